"""pybroker's consumer in consumer groups (classic protocol) against a real broker: subscribe by
list and by pattern, rebalances between several of our consumers with the range and
cooperative-sticky assignors (every partition owned exactly once; cooperative members keep what
does not move), a group shared with a confluent-kafka consumer, leaving on close and on a poll
timeout, commits from the revoke callback, the asyncio consumer; plus the assignors alone.

The cases of the other tiers: tests/unit/test_client_groups.py.
"""
import asyncio
import collections
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer

from pybroker.client import AsyncConsumer, Consumer, TopicPartition
from tests.kafka_wire import WireClient

DEADLINE = 25
GROUP_CONF = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100}


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(b, partitions: int, name: str | None = None) -> str:
    name = name or unique("gt")
    with WireClient(b.port) as w:
        w.create_topic(name, partitions)
    return name


def produce(b, topic: str, count: int, partitions: int) -> set:
    p = CKProducer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    values = set()
    for i in range(count):
        v = f"{topic}-{i}".encode()
        p.produce(topic, value=v, partition=i % partitions)
        values.add(v)
    assert p.flush(DEADLINE) == 0
    return values


class Owners:
    """Ownership from each consumer's rebalance callbacks; flags a partition owned twice."""

    def __init__(self):
        self.owned = {}  # tp -> consumer name
        self.revoked = collections.defaultdict(list)  # name -> list of revoked sets
        self.violations = []
        self.lock = threading.Lock()

    def callbacks(self, name):
        def on_assign(consumer, partitions):
            with self.lock:
                for tp in partitions:
                    holder = self.owned.get(tp)
                    if holder is not None and holder != name:
                        self.violations.append((tp, holder, name))
                    self.owned[tp] = name

        def on_revoke(consumer, partitions):
            with self.lock:
                self.revoked[name].append(set(partitions))
                for tp in partitions:
                    if self.owned.get(tp) == name:
                        del self.owned[tp]

        return {"on_assign": on_assign, "on_revoke": on_revoke}


def member(b, group, topics, owners=None, name="", **extra):
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, **GROUP_CONF,
                  **{k.replace("_", "."): v for k, v in extra.items()}})
    c.subscribe(topics, **(owners.callbacks(name) if owners else {}))
    return c


def poll_round(consumers: dict, got: dict, ms: int = 50) -> None:
    for name, c in consumers.items():
        for r in c.poll(ms):
            got[name].append((r.topic, r.partition, r.offset, r.value))


def settle(consumers: dict, partitions: set, got=None, timeout: float = DEADLINE) -> dict:
    """Poll every member until their assignments cover ``partitions`` exactly once, evenly: a
    cooperative rebalance passes through uneven states that cover every partition once."""
    got = got if got is not None else collections.defaultdict(list)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        poll_round(consumers, got)
        assignments = [c.assignment() for c in consumers.values()]
        owned = [tp for a in assignments for tp in a]
        sizes = [len(a) for a in assignments]
        if len(owned) == len(set(owned)) and set(owned) == partitions and max(sizes) - min(sizes) <= 1:
            return got
    raise AssertionError(f"no stable assignment: { {n: c.assignment() for n, c in consumers.items()} }")


def close_all(consumers) -> None:
    for c in consumers.values():
        c.close()


# ---- subscribe ------------------------------------------------------------------------------------------

def test_subscribe_list_commit_and_restart(broker):
    topic = new_topic(broker, 3)
    values = produce(broker, topic, 60, 3)
    group = unique("g")
    assigned = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **GROUP_CONF})
    c.subscribe([topic], on_assign=lambda consumer, tps: assigned.append(sorted(tps)))
    got, end = [], time.monotonic() + DEADLINE
    while len(got) < 60 and time.monotonic() < end:
        got += c.poll(200)
    assert {r.value for r in got} == values
    assert assigned[-1] == [TopicPartition(topic, p) for p in range(3)]
    assert c.subscription() == [topic]
    c.commit()
    c.close()
    produce(broker, topic, 6, 3)
    c = member(broker, group, [topic])
    got, end = [], time.monotonic() + DEADLINE
    while len(got) < 6 and time.monotonic() < end:
        got += c.poll(200)
    assert len(got) == 6 and all(r.offset >= 20 for r in got)  # continued after the commit
    c.unsubscribe()
    assert c.assignment() == [] and c.subscription() == []
    c.close()


