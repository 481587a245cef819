"""Group configs (Kafka 4.x's GROUP config resource) on a real broker with real clients: confluent-kafka's
AdminClient sets, describes and deletes them (librdkafka sends its GROUP resource as config resource
32), kafka-python describes them, they survive a restart, bad values and unknown keys are refused
with INVALID_CONFIG, ACLs on the group guard them, and a single node starts with Kafka's share
state topic replication keys (3 and 2). Kafka's kafka-configs.sh takes ``--entity-type groups`` from
4.0 on; the 3.8 tools the other tests use predate it, so that case runs only where a 4.x is installed.
"""
import glob
import os
import shutil
import subprocess
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, AlterConfigOpType,
                                   ConfigEntry, ConfigResource, ConfigSource, ResourcePatternType, ResourceType)
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from tests.clientutil import DEADLINE

INVALID_CONFIG, GROUP_AUTHORIZATION_FAILED = 40, 30
SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND
KAFKA_4_HOMES = sorted(glob.glob(os.path.expanduser("~/.cache/pybroker-kafka/kafka_2.13-4.*")))


def group_name(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def admin(b) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def alter(ad: AdminClient, group: str, ops: dict) -> None:
    """IncrementalAlterConfigs of one group: {key: (op, value)}; raises KafkaException on a refusal."""
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, (op, v) in ops.items()])
    ad.incremental_alter_configs([res])[res].result(DEADLINE)


def describe(ad: AdminClient, group: str) -> dict:
    res = ConfigResource(ResourceType.GROUP, group)
    return ad.describe_configs([res])[res].result(DEADLINE)


def refusal(ad: AdminClient, group: str, ops: dict):
    with pytest.raises(KafkaException) as info:
        alter(ad, group, ops)
    return info.value.args[0]


