"""The admin side of share groups (KIP-932, Kafka 4.2) on a real broker, with share groups formed by
librdkafka's ShareConsumer (confluent-kafka) and the admin requests sent on the wire (confluent-kafka's
AdminClient has no share-group calls yet): ShareGroupDescribe, ListGroups by type, DescribeGroups of a
share group, Describe/Alter/DeleteShareGroupOffsets (start offsets, lag, resets refused while members
are active, a new consumer starting where an operator put it), DeleteGroups of a share group, and the
group-type conflicts between share, consumer and classic groups."""
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import (GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL, NON_EMPTY_GROUP,
                                      UNKNOWN_TOPIC_OR_PARTITION)
from tests.clientutil import start_broker
from tests.kafka_wire import WireClient
from tests.shareutil import fill, make_topic, poll_until, set_group_config, share_consumer, unique

SETTINGS = {"group.share.min.session.timeout.ms": 6000, "group.share.session.timeout.ms": 6000,
            "group.share.min.heartbeat.interval.ms": 500, "group.share.heartbeat.interval.ms": 500,
            "offsets.topic.num.partitions": 2, "share.coordinator.state.topic.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0, "transaction.state.log.num.partitions": 2}
EARLIEST = {"share.auto.offset.reset": "earliest"}
DEADLINE = 60.0
GROUP_OPS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)  # READ DELETE DESCRIBE DESCRIBE/ALTER_CONFIGS


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory, "share-admin", SETTINGS)
    yield b
    b.stop()
    b.close()


# ---- the wire ------------------------------------------------------------------------------------

def share_describe(port, *groups, ops=False):
    with WireClient(port) as w:
        return w.request(REQUESTS[77](group_ids=list(groups), include_authorized_operations=ops), 1).groups


def describe_offsets(port, group, topics=None, version=1):
    """``topics``: {name: [partitions]}, or None for all."""
    R = REQUESTS[90]
    asked = None if topics is None else [R.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                                         for t, ps in topics.items()]
    with WireClient(port) as w:
        resp = w.request(R(groups=[R.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=asked)]), version)
    return resp.groups[0]


def offsets_of(group_answer) -> dict:
    """{(topic, partition): (start offset, lag)} of a DescribeShareGroupOffsets group answer."""
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag)
            for t in group_answer.topics for p in t.partitions}


def alter_offsets(port, group, offsets: dict):
    """``offsets``: {topic: {partition: new start offset}}."""
    R = REQUESTS[91]
    with WireClient(port) as w:
        return w.request(R(group_id=group, topics=[R.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=[
            R.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in ps.items()])
            for t, ps in offsets.items()]), 0)


def delete_offsets(port, group, topics):
    R = REQUESTS[92]
    with WireClient(port) as w:
        return w.request(R(group_id=group, topics=[R.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
                                                   for t in topics]), 0)


def list_groups(port, types=(), states=(), version=5) -> dict:
    with WireClient(port) as w:
        resp = w.request(REQUESTS[16](states_filter=list(states), types_filter=list(types)), version)
    assert resp.error_code == 0
    return {g.group_id: g for g in resp.groups}


def describe_groups(port, group, version):
    with WireClient(port) as w:
        return w.request(REQUESTS[15](groups=[group], include_authorized_operations=False), version).groups[0]


def delete_groups(port, *groups) -> dict:
    with WireClient(port) as w:
        resp = w.request(REQUESTS[42](groups_names=list(groups)), 2)
    return {r.group_id: r.error_code for r in resp.results}


