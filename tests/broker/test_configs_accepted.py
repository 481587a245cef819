"""A real broker takes every Kafka 3.8 topic config at CreateTopics, describes topics and itself as
Kafka does (DescribeConfigs v0..v4: types, documentation, hidden passwords), and answers broker
config changes with Kafka's rules (read-only keys refused, per-broker keys not at the cluster default)."""
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from pybroker.protocol.messages import REQUESTS
from tests.kafka_wire import WireClient
from tests.unit.test_kafka_configs import OTHER_VALUES

INC, DESC = REQUESTS[44], REQUESTS[32]
INVALID_CONFIG, INVALID_REQUEST = 40, 42
DEADLINE = 30


def inc_alter(port, name, ops):
    req = INC(resources=[INC.AlterConfigsResource(resource_type=4, resource_name=name, configs=[
        INC.AlterableConfig(name=k, config_operation=0, value=v) for k, v in ops.items()])], validate_only=True)
    with WireClient(port) as w:
        r = w.request(req, 1).responses[0]
    return r.error_code, r.error_message


def test_create_topics_with_every_topic_config_and_describe_them(shared_broker):
    topic = "every-topic-config"
    ad = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    ad.create_topics([NewTopic(topic, 1, 1, config=OTHER_VALUES)])[topic].result(DEADLINE)
    res = ConfigResource(ResourceType.TOPIC, topic)
    described = ad.describe_configs([res])[res].result(DEADLINE)
    assert {k: described[k].value for k in OTHER_VALUES} == OTHER_VALUES
    kp = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        answer = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])
        assert "0.10.2" in repr(answer) and "message.format.version" in repr(answer)
    finally:
        kp.close()


def test_describe_configs_every_version(shared_broker):
    for version in range(5):
        req = DESC(resources=[DESC.DescribeConfigsResource(resource_type=4, resource_name="",
                                                           configuration_keys=None)],
                   include_synonyms=version >= 1, include_documentation=version >= 3)
        with WireClient(shared_broker.port) as w:
            res = w.request(req, version).results[0]
        assert res.error_code == 0
        rows = {c.name: c for c in res.configs}
        assert rows["num.io.threads"].value == "8" and rows["num.io.threads"].read_only
        assert rows["ssl.keystore.password"].is_sensitive and rows["ssl.keystore.password"].value is None
        if version == 0:
            assert rows["num.io.threads"].is_default
        if version >= 3:
            assert rows["num.io.threads"].config_type == 3  # INT
            assert rows["num.io.threads"].documentation.startswith("Accepted and ignored")
            assert rows["log.retention.ms"].documentation.startswith("Broker default of the topic config")


def test_broker_config_changes_follow_kafkas_rules(shared_broker):
    code, message = inc_alter(shared_broker.port, "0", {"num.partitions": "3"})
    assert (code, message) == (INVALID_REQUEST, "Cannot update these configs dynamically: num.partitions")
    code, message = inc_alter(shared_broker.port, "0", {"ssl.keystore.location": "/k.pem"})
    assert code == INVALID_REQUEST and message.startswith("These security configs can be dynamically updated only "
                                                          "per-listener using the listener prefix")
    code, message = inc_alter(shared_broker.port, "0", {"num.io.threads": "many"})
    assert (code, message) == (INVALID_CONFIG, "Invalid value many for configuration num.io.threads: Not a number "
                                               "of type INT")
    code, message = inc_alter(shared_broker.port, "", {"listeners": "PLAINTEXT://:1"})
    assert code == INVALID_REQUEST and message.startswith("Cannot update these configs at default cluster level")
    assert inc_alter(shared_broker.port, "0", {"log.message.timestamp.difference.max.ms": "1000"}) == (0, None)


def test_inert_dynamic_and_custom_broker_keys_are_stored_and_described(broker):
    """Kafka takes a dynamic key that changes nothing here (num.io.threads) and a custom key alike:
    stored as given, described with the dynamic source, and removed again by a DELETE."""
    def alter(ops, operation=0):
        req = INC(resources=[INC.AlterConfigsResource(resource_type=4, resource_name="0", configs=[
            INC.AlterableConfig(name=k, config_operation=operation, value=v) for k, v in ops.items()])],
            validate_only=False)
        with WireClient(broker.port) as w:
            return w.request(req, 1).responses[0].error_code

    def described():
        req = DESC(resources=[DESC.DescribeConfigsResource(resource_type=4, resource_name="0",
                                                           configuration_keys=None)], include_synonyms=False)
        with WireClient(broker.port) as w:
            return {c.name: (c.value, c.config_source) for c in w.request(req, 2).results[0].configs}
    assert alter({"num.io.threads": "16", "my.team.owner": "data-eng"}) == 0
    rows = described()
    assert rows["num.io.threads"] == ("16", 2) and rows["my.team.owner"] == ("data-eng", 2)  # DYNAMIC_BROKER_CONFIG
    assert alter({"my.team.owner": None}, operation=1) == 0  # DELETE
    assert "my.team.owner" not in described()
