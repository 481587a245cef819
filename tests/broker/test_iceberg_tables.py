"""Topics as Iceberg tables, end to end: real broker processes, confluent-kafka producers, the table read
back with pyiceberg and compared row for row with a read_committed consume of the topic."""
import os
import signal
import sqlite3
import urllib.request

import pytest

from tests.clientutil import wait_until
from tests.icebergutil import catalog, no_duplicate_offsets, table_rows, topic_rows, wait_equal, worker_pids

pytest.importorskip("pyiceberg")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

LAG = {"iceberg.target.lag.ms": "1000"}


def create(bootstrap, topic, partitions=3, **configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"iceberg.mode": "key_value", **LAG, **configs}
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)


def produce(bootstrap, topic, n, start=0, partitions=3, **conf):
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i in range(start, start + n):
        p.produce(topic, key=f"k{i}".encode() if i % 5 else None, value=f"v{i}".encode(), partition=i % partitions,
                  headers=[("h", f"{i}".encode())] if i % 3 == 0 else None)
    assert p.flush(30) == 0


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_key_value_table_equals_the_committed_topic(broker_factory):
    """Plain, idempotent and transactional producers (with aborted transactions) into one topic: the table
    holds every committed record once, none of the aborted ones, with its key, value, headers, timestamp."""
    b = broker_factory(overrides={"transaction.state.log.replication.factor": 1,
                                  "transaction.state.log.min.isr": 1})
    topic = "orders"
    create(b.bootstrap, topic)
    produce(b.bootstrap, topic, 60)
    produce(b.bootstrap, topic, 60, start=60, **{"enable.idempotence": True})
    tx = ck.Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-1", "linger.ms": 5})
    tx.init_transactions(30)
    for round_, commit in enumerate((True, False, True, False)):
        tx.begin_transaction()
        for i in range(20):
            n = 1000 * (round_ + 1) + i
            tx.produce(topic, key=b"t", value=f"{'c' if commit else 'a'}{n}".encode(), partition=i % 3)
        tx.commit_transaction(30) if commit else tx.abort_transaction(30)
    got, want = wait_equal(catalog(b.data_dir), b.bootstrap, topic, 3)
    assert got == want
    assert len(want) == 160 and no_duplicate_offsets(got)
    assert not any(r[4].startswith(b"a") for r in got)  # nothing aborted


def test_kill_9_during_translation_then_restart(broker_factory):
    """kill -9 of the broker while its worker translates (and the worker goes with it); after a restart the
    table resumes from its own progress: every committed offset once."""
    b = broker_factory()
    topic = "crashy"
    create(b.bootstrap, topic)
    cat = catalog(b.data_dir)
    produce(b.bootstrap, topic, 300)
    assert wait_until(lambda: len(table_rows(cat, topic)) > 0, timeout=60)
    workers = worker_pids(b.proc.pid)
    assert len(workers) == 1
    produce(b.bootstrap, topic, 300, start=300)
    b.kill()
    assert wait_until(lambda: not alive(workers[0]), timeout=30)  # no orphan: its input ended with the broker
    b.start()
    produce(b.bootstrap, topic, 100, start=600)
    got, want = wait_equal(cat, b.bootstrap, topic, 3)
    assert got == want and len(want) == 700 and no_duplicate_offsets(got)


def test_catalog_outage_pauses_then_resumes(broker_factory):
    """The catalog's database locked by another process (the catalog is down): commits fail, the data stays
    in the topic, and once the lock goes the table catches up exactly."""
    port = _free_port()
    b = broker_factory(overrides={"metrics.listener": f"http://127.0.0.1:{port}",
                                  "iceberg.catalog.retry.ms": 200})
    topic = "outage"
    create(b.bootstrap, topic)
    cat = catalog(b.data_dir)
    produce(b.bootstrap, topic, 30)
    assert wait_until(lambda: len(table_rows(cat, topic)) == 30, timeout=60)
    failed_before = _settled_failures(port, topic)
    db = sqlite3.connect(os.path.join(b.data_dir, "iceberg", "catalog.db"), timeout=30)
    db.execute("BEGIN EXCLUSIVE")  # every read and write of the catalog now fails with "database is locked"
    try:
        produce(b.bootstrap, topic, 50, start=30)
        assert wait_until(lambda: _metric(port, "pybroker_iceberg_failures_total", topic) > failed_before, timeout=60)
    finally:
        db.rollback()
        db.close()
    got, want = wait_equal(cat, b.bootstrap, topic, 3)
    assert got == want and len(want) == 80 and no_duplicate_offsets(got)
    # the worker reports once a second: wait for the report after the last commit
    assert wait_until(lambda: _metric(port, "pybroker_iceberg_commits_total", topic) >= 2, timeout=30)
    assert wait_until(lambda: _metric(port, "pybroker_iceberg_records_written_total", topic) == 80, timeout=30)
    assert wait_until(lambda: _metric(port, "pybroker_iceberg_lag_offsets", topic) == 0, timeout=30)


