"""pybroker's consumer with ``group.protocol=consumer`` (KIP-848): it joins with ConsumerGroupHeartbeat,
reconciles the assignments the coordinator computes (revoke, commit, assign, acknowledge), leaves with
epoch -1, and reports its partitions lost when fenced or after a poll timeout.

Every scenario runs against pybroker (skipped until it offers ConsumerGroupHeartbeat) and against
Apache Kafka 3.8 in KRaft mode with the consumer protocol enabled, the oracle (skipped when it is not
installed): several of our consumers share partitions exactly once, members that keep partitions
keep them while others join or leave (no stop-the-world), a member that stops polling leaves and
comes back, a pattern picks up new topics, a group is shared with confluent-kafka's consumer-protocol
consumer. Plus the request our consumer builds and the settings it refuses, without a broker.

The cases of the other tiers: tests/unit/test_client_consumer_protocol.py.
"""
import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer

from pybroker.client import AsyncConsumer, Consumer, KafkaError, TopicPartition
from pybroker.protocol.errors import ErrorCode
from tests.broker import BrokerProcess
from tests.clientutil import wait_until
from tests.kafka_wire import WireClient
from tests.secure_brokers import KAFKA_HOME, kafka_available

DEADLINE = 40
CONSUMER_GROUP_HEARTBEAT = 68
HEARTBEAT_MS, SESSION_MS = 500, 6000
CONF = {"group.protocol": "consumer", "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 100}


# ---- brokers ----------------------------------------------------------------------------------------------

def _free_port() -> int:
    from tests.cluster import free_ports
    return free_ports(1)[0]


def _offers_consumer_protocol(port: int) -> bool:
    with WireClient(port) as w:
        resp = w.api_versions()
    return any(k.api_key == CONSUMER_GROUP_HEARTBEAT for k in resp.api_keys)


def start_kafka(tmp, consumer_protocol: bool = True):
    """A KRaft Kafka 3.8 (broker and controller in one process); the caller kills it."""
    from tests.cluster import Cluster, answers_requests, free_ports
    port, controller = free_ports(2)
    lines = ["process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{controller}",
             f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
             f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
             "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
             f"log.dirs={os.path.join(tmp, 'kafka-data')}", "offsets.topic.replication.factor=1",
             "offsets.topic.num.partitions=4", "group.initial.rebalance.delay.ms=0", "num.partitions=1",
             "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1"]
    if consumer_protocol:
        lines += ["group.coordinator.rebalance.protocols=classic,consumer",
                  f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}",
                  f"group.consumer.min.heartbeat.interval.ms={HEARTBEAT_MS}",
                  f"group.consumer.session.timeout.ms={SESSION_MS}",
                  f"group.consumer.min.session.timeout.ms={SESSION_MS}"]
    os.makedirs(tmp, exist_ok=True)
    props = os.path.join(tmp, "kafka.properties")
    with open(props, "w") as f:
        f.write("\n".join(lines) + "\n")
    env = {**os.environ, "LOG_DIR": os.path.join(tmp, "kafka-logs"), "KAFKA_HEAP_OPTS": "-Xmx512M -Xms512M"}
    bin_dir = os.path.join(KAFKA_HOME, "bin")
    subprocess.run([os.path.join(bin_dir, "kafka-storage.sh"), "format", "-t", "consumer-protocol-test01",
                    "-c", props], check=True, capture_output=True, env=env, timeout=120)
    proc = subprocess.Popen([os.path.join(bin_dir, "kafka-server-start.sh"), props], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        Cluster.wait_for(lambda: proc.poll() is None and answers_requests(port) is None, 120, "Kafka to listen",
                         interval=0.5)
    except BaseException:
        proc.kill()
        proc.wait(60)
        raise
    return proc, port


class Backend:
    def __init__(self, name: str, port: int):
        self.name = name
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"


@pytest.fixture(scope="module", params=["pybroker", "kafka"])
def backend(request, tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp(f"cgp-{request.param}"))
    if request.param == "kafka":
        if not kafka_available():
            pytest.skip(f"Apache Kafka 3.8 is not installed at {KAFKA_HOME}")
        proc, port = start_kafka(tmp)
        try:
            yield Backend("kafka", port)
        finally:
            proc.kill()
            proc.wait(60)
        return
    from pybroker.config import SUPPORTED
    overrides = {"group.initial.rebalance.delay.ms": 0, "num.partitions": 1, "offsets.topic.num.partitions": 4}
    if "group.consumer.heartbeat.interval.ms" in SUPPORTED:
        overrides.update({"group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
                          "group.consumer.session.timeout.ms": SESSION_MS})
    broker = BrokerProcess(os.path.join(tmp, "data"), overrides).start()
    try:
        if not _offers_consumer_protocol(broker.port):
            pytest.skip("this pybroker does not offer ConsumerGroupHeartbeat yet")
        yield Backend("pybroker", broker.port)
    finally:
        broker.close()


# ---- helpers ------------------------------------------------------------------------------------------------

def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(b: Backend, partitions: int, name: str | None = None) -> str:
    name = name or unique("cgp")
    with WireClient(b.port) as w:
        w.create_topic(name, partitions)
    return name


def produce(b: Backend, topic: str, count: int, partitions: int, start: int = 0) -> set:
    p = CKProducer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    values = set()
    for i in range(start, start + count):
        v = f"{topic}-{i}".encode()
        p.produce(topic, value=v, partition=i % partitions)
        values.add(v)
    assert p.flush(DEADLINE) == 0
    return values


class Owners:
    """Ownership from each consumer's callbacks: flags a partition assigned while another owns it,
    and remembers when a member was left with nothing (a stop-the-world rebalance)."""

    def __init__(self):
        self.owned = {}  # tp -> member name
        self.held = collections.defaultdict(set)  # member name -> tps
        self.events = []  # (member, kind, tps)
        self.violations = []
        self.lock = threading.Lock()

    def callbacks(self, name):
        def on_assign(consumer, partitions):
            with self.lock:
                self.events.append((name, "assign", sorted(partitions)))
                for tp in partitions:
                    holder = self.owned.get(tp)
                    if holder is not None and holder != name:
                        self.violations.append((tp, holder, name))
                    self.owned[tp] = name
                    self.held[name].add(tp)

        def release(kind):
            def on_release(consumer, partitions):
                with self.lock:
                    self.events.append((name, kind, sorted(partitions)))
                    for tp in partitions:
                        if self.owned.get(tp) == name:
                            del self.owned[tp]
                        self.held[name].discard(tp)
            return on_release

        return {"on_assign": on_assign, "on_revoke": release("revoke"), "on_lost": release("lost")}


def member(b: Backend, group: str, topics, owners: Owners | None = None, name: str = "", **extra):
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, **CONF,
                  **{k.replace("_", "."): v for k, v in extra.items()}})
    c.subscribe(topics, **(owners.callbacks(name) if owners else {}))
    return c