def wait_for(what, condition, timeout=DEADLINE, consumers=()):
    """Until ``condition()`` is truthy, polling ``consumers`` meanwhile (they heartbeat and fetch only then)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = condition()
        if got:
            return got
        for c in consumers:
            c.poll(0.1)
        if not consumers:
            time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def group_state(port, group):
    g = share_describe(port, group)[0]
    return g.group_state if g.error_code == 0 else None


def new_group(broker) -> str:
    group = unique("sg")
    set_group_config(broker.port, group, EARLIEST)
    return group


def settled_at(broker, group, topic, partitions: dict, consumers=()):
    """Until the share-partitions of ``topic`` start at ``partitions`` ({partition: start offset}) with no
    lag: everything before was accepted (``consumers`` are polled meanwhile: their acknowledgements go out)."""
    want = {(topic, p): (o, 0) for p, o in partitions.items()}
    wait_for(f"{topic} accepted up to {partitions}",
             lambda: offsets_of(describe_offsets(broker.port, group, {topic: list(partitions)})) == want,
             consumers=consumers)


def drain(consumer, count: int) -> list:
    """Poll until ``count`` records arrived (accepted implicitly by the next poll); their (partition, offset)."""
    seen = []
    assert poll_until([consumer], lambda: len(seen) >= count,
                      on_message=lambda c, m: seen.append((m.partition(), m.offset()))), f"{len(seen)} of {count}"
    return seen


# ---- ShareGroupDescribe, ListGroups, DescribeGroups ---------------------------------------------------

def test_share_group_described_with_its_members_and_assignment(broker):
    topic = make_topic(broker.port, 2)
    group = new_group(broker)
    consumers = [share_consumer(broker.bootstrap, group, topic, **{"client.id": f"share-client-{i}"})
                 for i in range(2)]
    try:
        def settled():
            g = share_describe(broker.port, group)[0]
            assigned = [tp for m in g.members for tp in m.assignment.topic_partitions]
            return g if len(g.members) == 2 and sum(len(tp.partitions) for tp in assigned) == 2 else None
        g = wait_for("two members sharing two partitions", settled, consumers=consumers)
        assert (g.error_code, g.group_id, g.group_state, g.assignor_name) == (0, group, "Stable", "simple")
        assert g.group_epoch >= 2 and g.assignment_epoch >= 1
        assert g.authorized_operations == -2147483648  # not asked for
        topic_id = broker_topic_id(broker.port, topic)
        partitions = []
        for m in g.members:
            assert m.client_id in ("share-client-0", "share-client-1") and m.client_host.startswith("/")
            assert m.subscribed_topic_names == [topic] and m.member_epoch > 0 and m.member_id
            for tp in m.assignment.topic_partitions:
                assert (tp.topic_name, tp.topic_id) == (topic, topic_id)
                partitions += tp.partitions
        assert sorted(partitions) == [0, 1]
        asked = share_describe(broker.port, group, ops=True)[0]
        assert asked.authorized_operations == GROUP_OPS
    finally:
        for c in consumers:
            c.close()
    wait_for("the group to empty", lambda: group_state(broker.port, group) == "Empty")
    g = share_describe(broker.port, group)[0]
    assert g.members == [] and g.error_code == 0


def broker_topic_id(port, topic):
    with WireClient(port) as w:
        return next(t.topic_id for t in w.metadata([topic], version=12).topics if t.name == topic)


def test_unknown_and_other_groups_are_not_share_groups(broker):
    topic = make_topic(broker.port, 1)
    other = unique("cg")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": other, "auto.offset.reset": "earliest",
                         "group.protocol": "consumer"})
    consumer.subscribe([topic])
    try:
        wait_for("the consumer group", lambda: other in list_groups(broker.port, types=["consumer"]),
                 consumers=[_Polled(consumer)])
        unknown, mine = share_describe(broker.port, "no-such-share-group", other)
        assert (unknown.error_code, unknown.error_message) == (GROUP_ID_NOT_FOUND,
                                                               "Group no-such-share-group not found.")
        assert (mine.error_code, mine.error_message) == (GROUP_ID_NOT_FOUND, f"Group {other} is not a share group.")
        # and a share consumer cannot join it (ShareGroupHeartbeat answers GROUP_ID_NOT_FOUND)
        with WireClient(broker.port) as w:
            hb = w.request(REQUESTS[76](group_id=other, member_id=str(uuid.uuid4()), member_epoch=0, rack_id=None,
                                        subscribed_topic_names=[topic]), 1)
        assert hb.error_code == GROUP_ID_NOT_FOUND, hb
        # nor can an operator reset it as a share group
        refused = alter_offsets(broker.port, other, {topic: {0: 0}})
        assert (refused.error_code, refused.error_message) == (GROUP_ID_NOT_FOUND,
                                                               f"Group {other} is not a share group.")
    finally:
        consumer.close()


class _Polled:
    """A classic/consumer Consumer polled like a share consumer by ``wait_for``."""
    def __init__(self, consumer):
        self.consumer = consumer

    def poll(self, timeout):
        self.consumer.poll(timeout)
        return []


def test_list_groups_by_type_beside_a_consumer_group(broker):
    topic = make_topic(broker.port, 1)
    fill(broker.bootstrap, topic, 1, 5)
    share_group, consumer_group = new_group(broker), unique("cg")
    sc = share_consumer(broker.bootstrap, share_group, topic)
    cc = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": consumer_group,
                   "auto.offset.reset": "earliest", "group.protocol": "consumer"})
    cc.subscribe([topic])
    try:
        drain(sc, 5)
        def both_listed():
            groups = list_groups(broker.port)
            return groups if {share_group, consumer_group} <= set(groups) else None
        both = wait_for("both groups listed", both_listed, consumers=[sc, _Polled(cc)])
        s, c = both[share_group], both[consumer_group]
        assert (s.group_type, s.protocol_type, s.group_state) == ("share", "share", "Stable")
        assert (c.group_type, c.protocol_type) == ("consumer", "consumer")
        shares = list_groups(broker.port, types=["share"])
        assert share_group in shares and consumer_group not in shares
        assert all(g.group_type == "share" for g in shares.values())
        consumers = list_groups(broker.port, types=["Consumer"])  # case-insensitive, as Kafka
        assert consumer_group in consumers and share_group not in consumers
        assert share_group in list_groups(broker.port, types=["share"], states=["stable"])
        assert share_group not in list_groups(broker.port, types=["share"], states=["empty"])
        assert share_group in list_groups(broker.port, version=4)  # no type filter before v5: listed all the same
        assert list_groups(broker.port, types=["nonsense"]) == {}
        # DescribeGroups describes classic groups only: before v6 a share group is Dead, v6 says why
        old = describe_groups(broker.port, share_group, 5)
        assert (old.error_code, old.group_state) == (0, "Dead")
        new = describe_groups(broker.port, share_group, 6)
        assert (new.error_code, new.group_state, new.error_message) == (
            GROUP_ID_NOT_FOUND, "Dead", f"Group {share_group} is not a classic group.")
        unknown = describe_groups(broker.port, "no-such-group-at-all", 6)
        assert (unknown.error_code, unknown.error_message) == (GROUP_ID_NOT_FOUND,
                                                               "Group no-such-group-at-all not found.")
    finally:
        sc.close()
        cc.close()


def test_share_group_id_refused_to_classic_and_consumer_members(broker):
    topic = make_topic(broker.port, 1)
    group = new_group(broker)
    sc = share_consumer(broker.bootstrap, group, topic)
    try:
        wait_for("the share group", lambda: group_state(broker.port, group) == "Stable", consumers=[sc])
        R = REQUESTS[11]
        with WireClient(broker.port) as w:
            join = w.request(R(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                               group_instance_id=None, protocol_type="consumer",
                               protocols=[R.JoinGroupRequestProtocol(name="range", metadata=b"")]), 5)
            assert (join.error_code, join.member_id) == (INCONSISTENT_GROUP_PROTOCOL, "")
            hb = w.request(REQUESTS[68](group_id=group, member_id=str(uuid.uuid4()), member_epoch=0,
                                        rebalance_timeout_ms=10000, subscribed_topic_names=[topic],
                                        topic_partitions=[]), 1)
            assert (hb.error_code, hb.error_message) == (GROUP_ID_NOT_FOUND, f"Group {group} is not a consumer group.")
        assert group_state(broker.port, group) == "Stable"  # the share group is untouched
    finally:
        sc.close()


# ---- DescribeShareGroupOffsets -------------------------------------------------------------------------

def test_describe_offsets_follows_the_start_offset_and_the_lag(broker):
    topic = make_topic(broker.port, 2)
    fill(broker.bootstrap, topic, 2, 20)  # 10 a partition
    group = new_group(broker)
    # no state yet: asked partitions answer -1, "all topics" answers nothing
    before = describe_offsets(broker.port, group, {topic: [0, 1]})
    assert before.error_code == 0 and offsets_of(before) == {(topic, 0): (-1, -1), (topic, 1): (-1, -1)}
    assert describe_offsets(broker.port, group).topics == []
    sc = share_consumer(broker.bootstrap, group, topic)
    try:
        drain(sc, 20)
        settled_at(broker, group, topic, {0: 10, 1: 10}, [sc])
        assert offsets_of(describe_offsets(broker.port, group)) == {(topic, 0): (10, 0), (topic, 1): (10, 0)}
        topic_id = broker_topic_id(broker.port, topic)
        answer = describe_offsets(broker.port, group, {topic: [0, 1, 7]})
        assert answer.topics[0].topic_id == topic_id
        assert offsets_of(answer) == {(topic, 0): (10, 0), (topic, 1): (10, 0), (topic, 7): (-1, -1)}
    finally:
        sc.close()
    # records produced while nobody consumes: the lag grows, the start offset stays
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        p.produce(topic, value=b"late", partition=0)
    assert p.flush(30) == 0
    assert offsets_of(describe_offsets(broker.port, group, {topic: [0]})) == {(topic, 0): (10, 3)}
    v0 = describe_offsets(broker.port, group, {topic: [0]}, version=0)
    assert v0.topics[0].partitions[0].start_offset == 10  # v0 has no lag
    missing = describe_offsets(broker.port, group, {"no-such-topic": [0]})
    assert offsets_of(missing) == {("no-such-topic", 0): (-1, -1)} and missing.topics[0].partitions[0].error_code == 0


# ---- AlterShareGroupOffsets -------------------------------------------------------------------------

def test_alter_offsets_refused_while_active_then_a_new_consumer_starts_there(broker):
    topic = make_topic(broker.port, 1)
    fill(broker.bootstrap, topic, 1, 30)
    group = new_group(broker)
    sc = share_consumer(broker.bootstrap, group, topic)
    try:
        drain(sc, 30)
        settled_at(broker, group, topic, {0: 30}, [sc])
        refused = alter_offsets(broker.port, group, {topic: {0: 5}})
        assert (refused.error_code, refused.error_message) == (NON_EMPTY_GROUP, "The group is not empty.")
    finally:
        sc.close()
    wait_for("the group to empty", lambda: group_state(broker.port, group) == "Empty")
    done = alter_offsets(broker.port, group, {topic: {0: 5, 3: 0}, "no-such-topic": {0: 1}})
    assert done.error_code == 0
    answers = {(t.topic_name, p.partition_index): p.error_code for t in done.responses for p in t.partitions}
    assert answers == {(topic, 0): 0, (topic, 3): UNKNOWN_TOPIC_OR_PARTITION,
                       ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert offsets_of(describe_offsets(broker.port, group, {topic: [0]})) == {(topic, 0): (5, 25)}
    again = share_consumer(broker.bootstrap, group, topic)
    try:
        seen = drain(again, 25)
    finally:
        again.close()
    assert sorted(o for _, o in seen) == list(range(5, 30))


def test_alter_offsets_creates_the_group_before_its_first_member(broker):
    topic = make_topic(broker.port, 1)
    fill(broker.bootstrap, topic, 1, 10)
    group = unique("sg")  # latest by default: without the reset, a consumer would see nothing of these
    done = alter_offsets(broker.port, group, {topic: {0: 7}})
    assert done.error_code == 0 and done.responses[0].partitions[0].error_code == 0
    assert group_state(broker.port, group) == "Empty"
    assert group in list_groups(broker.port, types=["share"])
    sc = share_consumer(broker.bootstrap, group, topic)
    try:
        seen = drain(sc, 3)
    finally:
        sc.close()
    assert sorted(o for _, o in seen) == [7, 8, 9]


# ---- DeleteShareGroupOffsets, DeleteGroups ------------------------------------------------------------------

def test_delete_offsets_then_the_group_starts_the_topic_afresh(broker):
    topic, other = make_topic(broker.port, 1), make_topic(broker.port, 1)
    fill(broker.bootstrap, topic, 1, 8)
    group = new_group(broker)
    sc = share_consumer(broker.bootstrap, group, topic)
    try:
        drain(sc, 8)
        settled_at(broker, group, topic, {0: 8}, [sc])
        refused = delete_offsets(broker.port, group, [topic])
        assert refused.error_code == NON_EMPTY_GROUP
    finally:
        sc.close()
    wait_for("the group to empty", lambda: group_state(broker.port, group) == "Empty")
    done = delete_offsets(broker.port, group, [topic, other, "no-such-topic"])
    assert done.error_code == 0
    answers = {t.topic_name: (t.error_code, t.error_message) for t in done.responses}
    assert answers == {topic: (0, None),
                       other: (UNKNOWN_TOPIC_OR_PARTITION, "There is no offset information to delete."),
                       "no-such-topic": (UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")}
    assert offsets_of(describe_offsets(broker.port, group, {topic: [0]})) == {(topic, 0): (-1, -1)}
    assert describe_offsets(broker.port, group).topics == []
    again = share_consumer(broker.bootstrap, group, topic)  # share.auto.offset.reset=earliest: all again
    try:
        seen = drain(again, 8)
    finally:
        again.close()
    assert sorted(o for _, o in seen) == list(range(8))


def test_delete_group_only_when_empty_and_with_its_state(broker):
    topic = make_topic(broker.port, 2)
    fill(broker.bootstrap, topic, 2, 6)
    group = new_group(broker)
    sc = share_consumer(broker.bootstrap, group, topic)
    try:
        drain(sc, 6)
        settled_at(broker, group, topic, {0: 3, 1: 3}, [sc])
        assert delete_groups(broker.port, group) == {group: NON_EMPTY_GROUP}
    finally:
        sc.close()
    wait_for("the group to empty", lambda: group_state(broker.port, group) == "Empty")
    assert len(offsets_of(describe_offsets(broker.port, group))) == 2
    assert delete_groups(broker.port, group, "no-such-group-here") == {group: 0,
                                                                       "no-such-group-here": GROUP_ID_NOT_FOUND}
    gone = share_describe(broker.port, group)[0]
    assert (gone.error_code, gone.error_message) == (GROUP_ID_NOT_FOUND, f"Group {group} not found.")
    assert group not in list_groups(broker.port)
    assert describe_offsets(broker.port, group).topics == []
    assert offsets_of(describe_offsets(broker.port, group, {topic: [0, 1]})) == {(topic, 0): (-1, -1),
                                                                                  (topic, 1): (-1, -1)}
    assert delete_groups(broker.port, group) == {group: GROUP_ID_NOT_FOUND}


# ---- authorization ----------------------------------------------------------------------------------------

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANON = "User:ANONYMOUS"


def acl(rtype, name, op, perm):
    from confluent_kafka.admin import AclBinding, ResourcePatternType
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, ANON, "*", op, perm)


def create_acls(port, bindings) -> None:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})  # kept until the answers are in
    for f in admin.create_acls(bindings).values():
        f.result(timeout=30)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """ACLs on, deny by default; ANONYMOUS may do everything on every topic, group and the cluster, until a
    test denies it something (the grants are made as a super user, then the broker restarts without one)."""
    from confluent_kafka.admin import AclOperation, AclPermissionType, ResourceType
    from tests.broker import BrokerProcess
    from tests.clientutil import finish_broker
    data = str(tmp_path_factory.mktemp("share-acl") / "data")
    base = {**SETTINGS, "authorizer.class.name": AUTHORIZER}
    b = BrokerProcess(data, {**base, "super.users": ANON}).start()
    try:
        create_acls(b.port, [acl(rtype, name, AclOperation.ALL, AclPermissionType.ALLOW) for rtype, name in (
            (ResourceType.BROKER, "kafka-cluster"), (ResourceType.TOPIC, "*"), (ResourceType.GROUP, "*"))])
    finally:
        finish_broker(b)
    b = BrokerProcess(data, base).start()
    yield b
    finish_broker(b)


def share_heartbeat(port, group, member_id, epoch, topics=None):
    with WireClient(port) as w:
        return w.request(REQUESTS[76](group_id=group, member_id=member_id, member_epoch=epoch, rack_id=None,
                                      subscribed_topic_names=topics), 1)


def test_authorization_as_kafka(secured):
    from confluent_kafka.admin import AclOperation, AclPermissionType, ResourceType
    from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED
    port = secured.port
    shown, hidden = make_topic(port, 1), make_topic(port, 1)
    group = unique("sg")
    with WireClient(port) as w:  # creates __consumer_offsets, as a client's first FindCoordinator does
        assert w.request(REQUESTS[10](key=group, key_type=0), 2).error_code in (0, 15)
    wait_for("the group's coordinator", lambda: alter_offsets(port, group, {shown: {0: 0}, hidden: {0: 0}})
             .error_code == 0)
    member = str(uuid.uuid4())
    joined = share_heartbeat(port, group, member, 0, [shown, hidden])
    assert joined.error_code == 0 and len(joined.assignment.topic_partitions) == 2
    create_acls(port, [acl(ResourceType.TOPIC, hidden, op, AclPermissionType.DENY)
                       for op in (AclOperation.DESCRIBE, AclOperation.READ)])
    # a group assigned a topic the caller may not describe is refused as a whole
    g = wait_for("the topic denied", lambda: (lambda g: g if g.error_code else None)(share_describe(port, group)[0]))
    assert (g.error_code, g.members) == (TOPIC_AUTHORIZATION_FAILED, [])
    assert g.error_message == "The group has described topic(s) that the client is not authorized to describe."
    # offsets: a named hidden topic is refused, "all topics" leaves it out
    named = describe_offsets(port, group, {shown: [0], hidden: [0]})
    errors = {t.topic_name: [(p.partition_index, p.error_code, p.start_offset) for p in t.partitions]
              for t in named.topics}
    assert errors == {shown: [(0, 0, 0)], hidden: [(0, TOPIC_AUTHORIZATION_FAILED, -1)]}
    assert offsets_of(describe_offsets(port, group)) == {(shown, 0): (0, 0)}
    assert share_heartbeat(port, group, member, -1).error_code == 0  # the member leaves: the group is empty
    altered = alter_offsets(port, group, {shown: {0: 0}, hidden: {0: 0}})
    assert {t.topic_name: [p.error_code for p in t.partitions] for t in altered.responses} == {
        shown: [0], hidden: [TOPIC_AUTHORIZATION_FAILED]}
    deleted = delete_offsets(port, group, [shown, hidden])
    assert {t.topic_name: t.error_code for t in deleted.responses} == {shown: 0, hidden: TOPIC_AUTHORIZATION_FAILED}
    # no access to the group: every share-group admin request is refused
    create_acls(port, [acl(ResourceType.GROUP, group, AclOperation.ALL, AclPermissionType.DENY)])
    wait_for("the group denied", lambda: share_describe(port, group)[0].error_code == GROUP_AUTHORIZATION_FAILED)
    assert describe_offsets(port, group).error_code == GROUP_AUTHORIZATION_FAILED
    assert alter_offsets(port, group, {shown: {0: 0}}).error_code == GROUP_AUTHORIZATION_FAILED
    assert delete_offsets(port, group, [shown]).error_code == GROUP_AUTHORIZATION_FAILED
    assert delete_groups(port, group) == {group: GROUP_AUTHORIZATION_FAILED}