def test_worker_killed_is_restarted(broker_factory):
    b = broker_factory()
    topic = "restarted"
    create(b.bootstrap, topic)
    produce(b.bootstrap, topic, 20)
    cat = catalog(b.data_dir)
    assert wait_until(lambda: len(table_rows(cat, topic)) == 20, timeout=60)
    [pid] = worker_pids(b.proc.pid)
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: worker_pids(b.proc.pid) and worker_pids(b.proc.pid) != [pid], timeout=60)
    produce(b.bootstrap, topic, 20, start=20)
    got, want = wait_equal(cat, b.bootstrap, topic, 3)
    assert got == want and len(want) == 40


def test_no_worker_without_iceberg_topics(broker_factory):
    b = broker_factory()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("plain", 1, 1)])["plain"].result(30)
    produce(b.bootstrap, "plain", 5, partitions=1)
    assert topic_rows(b.bootstrap, "plain", 1)
    assert worker_pids(b.proc.pid) == []


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metric(port: int, name: str, topic: str, **labels) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    want = {"topic": topic, **labels}
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in want.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _settled_failures(port: int, topic: str) -> float:
    """Failed commits so far, once the worker has reported its first commit: an outage's failures are
    counted from there, whatever happened before it."""
    assert wait_until(lambda: _metric(port, "pybroker_iceberg_commits_total", topic) >= 1, timeout=30)
    return _metric(port, "pybroker_iceberg_failures_total", topic)


def test_records_deleted_before_the_table_took_them_are_reported(broker_factory):
    """The catalog down, the log's start moved past what the table took (DeleteRecords, as retention would):
    the worker says how many records the table lost, in a metric and a log line, and goes on from the new start."""
    port = _free_port()
    b = broker_factory(overrides={"metrics.listener": f"http://127.0.0.1:{port}", "iceberg.catalog.retry.ms": 200})
    topic = "deleted"
    create(b.bootstrap, topic, partitions=1)
    cat = catalog(b.data_dir)
    produce(b.bootstrap, topic, 10, partitions=1)
    assert wait_until(lambda: len(table_rows(cat, topic)) == 10, timeout=60)
    failed_before = _settled_failures(port, topic)
    db = sqlite3.connect(os.path.join(b.data_dir, "iceberg", "catalog.db"), timeout=30)
    db.execute("BEGIN EXCLUSIVE")
    try:
        produce(b.bootstrap, topic, 20, start=10, partitions=1)
        # a failure of this outage, not an earlier one: only then is the table's partition paused
        assert wait_until(lambda: _metric(port, "pybroker_iceberg_failures_total", topic) > failed_before, timeout=60)
        produce(b.bootstrap, topic, 20, start=30, partitions=1)  # not fetched: the table's partition is paused
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.delete_records([ck.TopicPartition(topic, 0, 45)]).values():
            f.result(30)
    finally:
        db.rollback()
        db.close()
    assert wait_until(lambda: any(r[1] >= 45 for r in table_rows(cat, topic)), timeout=60)
    offsets = [r[1] for r in table_rows(cat, topic)]
    kept = [o for o in offsets if o < 45]
    assert offsets == kept + list(range(45, 50)) and kept == list(range(len(kept)))  # a prefix, then the rest
    lost = 45 - len(kept)
    assert lost > 0
    assert wait_until(lambda: _metric(port, "pybroker_iceberg_untranslated_deleted_records_total", topic) == lost,
                      timeout=30)
    assert "before the Iceberg table took them" in b.stderr()


