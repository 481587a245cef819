"""confluent-kafka (librdkafka) against a real broker: every acks level and codec, idempotence,
manual-assignment reads from the beginning / an offset / a timestamp, and the admin APIs."""
import json
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, ConfigResource, NewPartitions, NewTopic, OffsetSpec,
                                   ResourceType)

from tests.clientutil import (DEADLINE, MODES, Rec, check_arrived_intact, check_exactly_once, check_key_partitioning,
                              expected_from_offset, first_offset_at_or_after, norm_headers, records_to_send, wait_until)

COUNT = 150


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


def admin(b):
    return AdminClient({"bootstrap.servers": b.bootstrap})


def create_topic(b, name, partitions=3, **kwargs):
    ad = admin(b)  # kept alive until the result: a collected AdminClient fails its futures
    ad.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                     **kwargs)[name].result(DEADLINE)


def produce(b, topic, to_send, **conf):
    """Produce and flush; returns the acked Recs (offset -1 when acks=0 gives no offset)."""
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, **conf})
    acked, errors = [], []
    sent_headers = {value: headers for _, value, headers, _ in to_send}

    def report(err, m):  # delivery reports carry no headers: take the ones sent
        if err is not None:
            errors.append(err)
        else:
            acked.append(Rec(m.partition(), m.offset(), m.key(), m.value(), sent_headers[m.value()],
                             m.timestamp()[1]))
    for key, value, headers, ts in to_send:
        p.produce(topic, key=key, value=value, headers=list(headers), timestamp=ts, on_delivery=report)
        p.poll(0)
    assert p.flush(DEADLINE) == 0
    assert not errors, errors[:3]
    return acked


def to_rec(m) -> Rec:
    return Rec(m.partition(), m.offset(), m.key(), m.value(), norm_headers(m.headers()), m.timestamp()[1])


