"""ACL authorization end to end: real broker processes, real clients (confluent-kafka, kafka-python,
aiokafka, Kafka's kafka-acls.sh, ``pybroker acls``), on PLAINTEXT, where every connection is
``User:ANONYMOUS``.

The shared broker is bootstrapped as Kafka operators do it: first started with
``super.users=User:ANONYMOUS`` to grant ANONYMOUS the right to manage ACLs (ALTER and CREATE on
the cluster), then restarted without it, so everything else is denied by default and the
bootstrap ACLs prove they survived the restart.

The cases of the other tiers: tests/cluster/test_acls.py, tests/unit/test_acls.py.
"""
import asyncio
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from pybroker.protocol import REQUESTS
from pybroker.records import build_batch
from pybroker.security import acl as A
from pybroker.security.principal import KafkaPrincipal
from tests.broker import BrokerProcess
from tests.clientutil import finish_broker, start_broker, wait_until
from tests.kafka_wire import WireClient

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANON = "User:ANONYMOUS"
KAFKA_HOME = os.path.expanduser("~/.cache/pybroker-kafka/kafka_2.13-3.8.0")
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31
SECURITY_DISABLED = 54
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def binding(rtype, name, op, perm=AclPermissionType.ALLOW, pattern=ResourcePatternType.LITERAL, principal=ANON):
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def create_acls(admin, bindings) -> None:
    for f in admin.create_acls(bindings).values():
        f.result(timeout=30)


def delete_acls_of(admin, rtype, name, pattern=ResourcePatternType.ANY) -> None:
    flt = AclBindingFilter(rtype, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)
    for f in admin.delete_acls([flt]).values():
        f.result(timeout=30)


