"""Group configs (Kafka 4.2's GROUP resource) in-process: every key checked as Kafka checks it, the
bounds the broker's group.* keys set, effective values, the DescribeConfigs rows and their sources, the
local control keeping them in the metadata store across a restart, the API handlers, and the broker's
share-group and share-coordinator keys."""
import asyncio
import json

import pytest

from pybroker.api import alter_configs, describe_configs, incremental_alter_configs
from pybroker.api.context import RequestContext
from pybroker.config import BrokerConfig, ConfigError
from pybroker.controller.cluster_group_configs import group_path, znode_name
from pybroker.controller.metadata_store import METADATA_FILE, LocalMetadataStore, MetadataCorruptError
from pybroker.coordinator.group_configs import (GROUP_KEYS, GroupConfigs, GroupSettings, check_value, describe_group,
                                                new_overrides, parse_duration_ms, settings)
from pybroker.errors import InvalidConfigError
from pybroker.protocol.messages import REQUESTS
from tests.inprocess import start_services, stop_services

GROUP, TOPIC = 32, 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
INVALID_CONFIG, INVALID_REQUEST = 40, 42
GROUP_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 8, 4, 5
INC, DESC, ALTER = REQUESTS[44], REQUESTS[32], REQUESTS[33]

# Kafka 4.2's group configs (GroupConfig.configDef(), kafka.apache.org/42/configuration/group-configs)
KAFKA_42_GROUP_DEFAULTS = {
    "consumer.heartbeat.interval.ms": "5000", "consumer.session.timeout.ms": "45000",
    "share.auto.offset.reset": "latest", "share.heartbeat.interval.ms": "5000",
    "share.isolation.level": "read_uncommitted", "share.record.lock.duration.ms": "30000",
    "share.session.timeout.ms": "45000", "streams.heartbeat.interval.ms": "5000",
    "streams.initial.rebalance.delay.ms": "3000", "streams.num.standby.replicas": "0",
    "streams.session.timeout.ms": "45000",
}
# per key: values Kafka takes (with the default broker bounds), values it refuses and a part of why
VALID = {
    "consumer.heartbeat.interval.ms": ["5000", "15000", " 6000 "],
    "consumer.session.timeout.ms": ["45000", "60000"],
    "share.auto.offset.reset": ["latest", "earliest", "by_duration:PT1H", "by_duration:P1DT2H3M4.5S",
                                "by_duration:pt30m", "by_duration:PT0S", "by_duration:P7D"],
    "share.heartbeat.interval.ms": ["5000", "15000"],
    "share.isolation.level": ["read_committed", "read_uncommitted"],
    "share.record.lock.duration.ms": ["15000", "30000", "60000"],
    "share.session.timeout.ms": ["45000", "60000"],
    "streams.heartbeat.interval.ms": ["5000", "15000"],
    "streams.initial.rebalance.delay.ms": ["0", "3000", "100000"],
    "streams.num.standby.replicas": ["0", "2"],
    "streams.session.timeout.ms": ["45000", "60000"],
}
INVALID = {
    "consumer.heartbeat.interval.ms": [("soon", "Not a number of type INT"), ("0", "at least 1"),
                                       ("4999", "group.consumer.min.heartbeat.interval.ms"),
                                       ("15001", "group.consumer.max.heartbeat.interval.ms")],
    "consumer.session.timeout.ms": [("1.5", "Not a number of type INT"), ("44999", "min.session.timeout.ms"),
                                    ("60001", "group.consumer.max.session.timeout.ms"),
                                    ("99999999999", "Not a number of type INT")],
    "share.auto.offset.reset": [("hello", "by_duration"), ("LATEST", "expected latest"),
                                ("by_duration:", "ISO-8601"), ("by_duration:1H", "ISO-8601"),
                                ("by_duration:PT", "ISO-8601"), ("by_duration:P1DT", "ISO-8601"),
                                ("by_duration:-PT1H", "negative"), ("by_duration:PT-5M", "negative")],
    "share.heartbeat.interval.ms": [("x", "Not a number"), ("4999", "group.share.min.heartbeat.interval.ms"),
                                    ("15001", "group.share.max.heartbeat.interval.ms")],
    "share.isolation.level": [("READ_COMMITTED", "read_committed, read_uncommitted"),
                              ("committed", "String must be one of")],
    "share.record.lock.duration.ms": [("999", "at least 1000"), ("14999", "group.share.min.record.lock.duration.ms"),
                                      ("60001", "group.share.max.record.lock.duration.ms")],
    "share.session.timeout.ms": [("", "Not a number"), ("44999", "group.share.min.session.timeout.ms"),
                                 ("60001", "group.share.max.session.timeout.ms")],
    "streams.heartbeat.interval.ms": [("0", "at least 1"), ("4999", "group.streams.min.heartbeat.interval.ms"),
                                      ("15001", "group.streams.max.heartbeat.interval.ms")],
    "streams.initial.rebalance.delay.ms": [("-1", "at least 0"), ("x", "Not a number")],
    "streams.num.standby.replicas": [("-1", "at least 0"), ("3", "group.streams.max.standby.replicas")],
    "streams.session.timeout.ms": [("44999", "group.streams.min.session.timeout.ms"),
                                   ("60001", "group.streams.max.session.timeout.ms")],
}
BROKER = BrokerConfig.from_properties({})


