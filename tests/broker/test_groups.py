"""Consumer groups (classic protocol) with real clients against a real broker: partitions shared,
members that crash, join and leave, every assignor, kafka-python/aiokafka/kcat group consumers,
and protocol-level bad input answered with Kafka's error codes."""
import asyncio
import collections
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from pybroker.protocol import REQUESTS
from tests.clientutil import DEADLINE, kafka_python_group_consumer, wait_until
from tests.kafka_wire import WireClient

SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms: the shortest session a member may ask for
FAST = {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 2000}


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(b, partitions: int) -> str:
    name = unique("gt")
    with WireClient(b.port) as w:
        w.create_topic(name, partitions)
    return name


def produce(b, topic: str, count: int, prefix: str = "v") -> dict:
    """Acked records: value -> (partition, offset), spread round-robin over the partitions."""
    acked = {}
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5})
    parts = len(p.list_topics(topic, timeout=10).topics[topic].partitions)

    def done(err, msg):
        assert err is None, err
        acked[msg.value()] = (msg.partition(), msg.offset())

    for i in range(count):
        p.produce(topic, value=f"{prefix}-{i}".encode(), partition=i % parts, on_delivery=done)
    assert p.flush(DEADLINE) == 0
    assert len(acked) == count
    return acked


class Tracker:
    """Partition ownership over time from rebalance callbacks: no partition owned twice at once."""

    def __init__(self):
        self.owned: dict[int, object] = {}  # partition -> consumer name
        self.assignments = collections.defaultdict(list)  # consumer name -> list of assigned sets
        self.violations = []

    def callbacks(self, name):
        def on_assign(consumer, partitions):
            for tp in partitions:
                holder = self.owned.get(tp.partition)
                if holder is not None and holder != name:
                    self.violations.append((tp.partition, holder, name))
                self.owned[tp.partition] = name
            self.assignments[name].append({tp.partition for tp in partitions})

        def on_revoke(consumer, partitions):
            for tp in partitions:
                if self.owned.get(tp.partition) == name:
                    del self.owned[tp.partition]

        return {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_revoke}

    def current(self) -> dict:
        out = collections.defaultdict(set)
        for part, name in self.owned.items():
            out[name].add(part)
        return out


def group_consumer(b, group: str, topic: str, tracker: Tracker | None = None, name: str = "", **extra):
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, **FAST, **extra})
    c.subscribe([topic], **(tracker.callbacks(name) if tracker else {}))
    return c


def poll_all(consumers: dict, until, timeout: float = DEADLINE, got: dict | None = None) -> dict:
    """Poll every consumer in turn (callbacks run inside poll) until ``until(got)`` or timeout."""
    got = got if got is not None else collections.defaultdict(list)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for name, c in consumers.items():
            for m in c.consume(50, 0.05):
                assert m.error() is None, m.error()
                got[name].append((m.partition(), m.offset(), m.value()))
        if until(got):
            return got
    return got


def close_all(consumers) -> None:
    for c in consumers.values():
        c.close()


def describe(b, group: str, version: int = 4):
    with WireClient(b.port) as w:
        return w.request(REQUESTS[15](groups=[group], include_authorized_operations=False), version).groups[0]


def committed_offsets(b, group: str, topic: str, partitions: int) -> dict:
    with WireClient(b.port) as w:
        req = REQUESTS[9]
        resp = w.request(req(group_id=group, topics=[req.OffsetFetchRequestTopic(
            name=topic, partition_indexes=list(range(partitions)))]), 5)
    assert resp.error_code == 0
    return {p.partition_index: p.committed_offset for t in resp.topics for p in t.partitions}


def end_offsets(b, topic: str, partitions: int) -> dict:
    with WireClient(b.port) as w:
        return {p: w.list_offset(topic, p) for p in range(partitions)}


# ---- sharing partitions --------------------------------------------------------------------

