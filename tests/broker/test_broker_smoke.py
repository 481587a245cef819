"""Each real client against a real broker: create, produce, consume back, restart."""
import asyncio
import subprocess
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

DEADLINE = 30


def consume_all(bootstrap, topic, partitions, expected):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "smoke", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    end = time.monotonic() + DEADLINE
    while len(got) < expected and time.monotonic() < end:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.partition(), m.offset(), m.key(), m.value()))
    c.close()
    return got


def test_confluent_kafka_round_trip_and_restart(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("orders", num_partitions=3, replication_factor=1)])["orders"].result(DEADLINE)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "compression.type": "zstd"})
    acked = []
    for i in range(600):
        p.produce("orders", key=b"k%d" % (i % 7), value=b"v%d" % i,
                  on_delivery=lambda err, m: acked.append((err, m.partition(), m.offset(), m.value())))
    assert p.flush(DEADLINE) == 0
    assert len(acked) == 600 and not any(err for err, *_ in acked)
    got = consume_all(broker.bootstrap, "orders", 3, 600)
    assert sorted(v for *_, v in got) == sorted(v for *_, v in acked)
    for part in range(3):  # per-partition offsets are 0..n-1 in order
        offsets = [o for pa, o, *_ in got if pa == part]
        assert offsets == list(range(len(offsets)))
    assert broker.stop() == 0
    broker.start()
    assert len(consume_all(broker.bootstrap, "orders", 3, 600)) == 600


def test_kafka_python_and_aiokafka_and_kcat_share_a_topic(broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip", acks="all")
    futures = [kp.send("shared", value=b"kp-%d" % i) for i in range(100)]
    kp.flush(DEADLINE)
    assert all(f.succeeded() for f in futures)
    kp.close()

    async def aio_produce():
        from aiokafka import AIOKafkaProducer
        pr = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4", enable_idempotence=True)
        await pr.start()
        try:
            for i in range(100):
                await pr.send_and_wait("shared", b"aio-%d" % i)
        finally:
            await pr.stop()
    asyncio.run(aio_produce())
    lines = "\n".join(f"kcat-{i}" for i in range(100)) + "\n"
    subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", "shared", "-z", "snappy"], input=lines.encode(),
                   check=True, timeout=DEADLINE)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    c.assign([KTP("shared", 0)])
    c.seek_to_beginning()
    values = [m.value for m in c]
    c.close()
    assert values[:100] == [b"kp-%d" % i for i in range(100)]
    assert values[100:200] == [b"aio-%d" % i for i in range(100)]
    assert values[200:] == [b"kcat-%d" % i for i in range(100)]
    out = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", "shared", "-e", "-q", "-o", "beginning"],
                         capture_output=True, timeout=DEADLINE, check=True)
    assert out.stdout.decode().splitlines() == [v.decode() for v in values]


def test_topic_configs_at_creation(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    ok = NewTopic("kept", num_partitions=1, replication_factor=1,
                  config={"cleanup.policy": "delete", "retention.ms": "3600000"})
    admin.create_topics([ok])["kept"].result(DEADLINE)
    from confluent_kafka.admin import ConfigResource
    described = admin.describe_configs([ConfigResource("topic", "kept")])
    configs = list(described.values())[0].result(DEADLINE)
    assert configs["cleanup.policy"].value == "delete" and configs["retention.ms"].value == "3600000"
    compact = NewTopic("compacted", num_partitions=1, replication_factor=1, config={"cleanup.policy": "compact"})
    admin.create_topics([compact])["compacted"].result(DEADLINE)
    bad = NewTopic("bad-policy", num_partitions=1, replication_factor=1, config={"cleanup.policy": "compacted"})
    try:
        admin.create_topics([bad])["bad-policy"].result(DEADLINE)
    except Exception as exc:  # KafkaException carrying INVALID_CONFIG
        assert "INVALID_CONFIG" in str(exc) or "cleanup.policy" in str(exc)
    else:
        raise AssertionError("an unknown cleanup.policy must be refused")


def test_internal_offsets_topic_cannot_be_deleted(broker):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-internal", "enable.auto.commit": False})
    c.subscribe(["anything"])
    end = time.monotonic() + DEADLINE
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    while "__consumer_offsets" not in admin.list_topics(timeout=10).topics and time.monotonic() < end:
        c.poll(0.2)  # the group coordinator creates the offsets topic on first use
    c.close()
    assert "__consumer_offsets" in admin.list_topics(timeout=10).topics
    try:
        admin.delete_topics(["__consumer_offsets"])["__consumer_offsets"].result(DEADLINE)
    except Exception as exc:
        assert "cannot be deleted" in str(exc) or "INVALID_REQUEST" in str(exc)
    else:
        raise AssertionError("deleting the internal offsets topic must be refused")
    assert "__consumer_offsets" in admin.list_topics(timeout=10).topics
