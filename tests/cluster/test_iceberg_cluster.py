"""Topics as Iceberg tables on a three-broker cluster sharing one catalog and warehouse: each broker's
worker translates the partitions that broker leads, so leadership changes hand partitions from one
writer to another. Under an idempotent acks=all load, through a kill -9 of a leader and through
controlled moves (replicas reordered then a preferred election, a SIGTERM of a leader), the table ends
equal to a read_committed consume of the topic, holds every acknowledged record once, and the progress
its snapshots carry never goes backwards; a restarted broker translates again what a preferred election
hands back to it (its recovered logs take their topic's configs, iceberg.mode included)."""
import json
import time

import pytest

from tests.broker.test_iceberg_tables import alive
from tests.cluster import Cluster, require_zookeeper
from tests.cluster.test_cluster_ops import leader_election, on_preferred_leaders
from tests.cluster.test_reassignment import assignment, tool, wait_done, write_plan
from tests.cluster.test_replication import wait_full_isr
from tests.icebergutil import DEADLINE, catalog, no_duplicate_offsets, table_rows, topic_rows, worker_pids
from tests.replication_checks import LoggedProducer

pytest.importorskip("pyiceberg")
pytest.importorskip("confluent_kafka")

PARTITIONS = 3
TOPIC_CONFIGS = {"min.insync.replicas": "2", "iceberg.mode": "key_value", "iceberg.target.lag.ms": "1000"}
OVERRIDES = {"min.insync.replicas": 2, "default.replication.factor": 3, "offsets.topic.num.partitions": 3,
             "replica.lag.time.max.ms": 3000, "zookeeper.session.timeout.ms": 6000,
             "auto.leader.rebalance.enable": "false"}  # leaders move only when the test moves them
def start_cluster(tmp_path, zookeeper) -> tuple[Cluster, object]:
    """Three brokers on one SQLite catalog and one file warehouse; (cluster, that catalog)."""
    require_zookeeper()
    uri, warehouse = f"sqlite:///{tmp_path}/catalog.db", f"file://{tmp_path}/warehouse"
    shared = {"iceberg.catalog.uri": uri, "iceberg.warehouse": warehouse}
    cluster = Cluster(tmp_path, 3, zk=zookeeper, overrides={**OVERRIDES, **shared})
    return cluster, catalog(str(tmp_path), uri=uri, warehouse=warehouse)


def create_topic(cluster: Cluster, name: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 3, config=TOPIC_CONFIGS)])[name].result(60)
    wait_full_isr(cluster, name, PARTITIONS)
    return name


def leaders(cluster: Cluster, topic: str) -> dict[int, int]:
    return {p: cluster.leader(topic, p) for p in range(PARTITIONS)}


def busiest_leader(cluster: Cluster, topic: str) -> int:
    """The broker leading the most partitions of the topic (the lowest id among equals)."""
    led = list(leaders(cluster, topic).values())
    return max(sorted(set(led)), key=led.count)


def wait_led_elsewhere(cluster: Cluster, topic: str, gone: int, timeout: float = 60) -> dict[int, int]:
    """Until every partition has a leader other than ``gone``."""
    return cluster.wait_for(lambda: (now := leaders(cluster, topic)) and
                            all(b not in (gone, -1, None) for b in now.values()) and now,
                            timeout, f"every partition of {topic} led by a broker other than {gone}")


def table_partitions(cat, topic: str) -> set[int]:
    return {r[0] for r in table_rows(cat, topic)}


def wait_rows_of_every_partition(cat, topic: str, timeout: float = DEADLINE) -> None:
    # a read may meet the catalog's database locked by a broker's commit: that counts as "not yet"
    Cluster.wait_for(lambda: table_partitions(cat, topic) == set(range(PARTITIONS)), timeout,
                     f"rows of every partition in the table of {topic}", interval=0.5)


def progress_history(cat, topic: str) -> list[tuple[int, str, int | None, dict[int, int] | None]]:
    """(snapshot id, operation, added records, progress) of every snapshot, oldest first: the table's
    lineage from its first snapshot to the current one."""
    from pybroker.iceberg.settings import PROGRESS_KEY
    table = cat.load_table(("kafka", topic))
    chain, snapshot = [], table.current_snapshot()
    while snapshot is not None:
        chain.append(snapshot)
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    chain.reverse()
    stored = sorted(table.snapshots(), key=lambda s: s.sequence_number)
    assert [s.snapshot_id for s in chain] == [s.snapshot_id for s in stored], \
        "the table's snapshots are not one line of commits"
    out = []
    for s in chain:
        summary = s.summary
        text = summary.get(PROGRESS_KEY) if summary is not None else None
        added = summary.get("added-records") if summary is not None else None
        out.append((s.snapshot_id, summary.operation.value if summary is not None else "?",
                    None if added is None else int(added),
                    None if text is None else {int(p): int(o) for p, o in json.loads(text).items()}))
    return out