def test_subscribe_pattern_picks_up_new_topics(broker):
    prefix = unique("pat")
    first = new_topic(broker, 1, f"{prefix}-a")
    new_topic(broker, 1, unique("other"))
    produce(broker, first, 5, 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("pg"), **GROUP_CONF,
                  "metadata.max.age.ms": 300})
    try:
        c.subscribe(f"^{prefix}-.*")
        got, end = [], time.monotonic() + DEADLINE
        while len(got) < 5 and time.monotonic() < end:
            got += c.poll(100)
        assert {r.topic for r in got} == {first} and len(got) == 5
        second = new_topic(broker, 2, f"{prefix}-b")
        produce(broker, second, 8, 2)
        end = time.monotonic() + DEADLINE
        while len([r for r in got if r.topic == second]) < 8 and time.monotonic() < end:
            got += c.poll(100)
        assert len([r for r in got if r.topic == second]) == 8
        assert c.subscription() == sorted([first, second])
        assert sorted(c.assignment()) == [TopicPartition(first, 0), TopicPartition(second, 0),
                                          TopicPartition(second, 1)]
    finally:
        c.close()


# ---- rebalances among our consumers -------------------------------------------------------------------------

def test_range_rebalance_three_members(broker):
    topic = new_topic(broker, 6)
    values = produce(broker, topic, 120, 6)
    group = unique("rg")
    owners = Owners()
    all_tps = {TopicPartition(topic, p) for p in range(6)}
    consumers = {"a": member(broker, group, [topic], owners, "a", partition_assignment_strategy="range")}
    try:
        got = settle(consumers, all_tps)
        consumers["b"] = member(broker, group, [topic], owners, "b", partition_assignment_strategy="range")
        settle(consumers, all_tps, got)
        consumers["c"] = member(broker, group, [topic], owners, "c", partition_assignment_strategy="range")
        settle(consumers, all_tps, got)
        sizes = sorted(len(c.assignment()) for c in consumers.values())
        assert sizes == [2, 2, 2]
        # range: each member holds a run of consecutive partitions
        for c in consumers.values():
            parts = sorted(tp.partition for tp in c.assignment())
            assert parts == list(range(parts[0], parts[0] + len(parts)))
        assert not owners.violations
        consumers.pop("b").close()  # leaves the group: its partitions move
        settle(consumers, all_tps, got)
        assert sorted(len(c.assignment()) for c in consumers.values()) == [3, 3]
        assert not owners.violations
        # eager protocol: every member revoked everything before each rejoin
        assert all(s for s in owners.revoked["a"])
        end = time.monotonic() + DEADLINE
        while {v for rs in got.values() for *_, v in rs} != values and time.monotonic() < end:
            poll_round(consumers, got)
        assert {v for rs in got.values() for *_, v in rs} == values
        # enable.auto.commit is off: no rebalance committed anything on its own
        assert set(consumers["a"].committed(all_tps).values()) == {None}
    finally:
        close_all(consumers)


