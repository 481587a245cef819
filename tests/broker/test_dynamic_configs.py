"""Dynamic broker configs against real broker processes: IncrementalAlterConfigs / AlterConfigs /
DescribeConfigs on the broker resource, applied live to open logs, persisted across real restarts
(a single node's file in its log dir; a cluster's ZooKeeper), and Kafka's errors for static keys and
bad values. Also the cluster path of client quotas (ZooKeeper, watched by every broker).

The cases of the other tiers: tests/cluster/test_dynamic_configs.py.
"""

from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic, ResourceType)

from pybroker.protocol.messages import REQUESTS
from tests.kafka_wire import WireClient

INC, LEGACY, DESC = REQUESTS[44], REQUESTS[33], REQUESTS[32]
INVALID_CONFIG, INVALID_REQUEST = 40, 42
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5
DEADLINE = 30


def inc_alter(port, name, ops, version=1, validate_only=False):
    """``ops``: {key: value or None (DELETE)} on broker ``name``; (error code, message)."""
    req = INC(resources=[INC.AlterConfigsResource(resource_type=4, resource_name=name, configs=[
        INC.AlterableConfig(name=k, config_operation=1 if v is None else 0, value=v) for k, v in ops.items()])],
        validate_only=validate_only)
    with WireClient(port) as w:
        r = w.request(req, version).responses[0]
    return r.error_code, r.error_message


def describe(port, name, keys=None, synonyms=True) -> dict:
    """{key: (value, source, read_only, [(synonym value, source)])}."""
    req = DESC(resources=[DESC.DescribeConfigsResource(resource_type=4, resource_name=name,
                                                       configuration_keys=keys)], include_synonyms=synonyms)
    with WireClient(port) as w:
        res = w.request(req, 3).results[0]
    assert res.error_code == 0, res
    return {c.name: (c.value, c.config_source, c.read_only, [(s.value, s.source) for s in c.synonyms])
            for c in res.configs}


def produce_one(bootstrap, topic, size):
    """The delivery error of one ``size``-byte message, or None."""
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0})
    p.produce(topic, b"z" * size, on_delivery=lambda err, msg: errors.append(err))
    p.flush(DEADLINE)
    assert errors, "no delivery report"
    return errors[0]


def create_topic(bootstrap, name, config=None):
    ad = AdminClient({"bootstrap.servers": bootstrap})
    ad.create_topics([NewTopic(name, 1, 1, config=config or {})])[name].result(DEADLINE)


def test_log_defaults_change_live_apply_to_open_logs_and_persist(broker_factory, tmp_path):
    b = broker_factory(data_dir=str(tmp_path / "dyn"))
    create_topic(b.bootstrap, "plain")
    create_topic(b.bootstrap, "own-limit", {"max.message.bytes": "200000"})
    assert produce_one(b.bootstrap, "plain", 50_000) is None
    # the cluster-wide default and this broker's own value, as kafka-configs --entity-default / --entity-name 0
    assert inc_alter(b.port, "", {"log.retention.ms": "3600000", "message.max.bytes": "20000"}) == (0, None)
    assert inc_alter(b.port, "0", {"message.max.bytes": "10000"}) == (0, None)
    d = describe(b.port, "0", ["log.retention.ms", "message.max.bytes", "log.segment.bytes"])
    assert d["log.retention.ms"][:3] == ("3600000", DYNAMIC_DEFAULT, False)
    assert d["log.retention.ms"][3] == [("3600000", DYNAMIC_DEFAULT), ("168", DEFAULT)]  # log.retention.hours, as Kafka
    assert d["message.max.bytes"][:2] == ("10000", DYNAMIC_BROKER)
    assert d["message.max.bytes"][3] == [("10000", DYNAMIC_BROKER), ("20000", DYNAMIC_DEFAULT), ("1048588", DEFAULT)]
    assert d["log.segment.bytes"][:2] == ("1073741824", DEFAULT)
    # applied to the open log of a topic without its own value; the topic override still wins
    assert produce_one(b.bootstrap, "plain", 50_000).code() == 10  # MESSAGE_TOO_LARGE
    assert produce_one(b.bootstrap, "own-limit", 50_000) is None
    # the topic's described defaults follow the broker's
    ad = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ResourceType.TOPIC, "plain")
    topic = ad.describe_configs([res])[res].result(DEADLINE)
    assert topic["retention.ms"].value == "3600000" and topic["max.message.bytes"].value == "10000"

    b.stop()
    b.start()  # a real restart: the file in the log dir is read before the logs reopen
    d = describe(b.port, "0", ["log.retention.ms", "message.max.bytes"])
    assert d["log.retention.ms"][:2] == ("3600000", DYNAMIC_DEFAULT)
    assert d["message.max.bytes"][:2] == ("10000", DYNAMIC_BROKER)
    assert produce_one(b.bootstrap, "plain", 50_000).code() == 10
    # deleting the broker's value falls back to the default's, then to the static value
    assert inc_alter(b.port, "0", {"message.max.bytes": None}) == (0, None)
    assert describe(b.port, "0", ["message.max.bytes"])["message.max.bytes"][:2] == ("20000", DYNAMIC_DEFAULT)
    assert inc_alter(b.port, "", {"message.max.bytes": None}) == (0, None)
    assert describe(b.port, "0", ["message.max.bytes"])["message.max.bytes"][:2] == ("1048588", DEFAULT)
    assert produce_one(b.bootstrap, "plain", 50_000) is None
    b.stop()
    b.start()
    assert describe(b.port, "0", ["message.max.bytes"])["message.max.bytes"][:2] == ("1048588", DEFAULT)


