"""Shared fixtures for the Spark data source tests: one local Spark session and one broker for
the whole run, topics created and filled with confluent-kafka (an independent client).

Import the fixtures into a test module with ``from tests.spark_fixtures import *``.
"""
import os
import sys
import time
import uuid

import pytest

from tests.broker import BrokerProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPARK_SOURCE = os.path.join(ROOT, "spark_source")
if SPARK_SOURCE not in sys.path:
    sys.path.insert(0, SPARK_SOURCE)

DEADLINE = 30  # seconds: bound on every wait for a client


def _worker_pythonpath() -> None:
    # Spark's Python workers inherit the environment: let them import both packages from here
    parts = [SPARK_SOURCE, ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))


@pytest.fixture(scope="session")
def spark():
    _worker_pythonpath()
    from pyspark.sql import SparkSession

    session = (SparkSession.builder
               .master("local[2,2]")  # two cores; a failed task is tried once more
               .appName("pybroker-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory):
    broker = BrokerProcess(str(tmp_path_factory.mktemp("spark-broker") / "data")).start()
    yield broker
    try:
        broker.stop()
    finally:
        broker.close()


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=config or {})], operation_timeout=DEADLINE)
    futures[name].result(timeout=DEADLINE)
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:  # metadata shows every partition
        meta = admin.list_topics(name, timeout=DEADLINE)
        if name in meta.topics and len(meta.topics[name].partitions) == partitions:
            return name
        time.sleep(0.05)
    raise TimeoutError(f"topic {name} did not appear")


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(name, total)])[name].result(timeout=DEADLINE)


def produce(bootstrap: str, topic: str, records, partition: int | None = None) -> list:
    """Produce (key, value, headers, timestamp_ms) tuples; returns (partition, offset) per record
    in order. ``partition`` None lets the partitioner choose (by key)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "enable.idempotence": True})
    acked = [None] * len(records)
    errors = []

    def on_delivery(i):
        def cb(err, msg):
            if err is not None:
                errors.append(err)
            else:
                acked[i] = (msg.partition(), msg.offset())
        return cb

    for i, (key, value, headers, ts) in enumerate(records):
        kwargs = {"key": key, "value": value, "on_delivery": on_delivery(i)}
        if headers:
            kwargs["headers"] = list(headers)
        if ts is not None:
            kwargs["timestamp"] = ts
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, **kwargs)
        if i % 1000 == 999:
            producer.poll(0)
    left = producer.flush(DEADLINE)
    assert left == 0 and not errors, f"produce failed: {left} left, errors {errors[:3]}"
    return acked


def produce_values(bootstrap: str, topic: str, partition: int, count: int, prefix: str = "v",
                   start: int = 0, base_ts: int | None = None) -> list:
    """``count`` records with values prefix-<i> (and keys k-<i>) into one partition."""
    base_ts = int(time.time() * 1000) if base_ts is None else base_ts
    records = [(f"k-{i}".encode(), f"{prefix}-{i}".encode(), None, base_ts + i)
               for i in range(start, start + count)]
    return produce(bootstrap, topic, records, partition=partition)


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, partition, before)])
    for fut in futures.values():
        fut.result(timeout=DEADLINE)


def consume_all(bootstrap: str, topic: str, expected: int) -> list:
    """Every record of ``topic`` (up to ``expected``) read by a confluent-kafka consumer."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=DEADLINE).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])  # no group
    out = []
    deadline = time.monotonic() + DEADLINE
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is None:
                    out.append(msg)
    finally:
        consumer.close()
    return out


def read_opts(bootstrap: str, **extra) -> dict:
    return {"kafka.bootstrap.servers": bootstrap, **{k: str(v) for k, v in extra.items()}}


__all__ = ["spark", "spark_broker", "unique_topic", "create_topic", "add_partitions", "produce",
           "produce_values", "delete_records", "consume_all", "read_opts", "DEADLINE", "SPARK_SOURCE"]