def poll_round(consumers: dict, got: dict, ms: int = 50) -> None:
    for name, c in consumers.items():
        for r in c.poll(ms):
            got[name].append(r.value)


def settle(consumers: dict, partitions: set, got=None, timeout: float = DEADLINE, balanced: bool = True) -> dict:
    """Poll every member until their assignments cover ``partitions`` exactly once (evenly)."""
    got = got if got is not None else collections.defaultdict(list)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        poll_round(consumers, got)
        sizes = [len(c.assignment()) for c in consumers.values()]
        owned = [tp for c in consumers.values() for tp in c.assignment()]
        even = not balanced or max(sizes) - min(sizes) <= 1
        if len(owned) == len(set(owned)) and set(owned) == partitions and even:
            return got
    raise AssertionError(f"no stable assignment: { {n: c.assignment() for n, c in consumers.items()} }")


def drain(consumers: dict, got: dict, want: set, timeout: float = DEADLINE) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        seen = {v for vs in got.values() for v in vs}
        if want <= seen:
            return
        poll_round(consumers, got)
    seen = {v for vs in got.values() for v in vs}
    raise AssertionError(f"{len(want - seen)} of {len(want)} records never arrived")


def all_partitions(topic: str, n: int) -> set:
    return {TopicPartition(topic, p) for p in range(n)}