def test_cooperative_sticky_keeps_partitions_that_stay(broker):
    topic = new_topic(broker, 6)
    group = unique("cg")
    owners = Owners()
    all_tps = {TopicPartition(topic, p) for p in range(6)}
    coop = {"partition_assignment_strategy": "cooperative-sticky"}
    consumers = {"a": member(broker, group, [topic], owners, "a", **coop)}
    try:
        settle(consumers, all_tps)
        consumers["b"] = member(broker, group, [topic], owners, "b", **coop)
        settle(consumers, all_tps)
        a_before, b_before = set(consumers["a"].assignment()), set(consumers["b"].assignment())
        assert len(a_before) == 3 and len(b_before) == 3
        # a gave up exactly the partitions b now holds, and nothing else
        assert owners.revoked["a"] == [b_before] and owners.revoked["b"] == []
        consumers["c"] = member(broker, group, [topic], owners, "c", **coop)
        settle(consumers, all_tps)
        a_after, b_after = set(consumers["a"].assignment()), set(consumers["b"].assignment())
        assert sorted(len(c.assignment()) for c in consumers.values()) == [2, 2, 2]
        assert a_after <= a_before and b_after <= b_before  # sticky: both kept two of theirs
        # only the partitions that moved to c were revoked; those that stayed never were
        assert owners.revoked["a"] == [b_before, a_before - a_after]
        assert owners.revoked["b"] == [b_before - b_after]
        assert set(consumers["c"].assignment()) == (a_before - a_after) | (b_before - b_after)
        assert not owners.violations
        # produce now: every record reaches exactly one member
        values = produce(broker, topic, 60, 6)
        got = collections.defaultdict(list)
        end = time.monotonic() + DEADLINE
        while sum(len(v) for v in got.values()) < 60 and time.monotonic() < end:
            poll_round(consumers, got)
        seen = [v for rs in got.values() for *_, v in rs]
        assert sorted(seen) == sorted(values)
    finally:
        close_all(consumers)


def test_auto_commit_on_revoke_hands_over_without_duplicates(broker):
    topic = new_topic(broker, 2)
    values = produce(broker, topic, 40, 2)
    group = unique("ar")
    extra = {"partition_assignment_strategy": "cooperative-sticky", "enable_auto_commit": True,
             "auto_commit_interval_ms": 600000}  # only the revoke commits
    a = member(broker, group, [topic], **extra)
    consumers = {"a": a}
    try:
        got = settle(consumers, {TopicPartition(topic, 0), TopicPartition(topic, 1)})
        end = time.monotonic() + DEADLINE
        while len(got["a"]) < 40 and time.monotonic() < end:
            poll_round(consumers, got)
        assert {v for *_, v in got["a"]} == values
        consumers["b"] = member(broker, group, [topic], **extra)
        settle(consumers, {TopicPartition(topic, 0), TopicPartition(topic, 1)}, got)
        for _ in range(5):
            poll_round(consumers, got)
        assert got["b"] == []  # b starts where a's revoke committed: nothing is read twice
        moved = consumers["b"].assignment()[0]
        assert consumers["b"].position(moved) == 20
    finally:
        close_all(consumers)