def test_three_consumers_share_every_partition_disjointly(broker):
    topic, group = create_topic(broker, 6), unique("g")
    tracker = Tracker()
    consumers = {f"c{i}": group_consumer(broker, group, topic, tracker, f"c{i}") for i in range(3)}
    try:
        def settled(_):
            cur = tracker.current()
            return len(cur) == 3 and sum(len(s) for s in cur.values()) == 6
        poll_all(consumers, settled)
        cur = tracker.current()
        assert sorted(p for s in cur.values() for p in s) == list(range(6)), cur
        assert all(len(s) == 2 for s in cur.values()), cur  # range over 6 partitions / 3 members
        assert not tracker.violations
        acked = produce(broker, topic, 60)
        got = poll_all(consumers, lambda g: sum(map(len, g.values())) >= 60)
        for name, recs in got.items():  # each member reads only its own partitions
            assert {p for p, _, _ in recs} <= cur[name], (name, cur[name])
        assert sorted(v for recs in got.values() for _, _, v in recs) == sorted(acked)
        d = describe(broker, group)
        assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (0, "Stable", "consumer", "range")
        assert len(d.members) == 3 and all(m.member_assignment for m in d.members)
    finally:
        close_all(consumers)


def test_joining_member_triggers_rebalance_and_no_partition_is_owned_twice(broker):
    topic, group = create_topic(broker, 6), unique("g")
    tracker = Tracker()
    consumers = {"a": group_consumer(broker, group, topic, tracker, "a")}
    try:
        poll_all(consumers, lambda _: len(tracker.current().get("a", ())) == 6)
        assert tracker.current()["a"] == set(range(6))
        for name in ("b", "c"):  # every join rebalances; ownership never overlaps
            consumers[name] = group_consumer(broker, group, topic, tracker, name)
            want = len(consumers)
            poll_all(consumers, lambda _: len(tracker.current()) == want
                     and sum(map(len, tracker.current().values())) == 6)
            assert len(tracker.current()) == want, tracker.current()
        consumers.pop("a").close()  # a clean leave rebalances at once
        poll_all(consumers, lambda _: set(tracker.current()) == {"b", "c"}
                 and sum(map(len, tracker.current().values())) == 6)
        assert sorted(p for s in tracker.current().values() for p in s) == list(range(6))
        assert not tracker.violations, tracker.violations
        assert len(tracker.assignments["b"]) >= 2  # b saw at least two generations
    finally:
        close_all(consumers)


CHILD = r"""
import sys
from confluent_kafka import Consumer
bootstrap, group, topic = sys.argv[1:4]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 500, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
c.subscribe([topic], on_assign=lambda c, ps: print("assigned", len(ps), flush=True))
while True:
    m = c.poll(0.2)
    if m is None or m.error():
        continue
    c.commit(message=m, asynchronous=False)  # committed before it is reported: at-least-once
    print("got", m.value().decode(), flush=True)
"""


