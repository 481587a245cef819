"""Produce v9-v11 (flexible) as real clients send it: a live capture of what librdkafka, kafka-python and
Kafka's Java producer send when the broker advertises Produce v11, decoded the same by every codec
(the in-process golden-byte and malformed-input cases: tests/unit/test_produce_flexible.py)."""
import os
import shutil
import subprocess

import pytest

from tests.txn_brokers import KAFKA_HOME
from tests.interop.test_kafka_codec import RecordingProxy
from tests.unit.test_kafka_codec import decode_all
from tests.unit.test_produce_flexible import body_of


def _java_producer(bootstrap: str, topic: str, values) -> None:
    tool = os.path.join(KAFKA_HOME, "bin", "kafka-console-producer.sh")
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"}
    subprocess.run([tool, "--bootstrap-server", bootstrap, "--topic", topic, "--producer-property", "acks=all",
                    "--producer-property", "linger.ms=20"], input="".join(f"{v}\n" for v in values),
                   text=True, check=True, timeout=120, env=env, capture_output=True)


@pytest.fixture
def capture(broker_factory):
    proxy = RecordingProxy(lifetime=240)
    b = broker_factory(overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
                                  "num.partitions": "2"})
    proxy.start(b.port)
    yield proxy
    proxy.close()


def test_live_capture_flexible_versions(capture):
    """Every Produce frame real clients send is read alike by the three decoders; librdkafka,
    kafka-python and Kafka's Java producer all pick a flexible version."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer
    boot = f"127.0.0.1:{capture.port}"
    p = Producer({"bootstrap.servers": boot, "linger.ms": 20, "acks": "all", "enable.idempotence": True})
    for i in range(4):
        p.produce("flex", value=b"c-%d" % i, key=b"k", partition=i % 2)
    assert p.flush(30) == 0
    kp = KafkaProducer(bootstrap_servers=boot, linger_ms=20, acks="all", client_id="kafka-python-flex")
    try:
        for f in [kp.send("flex", value=b"kp-%d" % i, partition=i % 2) for i in range(4)]:
            f.get(30)
    finally:
        kp.close(5)
    clients = {"rdkafka", "kafka-python-flex"}  # named: the default id counts producers per process
    java = os.path.isfile(os.path.join(KAFKA_HOME, "bin", "kafka-console-producer.sh")) and shutil.which("java")
    if java:
        _java_producer(boot, "flex", [f"j-{i}" for i in range(4)])
    versions = {}
    for raw in capture.requests(0):
        frame = memoryview(bytearray(raw))
        header, pos = body_of(frame)
        data = decode_all(frame, pos, header.request_api_version)
        assert {t.name for t in data.topics} == {"flex"}
        versions.setdefault(header.client_id, set()).add(header.request_api_version)
    assert clients <= set(versions)
    assert versions["kafka-python-flex"] == {9}
    assert min(versions["rdkafka"]) >= 9
    if java:
        java_versions = {v for c, vs in versions.items() if c.startswith("console-producer") for v in vs}
        assert java_versions == {11}

