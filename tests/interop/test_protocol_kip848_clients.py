"""The consumer group protocol (KIP-848) seen from librdkafka with ``group.protocol=consumer``, checked
by the data: a member keeps consuming the partitions it keeps while another member joins (no
stop-the-world), a topic deleted and recreated under a live member is followed through its new id,
the server assignor comes from ``group.consumer.assignors`` unless a member names another, and a
deleted topic's committed offsets go with it. (Classic and consumer groups meeting: test_group_migration.py.)"""
import collections
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from pybroker.protocol import REQUESTS
from tests.clientutil import DEADLINE, finish_broker, start_broker, wait_until
from tests.kafka_wire import WireClient
from tests.broker.test_consumer_group_protocol import (
    HEARTBEAT_MS, NONE, Ownership, assigned, create_topic, describe, heartbeat, join, produce, unique,
    wait_for_coordinator)

PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory, "kip848-clients", {
        "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS, "group.consumer.session.timeout.ms": 10000,
        "group.initial.rebalance.delay.ms": 0, "group.consumer.assignors": "range,uniform"})
    wait_for_coordinator(b.port)
    yield b
    finish_broker(b)


def consumer(b, group, **extra):
    return Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "group.protocol": "consumer",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "topic.metadata.refresh.interval.ms": 1000, **extra})


class Member:
    """One librdkafka member: what it consumed, each record with the time it arrived."""

    def __init__(self, c: Consumer, name: str, commit: bool = True):
        self.c, self.name, self.commit = c, name, commit
        self.got: list[tuple[int, int, bytes, float]] = []  # (partition, offset, value, arrival)

    def poll_once(self) -> int:
        msgs = self.c.consume(100, 0.05)
        for m in msgs:
            assert m.error() is None, m.error()
            self.got.append((m.partition(), m.offset(), m.value(), time.monotonic()))
        if msgs and self.commit:
            self.c.commit(asynchronous=False)  # processed, then committed: exactly once
        return len(msgs)