def close_all(consumers: dict) -> None:
    for c in consumers.values():
        c.close()


# ---- against a broker ---------------------------------------------------------------------------------

def test_join_consume_commit_leave_and_resume(backend):
    topic, group = new_topic(backend, 3), unique("g")
    values = produce(backend, topic, 30, 3)
    c = member(backend, group, [topic])
    got = settle({"a": c}, all_partitions(topic, 3))
    drain({"a": c}, got, values)
    assert sorted(got["a"]) == sorted(values)  # nothing twice
    meta = c.consumer_group_metadata()
    assert meta.generation_id > 0 and meta.member_id  # the member epoch and id from the coordinator
    c.commit()
    c.close()  # leaves with epoch -1: a new member gets everything at once, from the committed offsets
    more = produce(backend, topic, 9, 3, start=30)
    c2 = member(backend, group, [topic])
    try:
        got2 = settle({"b": c2}, all_partitions(topic, 3), timeout=SESSION_MS / 1000 - 1)
        drain({"b": c2}, got2, more)
        assert sorted(got2["b"]) == sorted(more)
    finally:
        c2.close()


def test_three_members_share_exactly_once_without_stop_the_world(backend):
    topic, group, n = new_topic(backend, 6), unique("g"), 6
    owners = Owners()
    sent = produce(backend, topic, 60, n)
    consumers = {"a": member(backend, group, [topic], owners, "a", enable_auto_commit=True)}
    got = settle(consumers, all_partitions(topic, n))
    for name in ("b", "c"):
        consumers[name] = member(backend, group, [topic], owners, name, enable_auto_commit=True)
        sent |= produce(backend, topic, 30, n, start=len(sent))
        got = settle(consumers, all_partitions(topic, n), got)
        assert all(owners.held[m] for m in consumers), "a member was left with nothing"
    try:
        drain(consumers, got, sent)
        assert not owners.violations, f"partitions assigned while another member owned them: {owners.violations}"
        # incremental: "a" only gave up partitions, never everything, while b and c joined
        a_events = [e for e in owners.events if e[0] == "a"]
        held = set()
        for _, kind, tps in a_events:
            held = held | set(tps) if kind == "assign" else held - set(tps)
            assert held, "member a lost all its partitions during a rebalance"
        assert not any(kind == "lost" for _, kind, _ in owners.events)
        consumers.pop("c").close()  # c leaves: its partitions move to a and b
        sent |= produce(backend, topic, 30, n, start=len(sent))
        got = settle(consumers, all_partitions(topic, n), got)
        drain(consumers, got, sent)
        everything = [v for vs in got.values() for v in vs]
        assert set(everything) == sent
        # commits on revoke: a moved partition continues from where its last owner stopped
        dupes = [v for v, k in collections.Counter(everything).items() if k > 1]
        assert not dupes, f"{len(dupes)} records consumed twice"
        assert not owners.violations
    finally:
        close_all(consumers)


def test_poll_timeout_leaves_and_reports_lost_on_the_next_poll(backend):
    topic, group = new_topic(backend, 2), unique("g")
    owners = Owners()
    a = member(backend, group, [topic], owners, "a", max_poll_interval_ms=2000)
    b = member(backend, group, [topic], owners, "b")
    consumers = {"a": a, "b": b}
    try:
        settle(consumers, all_partitions(topic, 2))
        end = time.monotonic() + DEADLINE
        while len(b.assignment()) < 2:  # a stops polling: it leaves and b gets everything
            assert time.monotonic() < end, "the member that stopped polling kept its partitions"
            b.poll(100)
        since = len(owners.events)
        while not any(e[0] == "a" and e[1] == "lost" for e in owners.events[since:]):
            assert time.monotonic() < end, "polling again did not report the old partitions lost"
            a.poll(100)  # a comes back: its old partitions are reported lost, then it joins again
            b.poll(10)
        assert not [e for e in owners.events[since:] if e[0] == "a" and e[1] == "revoke"]  # lost, not revoked
        settle(consumers, all_partitions(topic, 2))
    finally:
        close_all(consumers)