def new_topic(admin, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    return name


def produce_wire(port: int, topic: str) -> int:
    """One Produce (acks=1) of one record to partition 0: the partition's error code."""
    with WireClient(port) as c:
        batch = bytes(build_batch([b"v"], base_timestamp=int(time.time() * 1000)))
        return c.produce(topic, 0, batch, acks=1).error_code


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker with the authorizer on, deny by default, ANONYMOUS allowed to manage ACLs and create topics."""
    data = str(tmp_path_factory.mktemp("acl-broker") / "data")
    base = {"authorizer.class.name": AUTHORIZER, "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1"}
    b = BrokerProcess(data, {**base, "super.users": ANON}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        create_acls(admin, [binding(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),
                            binding(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)])
    finally:
        finish_broker(b)
    b = BrokerProcess(data, base).start()  # no super user any more: the ACLs above must have survived
    yield b
    finish_broker(b)


@pytest.fixture
def admin(secured):
    return AdminClient({"bootstrap.servers": secured.bootstrap})


# ---- the decision rules, without a broker ----------------------------------------------------


ALICE, BOB = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")


# ---- a real broker -------------------------------------------------------------------------------

def test_acl_apis_without_an_authorizer_say_security_disabled(tmp_path_factory):
    b = start_broker(tmp_path_factory, "no-authz")
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        with WireClient(b.port) as c:  # librdkafka answers an empty list here, so ask on the wire
            for version in range(4):
                assert c.request(REQUESTS[29](resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                              principal_filter=None, host_filter=None, operation=1, permission_type=1),
                                 version).error_code == SECURITY_DISABLED
        with pytest.raises(KafkaException) as info:
            create_acls(admin, [binding(ResourceType.TOPIC, "t", AclOperation.READ)])
        assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED
    finally:
        finish_broker(b)


def test_acls_survive_a_restart(secured, admin):
    """The fixture granted these while ANONYMOUS was a super user, then restarted the broker."""
    found = admin.describe_acls(AclBindingFilter(ResourceType.BROKER, None, ResourcePatternType.ANY, ANON, None,
                                                 AclOperation.ANY, AclPermissionType.ALLOW)).result(timeout=30)
    assert {(b.name, b.operation) for b in found} >= {("kafka-cluster", AclOperation.ALTER),
                                                      ("kafka-cluster", AclOperation.CREATE)}
    assert os.path.exists(os.path.join(secured.data_dir, "acls.json"))


def test_bad_bindings_are_invalid_request(admin):
    with pytest.raises(KafkaException) as info:
        create_acls(admin, [binding(ResourceType.TOPIC, "*", AclOperation.READ, pattern=ResourcePatternType.PREFIXED)])
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST
    with pytest.raises(KafkaException) as info:
        create_acls(admin, [binding(ResourceType.TOPIC, "t", AclOperation.READ, principal="Robot:r2d2")])
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_deny_by_default_then_literal_allow(secured, admin):
    topic = new_topic(admin)
    assert produce_wire(secured.port, topic) == TOPIC_AUTHORIZATION_FAILED
    p = Producer({"bootstrap.servers": secured.bootstrap, "message.timeout.ms": 10000})
    errors = []
    p.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create_acls(admin, [binding(ResourceType.TOPIC, topic, AclOperation.WRITE)])
    try:
        assert produce_wire(secured.port, topic) == 0
        with WireClient(secured.port) as c:  # WRITE implies DESCRIBE, but not READ
            assert c.metadata([topic]).topics[0].error_code == 0
            assert c.fetch(topic, 0, 0).error_code == TOPIC_AUTHORIZATION_FAILED
        errors.clear()
        p = Producer({"bootstrap.servers": secured.bootstrap, "message.timeout.ms": 10000})  # no cached denial
        p.produce(topic, b"y", on_delivery=lambda err, msg: errors.append(err))
        p.flush(15)
        assert errors == [None]
    finally:
        delete_acls_of(admin, ResourceType.TOPIC, topic)
    assert wait_until(lambda: produce_wire(secured.port, topic) == TOPIC_AUTHORIZATION_FAILED, 10)


def test_prefixed_wildcard_and_deny_beats_allow(secured, admin):
    base = f"pre-{uuid.uuid4().hex[:6]}"
    mine, other, denied = new_topic(admin, base), new_topic(admin, "other"), new_topic(admin, base)
    create_acls(admin, [binding(ResourceType.TOPIC, base, AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
                        binding(ResourceType.TOPIC, denied, AclOperation.WRITE, AclPermissionType.DENY)])
    try:
        assert produce_wire(secured.port, mine) == 0
        assert produce_wire(secured.port, denied) == TOPIC_AUTHORIZATION_FAILED
        assert produce_wire(secured.port, other) == TOPIC_AUTHORIZATION_FAILED
        create_acls(admin, [binding(ResourceType.TOPIC, "*", AclOperation.ALL)])
        assert produce_wire(secured.port, other) == 0
        assert produce_wire(secured.port, denied) == TOPIC_AUTHORIZATION_FAILED  # DENY still wins
        found = admin.describe_acls(AclBindingFilter(ResourceType.TOPIC, mine, ResourcePatternType.MATCH, None,
                                                     None, AclOperation.ANY, AclPermissionType.ANY)).result(30)
        assert {(b.name, b.resource_pattern_type) for b in found} == {
            (base, ResourcePatternType.PREFIXED), ("*", ResourcePatternType.LITERAL)}
    finally:
        delete_acls_of(admin, ResourceType.TOPIC, None)


def test_metadata_hides_topics_it_may_not_describe(secured, admin):
    seen, hidden = new_topic(admin, "seen"), new_topic(admin, "hidden")
    create_acls(admin, [binding(ResourceType.TOPIC, seen, AclOperation.READ)])
    try:
        listed = admin.list_topics(timeout=30).topics
        assert seen in listed and hidden not in listed
        with WireClient(secured.port) as c:
            topics = {t.name: t.error_code for t in c.metadata([seen, hidden]).topics}
        assert topics == {seen: 0, hidden: TOPIC_AUTHORIZATION_FAILED}
    finally:
        delete_acls_of(admin, ResourceType.TOPIC, seen)


def test_consumer_needs_group_read_confluent(secured, admin):
    topic, group = new_topic(admin), f"g-{uuid.uuid4().hex[:6]}"
    create_acls(admin, [binding(ResourceType.TOPIC, topic, AclOperation.ALL)])
    try:
        c = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        codes = set()
        wait_until(lambda: (m := c.poll(0.5)) is not None and m.error() and codes.add(m.error().code())
                   or KafkaError.GROUP_AUTHORIZATION_FAILED in codes, 20)
        c.close()
        assert KafkaError.GROUP_AUTHORIZATION_FAILED in codes
    finally:
        delete_acls_of(admin, ResourceType.TOPIC, topic)


def test_idempotent_producer_needs_idempotent_write_or_topic_write(secured, admin):
    with WireClient(secured.port) as c:
        assert c.init_producer_id().error_code == CLUSTER_AUTHORIZATION_FAILED
    topic, fatal = new_topic(admin), []
    create_acls(admin, [binding(ResourceType.TOPIC, topic, AclOperation.DESCRIBE)])  # visible, not writable
    p = Producer({"bootstrap.servers": secured.bootstrap, "enable.idempotence": True, "message.timeout.ms": 10000,
                  "error_cb": lambda err: fatal.append(err)})
    p.produce(topic, b"x", on_delivery=lambda err, msg: fatal.append(err))
    try:
        p.flush(15)
    except (KafkaException, SystemError) as exc:  # the fatal error may surface from flush itself
        fatal.append(exc.args[0] if isinstance(exc, KafkaException) else exc.__cause__.args[0])
    assert any(e is not None and e.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED for e in fatal), fatal
    delete_acls_of(admin, ResourceType.TOPIC, topic)
    create_acls(admin, [binding(ResourceType.TOPIC, "somewhere-", AclOperation.WRITE,
                                pattern=ResourcePatternType.PREFIXED)])
    try:
        with WireClient(secured.port) as c:
            assert c.init_producer_id().error_code == 0
    finally:
        delete_acls_of(admin, ResourceType.TOPIC, "somewhere-")


def test_cluster_authorization_failed_for_acl_apis(secured, admin):
    create_acls(admin, [binding(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE, AclPermissionType.DENY)])
    try:
        with WireClient(secured.port) as c:  # librdkafka reports no DescribeAcls top-level error: ask on the wire
            resp = c.request(REQUESTS[29](resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                          principal_filter=None, host_filter=None, operation=1, permission_type=1), 3)
        assert resp.error_code == CLUSTER_AUTHORIZATION_FAILED and resp.resources == []
    finally:
        for f in admin.delete_acls([AclBindingFilter(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                                                     None, None, AclOperation.DESCRIBE,
                                                     AclPermissionType.DENY)]).values():
            f.result(timeout=30)


def test_kafka_python_sees_topic_and_group_errors(secured, admin):
    kafka = pytest.importorskip("kafka")
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
    topic = new_topic(admin)
    p = kafka.KafkaProducer(bootstrap_servers=secured.bootstrap, max_block_ms=10000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send(topic, b"x").get(timeout=20)
    finally:
        p.close(5)
    create_acls(admin, [binding(ResourceType.TOPIC, topic, AclOperation.ALL)])
    try:
        c = kafka.KafkaConsumer(topic, bootstrap_servers=secured.bootstrap, group_id="kp-denied",
                                consumer_timeout_ms=3000)
        try:
            with pytest.raises(GroupAuthorizationFailedError):
                for _ in range(20):
                    c.poll(500)
        finally:
            c.close()
    finally:
        delete_acls_of(admin, ResourceType.TOPIC, topic)


def test_aiokafka_sees_topic_and_cluster_errors(secured, admin):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError
    topic = new_topic(admin)

    async def main():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=secured.bootstrap, request_timeout_ms=10000)
        await p.start()
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                await p.send_and_wait(topic, b"x")
        finally:
            await p.stop()
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=secured.bootstrap, enable_idempotence=True,
                                      request_timeout_ms=10000)
        with pytest.raises(ClusterAuthorizationFailedError):
            try:
                await p.start()
                await p.send_and_wait(topic, b"x")
            finally:
                await p.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_super_users_and_allow_everyone(tmp_path_factory):
    b = start_broker(tmp_path_factory, "acl-open", {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                                    "allow.everyone.if.no.acl.found": "true"})
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        free, guarded = new_topic(admin, "free"), new_topic(admin, "guarded")
        create_acls(admin, [binding(ResourceType.TOPIC, guarded, AclOperation.WRITE, principal="User:alice")])
        assert produce_wire(b.port, free) == 0  # no ACL on it: everyone
        assert produce_wire(b.port, guarded) == TOPIC_AUTHORIZATION_FAILED  # an ACL for someone else
    finally:
        finish_broker(b)
    b.overrides["super.users"] = "User:admin;User:ANONYMOUS"
    b.start()
    try:
        assert produce_wire(b.port, guarded) == 0  # super users are never denied
    finally:
        finish_broker(b)


def test_denials_are_audited(secured, admin):
    topic = new_topic(admin, "audited")
    assert produce_wire(secured.port, topic) == TOPIC_AUTHORIZATION_FAILED
    line = wait_until(lambda: next((ln for ln in secured.stderr().splitlines()
                                    if "authorization denied" in ln and topic in ln), None), 10)
    assert line and "User:ANONYMOUS" in line and "host=127.0.0.1" in line
    assert "operation=Write" in line and "resource_type=Topic" in line and "api=Produce" in line


def test_pybroker_acls_cli(secured, admin):
    topic = new_topic(admin, "cli")
    cli = [sys.executable, "-m", "pybroker", "acls", "--bootstrap-server", secured.bootstrap]
    out = subprocess.run(cli + ["--add", "--allow-principal", ANON, "--producer", "--topic", topic],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`" \
        in out.stdout
    assert produce_wire(secured.port, topic) == 0
    out = subprocess.run(cli + ["--list", "--topic", topic], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "operation=WRITE, permissionType=ALLOW" in out.stdout and "operation=CREATE" in out.stdout
    out = subprocess.run(cli + ["--remove", "--topic", topic, "--force"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert produce_wire(secured.port, topic) == TOPIC_AUTHORIZATION_FAILED


@pytest.mark.skipif(not os.path.exists(os.path.join(KAFKA_HOME, "bin", "kafka-acls.sh"))
                    or shutil.which("java") is None,
                    reason="Apache Kafka's CLI is not installed")
def test_kafka_acls_sh(secured, admin):
    topic = new_topic(admin, "ksh")
    sh = [os.path.join(KAFKA_HOME, "bin", "kafka-acls.sh"), "--bootstrap-server", secured.bootstrap]
    out = subprocess.run(sh + ["--add", "--allow-principal", ANON, "--operation", "Write", "--topic", topic],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert produce_wire(secured.port, topic) == 0
    out = subprocess.run(sh + ["--list", "--topic", topic], capture_output=True, text=True, timeout=120)
    assert f"name={topic}, patternType=LITERAL" in out.stdout and "operation=WRITE" in out.stdout
    out = subprocess.run(sh + ["--remove", "--topic", topic, "--force"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert produce_wire(secured.port, topic) == TOPIC_AUTHORIZATION_FAILED


# ---- a ZooKeeper cluster -------------------------------------------------------------------------


# ---- SASL users ----------------------------------------------------------------------------------

SASL_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
             'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret" '
             'user_carol="carol-secret";')


def sasl_conf(b, user: str) -> dict:
    return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-secret"}


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "pybroker", "api", "sasl_authenticate.py")),
                    reason="SASL is not available")
def test_sasl_users_alice_allowed_bob_denied_carol_sees_nothing(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("acl-sasl") / "data")
    b = BrokerProcess(data, {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
                             "listener.name.sasl_plaintext.plain.sasl.jaas.config": SASL_JAAS,
                             "authorizer.class.name": AUTHORIZER, "super.users": "User:admin",
                             "offsets.topic.replication.factor": "1"}).start()
    try:
        admin = AdminClient(sasl_conf(b, "admin"))
        topic = new_topic(admin, "sasl")
        create_acls(admin, [binding(ResourceType.TOPIC, topic, AclOperation.WRITE, principal="User:alice"),
                            binding(ResourceType.TOPIC, topic, AclOperation.READ, principal="User:bob",
                                    perm=AclPermissionType.DENY),
                            binding(ResourceType.TOPIC, "*", AclOperation.DESCRIBE, principal="User:bob")])
        results = {}
        for user in ("alice", "bob"):
            p = Producer({**sasl_conf(b, user), "message.timeout.ms": 10000})
            errors = []
            p.produce(topic, b"x", on_delivery=lambda err, msg, errors=errors: errors.append(err))
            p.flush(20)
            results[user] = errors[0].code() if errors and errors[0] is not None else 0
        assert results == {"alice": 0, "bob": KafkaError.TOPIC_AUTHORIZATION_FAILED}
        assert topic in AdminClient(sasl_conf(b, "bob")).list_topics(timeout=30).topics  # DESCRIBE on *
        assert AdminClient(sasl_conf(b, "carol")).list_topics(timeout=30).topics == {}  # no ACLs: sees nothing
        config = os.path.join(os.path.dirname(data), "admin.properties")
        with open(config, "w") as f:
            f.write("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common."
                    'security.plain.PlainLoginModule required username="admin" password="admin-secret";\n')
        tools = [[sys.executable, "-m", "pybroker", "acls"]]
        if os.path.exists(os.path.join(KAFKA_HOME, "bin", "kafka-acls.sh")) and shutil.which("java"):
            tools.append([os.path.join(KAFKA_HOME, "bin", "kafka-acls.sh")])
        for tool, operation in zip(tools, ("Describe", "Read")):  # as admin, through --command-config
            out = subprocess.run(tool + ["--bootstrap-server", b.bootstrap, "--command-config", config, "--add",
                                         "--allow-principal", "User:carol", "--operation", operation, "--topic", topic],
                                 cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
        assert wait_until(lambda: topic in AdminClient(sasl_conf(b, "carol")).list_topics(timeout=30).topics, 10)
        line = wait_until(lambda: next((ln for ln in b.stderr().splitlines()
                                        if "authorization denied" in ln and "User:bob" in ln), None), 10)
        assert line and "operation=Write" in line
    finally:
        finish_broker(b)


# ---- Kafka's per-API mapping, on the wire ---------------------------------------------------------

def test_per_api_errors_on_the_wire(secured, admin):
    R = REQUESTS
    topic, group = new_topic(admin, "wire"), f"wire-{uuid.uuid4().hex[:6]}"
    with WireClient(secured.port) as c:
        batch = bytes(build_batch([b"v"], base_timestamp=int(time.time() * 1000)))
        assert c.produce(topic, 0, batch, transactional_id="tx").error_code == 53  # WRITE on the transactional id
        assert c.init_producer_id(transactional_id="tx").error_code == 53
        assert c.request(R[10](key=group, key_type=0), 2).error_code == GROUP_AUTHORIZATION_FAILED
        assert c.request(R[10](key="tx", key_type=1), 2).error_code == 53
        commit = c.request(R[8](group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            R[8].OffsetCommitRequestTopic(name=topic, partitions=[R[8].OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_metadata="")])]), 7)
        assert commit.topics[0].partitions[0].error_code == GROUP_AUTHORIZATION_FAILED
        fetched = c.request(R[9](group_id=group, topics=[R[9].OffsetFetchRequestTopic(name=topic,
                                                                                   partition_indexes=[0])]), 5)
        assert fetched.error_code == GROUP_AUTHORIZATION_FAILED
        assert c.request(R[15](groups=[group], include_authorized_operations=True), 4).groups[0].error_code \
            == GROUP_AUTHORIZATION_FAILED
        assert c.request(R[42](groups_names=[group]), 1).results[0].error_code == GROUP_AUTHORIZATION_FAILED
        assert c.request(R[20](topic_names=[topic], timeout_ms=5000), 3).responses[0].error_code \
            == TOPIC_AUTHORIZATION_FAILED
        grow = c.request(R[37](topics=[R[37].CreatePartitionsTopic(name=topic, count=2, assignments=None)],
                               timeout_ms=5000, validate_only=True), 1)
        assert grow.results[0].error_code == TOPIC_AUTHORIZATION_FAILED
        configs = c.request(R[32](resources=[R[32].DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                                           configuration_keys=None),
                                             R[32].DescribeConfigsResource(resource_type=4, resource_name="",
                                                                           configuration_keys=None)]), 3)
        assert [r.error_code for r in configs.results] == [TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED]
        offsets = c.request(R[2](replica_id=-1, isolation_level=0, topics=[R[2].ListOffsetsTopic(
            name=topic, partitions=[R[2].ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                              timestamp=-1)])]), 5)
        assert offsets.topics[0].partitions[0].error_code == TOPIC_AUTHORIZATION_FAILED
        assert c.request(R[35](topics=None), 4).error_code == 0  # DESCRIBE on the cluster, implied by ALTER
        assert c.request(R[43](election_type=0, topic_partitions=None, timeout_ms=5000), 2).error_code == 0  # ALTER
        follower = R[1](replica_id=1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                        session_epoch=-1, topics=[R[1].FetchTopic(topic=topic, partitions=[R[1].FetchPartition(
                            partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                            partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
        assert c.request(follower, 11).responses[0].partitions[0].error_code == TOPIC_AUTHORIZATION_FAILED
        md = c.request(R[3](topics=None, allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
                            include_topic_authorized_operations=True), 8)
        assert md.cluster_authorized_operations == (1 << A.ALTER) | (1 << A.CREATE) | (1 << A.DESCRIBE)
    create_acls(admin, [binding(ResourceType.GROUP, group, AclOperation.READ),
                        binding(ResourceType.TOPIC, topic, AclOperation.READ),
                        binding(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE, AclPermissionType.DENY)])
    try:
        with WireClient(secured.port) as c:
            assert c.request(R[35](topics=None), 4).error_code == CLUSTER_AUTHORIZATION_FAILED  # DENY beats implied
            # READ on the group implies the DESCRIBE FindCoordinator needs
            assert wait_until(lambda: c.request(R[10](key=group, key_type=0), 2).error_code == 0, 30)
            commit = c.request(R[8](group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
                R[8].OffsetCommitRequestTopic(name=topic, partitions=[R[8].OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=0, committed_metadata="")])]), 7)
            assert commit.topics[0].partitions[0].error_code == 0
            fetched = c.request(R[9](group_id=group, topics=None), 5)
            assert fetched.error_code == 0 and [t.name for t in fetched.topics] == [topic]
            described = c.request(R[15](groups=[group], include_authorized_operations=True), 4).groups[0]
            assert described.error_code == 0 and described.authorized_operations == (1 << A.READ) | (1 << A.DESCRIBE)
            md = c.request(R[3](topics=[R[3].MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False,
                                include_topic_authorized_operations=True), 8)
            assert md.topics[0].topic_authorized_operations == (1 << A.READ) | (1 << A.DESCRIBE)
            assert c.fetch(topic, 0, 0).error_code == 0
    finally:
        delete_acls_of(admin, ResourceType.GROUP, group)
        delete_acls_of(admin, ResourceType.TOPIC, topic)
        for f in admin.delete_acls([AclBindingFilter(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                                                     None, None, AclOperation.DESCRIBE,
                                                     AclPermissionType.DENY)]).values():
            f.result(timeout=30)


def test_kafka_python_admin_creates_describes_and_deletes_acls(secured):
    pytest.importorskip("kafka")
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern, ResourcePatternFilter)
    from kafka.admin import ResourceType as KResourceType
    name = f"kp-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=secured.bootstrap, request_timeout_ms=20000)
    try:
        acl = ACL(principal="User:kp", host="*", operation=ACLOperation.READ, permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KResourceType.TOPIC, name, ACLResourcePatternType.PREFIXED))
        result = admin.create_acls([acl])
        assert result["succeeded"] == [acl] and not result["failed"]
        flt = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                        resource_pattern=ResourcePatternFilter(KResourceType.TOPIC, name + "-x",
                                                               ACLResourcePatternType.MATCH))
        found, error = admin.describe_acls(flt)
        assert [a.principal for a in found] == ["User:kp"] and error.errno == 0
        deleted = admin.delete_acls([flt])
        assert [a.principal for a in deleted[0][1]] == ["User:kp"]
        assert admin.describe_acls(flt)[0] == []
    finally:
        admin.close()