def test_mixed_group_with_confluent_consumer(broker):
    topic = new_topic(broker, 4)
    values = produce(broker, topic, 80, 4)
    group = unique("mg")
    all_parts = set(range(4))
    ck = CKConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 300, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "partition.assignment.strategy": "range"})
    ck_assigned = set()

    def ck_assign(consumer, partitions):
        ck_assigned.clear()
        ck_assigned.update(tp.partition for tp in partitions)

    def ck_revoke(consumer, partitions):
        ck_assigned.difference_update(tp.partition for tp in partitions)

    ck.subscribe([topic], on_assign=ck_assign, on_revoke=ck_revoke)
    ours = None
    got = []
    try:
        end = time.monotonic() + DEADLINE
        while ck_assigned != all_parts and time.monotonic() < end:  # confluent joins first: it leads
            for m in ck.consume(20, 0.1):
                got.append(m.value())
        assert ck_assigned == all_parts
        ours = member(broker, group, [topic])  # range,cooperative-sticky: the group settles on range
        end = time.monotonic() + DEADLINE
        mine = set()
        while time.monotonic() < end:
            for m in ck.consume(20, 0.05):
                got.append(m.value())
            got.extend(r.value for r in ours.poll(50))
            mine = {tp.partition for tp in ours.assignment()}
            if mine and not (mine & ck_assigned) and mine | ck_assigned == all_parts:
                break
        assert mine == {0, 1} and ck_assigned == {2, 3}  # RangeAssignor, member ids sorted
        end = time.monotonic() + DEADLINE
        while set(got) != values and time.monotonic() < end:
            for m in ck.consume(20, 0.05):
                got.append(m.value())
            got.extend(r.value for r in ours.poll(50))
        assert set(got) == values
        # now ours leads: confluent leaves, ours takes everything; confluent rejoins under our assignment
        ck.close()
        ck = None
        end = time.monotonic() + DEADLINE
        while {tp.partition for tp in ours.assignment()} != all_parts and time.monotonic() < end:
            ours.poll(50)
        assert {tp.partition for tp in ours.assignment()} == all_parts
        ck = CKConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 300, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "partition.assignment.strategy": "range"})
        ck.subscribe([topic], on_assign=ck_assign, on_revoke=ck_revoke)
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            ck.consume(20, 0.05)
            ours.poll(50)
            mine = {tp.partition for tp in ours.assignment()}
            if len(mine) == 2 and len(ck_assigned) == 2 and mine | ck_assigned == all_parts:
                break
        assert len(mine) == 2 and mine | ck_assigned == all_parts and not (mine & ck_assigned)
    finally:
        if ck is not None:
            ck.close()
        if ours is not None:
            ours.close()


def test_static_member_restarts_without_rebalance(broker):
    topic = new_topic(broker, 4)
    group = unique("sg")
    all_tps = {TopicPartition(topic, p) for p in range(4)}
    owners = Owners()
    consumers = {"a": member(broker, group, [topic], owners, "a", group_instance_id="inst-a"),
                 "b": member(broker, group, [topic], owners, "b", group_instance_id="inst-b")}
    try:
        settle(consumers, all_tps)
        a_parts, b_parts = set(consumers["a"].assignment()), set(consumers["b"].assignment())
        consumers.pop("a").close()  # a static member sends no LeaveGroup: its partitions wait for it
        for _ in range(5):
            consumers["b"].poll(100)
        assert set(consumers["b"].assignment()) == b_parts
        consumers["a"] = member(broker, group, [topic], owners, "a", group_instance_id="inst-a")
        settle(consumers, all_tps)
        assert set(consumers["a"].assignment()) == a_parts  # the same partitions back (ordered by instance id)
        assert set(consumers["b"].assignment()) == b_parts
    finally:
        close_all(consumers)


def test_subscribing_to_a_topic_before_it_exists(broker):
    name = unique("later")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("lg"), **GROUP_CONF,
                  "allow.auto.create.topics": False})
    try:
        c.subscribe([name])
        assert c.poll(300) == []
        new_topic(broker, 2, name)
        produce(broker, name, 10, 2)
        got, end = [], time.monotonic() + DEADLINE
        while len(got) < 10 and time.monotonic() < end:
            got += c.poll(100)
        assert len(got) == 10 and sorted(c.assignment()) == [TopicPartition(name, 0), TopicPartition(name, 1)]
    finally:
        c.close()


def test_poll_timeout_leaves_and_rejoins(broker):
    topic = new_topic(broker, 2)
    group = unique("pt")
    all_tps = {TopicPartition(topic, p) for p in range(2)}
    lost = []
    slow = member(broker, group, [topic], max_poll_interval_ms=1500)
    slow.subscribe([topic], on_revoke=lambda c, tps: lost.append(sorted(tps)))
    other = member(broker, group, [topic])
    consumers = {"slow": slow, "other": other}
    try:
        settle(consumers, all_tps)
        assert len(slow.assignment()) == 1
        end = time.monotonic() + DEADLINE  # slow stops polling: it leaves, other takes over
        while set(other.assignment()) != all_tps and time.monotonic() < end:
            other.poll(100)
        assert set(other.assignment()) == all_tps
        settle(consumers, all_tps)  # slow polls again: it rejoins
        assert len(slow.assignment()) == 1 and len(other.assignment()) == 1
        assert lost  # its partitions were reported as lost on the way back
    finally:
        close_all(consumers)


