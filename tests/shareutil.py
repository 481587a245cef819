"""Helpers of the share-group tests: confluent-kafka share consumers, topics filled with numbered
records, and draining a group until every expected record was seen."""
import time
import uuid

from confluent_kafka import Producer, ShareConsumer

from tests.kafka_wire import WireClient

DEADLINE = 60.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_topic(port: int, partitions: int, configs: dict | None = None) -> str:
    name = unique("sq")
    with WireClient(port) as w:
        w.create_topic(name, partitions, configs or {})
    return name


def fill(bootstrap: str, topic: str, partitions: int, count: int, **conf) -> list[bytes]:
    """``count`` records spread round-robin over the partitions; their values, in order."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **conf})
    values = []
    for i in range(count):
        v = f"r{i:06d}".encode()
        p.produce(topic, value=v, partition=i % partitions)
        values.append(v)
    assert p.flush(30) == 0
    return values


def share_consumer(bootstrap: str, group: str, topic: str, **conf) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3, **conf})
    c.subscribe([topic])
    return c


def set_group_config(port: int, group: str, configs: dict) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    futures = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                              incremental_configs=entries)])
    for f in futures.values():
        f.result(30)


def poll_until(consumers, done, timeout: float = DEADLINE, on_message=None):
    """Poll every consumer in turn until ``done()`` (bounded); ``on_message(consumer, message)`` sees
    each record."""
    end = time.monotonic() + timeout
    while not done() and time.monotonic() < end:
        for c in consumers:
            for m in c.poll(0.2):
                if m.error() is None and on_message is not None:
                    on_message(c, m)
    return done()