def test_the_group_keys_are_kafka_42s():
    assert set(GROUP_KEYS) == set(KAFKA_42_GROUP_DEFAULTS) == set(VALID) == set(INVALID)
    described = {k: (v, source) for k, v, source, _ in describe_group({}, BROKER)}
    assert described == {k: (v, DEFAULT_CONFIG) for k, v in KAFKA_42_GROUP_DEFAULTS.items()}
    for key, spec in GROUP_KEYS.items():
        assert spec.type in ("INT", "STRING") and spec.doc.endswith(".")
        assert spec.broker_key is None or spec.broker_key == "group." + key


@pytest.mark.parametrize("key", sorted(GROUP_KEYS))
def test_every_key_takes_kafkas_values(key):
    for value in VALID[key]:
        assert new_overrides({}, {key: value}, False, BROKER) == {key: value.strip()}


@pytest.mark.parametrize("key", sorted(GROUP_KEYS))
def test_every_key_refuses_bad_values_in_kafkas_words(key):
    for value, why in INVALID[key]:
        with pytest.raises(InvalidConfigError, match=why.replace(".", r"\.")) as info:
            new_overrides({}, {key: value}, False, BROKER)
        assert info.value.code == INVALID_CONFIG


def test_unknown_keys_are_refused_and_deleting_one_is_a_no_op():
    with pytest.raises(InvalidConfigError, match="Unknown group config name: session.timeout.ms"):
        new_overrides({}, {"session.timeout.ms": "10000"}, False, BROKER)
    with pytest.raises(InvalidConfigError, match="Unknown group config name: share.delivery.count.limit"):
        check_value("share.delivery.count.limit", "5")  # a Kafka 4.3 key, not 4.2's
    assert new_overrides({"share.isolation.level": "read_committed"}, {"nope": None}, False, BROKER) == \
        {"share.isolation.level": "read_committed"}


def test_session_timeout_must_exceed_heartbeat_interval():
    wide = BrokerConfig.from_properties({"group.share.max.heartbeat.interval.ms": "60000",
                                         "group.consumer.max.heartbeat.interval.ms": "60000"})
    with pytest.raises(InvalidConfigError, match=r"share.session.timeout.ms \(45000\) must be greater than "
                                                 r"share.heartbeat.interval.ms \(45000\)"):
        new_overrides({}, {"share.heartbeat.interval.ms": "45000"}, False, wide)
    assert new_overrides({}, {"share.heartbeat.interval.ms": "45000", "share.session.timeout.ms": "50000"}, False,
                         wide) == {"share.heartbeat.interval.ms": "45000", "share.session.timeout.ms": "50000"}
    with pytest.raises(InvalidConfigError, match="consumer.session.timeout.ms"):
        new_overrides({"consumer.session.timeout.ms": "50000"}, {"consumer.heartbeat.interval.ms": "50000"}, False,
                      wide)