def test_commit_in_revoke_callback_hands_over_position(broker):
    topic = new_topic(broker, 1)
    produce(broker, topic, 30, 1)
    group = unique("rv")
    tp = TopicPartition(topic, 0)

    def commit_on_revoke(consumer, partitions):
        consumer.commit({p: consumer.position(p) for p in partitions})

    first = member(broker, group, [topic], max_poll_records=10)
    first.subscribe([topic], on_revoke=commit_on_revoke)
    got, end = [], time.monotonic() + DEADLINE
    while len(got) < 10 and time.monotonic() < end:
        got += first.poll(100)
    assert [r.offset for r in got] == list(range(10))
    first.close()  # revokes (the callback commits 10) and leaves
    second = member(broker, group, [topic])
    try:
        got, end = [], time.monotonic() + DEADLINE
        while len(got) < 20 and time.monotonic() < end:
            got += second.poll(100)
        assert [r.offset for r in got] == list(range(10, 30))
        assert second.committed([tp])[tp].offset == 10
    finally:
        second.close()


def test_async_group_members(broker):
    topic = new_topic(broker, 4)
    values = produce(broker, topic, 40, 4)
    group = unique("ag")

    async def run():
        conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, **GROUP_CONF,
                "partition.assignment.strategy": "cooperative-sticky"}
        assigned = collections.defaultdict(set)

        async def on_assign(consumer, partitions):  # coroutine callbacks are awaited
            await asyncio.sleep(0)
            assigned[id(consumer)].update(partitions)

        a, b = AsyncConsumer(conf), AsyncConsumer(conf)
        await a.start()
        await b.start()
        try:
            a.subscribe([topic], on_assign=on_assign)
            b.subscribe([topic], on_assign=on_assign)
            got = []
            end = time.monotonic() + DEADLINE
            while time.monotonic() < end:
                got += await a.poll(50)
                got += await b.poll(50)
                owned = a.assignment() + b.assignment()
                if {r.value for r in got} == values and len(owned) == 4 and len(set(owned)) == 4 \
                        and a.assignment() and b.assignment():
                    break
            assert {r.value for r in got} == values
            assert len(a.assignment()) == 2 and len(b.assignment()) == 2
            assert not set(a.assignment()) & set(b.assignment())
        finally:
            await a.close()
            await b.close()

    asyncio.run(asyncio.wait_for(run(), 60))


# ---- assignors alone --------------------------------------------------------------------------------------


def test_fatal_group_error_and_callback_error_reach_poll(broker):
    from pybroker.client import KafkaError
    from pybroker.protocol.errors import ErrorCode
    topic = new_topic(broker, 1)
    group = unique("fe")
    ours = member(broker, group, [topic], partition_assignment_strategy="range")
    other = None
    try:
        settle({"ours": ours}, {TopicPartition(topic, 0)})
        # a member with no assignor in common is refused; its poll raises the group's error
        other = member(broker, group, [topic], partition_assignment_strategy="roundrobin")
        with pytest.raises(KafkaError) as info:
            end = time.monotonic() + DEADLINE
            while time.monotonic() < end:
                other.poll(100)
                ours.poll(10)
        assert info.value.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    finally:
        ours.close()
        if other is not None:
            other.close()

    def boom(consumer, partitions):
        raise ValueError("from on_assign")

    c = member(broker, unique("cb"), [topic])
    c.subscribe([topic], on_assign=boom)
    try:
        with pytest.raises(ValueError, match="from on_assign"):
            end = time.monotonic() + DEADLINE
            while time.monotonic() < end:
                c.poll(100)
        c.poll(100)  # the rebalance went on: the consumer keeps working
        assert c.assignment() == [TopicPartition(topic, 0)]
    finally:
        c.close()
