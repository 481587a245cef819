"""Committed offsets: resumed by the next consumer, durable in __consumer_offsets across clean and
crash restarts, fenced for stale members, and the group admin APIs (list, describe, delete)."""
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from pybroker.coordinator.records import offsets_partition
from pybroker.protocol import REQUESTS
from tests.clientutil import DEADLINE
from tests.kafka_wire import WireClient
from tests.broker.test_groups import (FAST, SESSION_MS, committed_offsets, create_topic, describe, group_consumer,
                               heartbeat, join_new, poll_all, produce, sync, unique)

UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE = 3, 12
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 22, 25, 27
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 68, 69


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


def commit(w, group, offsets: dict, generation=-1, member_id="", version=7, metadata=""):
    """OffsetCommit of {(topic, partition): offset}; {(topic, partition): error}."""
    req = REQUESTS[8]
    topics = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append(req.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_leader_epoch=-1, committed_metadata=metadata))
    resp = w.request(req(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                         group_instance_id=None, retention_time_ms=-1,
                         topics=[req.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()]),
                     version)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def fetch_all(w, group, version=5):
    resp = w.request(REQUESTS[9](group_id=group, topics=None), version)
    assert resp.error_code == 0
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata) for t in resp.topics for p in t.partitions}


def test_next_consumer_resumes_exactly_at_the_committed_offsets(broker):
    topic, group = create_topic(broker, 3), unique("resume")
    acked = produce(broker, topic, 60)
    first = group_consumer(broker, group, topic)
    got = poll_all({"a": first}, lambda g: len(g["a"]) >= 60)["a"]
    assert len(got) == 60
    marks = {0: 7, 1: 3, 2: 19}  # commit positions other than the end, explicitly
    first.commit(offsets=[TopicPartition(topic, p, o) for p, o in marks.items()], asynchronous=False)
    first.close()
    assert committed_offsets(broker, group, topic, 3) == marks
    second = group_consumer(broker, group, topic)
    try:
        rest = poll_all({"b": second}, lambda g: len(g["b"]) >= 60 - sum(marks.values()))["b"]
        firsts = {}
        for p, off, _ in rest:
            firsts.setdefault(p, off)
        assert firsts == marks
        expected = {v for v, (p, o) in acked.items() if o >= marks[p]}
        assert {v for _, _, v in rest} == expected and len(rest) == len(expected)
        committed = second.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == marks
    finally:
        second.close()


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_committed_offsets_survive_broker_restart(broker_factory, how):
    b = broker_factory(overrides={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5})
    topic, group = create_topic(b, 2), unique("restart")
    produce(b, topic, 20)
    c = group_consumer(b, group, topic)
    poll_all({"c": c}, lambda g: len(g["c"]) >= 20)
    c.commit(asynchronous=False)
    c.close()
    with WireClient(b.port) as w:  # a simple commit (no generation) of a second group, with metadata
        assert commit(w, "simple-" + group, {(topic, 0): 4}, metadata="note") == {(topic, 0): 0}
        # the records went to the partition Kafka would choose: abs(hashCode) % 5
        home = offsets_partition(group, 5)
        assert w.list_offset("__consumer_offsets", home) >= 1
    if how == "sigterm":
        assert b.stop() == 0
    else:
        b.kill()
    b.start()
    assert committed_offsets(b, group, topic, 2) == {0: 10, 1: 10}
    with WireClient(b.port) as w:
        assert fetch_all(w, "simple-" + group) == {(topic, 0): (4, "note")}
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, **FAST})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
        assert [tp.offset for tp in tps] == [10, 10]
    finally:
        c.close()
    # the group is known (Empty, with offsets) after the restart
    assert describe(b, group).group_state == "Empty"