def test_the_bounds_come_from_the_broker():
    loose = BrokerConfig.from_properties({"group.share.min.record.lock.duration.ms": "1000",
                                          "group.share.min.session.timeout.ms": "6000",
                                          "group.share.session.timeout.ms": "6000",
                                          "group.share.min.heartbeat.interval.ms": "500",
                                          "group.share.heartbeat.interval.ms": "500"})
    assert new_overrides({}, {"share.record.lock.duration.ms": "2000", "share.session.timeout.ms": "6000",
                              "share.heartbeat.interval.ms": "1000"}, False, loose)
    with pytest.raises(InvalidConfigError, match="group.share.min.record.lock.duration.ms"):
        new_overrides({}, {"share.record.lock.duration.ms": "2000"}, False, BROKER)


def test_set_delete_and_replace_all():
    current = new_overrides({}, {"share.auto.offset.reset": "earliest", "consumer.session.timeout.ms": "50000"},
                            False, BROKER)
    assert new_overrides(current, {"consumer.session.timeout.ms": None}, False, BROKER) == \
        {"share.auto.offset.reset": "earliest"}
    assert new_overrides(current, {"share.isolation.level": "read_committed"}, True, BROKER) == \
        {"share.isolation.level": "read_committed"}
    assert new_overrides(current, {}, True, BROKER) == {}


def test_effective_values_override_else_broker_default():
    broker = BrokerConfig.from_properties({"group.share.record.lock.duration.ms": "20000",
                                           "group.consumer.session.timeout.ms": "50000"})
    assert settings({}, BrokerConfig.from_properties({})) == GroupSettings()
    s = settings({"share.auto.offset.reset": "by_duration:PT1H30M", "share.session.timeout.ms": "50000"}, broker)
    assert s.share_record_lock_duration_ms == 20000 and s.consumer_session_timeout_ms == 50000
    assert s.share_session_timeout_ms == 50000 and s.share_auto_offset_reset == "by_duration:PT1H30M"
    assert s.share_reset_duration_ms == 5_400_000 and GroupSettings().share_reset_duration_ms is None
    assert s.share_isolation_level == "read_uncommitted" and s.streams_num_standby_replicas == 0
    # bounds that moved after an override was stored: the value is taken clamped; unreadable: unset
    tight = BrokerConfig.from_properties({"group.share.max.session.timeout.ms": "48000"})
    assert settings({"share.session.timeout.ms": "50000"}, tight).share_session_timeout_ms == 48000
    assert settings({"share.session.timeout.ms": "soon"}, tight).share_session_timeout_ms == 45000


def test_group_configs_read_the_control():
    class Control:
        def group_configs(self, group_id):
            return {"share.record.lock.duration.ms": "40000"} if group_id == "g" else {}

    configs = GroupConfigs(Control(), BROKER)
    assert configs.effective("g").share_record_lock_duration_ms == 40000
    assert configs.effective("other") == GroupSettings()


def test_durations_parse_as_java_does():
    assert parse_duration_ms("PT1.5S") == 1500 and parse_duration_ms("P2D") == 172_800_000
    assert parse_duration_ms("PT-1.5S") == -1500 and parse_duration_ms("-PT1M") == -60_000
    assert parse_duration_ms("p1dt1h1m1s") == 90_061_000
    for bad in ("", "P", "PT", "1H", "P1H", "PT1D", "P1DT"):
        with pytest.raises(ValueError):
            parse_duration_ms(bad)