def check_progress(cat, topic: str, ends: dict[int, int]) -> int:
    """Every snapshot carries progress; per partition it never goes backwards nor disappears; each append
    adds exactly as many rows as its progress moved (offsets are contiguous: no transactions); the
    last snapshot's progress is the topic's end. Returns the number of snapshots."""
    history = progress_history(cat, topic)
    assert history, "the table has no snapshot"
    before: dict[int, int] = {}
    for snapshot_id, operation, added, progress in history:
        assert progress is not None, f"snapshot {snapshot_id} ({operation}) carries no progress"
        back = {p: (o, progress.get(p)) for p, o in before.items() if progress.get(p, -1) < o}
        assert not back, f"snapshot {snapshot_id}: progress went back (partition: (before, after)) {back}"
        if operation == "append":
            moved = sum(o - before.get(p, 0) for p, o in progress.items())
            assert added == moved, f"snapshot {snapshot_id}: {added} rows added, progress moved by {moved}"
        before = progress
    assert before == ends, f"the last snapshot's progress {before} is not the topic's end {ends}"
    return len(history)


def stderr_tails(cluster: Cluster, lines: int = 40) -> str:
    out = []
    for broker_id, b in cluster.brokers.items():
        tail = [line for line in b.stderr().splitlines() if "iceberg" in line.lower()][-lines:]
        out.append(f"--- broker {broker_id} ({b.stderr_path}), its iceberg lines:\n" + "\n".join(tail))
    return "\n".join(out)


def _last_snapshots(cat, topic: str) -> list:
    try:
        return progress_history(cat, topic)[-3:]
    except Exception as e:  # only for the failure message
        return [repr(e)]


def check_table(cluster: Cluster, cat, topic: str, producer: LoggedProducer, timeout: float = DEADLINE) -> dict:
    """The table equals a read_committed consume of the topic, with no (partition, offset) twice and every
    acknowledged record at its offset; its snapshots' progress is monotonic. Returns what was checked."""
    want = topic_rows(cluster.bootstrap, topic, PARTITIONS)
    got: list = []

    def equal() -> bool:
        got[:] = table_rows(cat, topic)
        return got == want
    try:
        Cluster.wait_for(equal, timeout, f"the table of {topic} to equal the topic", interval=0.5)
    except AssertionError:
        have, expect = {(r[0], r[1]) for r in got}, {(r[0], r[1]) for r in want}
        raise AssertionError(
            f"table {len(got)} rows, topic {len(want)}; missing (partition, offset) e.g. "
            f"{sorted(expect - have)[:10]} ({len(expect - have)}), extra e.g. {sorted(have - expect)[:10]}, "
            f"duplicates: {not no_duplicate_offsets(got)}; last snapshots: {_last_snapshots(cat, topic)}\n"
            + stderr_tails(cluster)) from None
    assert no_duplicate_offsets(got)
    at = {(r[0], r[1]): r[4] for r in got}
    by_partition: dict[int, set] = {}
    for r in got:
        by_partition.setdefault(r[0], set()).add(r[4])
    # librdkafka may acknowledge a retried batch the leader already held without its offset: None
    missing = [(p, o, v) for p, o, v in producer.acked
               if (at.get((p, o)) != v if o is not None else v not in by_partition.get(p, ()))]
    assert not missing, f"{len(missing)} acknowledged records not in the table, e.g. {missing[:5]}"
    values = [r[4] for r in got]
    assert len(values) == len(set(values)), "a value twice in the table"
    ends = {p: 1 + max(o for q, o in at if q == p) for p in range(PARTITIONS)}
    snapshots = check_progress(cat, topic, ends)
    return {"rows": len(got), "acked": len(producer.acked), "snapshots": snapshots}


def test_kill_9_of_the_busiest_leader_while_producing(tmp_path, zookeeper):
    """kill -9 of the broker leading the most partitions, mid-load; its worker goes with it, the new
    leaders' workers take its partitions from the table's progress. The killed broker is restarted (as a
    follower: no auto rebalance) and must then translate nothing."""
    cluster, cat = start_cluster(tmp_path, zookeeper)
    with cluster:
        topic = create_topic(cluster, "crash-table")
        producer = LoggedProducer(cluster.bootstrap, topic).start()
        try:
            producer.wait_acked(300, timeout=60)
            wait_rows_of_every_partition(cat, topic)
            victim = busiest_leader(cluster, topic)
            workers = worker_pids(cluster.broker(victim).proc.pid)
            assert len(workers) == 1, f"broker {victim} leads {leaders(cluster, topic)} but runs workers {workers}"
            producer.wait_acked(100, timeout=60)
            cluster.kill(victim)
            assert Cluster.wait_for(lambda: not alive(workers[0]), 30, "the killed broker's worker to exit")
            wait_led_elsewhere(cluster, topic, victim)
            producer.wait_acked(300, timeout=120)
            cluster.restart(victim)
            wait_full_isr(cluster, topic, PARTITIONS)
            producer.wait_acked(200, timeout=60)
        finally:
            producer.stop()
        assert not producer.errors, f"the producer got final errors: {producer.errors[:3]}"
        checked = check_table(cluster, cat, topic, producer)
        assert victim not in leaders(cluster, topic).values()
        assert worker_pids(cluster.broker(victim).proc.pid) == [], "a broker leading nothing runs a worker"
        print(f"kill -9 of broker {victim}: {checked}")