def test_compaction_waits_for_the_table(broker_factory):
    """On a compacted iceberg topic the cleaner leaves alone what the table has not taken: with the catalog down
    every superseded value stays in the log, and the table gets them all once the catalog is back."""
    b = broker_factory(overrides={"log.cleaner.backoff.ms": 100, "iceberg.catalog.retry.ms": 200})
    compacted = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                 "segment.bytes": "2000"}
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("plain-compacted", 1, 1, config=compacted)])["plain-compacted"].result(30)
    cat = catalog(b.data_dir)
    db = sqlite3.connect(os.path.join(b.data_dir, "iceberg", "catalog.db"), timeout=30)
    db.execute("BEGIN EXCLUSIVE")  # before the table exists: it takes nothing until the end
    try:
        create(b.bootstrap, "table-compacted", partitions=1, **compacted)

        def write(topic):  # batches below segment.bytes
            p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "batch.size": 1000})
            errors = []
            for i in range(200):
                p.produce(topic, key=f"k{i % 5}".encode(), value=f"v{i}".encode(), partition=0,
                          on_delivery=lambda err, _: errors.append(err) if err else None)
                p.poll(0)
            assert p.flush(30) == 0 and not errors, errors[:3]
        write("plain-compacted")
        write("table-compacted")
        # the plain topic gets compacted (only ~5 keys' last values and the active segment stay) ...
        assert wait_until(lambda: len(topic_rows(b.bootstrap, "plain-compacted", 1)) < 150, timeout=90)
        # ... the iceberg one keeps every record its table has not taken
        assert len(topic_rows(b.bootstrap, "table-compacted", 1)) == 200
    finally:
        db.rollback()
        db.close()
    assert wait_until(lambda: len(table_rows(cat, "table-compacted")) == 200, timeout=60)
    assert [r[4] for r in table_rows(cat, "table-compacted")] == [f"v{i}".encode() for i in range(200)]


def test_small_files_rewritten_and_snapshots_expired(broker_factory):
    """Maintenance on a schedule: many small commits become few files, old snapshots go, rows stay equal."""
    b = broker_factory(overrides={"iceberg.maintenance.interval.ms": 2000, "iceberg.small.files.to.rewrite": 4,
                                  "iceberg.snapshot.max.age.ms": 1, "iceberg.snapshots.to.keep": 2})
    topic = "tidy"
    create(b.bootstrap, topic, partitions=1, **{"iceberg.target.lag.ms": "100", "iceberg.partition.spec": "()"})
    cat = catalog(b.data_dir)
    for i in range(8):  # one commit each
        produce(b.bootstrap, topic, 5, start=5 * i, partitions=1)
        assert wait_until(lambda n=5 * (i + 1): len(table_rows(cat, topic)) == n, timeout=60)
    table = cat.load_table(("kafka", topic))

    def files():
        table.refresh()
        return len(list(table.scan().plan_files()))
    assert wait_until(lambda: files() < 4 and len(table.snapshots()) <= 3, timeout=60), \
        (files(), len(table.snapshots()))
    got, want = wait_equal(cat, b.bootstrap, topic, 1)
    assert got == want and len(want) == 40


def test_a_worker_that_cannot_connect_leaves_the_broker_serving(tmp_path):
    """A SASL broker without inter-broker credentials (a valid single node): its worker has no way in, so the
    broker says why the tables are off, once, and serves clients as before."""
    from tests.broker import BrokerProcess
    from tests.broker.test_sasl import PASSWORDS, SASL
    b = BrokerProcess(str(tmp_path / "data"), SASL).start()
    try:
        client = {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                  "sasl.username": "alice", "sasl.password": PASSWORDS["PLAIN"]}
        admin = AdminClient(client)  # kept referenced until the result is in
        admin.create_topics([NewTopic("locked-out", 1, 1, config={"iceberg.mode": "key_value"})])[
            "locked-out"].result(30)
        assert wait_until(lambda: "Iceberg tables are off" in b.stderr(), timeout=30)
        p = ck.Producer(client)
        p.produce("locked-out", value=b"still served")
        assert p.flush(30) == 0
        assert b.alive() and worker_pids(b.proc.pid) == []
        assert b.stderr().count("Iceberg tables are off") == 1
    finally:
        b.stop()
        b.close()