def test_describe_rows_name_their_source():
    broker = BrokerConfig.from_properties({"group.share.record.lock.duration.ms": "20000"})
    rows = {k: (v, source, synonyms) for k, v, source, synonyms in
            describe_group({"share.session.timeout.ms": "50000"}, broker)}
    assert rows["share.session.timeout.ms"] == ("50000", GROUP_CONFIG, [
        ("share.session.timeout.ms", "50000", GROUP_CONFIG),
        ("group.share.session.timeout.ms", "45000", DEFAULT_CONFIG)])
    assert rows["share.record.lock.duration.ms"] == ("20000", STATIC_BROKER_CONFIG, [
        ("group.share.record.lock.duration.ms", "20000", STATIC_BROKER_CONFIG),
        ("group.share.record.lock.duration.ms", "30000", DEFAULT_CONFIG)])
    assert rows["share.isolation.level"] == ("read_uncommitted", DEFAULT_CONFIG, [
        ("share.isolation.level", "read_uncommitted", DEFAULT_CONFIG)])


# ---- the broker's share-group and share-coordinator keys ---------------------------------------

def test_broker_share_keys_take_kafkas_defaults_and_ranges():
    c = BrokerConfig.from_properties({})
    assert (c.group_share_record_lock_duration_ms, c.group_share_delivery_count_limit, c.group_share_max_size,
            c.group_share_session_timeout_ms, c.group_share_heartbeat_interval_ms,
            c.group_share_partition_max_record_locks, c.group_share_max_share_sessions) == \
        (30000, 5, 200, 45000, 5000, 2000, 2000)
    assert (c.share_coordinator_state_topic_replication_factor, c.share_coordinator_state_topic_num_partitions,
            c.share_coordinator_state_topic_min_isr, c.share_coordinator_state_topic_segment_bytes,
            c.share_coordinator_snapshot_update_records_per_snapshot) == (3, 50, 2, 104857600, 500)
    described = c.describe_all()
    assert described["group.share.delivery.count.limit"] == ("5", True)
    assert described["share.coordinator.state.topic.replication.factor"] == ("3", True)
    assert described["group.share.assignors"] == ("simple", True)
    for key, bad in (("group.share.delivery.count.limit", "1"), ("group.share.delivery.count.limit", "11"),
                     ("group.share.max.size", "1001"), ("group.share.partition.max.record.locks", "99"),
                     ("group.share.record.lock.duration.ms", "999"),
                     ("group.share.min.record.lock.duration.ms", "30001"),
                     ("group.share.max.record.lock.duration.ms", "29999"),
                     ("share.coordinator.state.topic.replication.factor", "0"),
                     ("share.coordinator.state.topic.replication.factor", "32768"),
                     ("share.coordinator.state.topic.num.partitions", "0"),
                     ("share.coordinator.snapshot.update.records.per.snapshot", "-1"),
                     ("group.share.assignors", "range"), ("group.share.assignors", "simple,simple2")):
        with pytest.raises(ConfigError, match=key):
            BrokerConfig.from_properties({key: bad})


def test_broker_share_keys_hold_together_as_kafka_requires():
    for props, why in (({"group.share.session.timeout.ms": "30000"}, "group.share.min.session.timeout.ms"),
                       ({"group.share.heartbeat.interval.ms": "20000"}, "group.share.max.heartbeat.interval.ms"),
                       ({"group.share.min.heartbeat.interval.ms": "20000"}, "group.share.min.heartbeat"),
                       ({"group.share.max.session.timeout.ms": "40000"}, "group.share.max.session.timeout.ms"),
                       ({"group.share.record.lock.duration.ms": "10000"}, "group.share.min.record.lock"),
                       ({"group.share.record.lock.duration.ms": "61000"}, "group.share.max.record.lock"),
                       ({"group.share.min.session.timeout.ms": "5000", "group.share.session.timeout.ms": "5000"},
                        "must be less than group.share.session.timeout.ms"),
                       ({"group.streams.num.standby.replicas": "3"}, "group.streams.max.standby.replicas")):
        with pytest.raises(ConfigError, match=why):
            BrokerConfig.from_properties(props)
    ok = BrokerConfig.from_properties({"group.share.min.session.timeout.ms": "6000",
                                       "group.share.session.timeout.ms": "6000",
                                       "group.share.min.heartbeat.interval.ms": "1000",
                                       "group.share.heartbeat.interval.ms": "1000",
                                       "group.share.assignors": "org.apache.kafka.coordinator.group.assignor."
                                                                "SimpleAssignor"})
    assert ok.group_share_session_timeout_ms == 6000 and ok.group_share_assignors == ("simple",)