def test_member_paused_past_its_session_timeout_is_fenced(broker):
    """A member that stops heartbeating is evicted; its late commit is refused, the others go on."""
    topic, group = create_topic(broker, 2), unique("fence")
    with WireClient(broker.port, timeout=30) as w:
        me = join_new(w, group, protocols=(("range", b""),))
        assert sync(w, group, me.generation_id, me.member_id, [(me.member_id, b"")]).error_code == 0
        assert commit(w, group, {(topic, 0): 1}, me.generation_id, me.member_id) == {(topic, 0): 0}
        other = group_consumer(broker, group, topic)  # its join waits until we are evicted
        try:
            deadline = time.monotonic() + SESSION_MS / 1000 + 20
            def settled():
                d = describe(broker, group)
                return d.group_state == "Stable" and [m.member_id for m in d.members] not in ([], [me.member_id])
            while time.monotonic() < deadline and not settled():
                other.poll(0.2)
            d = describe(broker, group)
            assert d.group_state == "Stable" and [m.member_id for m in d.members] != [me.member_id]
            # the paused member wakes up: its commit and heartbeat are refused
            assert commit(w, group, {(topic, 0): 2}, me.generation_id, me.member_id) == {(topic, 0): UNKNOWN_MEMBER_ID}
            assert heartbeat(w, group, me.generation_id, me.member_id) == UNKNOWN_MEMBER_ID
            assert committed_offsets(broker, group, topic, 2)[0] == 1
        finally:
            other.close()


def test_commit_fencing_rules(broker):
    topic, group = create_topic(broker, 1), unique("rules")
    tp = (topic, 0)
    with WireClient(broker.port) as w:
        # no group yet: a simple commit (generation -1) is allowed; a generation-checked one is not
        assert commit(w, unique("x"), {tp: 1}, generation=3, member_id="m") == {tp: ILLEGAL_GENERATION}
        assert commit(w, group, {tp: 1}) == {tp: 0}
        me = join_new(w, group)
        # joined but not synced: CompletingRebalance refuses commits
        assert commit(w, group, {tp: 2}, me.generation_id, me.member_id) == {tp: REBALANCE_IN_PROGRESS}
        assert sync(w, group, me.generation_id, me.member_id, [(me.member_id, b"")]).error_code == 0
        assert commit(w, group, {tp: 2}, me.generation_id - 1, me.member_id) == {tp: ILLEGAL_GENERATION}
        assert commit(w, group, {tp: 2}, me.generation_id, "stranger") == {tp: UNKNOWN_MEMBER_ID}
        assert commit(w, group, {tp: 2}) == {tp: UNKNOWN_MEMBER_ID}  # simple commits need an empty group
        assert commit(w, group, {tp: 3}, me.generation_id, me.member_id, version=2) == {tp: 0}
        assert commit(w, group, {(topic, 9): 3, ("no-such-topic", 0): 3}, me.generation_id, me.member_id) == \
            {(topic, 9): UNKNOWN_TOPIC_OR_PARTITION, ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert commit(w, group, {tp: 4}, me.generation_id, me.member_id, metadata="m" * 5000) == \
            {tp: OFFSET_METADATA_TOO_LARGE}
        assert fetch_all(w, group) == {tp: (3, "")}
        # v1 asks partitions; unknown ones answer -1
        req = REQUESTS[9]
        asked = [req.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 5])]
        resp = w.request(req(group_id=group, topics=asked), 1)
        assert [(p.partition_index, p.committed_offset, p.error_code) for p in resp.topics[0].partitions] == \
            [(0, 3, 0), (5, -1, 0)]
        assert fetch_all(w, unique("never")) == {}


def test_list_describe_delete_groups(broker):
    topic, group = create_topic(broker, 2), unique("adm")
    produce(broker, topic, 10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    c = group_consumer(broker, group, topic)
    try:
        poll_all({"c": c}, lambda g: len(g["c"]) >= 10)
        c.commit(asynchronous=False)
        listed = admin.list_consumer_groups().result(timeout=DEADLINE).valid
        assert group in {g.group_id for g in listed}
        desc = admin.describe_consumer_groups([group])[group].result(timeout=DEADLINE)
        assert len(desc.members) == 1 and desc.partition_assignor == "range"
        with WireClient(broker.port) as w:
            res = w.request(REQUESTS[42](groups_names=[group, unique("ghost")]), 1).results
            assert [r.error_code for r in res] == [NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND]
    finally:
        c.close()
    unknown = describe(broker, unique("unknown"), version=0)  # always an entry: Dead, no error
    assert (unknown.error_code, unknown.group_state, unknown.members) == (0, "Dead", [])
    admin.delete_consumer_groups([group])[group].result(timeout=DEADLINE)
    with WireClient(broker.port) as w:
        assert fetch_all(w, group) == {}
        assert describe(broker, group).group_state == "Dead"
        res = w.request(REQUESTS[42](groups_names=[group]), 0).results
        assert res[0].error_code == GROUP_ID_NOT_FOUND
        lst = w.request(REQUESTS[16](), 2)
        assert lst.error_code == 0 and group not in {g.group_id for g in lst.groups}

