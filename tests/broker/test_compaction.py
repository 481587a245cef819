"""Compacted topics on real brokers with real clients: latest value per key, tombstones, configs,
bad input, idempotence after cleaning, __consumer_offsets, and followers copying a compacted leader.

The cases of the other tiers: tests/cluster/test_compaction.py.
"""
import os
import struct
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from pybroker.log.cleaner import CHECKPOINT
from pybroker.log.checkpoint import read_offsets
from pybroker.records import Record, build_batch, decode_records
from tests.clientutil import wait_until
from tests.kafka_wire import WireClient

FAST_CLEANER = {"log.cleaner.backoff.ms": "50"}
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "0"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def first_dirty(data_dir: str, topic: str, partition: int = 0) -> int:
    try:
        return read_offsets(os.path.join(data_dir, CHECKPOINT)).get((topic, partition), 0)
    except Exception:  # being rewritten right now: ask again
        return 0


def wait_cleaned(broker, topic: str, upto: int, partition: int = 0) -> None:
    """Until the cleaner's checkpoint for the partition reaches ``upto`` (its walks use only idle CPU time:
    on a loaded machine a cleaning waits for some)."""
    assert wait_until(lambda: first_dirty(broker.data_dir, topic, partition) >= upto, timeout=90), \
        f"{topic}-{partition} not cleaned up to {upto}: checkpoint at {first_dirty(broker.data_dir, topic, partition)}"


def consume_all(bootstrap: str, topic: str, expect_end: int) -> list:
    """(offset, key, value, headers, timestamp) of every record from the beginning, until offset expect_end-1 passed."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                position = c.position(c.assignment()) if c.assignment() else []
                if position and position[0].offset >= expect_end:
                    break
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(m.error())
            got.append((m.offset(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]))
    finally:
        c.close()
    return got


def produce_keyed(bootstrap: str, topic: str, items) -> list:
    """items: (key, value or None, headers); returns (offset, key, value, headers, timestamp) as acknowledged."""
    acked = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 7, "acks": "all",
                  "enable.idempotence": True})
    for key, value, headers in items:
        def done(err, m, headers=tuple(headers)):  # delivery reports carry no headers: the sent ones
            acked.append((m.offset(), m.key(), m.value(), headers, m.timestamp()[1]) if err is None else err)
        p.produce(topic, key=key, value=value, headers=list(headers), on_delivery=done)
        p.poll(0)
    assert p.flush(30) == 0
    assert all(isinstance(a, tuple) for a in acked), acked
    return sorted(acked)


def push_out_of_active_segment(bootstrap: str, topic: str, segment_bytes: int = 4096) -> None:
    """The active segment is never cleaned: more than a segment of other keys moves what came before out of it."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(segment_bytes // 200 + 2):
        p.produce(topic, key=b"filler-%d" % i, value=b"f" * 200)
        p.flush(10)


def latest_per_key(acked) -> dict:
    latest = {}
    for rec in acked:
        latest[rec[1]] = rec
    return latest


