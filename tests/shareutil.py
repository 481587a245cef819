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


HOLDER = """
import sys, time
from confluent_kafka import AcknowledgeType, ShareConsumer
bootstrap, group, topic = sys.argv[1], sys.argv[2], sys.argv[3]
c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                   "max.poll.records": int(sys.argv[4])})
c.subscribe([topic])

def poll_some():
    end = time.monotonic() + 60
    while time.monotonic() < end:
        got = [m for m in c.poll(0.5) if m.error() is None]
        if got:
            return got
    return []

accepted = poll_some()
for m in accepted:
    c.acknowledge(m, AcknowledgeType.ACCEPT)
results = c.commit_sync(30)
bad = [str(tp) for tp, r in (results or {}).items() if r is not None]
held = poll_some()  # never acknowledged
print("accepted", " ".join(f"{m.partition()}:{m.offset()}" for m in accepted), flush=True)
print("held", " ".join(f"{m.partition()}:{m.offset()}" for m in held), flush=True)
print("errors", " ".join(bad), flush=True)
time.sleep(300)  # holds them until it is killed
"""


class Holder:
    """A share consumer in its own process that accepts what its first poll got, holds what its second
    got (never acknowledged) and waits to be killed."""

    def __init__(self, bootstrap: str, group: str, topic: str, max_records: int = 500):
        import subprocess
        import sys
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, bootstrap, group, topic, str(max_records)],
                                     stdout=subprocess.PIPE, text=True)
        lines = {}
        for _ in range(3):
            line = self.proc.stdout.readline()
            if not line:
                break
            name, _, rest = line.rstrip("\n").partition(" ")
            lines[name] = rest.split()
        assert lines.get("errors") == [], f"the holder's acknowledgements failed: {lines}"
        self.accepted = {tuple(map(int, x.split(":"))) for x in lines["accepted"]}
        self.held = {tuple(map(int, x.split(":"))) for x in lines["held"]}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.proc.stdout.close()