def test_killed_member_partitions_move_and_nothing_is_skipped(broker, tmp_path):
    topic, group = create_topic(broker, 6), unique("g")
    out_path = tmp_path / "child.out"
    with open(out_path, "w") as out:
        child = subprocess.Popen([sys.executable, "-c", CHILD, broker.bootstrap, group, topic], stdout=out,
                                 stderr=subprocess.DEVNULL)
    tracker = Tracker()
    consumers = {f"c{i}": group_consumer(broker, group, topic, tracker, f"c{i}") for i in range(2)}
    try:
        # the child holds a third of the partitions once all three are in
        poll_all(consumers, lambda _: sum(map(len, tracker.current().values())) == 4 and len(tracker.current()) == 2)
        assert sum(map(len, tracker.current().values())) == 4, tracker.current()
        acked = produce(broker, topic, 60, "first")
        got = poll_all(consumers, lambda g: "got" in out_path.read_text()
                       and sum(map(len, g.values())) >= 40)
        assert wait_until(lambda: out_path.read_text().count("got") >= 5), "the child consumed nothing"
        child.kill()  # SIGKILL: no LeaveGroup, the session timeout must find out
        child.wait(10)
        acked.update(produce(broker, topic, 60, "second"))
        poll_all(consumers, lambda _: sum(map(len, tracker.current().values())) == 6, timeout=SESSION_MS / 1000 + 20,
                 got=got)
        assert sorted(p for s in tracker.current().values() for p in s) == list(range(6)), tracker.current()
        child_values = {line.split()[1].encode() for line in out_path.read_text().splitlines()
                        if line.startswith("got")}
        seen = lambda: {v for recs in got.values() for _, _, v in recs} | child_values  # noqa: E731
        ends = end_offsets(broker, topic, 6)

        def caught_up(_):  # every record seen and every member at the end of what it owns
            return seen() >= set(acked) and all(tp.offset == ends[tp.partition]
                                                for c in consumers.values() for tp in c.position(c.assignment()))
        poll_all(consumers, caught_up, got=got)
        assert set(acked) - seen() == set(), "acked records skipped by the group"
        for c in consumers.values():
            try:
                c.commit(asynchronous=False)
            except KafkaException as exc:  # nothing consumed since: the child's commits stand
                assert exc.args[0].code() == KafkaError._NO_OFFSET, exc
        assert committed_offsets(broker, group, topic, 6) == end_offsets(broker, topic, 6)
        assert not tracker.violations
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        close_all(consumers)


def test_two_groups_each_see_every_record(broker):
    topic = create_topic(broker, 3)
    acked = produce(broker, topic, 45)
    consumers = {g: group_consumer(broker, unique(g), topic) for g in ("one", "two")}
    try:
        got = poll_all(consumers, lambda g: all(len(g[n]) >= 45 for n in consumers))
        for name in consumers:
            assert sorted(v for _, _, v in got[name]) == sorted(acked), name
    finally:
        close_all(consumers)


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_confluent_assignors(broker, strategy):
    topic, group = create_topic(broker, 6), unique("g")
    tracker = Tracker()
    opts = {"partition.assignment.strategy": strategy}
    consumers = {"a": group_consumer(broker, group, topic, tracker, "a", **opts)}
    try:
        poll_all(consumers, lambda _: len(tracker.current().get("a", ())) == 6)
        consumers["b"] = group_consumer(broker, group, topic, tracker, "b", **opts)
        poll_all(consumers, lambda _: len(tracker.current()) == 2 and sum(map(len, tracker.current().values())) == 6)
        cur = tracker.current()
        assert sorted(p for s in cur.values() for p in s) == list(range(6)), cur
        assert sorted(len(s) for s in cur.values()) == [3, 3], cur
        assert not tracker.violations, tracker.violations
        acked = produce(broker, topic, 30)
        got = poll_all(consumers, lambda g: sum(map(len, g.values())) >= 30)
        assert sorted(v for recs in got.values() for _, _, v in recs) == sorted(acked)
        assert describe(broker, group).protocol_data == strategy
    finally:
        close_all(consumers)


# ---- other clients -------------------------------------------------------------------------

@pytest.mark.parametrize("assignor", ["range", "sticky"])
def test_kafka_python_group_consumer(broker, assignor):
    """One kafka-python member per group: two in one process hang client-side in kafka-python 3.0.12
    (the leader receives its SyncGroup answer, error 0, and stops heartbeating)."""
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    topic, group = create_topic(broker, 4), unique("kp")
    acked = produce(broker, topic, 40)
    strategy = (StickyPartitionAssignor if assignor == "sticky" else RangePartitionAssignor,)
    c = kafka_python_group_consumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500,
                                    partition_assignment_strategy=strategy)
    try:
        got = []
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end and len(got) < 40:
            for recs in c.poll(timeout_ms=100).values():
                got.extend(r.value for r in recs)
        assert sorted(got) == sorted(acked)
        assert {tp.partition for tp in c.assignment()} == set(range(4))
        c.commit()
        assert committed_offsets(broker, group, topic, 4) == end_offsets(broker, topic, 4)
        assert describe(broker, group).protocol_data == assignor
    finally:
        c.close()