def test_latest_value_per_key_survives_cleaning_for_every_client(broker_factory):
    from tests.cluster import free_ports
    from tests.broker.test_metrics import scrape, value
    metrics_port, = free_ports(1)
    b = broker_factory({**FAST_CLEANER, "metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("changelog", 1, 1, config=COMPACT)])["changelog"].result(10)
    items = [(b"k%d" % (i % 25), b"v%d" % i, [("n", b"%d" % i)]) for i in range(1500)]
    items += [(b"k%d" % i, None, []) for i in range(5)]  # tombstones for five keys
    acked = produce_keyed(b.bootstrap, "changelog", items)
    end = acked[-1][0] + 1
    push_out_of_active_segment(b.bootstrap, "changelog")
    wait_cleaned(b, "changelog", end)
    got = consume_all(b.bootstrap, "changelog", end)
    by_offset = {r[0]: r for r in acked}
    for rec in got:  # every surviving record is the one acknowledged at its offset
        if rec[0] in by_offset:
            assert rec == by_offset[rec[0]], rec
    assert len(got) < len(acked) / 5, f"{len(got)} records left of {len(acked)}: nothing was compacted"
    latest = latest_per_key(acked)
    got_latest = latest_per_key(r for r in got if r[0] < end)
    for key, rec in latest.items():
        if rec[2] is not None:
            assert got_latest[key] == rec, key
    # kafka-python and aiokafka read the same compacted log (offset gaps, batches with fewer records)
    kp = kafka_python_read(b.bootstrap, "changelog", end)
    assert kp == [(r[0], r[1], r[2]) for r in got if r[0] < end]
    assert own_client_read(b.bootstrap, "changelog", end) == kp
    describe = subprocess.run([sys.executable, "-m", "pybroker", "topics", "--bootstrap-server", b.bootstrap,
                               "--describe", "--topic", "changelog"], capture_output=True, text=True, cwd=ROOT,
                              timeout=60)
    assert "cleanup.policy=compact" in describe.stdout, describe.stdout + describe.stderr
    assert "cleaned log topic=changelog" in b.stderr()
    samples = scrape(metrics_port)
    assert value(samples, "pybroker_log_cleaner_runs_total") >= 1
    written = value(samples, "pybroker_log_cleaner_written_bytes_total")
    assert value(samples, "pybroker_log_cleaner_read_bytes_total") > written > 0
    assert 0 < value(samples, "kafka_log_logcleaner_max_buffer_utilization_percent") < 100


def kafka_python_read(bootstrap: str, topic: str, end: int) -> list:
    kafka = pytest.importorskip("kafka")
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                            consumer_timeout_ms=3000)
    tp = kafka.TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    out = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and c.position(tp) < end:
        for recs in c.poll(timeout_ms=500).values():
            out += [(r.offset, r.key, r.value) for r in recs if r.offset < end]
    c.close()
    return out


def own_client_read(bootstrap: str, topic: str, end: int) -> list:
    from pybroker.client import Consumer as OwnConsumer
    out = []
    with OwnConsumer({"bootstrap.servers": bootstrap, "group.id": "own-reader", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False}) as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and c.position((topic, 0)) < end:
            out += [(r.offset, r.key, r.value) for r in c.poll(timeout_ms=500) if r.offset < end]
    return out


def test_records_without_a_key_are_refused_and_nothing_is_appended(broker_factory):
    b = broker_factory(FAST_CLEANER)
    with WireClient(b.port) as c:
        c.create_topic("keyed", 1, {"cleanup.policy": "compact"})
        r = c.produce("keyed", 0, bytes(build_batch([Record(b"v", b"k")])))
        assert (r.error_code, r.base_offset) == (0, 0)
        bad = bytes(build_batch([Record(b"v", b"k2"), Record(b"no key", None)]))
        r = c.produce("keyed", 0, bad)
        assert r.error_code == 87  # INVALID_RECORD, naming the keyless record (KIP-467)
        keyless = "Compacted topic cannot accept message without key in topic partition keyed-0"
        assert r.error_message == ("One or more records have been rejected due to 1 record errors in total, and "
                                   "only showing the first three errors at most: "
                                   f"[RecordError(batchIndex=1, message='{keyless}')]")
        assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [(1, keyless)]
        compressed = bytes(build_batch([Record(b"no key", None)], attributes=4))
        assert c.produce("keyed", 0, compressed).error_code == 87
        assert c.list_offset("keyed", 0) == 1  # nothing appended
        # an invalid policy or ratio: INVALID_CONFIG (40)
        req_topics = [("bad-policy", {"cleanup.policy": "compacted"}),
                      ("bad-ratio", {"min.cleanable.dirty.ratio": "1.5"}),
                      ("bad-lag", {"min.compaction.lag.ms": "-1"})]
        from pybroker.protocol.messages import REQUESTS
        req = REQUESTS[19]
        for name, configs in req_topics:
            resp = c.request(req(topics=[req.CreatableTopic(
                name=name, num_partitions=1, replication_factor=1, assignments=[],
                configs=[req.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])],
                timeout_ms=10000, validate_only=False), 4)
            assert resp.topics[0].error_code == 40, (name, resp.topics[0])


def test_policy_and_cleaner_configs_change_live(broker_factory):
    b = broker_factory(FAST_CLEANER)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("switch", 1, 1, config={"segment.bytes": "2048"})])["switch"].result(10)
    acked = produce_keyed(b.bootstrap, "switch", [(b"k%d" % (i % 3), b"v%d" % i, []) for i in range(400)])
    assert first_dirty(b.data_dir, "switch") == 0  # a delete-policy topic is never cleaned
    resource = ConfigResource("topic", "switch", incremental_configs=[])
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    resource.add_incremental_config(ConfigEntry("cleanup.policy", "compact",
                                                incremental_operation=AlterConfigOpType.SET))
    resource.add_incremental_config(ConfigEntry("min.cleanable.dirty.ratio", "0.01",
                                                incremental_operation=AlterConfigOpType.SET))
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(10)
    push_out_of_active_segment(b.bootstrap, "switch", 2048)
    wait_cleaned(b, "switch", acked[-1][0] + 1)
    described = admin.describe_configs([ConfigResource("topic", "switch")])
    configs = list(described.values())[0].result(10)
    assert configs["cleanup.policy"].value == "compact"
    # a broker default changed live applies to logs without an override
    broker_res = ConfigResource("broker", "0", incremental_configs=[])
    broker_res.add_incremental_config(ConfigEntry("log.cleaner.delete.retention.ms", "1234",
                                                  incremental_operation=AlterConfigOpType.SET))
    for f in admin.incremental_alter_configs([broker_res]).values():
        f.result(10)
    configs = list(admin.describe_configs([ConfigResource("topic", "switch")]).values())[0].result(10)
    assert configs["delete.retention.ms"].value == "1234"
    # the cleaner's own settings change live too
    cleaner_res = ConfigResource("broker", "0", incremental_configs=[])
    for key, value in (("log.cleaner.threads", "2"), ("log.cleaner.io.max.bytes.per.second", "5000000.5"),
                       ("log.cleaner.dedupe.buffer.size", str(8 << 20))):
        cleaner_res.add_incremental_config(ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET))
    for f in admin.incremental_alter_configs([cleaner_res]).values():
        f.result(10)
    assert wait_until(lambda: "log cleaner restarting with 2 threads and a 8388608-byte dedupe buffer" in b.stderr())
    shown = list(admin.describe_configs([ConfigResource("broker", "0")]).values())[0].result(10)
    assert shown["log.cleaner.threads"].value == "2"
    assert float(shown["log.cleaner.io.max.bytes.per.second"].value) == 5000000.5
    bad = ConfigResource("broker", "0", incremental_configs=[])
    bad.add_incremental_config(ConfigEntry("log.cleaner.threads", "-1", incremental_operation=AlterConfigOpType.SET))
    with pytest.raises(Exception, match="INVALID_CONFIG|must be an integer"):
        list(admin.incremental_alter_configs([bad]).values())[0].result(10)
    acked2 = produce_keyed(b.bootstrap, "switch", [(b"k%d" % (i % 3), b"w%d" % i, []) for i in range(300)])
    push_out_of_active_segment(b.bootstrap, "switch", 2048)
    wait_cleaned(b, "switch", acked2[-1][0] + 1)  # the restarted threads clean