def test_single_node_takes_the_share_state_topics_replication_keys():
    c = BrokerConfig.from_properties({"share.coordinator.state.topic.replication.factor": "3",
                                      "share.coordinator.state.topic.min.isr": "2", "group.share.enable": "true",
                                      "share.coordinator.threads": "4"})
    assert c.share_coordinator_state_topic_replication_factor == 3 and "group.share.enable" in c.ignored
    with pytest.raises(ConfigError, match="group.share.enable"):
        BrokerConfig.from_properties({"group.share.enable": "maybe"})


# ---- the local control and its metadata store --------------------------------------------------

def test_overrides_survive_a_restart_of_the_local_control(tmp_path):
    async def first():
        services = await start_services(tmp_path)
        try:
            control = services.control
            await control.alter_group_configs("g1", {"share.auto.offset.reset": "earliest",
                                                     "share.record.lock.duration.ms": "45000"})
            await control.alter_group_configs("g2", {"consumer.session.timeout.ms": "50000"})
            await control.alter_group_configs("g2", {"consumer.session.timeout.ms": "55000"}, validate_only=True)
            with pytest.raises(InvalidConfigError):
                await control.alter_group_configs("g1", {"share.isolation.level": "dirty"})
            await control.alter_group_configs("g3", {"share.isolation.level": "read_committed"})
            await control.alter_group_configs("g3", {"share.isolation.level": None})
            assert control.group_configs("g3") == {} and control.group_configs("never") == {}
        finally:
            await stop_services(services)

    async def second():
        services = await start_services(tmp_path)
        try:
            control = services.control
            assert control.group_configs("g1") == {"share.auto.offset.reset": "earliest",
                                                   "share.record.lock.duration.ms": "45000"}
            assert control.group_configs("g2") == {"consumer.session.timeout.ms": "50000"}
            effective = GroupConfigs(control, services.config).effective("g1")
            assert effective.share_record_lock_duration_ms == 45000 and effective.share_auto_offset_reset == "earliest"
            await control.alter_group_configs("g1", {"share.isolation.level": "read_committed"}, replace_all=True)
            assert control.group_configs("g1") == {"share.isolation.level": "read_committed"}
        finally:
            await stop_services(services)

    asyncio.run(first())
    body = json.loads((tmp_path / METADATA_FILE).read_text())
    assert body["group_configs"] == {"g1": {"share.auto.offset.reset": "earliest",
                                            "share.record.lock.duration.ms": "45000"},
                                     "g2": {"consumer.session.timeout.ms": "50000"}}
    asyncio.run(second())


def test_the_store_reads_tables_with_and_without_group_configs(tmp_path):
    store = LocalMetadataStore(str(tmp_path), node_id=0)
    store.create_topic("t", 1, 1)
    assert "group_configs" not in json.loads((tmp_path / METADATA_FILE).read_text())  # as older tables
    store.set_group_configs("g", {"share.isolation.level": "read_committed"})
    again = LocalMetadataStore(str(tmp_path), node_id=0)
    assert dict(again.group_configs) == {"g": {"share.isolation.level": "read_committed"}} and "t" in again.topics
    body = json.loads((tmp_path / METADATA_FILE).read_text())
    body["group_configs"] = {"g": {"k": 5}}
    (tmp_path / METADATA_FILE).write_text(json.dumps(body))
    with pytest.raises(MetadataCorruptError, match="group_configs"):
        LocalMetadataStore(str(tmp_path), node_id=0)


def test_znode_names_escape_what_zookeeper_cannot_hold():
    assert znode_name("orders-app_1.v2") == "orders-app_1.v2"
    assert group_path("a/b") == "/config/groups/a%2Fb"
    assert znode_name(".") == "%2E" and znode_name("..") == "%2E%2E"
    assert znode_name("grüppe") == "gr%C3%BCppe"


# ---- the API handlers ---------------------------------------------------------------------------