def rotated_preferred_leaders(cluster: Cluster, topic: str, tmp_path, round_: int) -> dict[int, int]:
    """Every partition's replica list turned by one (a reassignment that moves no data), then a preferred
    election: each partition's leadership goes to another running broker. The new leaders."""
    before = leaders(cluster, topic)
    current = assignment(cluster, topic)
    turned = {(topic, p): replicas[1:] + replicas[:1] for p, replicas in current.items()}
    plan = write_plan(tmp_path, turned, f"rotate-{round_}.json")
    tool(cluster, "reassign-partitions", "--execute", "--reassignment-json-file", plan)
    wait_done(cluster, plan)
    done = leader_election(cluster, "--election-type", "preferred", "--all-topic-partitions")
    assert done.returncode == 0, done.stdout + done.stderr
    after = cluster.wait_for(lambda: on_preferred_leaders(cluster, topic) and leaders(cluster, topic), 30,
                             "every partition led by its new preferred replica")
    assert all(after[p] != before[p] for p in range(PARTITIONS)), (before, after)
    return after


def test_controlled_leader_moves_while_producing(tmp_path, zookeeper):
    """Leaderships handed between running brokers twice (replicas reordered, then a preferred election: each
    worker releases a partition another acquires in the same moment), then a SIGTERM of the busiest leader
    (its controlled shutdown moves its leaderships first; it stays down): the table stays exact."""
    cluster, cat = start_cluster(tmp_path, zookeeper)
    with cluster:
        topic = create_topic(cluster, "moved-table")
        producer = LoggedProducer(cluster.bootstrap, topic).start()
        try:
            producer.wait_acked(300, timeout=60)
            wait_rows_of_every_partition(cat, topic)
            for round_ in range(2):
                rotated_preferred_leaders(cluster, topic, tmp_path, round_)
                producer.wait_acked(300, timeout=60)
            victim = busiest_leader(cluster, topic)
            workers = worker_pids(cluster.broker(victim).proc.pid)
            assert cluster.stop(victim) == 0
            assert not any(alive(w) for w in workers), "the stopped broker's worker outlived it"
            wait_led_elsewhere(cluster, topic, victim)
            producer.wait_acked(300, timeout=60)
        finally:
            producer.stop()
        assert not producer.errors, f"the producer got final errors: {producer.errors[:3]}"
        started = time.monotonic()
        checked = check_table(cluster, cat, topic, producer)
        print(f"two rotations and a SIGTERM of broker {victim}: {checked}, "
              f"equal after {time.monotonic() - started:.1f} s")


def test_preferred_election_back_to_a_restarted_broker(tmp_path, zookeeper):
    """SIGTERM of a leader, its restart, then a preferred election that hands its partitions back: the
    restarted broker must translate them (a worker starts) and the table stays exact."""
    cluster, cat = start_cluster(tmp_path, zookeeper)
    with cluster:
        topic = create_topic(cluster, "restarted-table")
        producer = LoggedProducer(cluster.bootstrap, topic).start()
        try:
            producer.wait_acked(300, timeout=60)
            wait_rows_of_every_partition(cat, topic)
            victim = busiest_leader(cluster, topic)
            preferred_there = [p for p, b in leaders(cluster, topic).items() if b == victim]
            assert cluster.stop(victim) == 0
            wait_led_elsewhere(cluster, topic, victim)
            producer.wait_acked(300, timeout=60)
            cluster.restart(victim)
            wait_full_isr(cluster, topic, PARTITIONS)
            done = leader_election(cluster, "--election-type", "preferred", "--all-topic-partitions")
            assert done.returncode == 0, done.stdout + done.stderr
            assert on_preferred_leaders(cluster, topic), leaders(cluster, topic)
            assert [p for p, b in leaders(cluster, topic).items() if b == victim] == preferred_there
            Cluster.wait_for(lambda: worker_pids(cluster.broker(victim).proc.pid), 60,
                             f"a worker on the restarted broker {victim}, leading {preferred_there} again")
            producer.wait_acked(300, timeout=60)
        finally:
            producer.stop()
        assert not producer.errors, f"the producer got final errors: {producer.errors[:3]}"
        check_table(cluster, cat, topic, producer)