def test_idempotent_producer_still_deduplicates_after_its_batches_were_cleaned(broker_factory):
    b = broker_factory(FAST_CLEANER)
    with WireClient(b.port) as c:
        c.create_topic("idem-c", 1, COMPACT)
        pid = c.init_producer_id().producer_id
        sent = [bytes(build_batch([Record(b"v%d" % s, b"same-key")], producer_id=pid, producer_epoch=0,
                                  base_sequence=s)) for s in range(40)]
        offsets = [c.produce("idem-c", 0, s).base_offset for s in sent]
        assert offsets == list(range(40))
        # another producer's writes supersede every record of pid, so its batches are emptied
        filler = bytes(build_batch([Record(b"x" * 200, b"same-key")]))
        c.produce("idem-c", 0, filler)
        superseded = c.list_offset("idem-c", 0)
        for i in range(30):  # other keys move it all out of the active segment
            c.produce("idem-c", 0, bytes(build_batch([Record(b"x" * 200, b"other-%d" % i)])))
        end = c.list_offset("idem-c", 0)
    wait_cleaned(b, "idem-c", superseded)
    b.kill()  # no producer-state snapshot: the state is rebuilt from the cleaned log
    b.start()
    with WireClient(b.port) as c:
        r = c.produce("idem-c", 0, sent[-1])  # a retry of the last batch: a duplicate
        assert (r.error_code, r.base_offset) == (0, 39)
        nxt = bytes(build_batch([Record(b"v40", b"same-key")], producer_id=pid, producer_epoch=0, base_sequence=40))
        r = c.produce("idem-c", 0, nxt)
        assert r.error_code == 0 and r.base_offset == end  # the sequence goes on: nothing out of order