def test_confluent_admin_sets_and_describes_a_broker_config(broker):
    ad = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.bytes", "123456789", incremental_operation=AlterConfigOpType.SET)])
    for fut in ad.incremental_alter_configs([res]).values():
        fut.result(DEADLINE)
    res = ConfigResource(ResourceType.BROKER, "0")
    entries = ad.describe_configs([res])[res].result(DEADLINE)
    e = entries["log.retention.bytes"]
    assert e.value == "123456789" and e.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value and not e.is_read_only


def test_static_keys_and_bad_values_get_kafkas_errors(broker):
    p = broker.port
    code, message = inc_alter(p, "0", {"log.dirs": "/x", "num.partitions": "3"})
    assert code == INVALID_REQUEST
    assert message.startswith("Cannot update these configs dynamically: log.dirs, num.partitions")
    assert inc_alter(p, "0", {"log.segment.bytes": "5"})[0] == INVALID_CONFIG
    assert inc_alter(p, "0", {"log.retention.ms": "soon"})[0] == INVALID_CONFIG
    assert inc_alter(p, "0", {"log.cleanup.policy": "compacted"})[0] == INVALID_CONFIG
    assert inc_alter(p, "0", {"log.cleaner.min.cleanable.ratio": "2"})[0] == INVALID_CONFIG
    assert inc_alter(p, "", {"leader.replication.throttled.rate": "-1"})[0] == INVALID_CONFIG
    assert inc_alter(p, "7", {"log.retention.ms": "1000"})[0] == INVALID_REQUEST  # another broker's id
    assert inc_alter(p, "0", {"log.cleanup.policy": "delete"}) == (0, None)
    assert inc_alter(p, "0", {"log.retention.ms": "1000"}, validate_only=True) == (0, None)
    d = describe(p, "0", ["log.retention.ms", "log.segment.bytes", "log.cleanup.policy"])
    assert d["log.retention.ms"][1] == DEFAULT and d["log.segment.bytes"][1] == DEFAULT  # nothing bad stored
    assert d["log.cleanup.policy"][:2] == ("delete", DYNAMIC_BROKER)
    # legacy AlterConfigs replaces the broker's whole set
    req = LEGACY(resources=[LEGACY.AlterConfigsResource(resource_type=4, resource_name="0", configs=[
        LEGACY.AlterableConfig(name="log.roll.ms", value="3600000")])], validate_only=False)
    with WireClient(p) as w:
        assert w.request(req, 1).responses[0].error_code == 0
        assert w.metadata().brokers  # the connection keeps working after the errors
    d = describe(p, "0", ["log.roll.ms", "log.cleanup.policy"])
    assert d["log.roll.ms"][:2] == ("3600000", DYNAMIC_BROKER) and d["log.cleanup.policy"][1] == DEFAULT