class Header:
    def __init__(self, version):
        self.request_api_version = version


def inc(resource_type, name, ops, validate_only=False):
    return INC(resources=[INC.AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=[
        INC.AlterableConfig(name=k, config_operation=op, value=v) for k, (op, v) in ops.items()])],
        validate_only=validate_only)


def test_the_handlers_answer_group_resources(tmp_path):
    async def go():
        services = await start_services(tmp_path)
        try:
            ctx = RequestContext(services, Header(1), None)

            async def alter(name, ops, **kw):
                r = (await incremental_alter_configs.handle(ctx, inc(GROUP, name, ops, **kw))).responses[0]
                return r.error_code, r.error_message

            def describe(name, keys=None, version=4):
                req = DESC(resources=[DESC.DescribeConfigsResource(resource_type=GROUP, resource_name=name,
                                                                   configuration_keys=keys)],
                           include_synonyms=True, include_documentation=True)
                ctx.header.request_api_version = version
                return describe_configs.handle(ctx, req).results[0]

            assert await alter("app", {"share.record.lock.duration.ms": (SET, "40000"),
                                       "share.auto.offset.reset": (SET, "earliest")}) == (0, None)
            assert await alter("app", {"share.auto.offset.reset": (DELETE, None)}) == (0, None)
            assert await alter("app", {"consumer.session.timeout.ms": (SET, "50000")}, validate_only=True) == (0, None)
            assert services.control.group_configs("app") == {"share.record.lock.duration.ms": "40000"}
            assert await alter("app", {"share.bogus": (SET, "1")}) == (INVALID_CONFIG,
                                                                       "Unknown group config name: share.bogus")
            code, message = await alter("app", {"share.record.lock.duration.ms": (SET, "120000")})
            assert code == INVALID_CONFIG and "group.share.max.record.lock.duration.ms" in message
            for op in (APPEND, SUBTRACT):
                code, message = await alter("app", {"share.isolation.level": (op, "read_committed")})
                assert code == INVALID_CONFIG and "not allowed" in message
            assert (await alter("", {"share.isolation.level": (SET, "read_committed")}))[0] == INVALID_REQUEST

            res = describe("app")
            assert res.error_code == 0 and res.resource_type == GROUP
            rows = {c.name: c for c in res.configs}
            assert set(rows) == set(GROUP_KEYS)
            lock = rows["share.record.lock.duration.ms"]
            assert (lock.value, lock.config_source, lock.read_only, lock.is_default, lock.config_type) == \
                ("40000", GROUP_CONFIG, False, False, 3)
            assert [(s.name, s.value, s.source) for s in lock.synonyms] == [
                ("share.record.lock.duration.ms", "40000", GROUP_CONFIG),
                ("group.share.record.lock.duration.ms", "30000", DEFAULT_CONFIG)]
            assert rows["share.isolation.level"].config_type == 2 and rows["share.isolation.level"].documentation
            assert rows["consumer.session.timeout.ms"].config_source == DEFAULT_CONFIG
            assert rows["consumer.session.timeout.ms"].is_default
            v0 = {c.name: c for c in describe("never-seen", version=0).configs}
            assert v0["share.record.lock.duration.ms"].value == "30000"
            assert v0["share.record.lock.duration.ms"].is_default
            only = describe("app", keys=["share.session.timeout.ms"])
            assert [c.name for c in only.configs] == ["share.session.timeout.ms"]
            empty = describe("")
            assert (empty.error_code, empty.error_message) == (INVALID_REQUEST, "Group name must not be empty")

            legacy = ALTER(resources=[ALTER.AlterConfigsResource(resource_type=GROUP, resource_name="app", configs=[
                ALTER.AlterableConfig(name="share.isolation.level", value="read_committed")])], validate_only=False)
            r = (await alter_configs.handle(ctx, legacy)).responses[0]
            assert r.error_code == 0
            assert services.control.group_configs("app") == {"share.isolation.level": "read_committed"}
        finally:
            await stop_services(services)

    asyncio.run(go())
