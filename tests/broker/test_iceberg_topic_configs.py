"""A real broker takes pybroker's own topic configs iceberg.* like any topic config: CreateTopics,
IncrementalAlterConfigs and AlterConfigs set them (bad values answered INVALID_CONFIG in Kafka's
words), DescribeConfigs shows them with their defaults, types and documentation, and the
``pybroker topics`` / ``pybroker configs`` tools pass them through."""
import subprocess
import sys

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from pybroker.protocol.messages import REQUESTS
from tests.broker import ROOT, BrokerProcess
from tests.kafka_wire import WireClient

ALTER, DESC = REQUESTS[33], REQUESTS[32]
TOPIC_RESOURCE = 2
INVALID_CONFIG = 40
DEADLINE = 30
KEYS = ("iceberg.mode", "iceberg.partition.spec", "iceberg.target.lag.ms", "iceberg.invalid.record.action")
DEFAULTS = {"iceberg.mode": "disabled", "iceberg.partition.spec": "hour(kafka.timestamp)",
            "iceberg.target.lag.ms": "60000", "iceberg.invalid.record.action": "dlq_table"}
TYPES = {"iceberg.mode": 2, "iceberg.partition.spec": 2, "iceberg.target.lag.ms": 5,  # STRING, LONG
         "iceberg.invalid.record.action": 2}
BAD_MODE = ("Invalid value yes for configuration iceberg.mode: String must be one of: disabled, key_value, "
            "value_schema_id_prefix, value_schema_latest")


@pytest.fixture(scope="module")
def iceberg_broker(tmp_path_factory):
    """A broker of this module's own: its topics with iceberg.mode set get this broker's table writer."""
    b = BrokerProcess(str(tmp_path_factory.mktemp("iceberg-configs") / "data")).start()
    yield b
    try:
        b.stop()
    finally:
        b.close()


def described(port: int, topic: str) -> dict:
    """{key: (value, config_source, read_only, config_type, documentation)} of the iceberg keys, v4."""
    req = DESC(resources=[DESC.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=topic,
                                                       configuration_keys=None)],
               include_synonyms=True, include_documentation=True)
    with WireClient(port) as w:
        res = w.request(req, 4).results[0]
    assert res.error_code == 0, res.error_message
    return {c.name: (c.value, c.config_source, c.read_only, c.config_type, c.documentation)
            for c in res.configs if c.name in KEYS}


def kafka_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(DEADLINE)
    return info.value.args[0]