def poll_until(members, predicate, timeout=DEADLINE, between=None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for m in members:
            m.poll_once()
        if between:
            between()
        if predicate():
            return True
    return False


def test_a_member_keeps_consuming_what_it_keeps_while_another_joins(broker):
    """c0 owns every partition; a wire-level member joins and then stays silent, so the rebalance stays
    open. c0 gives up only the newcomer's share and goes on consuming records written to the rest while
    the group is still Reconciling; then the newcomer takes its share and leaves, two librdkafka members
    join, one leaves again, and every record is consumed exactly once, at its acknowledged offset."""
    topic, tid = create_topic(broker.port, PARTITIONS)
    group = unique("nostw")
    acked = produce(broker, topic, 0, 60, PARTITIONS)
    own = Ownership()
    c0 = Member(consumer(broker, group), "c0")
    c0.c.subscribe([topic], **own.callbacks("c0"))
    members = [c0]
    try:
        assert poll_until(members, lambda: len(own.of("c0")) == PARTITIONS and len(c0.got) >= 60), \
            (own.of("c0"), len(c0.got))
        with WireClient(broker.port) as w:
            newcomer, r = join(w, group, [topic])  # then silent: the rebalance stays open meanwhile
            assert assigned(r) == {}
            assert poll_until(members, lambda: len(own.of("c0")) < PARTITIONS), own.of("c0")
            kept = own.of("c0")
            target = {m.member_id: {p for t in m.target_assignment.topic_partitions for p in t.partitions}
                      for m in describe(w, group).members}
            # incremental: c0 was asked only for the newcomer's share, never for what it keeps
            assert set().union(*own.revoked["c0"]) == target[newcomer] == set(range(PARTITIONS)) - kept
            during = produce(broker, topic, 60, 60, PARTITIONS)
            acked.update(during)
            want = {v for v, (p, _) in during.items() if p in kept}
            assert want and poll_until(members, lambda: want <= {v for _, _, v, _ in c0.got})
            # all of it read while the newcomer had not yet taken its partitions: no stop-the-world
            d = describe(w, group)
            assert d.group_state == "Reconciling", d.group_state
            assert [m.assignment.topic_partitions for m in d.members if m.member_id == newcomer] == [[]]
            r = heartbeat(w, group, newcomer, r.member_epoch, owned={})
            assert (r.error_code, assigned(r)) == (NONE, {tid: target[newcomer]})
            assert heartbeat(w, group, newcomer, -1).error_code == NONE  # leaves: what it held goes back
        assert poll_until(members, lambda: len(own.of("c0")) == PARTITIONS and
                          {v for _, _, v, _ in c0.got} >= set(acked)), own.of("c0")
        for name in ("c1", "c2"):
            m = Member(consumer(broker, group), name)
            m.c.subscribe([topic], **own.callbacks(name))
            members.append(m)
        acked.update(produce(broker, topic, 120, 120, PARTITIONS))
        everything = lambda: {v for m in members for _, _, v, _ in m.got} >= set(acked)  # noqa: E731
        assert poll_until(members, lambda: all(len(own.of(m.name)) == 2 for m in members) and everything()), \
            {m.name: own.of(m.name) for m in members}
        members.pop().c.close()  # c2 leaves
        acked.update(produce(broker, topic, 240, 60, PARTITIONS))
        assert poll_until(members, lambda: len(own.of("c0") | own.of("c1")) == PARTITIONS and everything())
        assert not own.violations, own.violations
    finally:
        for m in members:
            m.c.close()
    everyone = [(p, o, v) for m in members for p, o, v, _ in m.got]
    values = collections.Counter(v for _, _, v in everyone)
    assert set(values) >= set(acked) and all(values[v] == 1 for v in acked), \
        [v for v in acked if values[v] != 1][:5]
    assert all(acked[v] == (p, o) for p, o, v in everyone if v in acked)


def test_a_recreated_topic_is_followed_through_its_new_id(broker):
    """A member subscribed by name keeps its subscription when the topic is deleted and created again
    with the same name: the group assigns the new topic id and the member reads the new records.
    (It commits nothing: what a deleted topic's committed offsets become is the test below.)"""
    topic, first_id = create_topic(broker.port, 2)
    group = unique("recreate")
    acked = produce(broker, topic, 0, 10, 2)
    m = Member(consumer(broker, group), "m", commit=False)
    m.c.subscribe([topic])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        assert poll_until([m], lambda: {v for _, _, v, _ in m.got} == set(acked))

        def assigned_ids(w):
            d = describe(w, group)
            return {t.topic_id for mem in d.members for t in mem.assignment.topic_partitions}
        with WireClient(broker.port) as w:
            assert assigned_ids(w) == {first_id}
            admin.delete_topics([topic])[topic].result(DEADLINE)
            assert wait_until(lambda: w.metadata([topic], version=12).topics[0].error_code != NONE, timeout=DEADLINE)
            _, second_id = create_topic(broker.port, 3, topic)
            assert second_id != first_id
            again = produce(broker, topic, 100, 30, 3)
            assert poll_until([m], lambda: assigned_ids(w) == {second_id} and
                              {v for _, _, v, _ in m.got} >= set(again)), (assigned_ids(w), len(m.got))
            member = describe(w, group).members[0]
            assert sorted(p for t in member.assignment.topic_partitions for p in t.partitions) == [0, 1, 2]
    finally:
        m.c.close()
    # every new record, at the offset it was acknowledged at (from 0 again); without commits a record
    # read before the member heard of its new assignment may be read again after it
    new = {(p, o, v) for p, o, v, _ in m.got if v in again}
    assert new == {(p, o, v) for v, (p, o) in again.items()}


def test_group_consumer_assignors_sets_the_default_and_members_may_name_another(broker):
    topic, tid = create_topic(broker.port, 4)
    group = unique("assignors")
    with WireClient(broker.port) as w:
        a, r = join(w, group, [topic])  # no ServerAssignor: the first of group.consumer.assignors
        assert assigned(r) == {tid: {0, 1, 2, 3}} and describe(w, group).assignor_name == "range"
        b, r = join(w, group, [topic])
        heartbeat(w, group, a, 1, owned={tid: {0, 1, 2, 3}})
        target = {m.member_id: {p for t in m.target_assignment.topic_partitions for p in t.partitions}
                  for m in describe(w, group).members}
        first, second = sorted(target, key=lambda m: min(target[m]))
        assert [sorted(target[first]), sorted(target[second])] == [[0, 1], [2, 3]]  # range: contiguous runs
        for m in (a, b):
            heartbeat(w, group, m, -1)
        other = unique("assignors")
        c, r = join(w, other, [topic], assignor="uniform")
        d = describe(w, other)
        assert d.assignor_name == "uniform"
        # members that disagree: the assignor most of them ask for
        join(w, other, [topic], assignor="range")
        join(w, other, [topic], assignor="range")
        assert describe(w, other).assignor_name == "range"



def test_deleting_a_topic_removes_its_committed_offsets(broker):
    topic, _ = create_topic(broker.port, 1)
    group = unique("offsets-of-deleted")
    commit, fetch, delete = REQUESTS[8], REQUESTS[9], REQUESTS[20]

    def committed(w):
        r = w.request(fetch(group_id=group, topics=[fetch.OffsetFetchRequestTopic(name=topic,
                                                                                  partition_indexes=[0])]), 7)
        return r.topics[0].partitions[0].committed_offset
    with WireClient(broker.port) as w:
        r = w.request(commit(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            commit.OffsetCommitRequestTopic(name=topic, partitions=[
                commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]), 8)
        assert r.topics[0].partitions[0].error_code == NONE and committed(w) == 5
        assert w.request(delete(topic_names=[topic], timeout_ms=10000), 5).responses[0].error_code == NONE
        assert wait_until(lambda: w.metadata([topic], version=12).topics[0].error_code != NONE, timeout=DEADLINE)
        create_topic(broker.port, 1, topic)
        assert wait_until(lambda: committed(w) == -1, timeout=5), committed(w)  # not the old incarnation's 5