CHILD = """
import json, sys, threading
from pybroker.client import Consumer
bootstrap, group, topic = sys.argv[1:4]
def say(kind):
    def callback(consumer, partitions):
        print(json.dumps([kind, sorted(p.partition for p in partitions)]), flush=True)
    return callback
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False})
c.subscribe([topic], on_assign=say("assign"), on_revoke=say("revoke"), on_lost=say("lost"))
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
while not done.is_set():  # polls until the test closes stdin
    c.poll(100)
c.close()
"""


class Child:
    """One of our consumers in a process of its own (so that SIGSTOP can freeze its heartbeats);
    it polls until its stdin is closed and prints its rebalance callbacks."""

    def __init__(self, b: Backend, group: str, topic: str):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, b.bootstrap, group, topic], cwd=root,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.events = []
        self.owned = set()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            kind, parts = json.loads(line)
            self.events.append(kind)
            self.owned = self.owned | set(parts) if kind == "assign" else self.owned - set(parts)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(30)


def test_frozen_member_is_fenced_reports_lost_and_rejoins(backend):
    topic, group = new_topic(backend, 2), unique("g")
    child = Child(backend, group, topic)
    ours = None
    try:
        end = time.monotonic() + DEADLINE
        assert wait_until(lambda: child.owned == {0, 1}), "the child member never got its partitions"
        ours = member(backend, group, [topic])
        while not (len(child.owned) == 1 and len(ours.assignment()) == 1):
            assert time.monotonic() < end, f"no shared assignment: child {child.owned}, ours {ours.assignment()}"
            ours.poll(50)
        os.kill(child.proc.pid, signal.SIGSTOP)  # no heartbeats: the coordinator drops it after the session
        try:
            end = time.monotonic() + SESSION_MS / 1000 + DEADLINE
            while len(ours.assignment()) < 2:
                assert time.monotonic() < end, "the frozen member's partition never moved"
                ours.poll(100)
        finally:
            os.kill(child.proc.pid, signal.SIGCONT)
        end = time.monotonic() + DEADLINE
        while not ("lost" in child.events and len(child.owned) == 1 and len(ours.assignment()) == 1):
            assert time.monotonic() < end, f"the fenced member did not come back: {child.events}"
            ours.poll(50)
        assert "revoke" not in child.events[child.events.index("lost"):]  # fenced: lost, not revoked
    finally:
        if ours is not None:
            ours.close()
        child.close()


def test_pattern_subscription_picks_up_a_new_topic(backend):
    prefix = unique("cgpat")
    first = new_topic(backend, 2, f"{prefix}-one")
    group = unique("g")
    c = Consumer({"bootstrap.servers": backend.bootstrap, "group.id": group, **CONF,
                  "metadata.max.age.ms": 500})
    c.subscribe([f"^{prefix}-.*"])
    try:
        settle({"a": c}, all_partitions(first, 2))
        second = new_topic(backend, 1, f"{prefix}-two")
        values = produce(backend, second, 5, 1)
        got = settle({"a": c}, all_partitions(first, 2) | all_partitions(second, 1))
        drain({"a": c}, got, values)
    finally:
        c.close()