def test_aiokafka_group_consumer(broker):
    from aiokafka import AIOKafkaConsumer
    topic, group = create_topic(broker, 3), unique("aio")
    acked = produce(broker, topic, 30)

    async def run():
        c = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
        await c.start()
        try:
            got = []
            end = time.monotonic() + DEADLINE
            while len(got) < 30 and time.monotonic() < end:
                for recs in (await c.getmany(timeout_ms=200)).values():
                    got.extend(r.value for r in recs)
            await c.commit()
            return got
        finally:
            await c.stop()

    got = asyncio.run(asyncio.wait_for(run(), DEADLINE + 10))
    assert sorted(got) == sorted(acked)
    assert committed_offsets(broker, group, topic, 3) == end_offsets(broker, topic, 3)


def test_kcat_group_consumer(broker):
    topic, group = create_topic(broker, 3), unique("kcat")
    acked = produce(broker, topic, 30)
    proc = subprocess.Popen(["kcat", "-b", broker.bootstrap, "-G", group, "-o", "beginning", "-q",
                             "-X", "session.timeout.ms=6000", "-X", "auto.commit.interval.ms=200", "-f", "%s\n",
                             topic], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: committed_offsets(broker, group, topic, 3) == end_offsets(broker, topic, 3))
    finally:
        proc.terminate()  # kcat leaves the group and commits on SIGTERM
        out, err = proc.communicate(timeout=DEADLINE)
    assert sorted(out.split()) == sorted(acked), err.decode()[-2000:]


# ---- protocol level ------------------------------------------------------------------------

def join(w, group, member_id="", version=5, session=SESSION_MS, rebalance=10000, instance=None,
         protocols=(("range", b"meta"),), protocol_type="consumer"):
    req = REQUESTS[11]
    return w.request(req(group_id=group, session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                         member_id=member_id, group_instance_id=instance, protocol_type=protocol_type,
                         protocols=[req.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols]),
                     version)


def sync(w, group, generation, member_id, assignments=(), version=3, instance=None):
    req = REQUESTS[14]
    return w.request(req(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance,
                         assignments=[req.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                      for m, a in assignments]), version)


def heartbeat(w, group, generation, member_id, version=3, instance=None):
    return w.request(REQUESTS[12](group_id=group, generation_id=generation, member_id=member_id,
                                  group_instance_id=instance), version).error_code


def join_new(w, group, **kw):
    """v4+: the first join gets MEMBER_ID_REQUIRED (79) and the id; the second one gets in."""
    first = join(w, group, **kw)
    assert first.error_code == 79 and first.member_id, first
    resp = join(w, group, member_id=first.member_id, **kw)
    assert resp.error_code == 0, resp
    return resp


def test_protocol_errors_and_a_consistent_group(broker):
    group = unique("wire")
    with WireClient(broker.port) as w:
        # absurd session timeouts: outside [6000, 1800000]
        assert join(w, group, session=10).error_code == 26
        assert join(w, group, session=1800001).error_code == 26
        assert join(w, group, protocols=()).error_code == 23
        assert join(w, "", version=3).error_code == 24  # INVALID_GROUP_ID
        assert join(w, group, member_id="nobody", version=3).error_code == 25
        assert heartbeat(w, unique("nogroup"), 1, "nobody") == 25
        # a one-member group; the leader sends malformed (opaque) assignment bytes: relayed as they are
        me = join_new(w, group)
        assert me.leader == me.member_id and me.generation_id == 1 and len(me.members) == 1
        s = sync(w, group, 1, me.member_id, [(me.member_id, b"\xff\x00garbage"), ("ghost", b"x")])
        assert (s.error_code, s.assignment) == (0, b"\xff\x00garbage")
        assert heartbeat(w, group, 1, me.member_id) == 0
        assert heartbeat(w, group, 0, me.member_id) == 22  # ILLEGAL_GENERATION
        assert heartbeat(w, group, 1, "stranger") == 25
        assert sync(w, group, 2, me.member_id).error_code == 22
        # another protocol type cannot join, nor a member without a common protocol
        assert join(w, group, protocol_type="connect", version=3).error_code == 23
        assert join(w, group, protocols=(("other", b""),), version=3).error_code == 23
        d = describe(broker, group)
        assert (d.group_state, len(d.members), d.members[0].member_assignment) == ("Stable", 1, b"\xff\x00garbage")
        # leave, then everything about the old member is unknown
        leave = w.request(REQUESTS[13](group_id=group, member_id=me.member_id), 2)
        assert leave.error_code == 0
        assert heartbeat(w, group, 1, me.member_id) == 25
        assert describe(broker, group).group_state == "Empty"


