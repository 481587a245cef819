"""Records written by one client are read intact by another, compressed batches included:
the ring confluent-kafka → kafka-python → aiokafka → kcat → confluent-kafka, and one topic
written by all four (each with its own codec) that every client reads identically."""
import asyncio

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition as CfTP
from kafka import TopicPartition as KpTP
from aiokafka import TopicPartition as AioTP

from tests.interop import test_clients_aiokafka as aio
from tests.interop import test_clients_confluent as cf
from tests.interop import test_clients_kafka_python as kp
from tests.interop import test_clients_kcat as kc
from tests.clientutil import (check_arrived_intact, check_exactly_once, records_to_send)

COUNT = 90


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


def read_with(client, b, topic, partitions, expected):
    """All records of ``topic`` from the beginning, read by ``client``."""
    if client == "confluent":
        return cf.consume(b, [CfTP(topic, p, OFFSET_BEGINNING) for p in range(partitions)], expected, idle=0.3)
    if client == "kafka-python":
        return kp.consume(b, {KpTP(topic, p): None for p in range(partitions)}, expected, idle=0.3)
    if client == "aiokafka":
        return asyncio.run(aio.consume(b, {AioTP(topic, p): None for p in range(partitions)}, expected, idle=0.3))
    return kc.consume(b, topic, "-o", "beginning")


def test_confluent_to_kafka_python(broker):
    cf.create_topic(broker, "x-cf")
    acked = cf.produce(broker, "x-cf", records_to_send("x-cf", COUNT), **{"enable.idempotence": True,
                                                                          "compression.type": "zstd"})
    got = read_with("kafka-python", broker, "x-cf", 3, COUNT)
    check_exactly_once(acked, got, timestamps=True)
    assert len(got) == COUNT


def test_kafka_python_to_aiokafka(broker):
    cf.create_topic(broker, "x-kp")
    acked = kp.produce(broker, "x-kp", records_to_send("x-kp", COUNT), acks="all", compression_type="lz4")
    got = read_with("aiokafka", broker, "x-kp", 3, COUNT)
    check_exactly_once(acked, got, timestamps=True)
    assert len(got) == COUNT


def test_aiokafka_to_kcat(broker):
    cf.create_topic(broker, "x-aio")
    acked = asyncio.run(aio.produce(broker, "x-aio", records_to_send("x-aio", COUNT), acks="all",
                                    compression_type="gzip", enable_idempotence=True))
    got = read_with("kcat", broker, "x-aio", 3, COUNT)
    check_exactly_once(acked, got, timestamps=True)
    assert len(got) == COUNT


def test_kcat_to_confluent(broker):
    cf.create_topic(broker, "x-kc")
    sent = [(f"key-{i % 12}", f"x-kc-{i}") for i in range(COUNT)]
    kc.produce(broker, "x-kc", sent, "-z", "snappy", "-X", "acks=all")
    got = read_with("confluent", broker, "x-kc", 3, COUNT)
    # kcat reports no offsets: exit 0 = all acked; each arrives once, intact, in send order
    check_arrived_intact({v.encode(): (k.encode(), kc.HEADERS) for k, v in sent}, got)
    assert sorted(r.value for r in got) == sorted(v.encode() for _, v in sent)


def test_one_topic_written_by_all_read_by_all(broker):
    topic = "x-mixed"
    cf.create_topic(broker, topic, partitions=1)
    acked = cf.produce(broker, topic, records_to_send("cf", 20), **{"compression.type": "zstd", "acks": "all"})
    acked += kp.produce(broker, topic, records_to_send("kp", 20), acks=1, compression_type="snappy")
    acked += asyncio.run(aio.produce(broker, topic, records_to_send("aio", 20), acks="all", compression_type="lz4"))
    kc.produce(broker, topic, [("kc-key", f"kc-{i}") for i in range(20)], "-z", "gzip", "-p", "0")
    assert [a.offset for a in acked] == list(range(60))
    reads = {c: read_with(c, broker, topic, 1, 80) for c in ("confluent", "kafka-python", "aiokafka", "kcat")}
    for client, got in reads.items():
        assert [r.offset for r in got] == list(range(80)), client
        check_exactly_once(acked, got)
        assert [r.value for r in got[60:]] == [b"kc-%d" % i for i in range(20)], client
        assert {(r.key, r.value, r.headers) for r in got} == {(r.key, r.value, r.headers) for r in reads["confluent"]}
