"""kafka-python against a real broker: every acks level and codec, idempotence, manual-assignment
reads from the beginning / an offset / a timestamp, and its admin client."""
import threading
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, OffsetSpec
from kafka.errors import KafkaError

from tests.clientutil import (DEADLINE, MODES, Rec, check_arrived_intact, check_exactly_once, check_key_partitioning,
                              expected_from_offset, first_offset_at_or_after, norm_headers, records_to_send, wait_until)

COUNT = 120


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


@pytest.fixture(scope="module")
def admin(broker):
    ad = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield ad
    ad.close()


def create_topic(admin, name, partitions=3, **configs):
    res = admin.create_topics({name: {"num_partitions": partitions, "replication_factor": 1, "configs": configs}})
    assert res["topics"][0]["error_code"] == 0, res


def produce(b, topic, to_send, **conf):
    """Send all, flush, and return the acked Recs (for acks=0 the offsets mean nothing)."""
    p = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5, **conf)
    futures = [(p.send(topic, key=k, value=v, headers=list(h), timestamp_ms=ts), h) for k, v, h, ts in to_send]
    p.flush(DEADLINE)
    acked = []
    for f, headers in futures:
        md = f.get(DEADLINE)
        acked.append(Rec(md.partition, md.offset, to_send[len(acked)][0], to_send[len(acked)][1], headers,
                         md.timestamp))
    p.close(DEADLINE)
    return acked


def to_rec(m) -> Rec:
    return Rec(m.partition, m.offset, m.key, m.value, norm_headers(m.headers), m.timestamp)


def consume(b, starts: dict, expected: int, idle: float = 0.0):
    """Assign the partitions of ``starts`` (offset, or None for the beginning); read ``expected``."""
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    c.assign(list(starts))
    for tp, offset in starts.items():
        if offset is None:
            c.seek_to_beginning(tp)
        else:
            c.seek(tp, offset)
    got = []
    end = time.monotonic() + DEADLINE
    try:
        while len(got) < expected and time.monotonic() < end:
            for records in c.poll(timeout_ms=200).values():
                got.extend(to_rec(m) for m in records)
        end = time.monotonic() + idle  # nothing more may arrive
        while time.monotonic() < end:
            for records in c.poll(timeout_ms=100).values():
                got.extend(to_rec(m) for m in records)
    finally:
        c.close()
    return got