def test_group_shared_with_confluent_kafka_consumer(backend):
    if backend.name == "kafka":  # it sends v1 only and never joins Kafka 3.8's v0-only preview
        pytest.skip("librdkafka's consumer protocol needs ConsumerGroupHeartbeat v1 (Kafka 4.0); Kafka 3.8 has v0")
    topic, group, n = new_topic(backend, 4), unique("g"), 4
    sent = produce(backend, topic, 40, n)
    ours = member(backend, group, [topic])
    theirs = CKConsumer({"bootstrap.servers": backend.bootstrap, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    theirs.subscribe([topic])
    got = collections.defaultdict(list)
    try:
        end = time.monotonic() + DEADLINE
        while True:
            poll_round({"ours": ours}, got)
            m = theirs.poll(0.05)
            if m is not None and m.error() is None:
                got["theirs"].append(m.value())
            mine = set(ours.assignment())
            other = {TopicPartition(tp.topic, tp.partition) for tp in theirs.assignment()}
            shared = mine and other and not mine & other and mine | other == all_partitions(topic, n)
            # nothing is committed: each reads its share from the start, whoever read it before
            if shared and got["theirs"] and set(got["ours"]) | set(got["theirs"]) == sent:
                break
            assert time.monotonic() < end, (f"ours {sorted(mine)}, theirs {sorted(other)}; "
                                            f"{len(sent - set(got['ours']) - set(got['theirs']))} records missing")
    finally:
        ours.close()
        theirs.close()


def test_async_members_share_with_coroutine_callbacks(backend):
    topic, group = new_topic(backend, 2), unique("g")
    values = produce(backend, topic, 20, 2)

    async def main():
        assigned = collections.defaultdict(set)

        def callbacks(name):
            async def on_assign(consumer, partitions):
                assigned[name] |= set(partitions)

            async def on_revoke(consumer, partitions):
                assigned[name] -= set(partitions)
            return {"on_assign": on_assign, "on_revoke": on_revoke}

        conf = {"bootstrap.servers": backend.bootstrap, "group.id": group, **CONF}
        async with AsyncConsumer(conf) as a, AsyncConsumer(conf) as b:
            a.subscribe([topic], **callbacks("a"))
            b.subscribe([topic], **callbacks("b"))
            got = set()
            end = time.monotonic() + DEADLINE
            while not (got == values and len(assigned["a"]) == 1 and len(assigned["b"]) == 1):
                assert time.monotonic() < end, f"assigned {dict(assigned)}, {len(values - got)} records missing"
                for c in (a, b):
                    got |= {r.value for r in await c.poll(50)}
            assert assigned["a"] | assigned["b"] == all_partitions(topic, 2)
            assert set(a.assignment()) == assigned["a"] and set(b.assignment()) == assigned["b"]

    asyncio.run(main())


def test_static_member_leaves_and_comes_back(backend):
    topic, group = new_topic(backend, 2), unique("g")
    a = member(backend, group, [topic], group_instance_id="static-a")
    try:
        settle({"a": a}, all_partitions(topic, 2))
        epoch = a.consumer_group_metadata().generation_id
        assert epoch > 0
    finally:
        a.close()  # a static member leaves with epoch -2: it means to come back
    a2 = member(backend, group, [topic], group_instance_id="static-a")
    try:
        settle({"a": a2}, all_partitions(topic, 2), timeout=SESSION_MS / 1000 - 1)
    finally:
        a2.close()


def test_unknown_server_assignor_reaches_poll(backend):
    topic, group = new_topic(backend, 1), unique("g")
    c = member(backend, group, [topic], group_remote_assignor="no-such-assignor")
    try:
        end = time.monotonic() + DEADLINE
        with pytest.raises(KafkaError) as info:
            while time.monotonic() < end:
                c.poll(100)
        assert info.value.code == ErrorCode.UNSUPPORTED_ASSIGNOR
    finally:
        c.close()


def test_cluster_without_the_consumer_protocol_is_a_clear_error(tmp_path):
    if not kafka_available():
        pytest.skip(f"Apache Kafka 3.8 is not installed at {KAFKA_HOME}")
    proc, port = start_kafka(str(tmp_path), consumer_protocol=False)
    try:
        topic = f"plain-{uuid.uuid4().hex[:6]}"
        with WireClient(port) as w:
            w.create_topic(topic, 1)
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "g", **CONF})
        c.subscribe([topic])
        try:
            end = time.monotonic() + DEADLINE
            with pytest.raises(KafkaError) as info:
                while time.monotonic() < end:
                    c.poll(100)
            assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
            assert "group.protocol=classic" in info.value.message
        finally:
            c.close()
    finally:
        proc.kill()
        proc.wait(60)


# ---- without a broker -------------------------------------------------------------------------------------


