"""Every Kafka 3.8 topic and broker config is accepted (deprecated ones included), and described as
Kafka describes it: type, default, sensitivity, and what it does here."""
import pytest

from pybroker import config_catalog as catalog
from pybroker.config import SUPPORTED, BrokerConfig, ConfigError
from pybroker.controller.topic_rules import describe_topic_configs
from pybroker.log.config import LONG_MAX, TOPIC_NAMES, LogConfig

# Kafka 3.8's topic configs and their defaults (LogConfig.configKeys() of the 3.8.0 release)
KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete", "compression.gzip.level": "-1", "compression.lz4.level": "9",
    "compression.type": "producer", "compression.zstd.level": "3", "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000", "flush.messages": str(LONG_MAX), "flush.ms": str(LONG_MAX),
    "follower.replication.throttled.replicas": "", "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "", "local.retention.bytes": "-2", "local.retention.ms": "-2",
    "max.compaction.lag.ms": str(LONG_MAX), "max.message.bytes": "1048588", "message.downconversion.enable": "true",
    "message.format.version": "3.0-IV1", "message.timestamp.after.max.ms": str(LONG_MAX),
    "message.timestamp.before.max.ms": str(LONG_MAX), "message.timestamp.difference.max.ms": str(LONG_MAX),
    "message.timestamp.type": "CreateTime", "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1", "preallocate": "false", "remote.storage.enable": "false", "retention.bytes": "-1",
    "retention.ms": "604800000", "segment.bytes": "1073741824", "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0", "segment.ms": "604800000", "unclean.leader.election.enable": "false",
}
# a value other than the default that Kafka takes, for each topic key
OTHER_VALUES = {
    "cleanup.policy": "compact,delete", "compression.gzip.level": "5", "compression.lz4.level": "12",
    "compression.type": "zstd", "compression.zstd.level": "-5", "delete.retention.ms": "1000",
    "file.delete.delay.ms": "0", "flush.messages": "100", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1,1:2", "index.interval.bytes": "100",
    "leader.replication.throttled.replicas": "*", "local.retention.bytes": "-1", "local.retention.ms": "1000",
    "max.compaction.lag.ms": "100000", "max.message.bytes": "2000", "message.downconversion.enable": "false",
    "message.format.version": "0.10.2", "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "7200000", "message.timestamp.difference.max.ms": "60000",
    "message.timestamp.type": "LogAppendTime", "min.cleanable.dirty.ratio": "0.9", "min.compaction.lag.ms": "10",
    "min.insync.replicas": "2", "preallocate": "true", "remote.storage.enable": "false", "retention.bytes": "1000000",
    "retention.ms": "-1", "segment.bytes": "1000000", "segment.index.bytes": "4096",
    "segment.jitter.ms": "10", "segment.ms": "60000", "unclean.leader.election.enable": "true",
}
# keys whose Kafka default this broker cannot take, and why
UNTAKEN_DEFAULTS = {"broker.id": "-1 asks Kafka to generate an id", "node.id": "-1: no id",
                    "process.roles": "only a combined broker,controller node", "sasl.enabled.mechanisms": "no GSSAPI"}


class Record:
    def __init__(self, configs):
        self.configs = configs


def test_the_topic_list_is_kafkas():
    """Kafka's keys exactly, plus pybroker's own extension keys (catalog.PYBROKER_TOPIC), none of them Kafka's."""
    assert set(catalog.KAFKA_TOPIC) == set(KAFKA_TOPIC_DEFAULTS) == set(OTHER_VALUES)
    assert not set(catalog.PYBROKER_TOPIC) & set(KAFKA_TOPIC_DEFAULTS)
    assert set(catalog.TOPIC) == set(TOPIC_NAMES.values()) == set(KAFKA_TOPIC_DEFAULTS) | set(catalog.PYBROKER_TOPIC)


def test_every_topic_key_described_with_kafkas_default():
    described = {k: (v, overridden) for k, v, overridden in describe_topic_configs(Record({}), LogConfig())}
    kafkas = {k: row for k, row in described.items() if k not in catalog.PYBROKER_TOPIC}
    assert kafkas == {k: (v, False) for k, v in KAFKA_TOPIC_DEFAULTS.items()}
    assert set(described) - set(kafkas) == set(catalog.PYBROKER_TOPIC)


@pytest.mark.parametrize("key", sorted(KAFKA_TOPIC_DEFAULTS))
def test_every_topic_key_is_taken_and_kept(key):
    for value in (KAFKA_TOPIC_DEFAULTS[key], OTHER_VALUES[key]):
        described = {k: (v, o) for k, v, o in describe_topic_configs(Record({key: value}), LogConfig())}
        assert described[key] == (value, True)
    kind, doc = catalog.TOPIC[key]
    assert kind in catalog.CONFIG_TYPES and doc.endswith(".")