def consume(b, assignments, expected, idle=None):
    """Manually assigned consumer: read until ``expected`` records (bounded); returns Recs."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign(assignments)
    got = []
    end = time.monotonic() + DEADLINE
    try:
        while len(got) < expected and time.monotonic() < end:
            m = c.poll(0.2)
            if m is None:
                continue
            assert not m.error() or m.error().code() == KafkaError._PARTITION_EOF, m.error()
            if not m.error():
                got.append(to_rec(m))
        if idle:  # stay a little longer: nothing more may arrive
            end = time.monotonic() + idle
            while time.monotonic() < end:
                m = c.poll(0.1)
                if m is not None and not m.error():
                    got.append(to_rec(m))
    finally:
        c.close()
    return got


@pytest.mark.parametrize("name,acks,codec,idempotent", MODES, ids=[m[0] for m in MODES])
def test_produce_and_read_back(broker, name, acks, codec, idempotent):
    topic = f"cf-{name}"
    create_topic(broker, topic)
    conf = {"acks": acks, "compression.type": codec or "none"}
    if idempotent:
        conf["enable.idempotence"] = True
    to_send = records_to_send(topic, COUNT)
    acked = produce(broker, topic, to_send, **conf)
    assert len(acked) == COUNT
    check_key_partitioning(acked)
    got = consume(broker, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)], COUNT, idle=0.5)
    if acks == 0:
        # no offsets came back; on one healthy broker every record still arrives, intact, in send order
        check_arrived_intact({v: (k, h) for k, v, h, _ in to_send}, got)
        assert sorted(r.value for r in got) == sorted(v for _, v, _, _ in to_send)
        acked = got  # the broker's offsets are the truth for the reads below
    else:
        check_exactly_once(acked, got, timestamps=True)
        assert len(got) == COUNT
    for p in range(3):  # every partition is dense from 0
        assert sorted(r.offset for r in got if r.partition == p) == list(range(sum(r.partition == p for r in got)))

    # from a given offset: the middle of each partition
    starts = {p: sum(a.partition == p for a in acked) // 2 for p in range(3)}
    want = [r for p in range(3) for r in expected_from_offset(acked, p, starts[p])]
    got = consume(broker, [TopicPartition(topic, p, starts[p]) for p in range(3)], len(want))
    check_exactly_once(want, got)
    assert len(got) == len(want)

    # from a timestamp: offsetsForTimes, then read from there
    ts = to_send[COUNT // 2][3] + 5  # between two records' timestamps
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    found = c.offsets_for_times([TopicPartition(topic, p, ts) for p in range(3)], DEADLINE)
    late = c.offsets_for_times([TopicPartition(topic, p, to_send[-1][3] + 1000) for p in range(3)], DEADLINE)
    c.close()
    for tp in found:
        assert tp.error is None
        assert tp.offset == first_offset_at_or_after(acked, tp.partition, ts)
    assert all(tp.offset == -1 for tp in late)  # no record that recent: the end (-1)
    want = [r for tp in found if tp.offset >= 0 for r in expected_from_offset(acked, tp.partition, tp.offset)]
    got = consume(broker, [tp for tp in found if tp.offset >= 0], len(want))
    check_exactly_once(want, got)
    assert len(got) == len(want) and all(r.timestamp >= ts for r in got)


def test_list_offsets_and_delete_records(broker):
    topic = "cf-offsets"
    create_topic(broker, topic)
    acked = produce(broker, topic, records_to_send(topic, 90), acks="all")
    counts = {p: sum(a.partition == p for a in acked) for p in range(3)}
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    for p in range(3):
        assert c.get_watermark_offsets(TopicPartition(topic, p), DEADLINE) == (0, counts[p])
    ad = admin(broker)
    for spec, want in ((OffsetSpec.earliest(), lambda p: 0), (OffsetSpec.latest(), lambda p: counts[p])):
        res = ad.list_offsets({TopicPartition(topic, p): spec for p in range(3)})
        for tp, fut in res.items():
            assert fut.result(DEADLINE).offset == want(tp.partition)

    cut = {p: counts[p] // 3 for p in range(3)}
    res = ad.delete_records([TopicPartition(topic, p, cut[p]) for p in range(3)])
    for tp, fut in res.items():
        assert fut.result(DEADLINE).low_watermark == cut[tp.partition]
    for p in range(3):
        assert c.get_watermark_offsets(TopicPartition(topic, p), DEADLINE) == (cut[p], counts[p])
    # the earliest record at or after timestamp 0 is the first one still there
    found = c.offsets_for_times([TopicPartition(topic, p, 0) for p in range(3)], DEADLINE)
    assert {tp.partition: tp.offset for tp in found} == cut
    c.close()
    want = [a for a in acked if a.offset >= cut[a.partition]]
    got = consume(broker, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)], len(want), idle=0.3)
    check_exactly_once(want, got)
    assert len(got) == len(want)
    # an offset below the new log start is out of range: auto.offset.reset=earliest lands on the cut
    got = consume(broker, [TopicPartition(topic, 0, 0)], counts[0] - cut[0])
    assert [r.offset for r in got] == list(range(cut[0], counts[0]))
    # past the high watermark is refused
    bad = ad.delete_records([TopicPartition(topic, 0, counts[0] + 10)])
    with pytest.raises(Exception):
        list(bad.values())[0].result(DEADLINE)


def test_create_partitions(broker):
    topic = "cf-grow"
    create_topic(broker, topic, partitions=2)
    ad = admin(broker)
    ad.create_partitions([NewPartitions(topic, 5)])[topic].result(DEADLINE)
    assert len(ad.list_topics(topic, timeout=DEADLINE).topics[topic].partitions) == 5
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    delivered = []
    for part in range(5):
        p.produce(topic, value=b"p%d" % part, partition=part,
                  on_delivery=lambda err, m: delivered.append((err, m.partition(), m.offset())))
    assert p.flush(DEADLINE) == 0
    assert sorted(delivered) == [(None, part, 0) for part in range(5)]
    got = consume(broker, [TopicPartition(topic, part, OFFSET_BEGINNING) for part in range(5)], 5)
    assert sorted((r.partition, r.value) for r in got) == [(part, b"p%d" % part) for part in range(5)]
    with pytest.raises(Exception):  # shrinking is refused
        ad.create_partitions([NewPartitions(topic, 3)])[topic].result(DEADLINE)


def test_describe_configs(broker):
    topic = "cf-configs"
    ad = admin(broker)
    ad.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "123456"})])[topic].result(DEADLINE)
    res = ad.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = list(res.values())[0].result(DEADLINE)
    assert entries["retention.ms"].value == "123456" and not entries["retention.ms"].is_default
    for name in ("segment.bytes", "retention.bytes", "max.message.bytes", "message.timestamp.type"):
        assert name in entries, sorted(entries)
    md = ad.list_topics(timeout=DEADLINE)
    node = str(next(iter(md.brokers)))
    res = ad.describe_configs([ConfigResource(ResourceType.BROKER, node)])
    entries = list(res.values())[0].result(DEADLINE)
    for name in ("log.dirs", "num.partitions", "log.segment.bytes", "auto.create.topics.enable"):
        assert name in entries, sorted(entries)
    assert entries["log.dirs"].value == broker.data_dir


def test_validate_only_and_delete_topics(broker):
    ad = admin(broker)
    ad.create_topics([NewTopic("cf-dry", 3, 1)], validate_only=True)["cf-dry"].result(DEADLINE)
    assert "cf-dry" not in ad.list_topics(timeout=DEADLINE).topics
    with pytest.raises(Exception):  # validation still rejects what a real create would
        ad.create_topics([NewTopic("cf-dry", 0, 1)], validate_only=True)["cf-dry"].result(DEADLINE)

    create_topic(broker, "cf-doomed")
    produce(broker, "cf-doomed", records_to_send("doomed", 30), acks=1)
    ad.delete_topics(["cf-doomed"])["cf-doomed"].result(DEADLINE)
    assert wait_until(lambda: "cf-doomed" not in ad.list_topics(timeout=DEADLINE).topics, 10)
    create_topic(broker, "cf-doomed", partitions=2)  # the name is free again, the old data gone
    assert len(ad.list_topics(timeout=DEADLINE).topics["cf-doomed"].partitions) == 2
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    assert c.get_watermark_offsets(TopicPartition("cf-doomed", 0), DEADLINE) == (0, 0)
    c.close()
    acked = produce(broker, "cf-doomed", records_to_send("again", 10), acks="all")
    got = consume(broker, [TopicPartition("cf-doomed", p, OFFSET_BEGINNING) for p in range(2)], 10)
    check_exactly_once(acked, got)


def test_fetch_long_poll_wakes_on_produce(broker):
    """A consumer parked at the end gets a later record while its fetch waits (max wait 20 s)."""
    topic = "cf-longpoll"
    create_topic(broker, topic, partitions=1)
    produce(broker, topic, records_to_send("before", 3), acks=1)
    stats = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 20000, "fetch.min.bytes": 1, "statistics.interval.ms": 200,
                  "stats_cb": lambda s: stats.append(json.loads(s))})
    c.assign([TopicPartition(topic, 0, 3)])  # an explicit offset: the record produced later is there
    assert c.poll(1.0) is None  # parked at the end
    threading.Timer(1.0, produce, (broker, topic, [(b"k", b"late", (), int(time.time() * 1000))]),
                    {"acks": 1}).start()
    got, end = None, time.monotonic() + 15  # well under the 20 s fetch wait: the append woke the fetch
    while got is None and time.monotonic() < end:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got = m
    c.poll(0.5)  # one more statistics report
    c.close()
    assert got is not None and (got.offset(), got.value()) == (3, b"late")
    # no busy polling: the broker held the fetches (a broker ignoring max wait would see hundreds)
    fetches = sum(b["req"].get("Fetch", 0) for b in stats[-1]["brokers"].values())
    assert 1 <= fetches <= 5, fetches