def test_batch_leave_and_static_membership(broker):
    group = unique("static")
    with WireClient(broker.port) as w1, WireClient(broker.port) as w2:
        a = join(w1, group, instance="inst-a")  # static members skip MEMBER_ID_REQUIRED
        assert a.error_code == 0 and a.member_id.startswith("inst-a-")
        s = sync(w1, group, a.generation_id, a.member_id, [(a.member_id, b"A")], instance="inst-a")
        assert (s.error_code, s.assignment) == (0, b"A")
        # the same instance id under another member id is a zombie: fenced
        assert heartbeat(w1, group, a.generation_id, "zombie", instance="inst-a") == 82
        # a restart of the static member (empty member id) takes over; the old id is fenced
        a2 = join(w2, group, instance="inst-a")
        assert a2.error_code == 0 and a2.member_id != a.member_id
        assert heartbeat(w1, group, a.generation_id, a.member_id, instance="inst-a") == 82
        leave = REQUESTS[13]
        resp = w2.request(leave(group_id=group, members=[
            leave.MemberIdentity(member_id="", group_instance_id="inst-a"),
            leave.MemberIdentity(member_id="unknown-member", group_instance_id=None)]), 3)
        assert resp.error_code == 0
        assert [m.error_code for m in resp.members] == [0, 25]
        assert describe(broker, group).group_state == "Empty"


def test_rebalance_in_progress_and_member_sync(broker):
    group = unique("reb")
    with WireClient(broker.port) as w1, WireClient(broker.port) as w2:
        a = join_new(w1, group)
        assert sync(w1, group, 1, a.member_id, [(a.member_id, b"all")]).error_code == 0
        # b's join parks until a rejoins; meanwhile a's heartbeat says REBALANCE_IN_PROGRESS
        first = join(w2, group)
        assert first.error_code == 79
        req_b = REQUESTS[11](group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=10000,
                             member_id=first.member_id, group_instance_id=None, protocol_type="consumer",
                             protocols=[REQUESTS[11].JoinGroupRequestProtocol(name="range", metadata=b"b")])
        w2.send_only(req_b, 5)
        assert wait_until(lambda: heartbeat(w1, group, 1, a.member_id) == 27, timeout=10)
        a2 = join(w1, group, member_id=a.member_id)
        from pybroker.protocol import decode_response
        _, b = decode_response(w2.recv_frame(), 11, 5)
        assert a2.error_code == b.error_code == 0 and a2.generation_id == b.generation_id == 2
        assert a2.leader == a.member_id and len(a2.members) == 2 and b.members == []
        # the follower's sync waits for the leader's assignment
        req_s = REQUESTS[14](group_id=group, generation_id=2, member_id=b.member_id, group_instance_id=None,
                             assignments=[])
        w2.send_only(req_s, 3)
        s = sync(w1, group, 2, a.member_id, [(a.member_id, b"A"), (b.member_id, b"B")])
        _, sb = decode_response(w2.recv_frame(), 14, 3)
        assert (s.error_code, s.assignment, sb.error_code, sb.assignment) == (0, b"A", 0, b"B")
        assert heartbeat(w1, group, 2, a.member_id) == 0