def test_create_alter_and_describe_through_the_admin_client(iceberg_broker):
    ad = AdminClient({"bootstrap.servers": iceberg_broker.bootstrap})
    topic = "iceberg-orders"
    created = {"iceberg.mode": "key_value", "iceberg.partition.spec": "bucket(4, kafka.key), day(kafka.timestamp)",
               "iceberg.target.lag.ms": "5000"}
    ad.create_topics([NewTopic(topic, 2, 1, config=created)])[topic].result(DEADLINE)

    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = ad.describe_configs([res])[res].result(DEADLINE)
    assert {k: (entries[k].value, entries[k].is_default, entries[k].is_read_only) for k in KEYS} == {
        **{k: (v, False, False) for k, v in created.items()},
        "iceberg.invalid.record.action": ("dlq_table", True, False)}
    rows = described(iceberg_broker.port, topic)
    for key in KEYS:
        value, source, read_only, kind, doc = rows[key]
        assert (source, read_only, kind) == (1 if key in created else 5, False, TYPES[key])  # dynamic topic / default
        assert doc.startswith("pybroker's own: ") and len(doc) > 60

    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("iceberg.mode", "value_schema_id_prefix", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("iceberg.invalid.record.action", "drop", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("iceberg.target.lag.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    ad.incremental_alter_configs([change])[change].result(DEADLINE)
    rows = described(iceberg_broker.port, topic)
    assert {k: rows[k][:2] for k in KEYS} == {
        "iceberg.mode": ("value_schema_id_prefix", 1), "iceberg.partition.spec": (created["iceberg.partition.spec"], 1),
        "iceberg.target.lag.ms": ("60000", 5), "iceberg.invalid.record.action": ("drop", 1)}

    plain = "iceberg-plain"  # a topic without overrides describes every default
    ad.create_topics([NewTopic(plain, 1, 1)])[plain].result(DEADLINE)
    rows = described(iceberg_broker.port, plain)
    assert {k: rows[k][:3] for k in KEYS} == {k: (v, 5, False) for k, v in DEFAULTS.items()}


def test_bad_values_answer_invalid_config_with_kafkas_message(iceberg_broker):
    ad = AdminClient({"bootstrap.servers": iceberg_broker.bootstrap})
    err = kafka_error(ad.create_topics([NewTopic("iceberg-bad", 1, 1, config={"iceberg.mode": "yes"})])["iceberg-bad"])
    assert err.code() == KafkaError.INVALID_CONFIG and err.str() == BAD_MODE
    err = kafka_error(ad.create_topics([NewTopic("iceberg-bad", 1, 1, config={
        "iceberg.partition.spec": "hours(kafka.timestamp)"})])["iceberg-bad"])
    assert err.code() == KafkaError.INVALID_CONFIG
    assert err.str().startswith("Invalid value hours(kafka.timestamp) for configuration iceberg.partition.spec: "
                                "unknown transform 'hours'")
    assert "iceberg-bad" not in ad.list_topics(timeout=DEADLINE).topics

    topic = "iceberg-kept"
    ad.create_topics([NewTopic(topic, 1, 1, config={"iceberg.target.lag.ms": "2000"})])[topic].result(DEADLINE)
    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("iceberg.target.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    err = kafka_error(ad.incremental_alter_configs([change])[change])
    assert err.code() == KafkaError.INVALID_CONFIG
    assert err.str() == "Invalid value 0 for configuration iceberg.target.lag.ms: Value must be at least 1"

    req = ALTER(resources=[ALTER.AlterConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=topic, configs=[
        ALTER.AlterableConfig(name="iceberg.invalid.record.action", value="skip")])], validate_only=False)
    with WireClient(iceberg_broker.port) as w:
        r = w.request(req, 1).responses[0]
    assert (r.error_code, r.error_message) == (INVALID_CONFIG, "Invalid value skip for configuration "
                                                               "iceberg.invalid.record.action: String must be one "
                                                               "of: dlq_table, drop")
    assert described(iceberg_broker.port, topic)["iceberg.target.lag.ms"][:2] == ("2000", 1)  # nothing changed


def tool(*args) -> str:
    r = subprocess.run([sys.executable, "-m", "pybroker", *args], cwd=ROOT, capture_output=True, timeout=60)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout.decode()


def test_topics_and_configs_tools(iceberg_broker):
    bs = ("--bootstrap-server", iceberg_broker.bootstrap)
    spec = "(bucket(8, kafka.key), hour(kafka.timestamp))"
    assert tool("topics", *bs, "--create", "--topic", "iceberg-cli", "--partitions", "1", "--replication-factor",
                "1", "--config", "iceberg.mode=key_value", "--config",
                f"iceberg.partition.spec={spec}") == "Created topic iceberg-cli.\n"
    rows = described(iceberg_broker.port, "iceberg-cli")
    assert rows["iceberg.mode"][:2] == ("key_value", 1)
    assert rows["iceberg.partition.spec"][:2] == (spec, 1)
    entity = ("--entity-type", "topics", "--entity-name", "iceberg-cli")
    assert tool("configs", *bs, *entity, "--alter",
                "--add-config", "iceberg.target.lag.ms=1500,iceberg.partition.spec=[day(kafka.timestamp),kafka.key]",
                "--delete-config", "iceberg.mode") == "Completed updating config for topic iceberg-cli.\n"
    shown = tool("configs", *bs, *entity, "--describe").splitlines()
    assert shown[0] == "Dynamic configs for topic iceberg-cli are:"
    assert [line.split(" sensitive=")[0].strip() for line in shown[1:]] == [
        "iceberg.partition.spec=day(kafka.timestamp),kafka.key", "iceberg.target.lag.ms=1500"]
    out = tool("topics", *bs, "--describe", "--topic", "iceberg-cli")
    assert "iceberg.target.lag.ms=1500" in out
    r = subprocess.run([sys.executable, "-m", "pybroker", "topics", *bs, "--create", "--topic", "iceberg-cli-bad",
                        "--config", "iceberg.mode=sometimes"], cwd=ROOT, capture_output=True, timeout=60)
    assert r.returncode != 0 and b"Invalid value sometimes for configuration iceberg.mode" in r.stderr