def test_difference_max_ms_stands_for_the_bounds_left_at_their_default():
    only = LogConfig.from_properties({"message.timestamp.difference.max.ms": "1000"})
    assert only.timestamp_bounds == (1000, 1000)
    assert only.message_timestamp_before_max_ms == only.message_timestamp_after_max_ms == LONG_MAX  # as described
    mixed = LogConfig.from_properties({"message.timestamp.difference.max.ms": "1000",
                                       "message.timestamp.after.max.ms": "50"})
    assert mixed.timestamp_bounds == (1000, 50)
    broker = LogConfig.from_properties({"log.message.timestamp.difference.max.ms": "7"})
    assert broker.timestamp_bounds == (7, 7)
    assert LogConfig().timestamp_bounds is None
    doc = catalog.TOPIC["message.timestamp.difference.max.ms"][1]
    assert "Deprecated" in doc and "message.timestamp.before.max.ms" in doc
    assert "ignored" in catalog.TOPIC["message.format.version"][1]


def test_topic_values_get_kafkas_errors():
    with pytest.raises(ValueError, match="Invalid value 10 for configuration compression.gzip.level"):
        LogConfig.from_properties({"compression.gzip.level": "10"})
    with pytest.raises(ValueError, match="Expected value to be either true or false"):
        LogConfig.from_properties({"preallocate": "yes"})
    with pytest.raises(ValueError, match="Tiered Storage functionality is disabled"):
        LogConfig.from_properties({"remote.storage.enable": "true"})


def test_the_broker_list_is_kafkas():
    # KafkaConfig.configDef of 3.8.0, internal keys included, and Kafka 4.2's group.share.*, group.streams.*,
    # share.coordinator.* and share.fetch.* keys (none of them a 3.8 key)
    assert len(catalog.KAFKA_42_KEYS) == 38
    assert len(catalog.BROKER) == 313 + 38
    assert catalog.BROKER["group.share.record.lock.duration.ms"] == ("INT", catalog.READ_ONLY, "30000", False)
    assert catalog.BROKER["share.fetch.max.fetch.records"].internal
    assert set(catalog.DYNAMIC) >= {"message.max.bytes", "log.retention.ms", "num.io.threads", "ssl.keystore.location",
                                    "leader.replication.throttled.rate", "log.message.timestamp.before.max.ms"}
    assert catalog.BROKER["log.dirs"].mode == catalog.READ_ONLY
    assert catalog.BROKER["ssl.keystore.location"].mode == catalog.PER_BROKER
    assert catalog.BROKER["log.retention.ms"].mode == catalog.CLUSTER_WIDE
    assert catalog.BROKER["unstable.api.versions.enable"].internal


@pytest.mark.parametrize("key", sorted(k for k, v in catalog.BROKER.items() if v.default is not None))
def test_every_broker_key_takes_kafkas_default(key):
    if key in UNTAKEN_DEFAULTS:
        with pytest.raises(ConfigError):
            BrokerConfig.from_properties({key: catalog.BROKER[key].default})
        return
    c = BrokerConfig.from_properties({key: catalog.BROKER[key].default})
    described = c.describe_all()
    if not catalog.BROKER[key].internal:
        value, is_default = described[key]
        assert is_default is False and (value is not None or catalog.BROKER[key].default == "")
    assert key not in c.ignored or key not in SUPPORTED


def test_ignored_broker_keys_are_type_checked_and_documented():
    with pytest.raises(ConfigError, match="Invalid value many for configuration num.io.threads: Not a number of "
                                          "type INT"):
        BrokerConfig.from_properties({"num.io.threads": "many"})
    with pytest.raises(ConfigError, match="Expected value to be either true or false"):
        BrokerConfig.from_properties({"remote.log.storage.system.enable": "maybe"})
    with pytest.raises(ConfigError, match="unknown config key 'num.io.thread'"):
        BrokerConfig.from_properties({"num.io.thread": "8"})
    assert catalog.broker_documentation("num.io.threads", False) == \
        "Accepted and ignored: requests are handled on the event loop, not a thread pool."
    assert "tiered storage" in catalog.broker_documentation("remote.log.reader.threads", False)
    assert catalog.broker_documentation("num.partitions", True) == "Applied by this broker."
    assert catalog.broker_documentation("log.retention.ms", True, "retention.ms").startswith(
        "Broker default of the topic config retention.ms")


def test_describe_all_lists_every_kafka_key_with_kafkas_defaults():
    d = BrokerConfig.from_properties({}).describe_all()
    public = {k for k, v in catalog.BROKER.items() if not v.internal}
    assert public <= set(d)
    assert d["num.io.threads"] == ("8", True) and d["queued.max.requests"] == ("500", True)
    assert d["log.roll.jitter.hours"] == ("0", True)
    assert catalog.is_sensitive(catalog.BROKER["ssl.keystore.password"].type)
    assert not catalog.is_sensitive(catalog.BROKER["ssl.keystore.location"].type)


def test_log_roll_jitter_hours_sets_the_jitter():
    assert BrokerConfig.from_properties({"log.roll.jitter.hours": "2"}).log.segment_jitter_ms == 7_200_000