def test_consumer_offsets_are_compacted_and_deleted_groups_leave_the_disk(broker_factory):
    b = broker_factory({**FAST_CLEANER, "offsets.topic.num.partitions": "1", "log.cleaner.delete.retention.ms": "0"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("in", 1, 1)])["in"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(20):
        p.produce("in", value=b"%d" % i)
    p.flush(10)
    from confluent_kafka import TopicPartition
    for group in ("keep-me", "drop-me"):
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
        for i in range(300):  # many commits of one key: compaction keeps the last
            c.commit(offsets=[TopicPartition("in", 0, i % 20 + 1)], asynchronous=False)
        c.close()
    admin.delete_consumer_groups(["drop-me"])["drop-me"].result(10)
    configs = list(admin.describe_configs([ConfigResource("topic", "__consumer_offsets")]).values())[0].result(10)
    assert configs["cleanup.policy"].value == "compact"

    def keys_on_disk():
        d = os.path.join(b.data_dir, "__consumer_offsets-0")
        keys = []
        for name in sorted(os.listdir(d)):
            if name.endswith(".log"):
                data = open(os.path.join(d, name), "rb").read()
                pos = 0
                while pos + 12 <= len(data):
                    size = struct.unpack_from(">i", data, pos + 8)[0] + 12
                    if struct.unpack_from(">i", data, pos + 57)[0]:
                        keys += [(r.key, r.value is None) for r in decode_records(data[pos:pos + size])]
                    pos += size
        return keys

    # the commits sit in the active segment, which is never cleaned: restart with log.roll.ms=1 so
    # that the next commit rolls it
    b.stop()
    b.overrides["log.roll.ms"] = "1"  # every log rolls at its next append: the commits become cleanable
    b.start()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "keep-me", "enable.auto.commit": False})

    def compacted():  # each commit rolls a segment, so cleanings go on; the tombstone goes at the second
        c.commit(offsets=[TopicPartition("in", 0, 20)], asynchronous=False)
        keys = keys_on_disk()
        return keys if len(keys) <= 3 and not any(b"drop-me" in k for k, _ in keys) else None
    keys = wait_until(compacted, timeout=90)  # cleanings back off between tries: a loaded machine is slow
    c.close()
    assert keys, f"offsets not compacted: {keys_on_disk()} on disk"
    assert any(b"keep-me" in k for k, tomb in keys if not tomb)
    # the committed offset of the kept group is still served after a restart
    b.stop()
    b.start()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "keep-me", "enable.auto.commit": False})
    assert c.committed([TopicPartition("in", 0)], timeout=10)[0].offset == 20
    c.close()