def test_set_describe_delete_and_restart(broker_factory, tmp_path):
    data = str(tmp_path / "data")
    # Kafka's defaults for the share state topic on a single node: it must start all the same
    static = {"group.share.record.lock.duration.ms": 20000, "share.coordinator.state.topic.replication.factor": 3,
              "share.coordinator.state.topic.min.isr": 2}
    b = broker_factory(static, data_dir=data)
    ad = admin(b)
    group = group_name()
    fresh = describe(ad, group)  # any group id is described, known or not
    assert fresh["share.record.lock.duration.ms"].value == "20000"
    assert fresh["share.record.lock.duration.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert fresh["share.session.timeout.ms"].value == "45000" and fresh["share.session.timeout.ms"].is_default

    alter(ad, group, {"share.record.lock.duration.ms": (SET, "40000"), "share.auto.offset.reset": (SET, "earliest"),
                      "consumer.session.timeout.ms": (SET, "50000"), "share.isolation.level": (SET, "read_committed")})
    alter(ad, group, {"consumer.session.timeout.ms": (DELETE, None)})
    expected = {"share.record.lock.duration.ms": "40000", "share.auto.offset.reset": "earliest",
                "share.isolation.level": "read_committed"}

    def check(described):
        for key, value in expected.items():
            assert (described[key].value, described[key].source) == (value, ConfigSource.GROUP_CONFIG.value), key
            assert not described[key].is_default and not described[key].is_read_only
        assert described["consumer.session.timeout.ms"].value == "45000"
        assert described["consumer.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
        lock = described["share.record.lock.duration.ms"]
        assert [(s.name, s.value, s.source) for s in lock.synonyms.values()][0] == \
            ("share.record.lock.duration.ms", "40000", ConfigSource.GROUP_CONFIG.value)

    check(describe(ad, group))
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        answer = kp.describe_configs([KpResource(ConfigResourceType.GROUP, group)])
        assert "read_committed" in repr(answer) and "40000" in repr(answer)
    finally:
        kp.close()

    assert b.stop() == 0
    b = broker_factory(static, data_dir=data)
    ad = admin(b)
    check(describe(ad, group))
    brokers = ConfigResource(ResourceType.BROKER, "0")
    listed = ad.describe_configs([brokers])[brokers].result(DEADLINE)
    assert listed["group.share.record.lock.duration.ms"].value == "20000"
    assert listed["group.share.delivery.count.limit"].value == "5"
    assert listed["share.coordinator.state.topic.replication.factor"].value == "3"

    alter(ad, group, {k: (DELETE, None) for k in expected})
    assert all(e.source != ConfigSource.GROUP_CONFIG.value for e in describe(ad, group).values())


def test_bad_values_and_unknown_keys_are_refused(shared_broker):
    ad = admin(shared_broker)
    group = group_name("bad")
    alter(ad, group, {"share.session.timeout.ms": (SET, "50000")})
    for ops, why in (({"share.sessoin.timeout.ms": (SET, "50000")}, "Unknown group config name"),
                     ({"share.record.lock.duration.ms": (SET, "500")}, "at least 1000"),
                     ({"share.record.lock.duration.ms": (SET, "90000")}, "group.share.max.record.lock.duration.ms"),
                     ({"consumer.session.timeout.ms": (SET, "1000")}, "group.consumer.min.session.timeout.ms"),
                     ({"share.auto.offset.reset": (SET, "by_duration:1h")}, "ISO-8601"),
                     ({"share.auto.offset.reset": (SET, "by_duration:-PT1H")}, "negative"),
                     ({"share.isolation.level": (SET, "snapshot")}, "read_committed"),
                     ({"share.heartbeat.interval.ms": (SET, "abc")}, "Not a number"),
                     ({"share.isolation.level": (APPEND, "read_committed")}, "not allowed")):
        err = refusal(ad, group, ops)
        assert err.code() == INVALID_CONFIG and why in err.str(), (ops, err)
    described = describe(ad, group)
    assert described["share.session.timeout.ms"].value == "50000"  # what was refused changed nothing
    assert [k for k, e in described.items() if e.source == ConfigSource.GROUP_CONFIG.value] == \
        ["share.session.timeout.ms"]
    alter(ad, group, {"share.auto.offset.reset": (SET, "by_duration:P1DT12H")})
    assert describe(ad, group)["share.auto.offset.reset"].value == "by_duration:P1DT12H"


def test_acls_on_the_group_guard_its_configs(broker_factory):
    b = broker_factory({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                        "allow.everyone.if.no.acl.found": "true"})
    ad = admin(b)
    locked, open_group = group_name("locked"), group_name("open")
    for op in (AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS):
        binding = AclBinding(ResourceType.GROUP, locked, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", op,
                             AclPermissionType.DENY)
        for f in ad.create_acls([binding]).values():
            f.result(DEADLINE)
    assert refusal(ad, locked, {"share.isolation.level": (SET, "read_committed")}).code() == \
        GROUP_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as info:
        describe(ad, locked)
    assert info.value.args[0].code() == GROUP_AUTHORIZATION_FAILED
    alter(ad, open_group, {"share.isolation.level": (SET, "read_committed")})
    assert describe(ad, open_group)["share.isolation.level"].value == "read_committed"


@pytest.mark.skipif(not KAFKA_4_HOMES or not shutil.which("java"),
                    reason="needs a Kafka 4.x distribution (kafka-configs.sh --entity-type groups) and Java; "
                           "the installed 3.8 tools predate group configs")
def test_kafka_configs_tool_alters_and_describes_a_group(shared_broker):
    tool = os.path.join(KAFKA_4_HOMES[-1], "bin", "kafka-configs.sh")
    group = group_name("tool")
    base = [tool, "--bootstrap-server", shared_broker.bootstrap, "--entity-type", "groups", "--entity-name", group]
    subprocess.run(base + ["--alter", "--add-config", "share.record.lock.duration.ms=35000"], check=True,
                   capture_output=True, text=True, timeout=120)
    out = subprocess.run(base + ["--describe"], check=True, capture_output=True, text=True, timeout=120).stdout
    assert "share.record.lock.duration.ms=35000" in out