@pytest.mark.parametrize("name,acks,codec,idempotent", MODES, ids=[m[0] for m in MODES])
def test_produce_and_read_back(broker, admin, name, acks, codec, idempotent):
    topic = f"kp-{name}"
    create_topic(admin, topic)
    to_send = records_to_send(topic, COUNT)
    acked = produce(broker, topic, to_send, acks=acks, compression_type=codec, enable_idempotence=idempotent)
    assert len(acked) == COUNT
    check_key_partitioning(acked)
    got = consume(broker, {TopicPartition(topic, p): None for p in range(3)}, COUNT, idle=0.5)
    if acks == 0:
        # no offsets came back; on one healthy broker every record still arrives, intact, in send order
        check_arrived_intact({v: (k, h) for k, v, h, _ in to_send}, got)
        assert sorted(r.value for r in got) == sorted(v for _, v, _, _ in to_send)
        assert {r.value: r.partition for r in got} == {a.value: a.partition for a in acked}
        acked = got
    else:
        check_exactly_once(acked, got, timestamps=True)
        assert len(got) == COUNT

    starts = {p: sum(a.partition == p for a in acked) // 2 for p in range(3)}
    want = [r for p in range(3) for r in expected_from_offset(acked, p, starts[p])]
    got = consume(broker, {TopicPartition(topic, p): starts[p] for p in range(3)}, len(want))
    check_exactly_once(want, got)
    assert len(got) == len(want)

    ts = to_send[COUNT // 2][3] + 5
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    found = c.offsets_for_times({TopicPartition(topic, p): ts for p in range(3)})
    late = c.offsets_for_times({TopicPartition(topic, p): to_send[-1][3] + 1000 for p in range(3)})
    c.close()
    for tp, ot in found.items():
        want_offset = first_offset_at_or_after(acked, tp.partition, ts)
        assert (ot.offset if ot else -1) == want_offset, (tp, ot, want_offset)
    assert all(v is None for v in late.values())  # no record that recent
    starts = {tp: ot.offset for tp, ot in found.items() if ot}
    want = [r for tp, off in starts.items() for r in expected_from_offset(acked, tp.partition, off)]
    got = consume(broker, starts, len(want))
    check_exactly_once(want, got)
    assert len(got) == len(want) and all(r.timestamp >= ts for r in got)


def test_list_offsets_and_delete_records(broker, admin):
    topic = "kp-offsets"
    create_topic(admin, topic)
    acked = produce(broker, topic, records_to_send(topic, 90), acks="all")
    counts = {p: sum(a.partition == p for a in acked) for p in range(3)}
    tps = [TopicPartition(topic, p) for p in range(3)]
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
    assert c.end_offsets(tps) == {tp: counts[tp.partition] for tp in tps}
    listed = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
    assert {tp: o.offset for tp, o in listed.items()} == {tp: counts[tp.partition] for tp in tps}

    cut = {tp: counts[tp.partition] // 3 for tp in tps}
    res = admin.delete_records(cut)
    assert {tp: r["low_watermark"] for tp, r in res.items()} == cut
    assert c.beginning_offsets(tps) == cut
    assert c.end_offsets(tps) == {tp: counts[tp.partition] for tp in tps}
    c.close()
    want = [a for a in acked if a.offset >= cut[TopicPartition(topic, a.partition)]]
    got = consume(broker, {tp: None for tp in tps}, len(want), idle=0.3)
    check_exactly_once(want, got)
    assert len(got) == len(want)
    with pytest.raises(KafkaError):  # past the high watermark
        admin.delete_records({tps[0]: counts[0] + 5})


def test_create_partitions(broker, admin):
    topic = "kp-grow"
    create_topic(admin, topic, partitions=1)
    res = admin.create_partitions({topic: NewPartitions(4)})
    assert res.results[0].error_code == 0
    desc = admin.describe_topics([topic])
    assert [p["partition_index"] for p in desc[0]["partitions"]] == [0, 1, 2, 3]
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    mds = [p.send(topic, value=b"p%d" % i, partition=i).get(DEADLINE) for i in range(4)]
    p.close()
    assert [(m.partition, m.offset) for m in mds] == [(i, 0) for i in range(4)]
    got = consume(broker, {TopicPartition(topic, i): None for i in range(4)}, 4)
    assert sorted((r.partition, r.value) for r in got) == [(i, b"p%d" % i) for i in range(4)]


def test_describe_configs(broker, admin):
    create_topic(admin, "kp-configs", partitions=1, **{"segment.bytes": "1048576"})
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-configs")], config_filter="all")
    entries = res["topic"]["kp-configs"]
    assert entries["segment.bytes"]["value"] == "1048576"
    assert entries["segment.bytes"]["config_source"] != "DEFAULT_CONFIG"
    assert entries["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
    res = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
    entries = res["broker"]["0"]
    for name in ("log.dirs", "num.partitions", "log.retention.ms", "message.max.bytes"):
        assert name in entries, sorted(entries)
    assert entries["log.dirs"]["value"] == broker.data_dir


def test_validate_only_and_delete_topics(broker, admin):
    res = admin.create_topics({"kp-dry": {"num_partitions": 3, "replication_factor": 1}}, validate_only=True)
    assert res["topics"][0]["error_code"] == 0
    assert "kp-dry" not in admin.list_topics()
    res = admin.create_topics({"kp-dry": {"num_partitions": 1, "replication_factor": 3}}, validate_only=True,
                              raise_errors=False)
    assert res["topics"][0]["error_code"] == 38  # INVALID_REPLICATION_FACTOR, even when only validating

    create_topic(admin, "kp-doomed")
    produce(broker, "kp-doomed", records_to_send("doomed", 20), acks=1)
    admin.delete_topics(["kp-doomed"])
    assert wait_until(lambda: "kp-doomed" not in admin.list_topics(), 10)
    create_topic(admin, "kp-doomed", partitions=1)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    tp = TopicPartition("kp-doomed", 0)
    assert c.end_offsets([tp]) == {tp: 0}  # the old data went with the old topic
    c.close()


def test_fetch_long_poll_wakes_on_produce(broker, admin):
    """A consumer parked at the end gets a later record while its fetch waits (max wait 20 s)."""
    topic = "kp-longpoll"
    create_topic(admin, topic, partitions=1)
    produce(broker, topic, records_to_send("before", 2), acks=1)
    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=20000,
                      request_timeout_ms=40000)
    c.assign([tp])
    c.seek(tp, 2)
    assert c.poll(timeout_ms=1000) == {}
    threading.Timer(1.0, produce, (broker, topic, [(b"k", b"late", (), int(time.time() * 1000))]),
                    {"acks": 1}).start()
    got, end = [], time.monotonic() + 15  # under the 20 s fetch wait: the append woke the fetch
    while not got and time.monotonic() < end:
        for records in c.poll(timeout_ms=500).values():
            got.extend(records)
    c.close()
    assert [(m.offset, m.value) for m in got] == [(2, b"late")]
