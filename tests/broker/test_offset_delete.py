"""OffsetDelete (API 47) on real broker processes: raw wire requests answered as Apache Kafka 3.8
answers them (the same steps run against Kafka as the oracle), tombstones that keep the offsets
deleted across a restart, GROUP_SUBSCRIBED_TO_TOPIC for classic and KIP-848 groups, the ACLs Kafka
checks, NOT_COORDINATOR from the other broker of a cluster, Kafka's ``kafka-consumer-groups.sh
--delete-offsets`` and kafka-python's ``delete_group_offsets``.

The cases of the other tiers: tests/cluster/test_offset_delete.py.
"""
import os
import subprocess
import uuid

import pytest

from pybroker.client.assignors import Subscription, encode_subscription
from pybroker.protocol import REQUESTS
from tests.clientutil import finish_broker, start_broker, wait_until
from tests.kafka_wire import WireClient
from tests.broker.test_consumer_group_protocol import heartbeat as consumer_heartbeat
from tests.broker.test_consumer_group_protocol import wait_for_coordinator
from tests.broker.test_group_versions import _settled, commit, fetch_groups, find
from tests.broker.test_groups import join, sync

OFFSET_DELETE = 47
UNKNOWN_TOPIC_OR_PARTITION, INVALID_GROUP_ID, TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = 3, 24, 29, 30
NOT_COORDINATOR, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC = 16, 68, 69, 86
LOADING = {14, 15, 16}  # the coordinator is still loading (or electing) its __consumer_offsets partition
Request = REQUESTS[OFFSET_DELETE]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory, "offset-delete", {"group.initial.rebalance.delay.ms": 0,
                                                         "offsets.topic.num.partitions": 3})
    yield b
    finish_broker(b)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def delete_offsets(w, group: str, partitions) -> tuple[int, dict]:
    """(top-level error, {(topic, partition): error}) of one OffsetDelete v0."""
    topics = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(Request.OffsetDeleteRequestPartition(partition_index=p))
    resp = w.request(Request(group_id=group, topics=[Request.OffsetDeleteRequestTopic(name=t, partitions=ps)
                                                     for t, ps in topics.items()]), 0)
    return resp.error_code, {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def committed(w, group: str) -> dict:
    """{(topic, partition): offset} the group has committed (OffsetFetch v8, all partitions)."""
    error, offsets = fetch_groups(w, {group: None})[group]
    assert error == 0, error
    return {tp: offset for tp, (offset, _metadata, _error) in offsets.items() if offset >= 0}


def coordinator_ready(w, group: str) -> None:
    """Ask for the group's coordinator (that creates __consumer_offsets, as clients do first) until its
    offsets can be read."""
    assert wait_until(lambda: _settled(find(w, 3, [group])), timeout=60), "no coordinator"
    assert wait_until(lambda: fetch_groups(w, {group: None})[group][0] not in LOADING, timeout=60), "not loaded"


def subscription(*topics: str) -> bytes:
    return encode_subscription(Subscription(topics=list(topics), user_data=None))


def stable_member(w, group: str, protocol_type: str, metadata: bytes) -> str:
    """A one-member classic group, Stable after its SyncGroup: the member id."""
    first = join(w, group, protocols=(("range", metadata),), protocol_type=protocol_type)
    me = join(w, group, member_id=first.member_id, protocols=(("range", metadata),), protocol_type=protocol_type)
    assert me.error_code == 0, me
    assert sync(w, group, me.generation_id, me.member_id, [(me.member_id, b"")]).error_code == 0
    return me.member_id


def scenario(port: int) -> dict:
    """The same steps against any broker; every answer as plain values, to compare."""
    with WireClient(port) as w:
        w.create_topic("od-a", 2)
        w.create_topic("od-b", 1)
        a0, a1, b0 = ("od-a", 0), ("od-a", 1), ("od-b", 0)
        out = {}
        for group in ("od-simple", "od-consumer", "od-unreadable", "od-connect"):
            coordinator_ready(w, group)
        assert commit(w, "od-simple", {a0: 5, a1: 6, b0: 7}) == {a0: 0, a1: 0, b0: 0}
        out["empty group"] = delete_offsets(w, "od-simple", [a0, ("od-a", 9), ("od-none", 0)])
        out["left after"] = committed(w, "od-simple")
        out["nothing committed there"] = delete_offsets(w, "od-simple", [a0])
        out["no partitions"] = delete_offsets(w, "od-simple", [])
        out["unknown group"] = delete_offsets(w, "od-ghost", [a0])
        out["empty group id"] = delete_offsets(w, "", [a0])
        member = stable_member(w, "od-consumer", "consumer", subscription("od-a"))
        assert commit(w, "od-consumer", {a0: 1, b0: 2}, 1, member, 8) == {a0: 0, b0: 0}
        out["subscribed topic"] = delete_offsets(w, "od-consumer", [a0, a1, b0, ("od-none", 0)])
        out["consumer left after"] = committed(w, "od-consumer")
        stable_member(w, "od-unreadable", "consumer", b"\x00")
        out["unreadable subscription"] = delete_offsets(w, "od-unreadable", [b0])
        stable_member(w, "od-connect", "connect", b"worker")
        out["other protocol type"] = delete_offsets(w, "od-connect", [a0, ("od-none", 0)])
        return out


EXPECTED = {
    "empty group": (0, {("od-a", 0): 0, ("od-a", 9): UNKNOWN_TOPIC_OR_PARTITION,
                        ("od-none", 0): UNKNOWN_TOPIC_OR_PARTITION}),
    "left after": {("od-a", 1): 6, ("od-b", 0): 7},
    "nothing committed there": (0, {("od-a", 0): 0}),
    "no partitions": (0, {}),
    "unknown group": (GROUP_ID_NOT_FOUND, {}),
    "empty group id": (INVALID_GROUP_ID, {}),
    "subscribed topic": (0, {("od-a", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("od-a", 1): GROUP_SUBSCRIBED_TO_TOPIC,
                             ("od-b", 0): 0, ("od-none", 0): UNKNOWN_TOPIC_OR_PARTITION}),
    "consumer left after": {("od-a", 0): 1},
    "unreadable subscription": (0, {("od-b", 0): GROUP_SUBSCRIBED_TO_TOPIC}),
    "other protocol type": (NON_EMPTY_GROUP, {}),
}


def test_offset_delete_answers(tmp_path_factory):
    b = start_broker(tmp_path_factory, "offset-delete-scenario", {"group.initial.rebalance.delay.ms": 0})
    try:
        assert scenario(b.port) == EXPECTED
    finally:
        finish_broker(b)


def test_offset_delete_answers_as_kafka_does(tmp_path):
    from tests.txn_brokers import KafkaBroker, kafka_available
    if not kafka_available():
        pytest.skip("Apache Kafka 3.8 is not installed")
    kafka = KafkaBroker(str(tmp_path / "kafka")).start()
    try:
        assert scenario(kafka.port) == EXPECTED
    finally:
        kafka.close()


def test_deleted_offsets_stay_deleted_after_a_restart(broker):
    group, topic = unique("od-restart"), unique("od-restart")
    with WireClient(broker.port) as w:
        w.create_topic(topic, 3)
        tps = [(topic, i) for i in range(3)]
        coordinator_ready(w, group)
        assert commit(w, group, {tp: 10 + i for i, tp in enumerate(tps)}) == dict.fromkeys(tps, 0)
        assert delete_offsets(w, group, tps[:2]) == (0, dict.fromkeys(tps[:2], 0))
        assert committed(w, group) == {tps[2]: 12}
    broker.stop()
    broker.start()
    with WireClient(broker.port) as w:
        coordinator_ready(w, group)
        assert committed(w, group) == {tps[2]: 12}
        assert delete_offsets(w, group, tps[2:]) == (0, {tps[2]: 0})
        assert committed(w, group) == {}


def test_consumer_group_protocol_members_keep_their_subscribed_topics(broker):
    """A KIP-848 group: any state, only the topics its members subscribe to are kept."""
    group, subscribed, other = unique("od-kip848"), unique("od-sub"), unique("od-other")
    wait_for_coordinator(broker.port)
    with WireClient(broker.port) as w:
        w.create_topic(subscribed, 1)
        w.create_topic(other, 1)
        coordinator_ready(w, group)
        assert commit(w, group, {(subscribed, 0): 3, (other, 0): 4}) == {(subscribed, 0): 0, (other, 0): 0}
        member = uuid.uuid4().hex
        r = wait_until(lambda: consumer_heartbeat(w, group, member, 0, topics=[subscribed], owned={},
                                                  rebalance_ms=30000, version=0), timeout=30)
        assert r.error_code == 0, r
        assert delete_offsets(w, group, [(subscribed, 0), (other, 0)]) == \
            (0, {(subscribed, 0): GROUP_SUBSCRIBED_TO_TOPIC, (other, 0): 0})
        assert committed(w, group) == {(subscribed, 0): 3}
        assert consumer_heartbeat(w, group, member, -1, version=0).error_code == 0  # leaves: the group is Empty
        assert delete_offsets(w, group, [(subscribed, 0)]) == (0, {(subscribed, 0): 0})
        assert committed(w, group) == {}


def test_acls_delete_on_the_group_and_read_on_the_topic(tmp_path_factory):
    from confluent_kafka.admin import AclOperation, AclPermissionType, AdminClient, ResourceType
    from tests.broker.test_acls import binding, create_acls
    b = start_broker(tmp_path_factory, "offset-delete-acls", {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "allow.everyone.if.no.acl.found": "true",
        "group.initial.rebalance.delay.ms": 0})
    try:
        group, guarded_group, open_topic, secret = unique("od-g"), unique("od-guarded"), unique("od-t"), unique("od-s")
        create_acls(AdminClient({"bootstrap.servers": b.bootstrap}), [
            binding(ResourceType.GROUP, guarded_group, AclOperation.DELETE, AclPermissionType.DENY),
            binding(ResourceType.TOPIC, secret, AclOperation.READ, AclPermissionType.DENY)])
        with WireClient(b.port) as w:
            w.create_topic(open_topic, 1)
            w.create_topic(secret, 1)
            tps = {(open_topic, 0): 1, (secret, 0): 2}
            coordinator_ready(w, group)
            assert commit(w, group, tps) == {(open_topic, 0): 0, (secret, 0): 29}  # READ on the topic: denied
            assert delete_offsets(w, guarded_group, list(tps)) == (GROUP_AUTHORIZATION_FAILED, {})
            assert delete_offsets(w, group, [(secret, 0), (open_topic, 0)]) == \
                (0, {(secret, 0): TOPIC_AUTHORIZATION_FAILED, (open_topic, 0): 0})
    finally:
        finish_broker(b)


def test_kafka_consumer_groups_delete_offsets(broker):
    from tests.txn_brokers import KAFKA_HOME, kafka_available
    if not kafka_available():
        pytest.skip("Apache Kafka 3.8 is not installed")
    group, topic = unique("od-tool"), unique("od-tool")
    with WireClient(broker.port) as w:
        w.create_topic(topic, 2)
        tps = [(topic, 0), (topic, 1)]
        coordinator_ready(w, group)
        assert commit(w, group, {tps[0]: 4, tps[1]: 5}) == dict.fromkeys(tps, 0)
    tool = os.path.join(KAFKA_HOME, "bin", "kafka-consumer-groups.sh")
    run = subprocess.run([tool, "--bootstrap-server", broker.bootstrap, "--delete-offsets", "--group", group,
                          "--topic", f"{topic}:1"], capture_output=True, timeout=120,
                         env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256M"})
    out = run.stdout.decode()
    assert run.returncode == 0, (out, run.stderr.decode()[-2000:])
    assert out.split()[-6:] == ["TOPIC", "PARTITION", "STATUS", topic, "1", "Successful"], out  # one line
    with WireClient(broker.port) as w:
        assert committed(w, group) == {tps[0]: 4}
    run = subprocess.run([tool, "--bootstrap-server", broker.bootstrap, "--delete-offsets", "--group", group,
                          "--topic", topic], capture_output=True, timeout=120,
                         env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256M"})
    assert run.returncode == 0, (run.stdout.decode(), run.stderr.decode()[-2000:])
    with WireClient(broker.port) as w:
        assert committed(w, group) == {}


def test_kafka_python_delete_group_offsets(broker):
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import GroupIdNotFoundError, NoError
    group, topic = unique("od-kp"), unique("od-kp")
    with WireClient(broker.port) as w:
        w.create_topic(topic, 2)
        coordinator_ready(w, group)
        assert commit(w, group, {(topic, 0): 3, (topic, 1): 4}) == {(topic, 0): 0, (topic, 1): 0}
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert admin.delete_group_offsets(group, [TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): NoError}
        assert admin.list_group_offsets(group)[group].keys() == {TopicPartition(topic, 1)}
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets(unique("od-kp-ghost"), [TopicPartition(topic, 0)])
    finally:
        admin.close()


