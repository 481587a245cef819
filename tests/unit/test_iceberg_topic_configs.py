"""pybroker's own topic configs iceberg.*: taken, checked in Kafka's words, typed and documented for
DescribeConfigs, and in step with what pybroker/iceberg does with them."""
import pytest

from pybroker import config_catalog as catalog
from pybroker.controller.metadata_store import InvalidConfigError
from pybroker.controller.topic_rules import describe_topic_configs, new_overrides
from pybroker.iceberg import settings as iceberg_settings
from pybroker.log.config import (ICEBERG_INVALID_RECORD_ACTIONS, ICEBERG_MODES, TOPIC_NAMES, LogConfig,
                                 iceberg_partition_fields)

DEFAULTS = {"iceberg.mode": "disabled", "iceberg.partition.spec": "hour(kafka.timestamp)",
            "iceberg.target.lag.ms": "60000", "iceberg.invalid.record.action": "dlq_table"}
# spec -> its fields as iceberg_partition_fields gives them
GOOD_SPECS = {
    "hour(kafka.timestamp)": [("hour", None, "kafka.timestamp")],
    "": [],
    "  ": [],
    "()": [],
    "( )": [],
    "kafka.partition": [("identity", None, "kafka.partition")],
    "identity(kafka.partition)": [("identity", None, "kafka.partition")],
    "bucket(16, kafka.key), day(kafka.timestamp)": [("bucket", 16, "kafka.key"), ("day", None, "kafka.timestamp")],
    "(truncate(4,value), kafka.partition)": [("truncate", 4, "value"), ("identity", None, "kafka.partition")],
    " ( year ( kafka.timestamp ) , void(key) ) ": [("year", None, "kafka.timestamp"), ("void", None, "key")],
    "MONTH(kafka.timestamp)": [("month", None, "kafka.timestamp")],
    "bucket(2147483647, order.customer.id)": [("bucket", 2147483647, "order.customer.id")],
}
# spec -> a piece of the reason it is refused
BAD_SPECS = {
    "hours(kafka.timestamp)": "unknown transform 'hours'",
    "hour(kafka.timestamp": "unbalanced parentheses",
    "hour(kafka.timestamp))": "unbalanced parentheses",
    "(a), (b)": "unbalanced parentheses",
    "hour(kafka.timestamp),": "a partition field is empty",
    "a,,b": "a partition field is empty",
    "bucket(kafka.key)": "bucket takes a width and a column",
    "truncate(4)": "truncate takes a width and a column",
    "hour(3, kafka.timestamp)": "hour takes one column",
    "bucket(0, kafka.key)": "must be a whole number from 1 to 2147483647",
    "bucket(-1, kafka.key)": "must be a whole number",
    "bucket(2147483648, kafka.key)": "must be a whole number",
    "bucket(x, kafka.key)": "must be a whole number",
    "bucket(١٦, kafka.key)": "must be a whole number",  # Arabic-Indic digits: not a width
    "day(kafka..timestamp)": "is not a column name",
    "day(.timestamp)": "is not a column name",
    "day()": "is not a column name",
    "kafka timestamp": "is not a column name or a transform(column)",
    "hour(day(kafka.timestamp))": "is not a column name",
    "kafka.timestamp;drop": "is not a column name",
}


class Record:
    def __init__(self, configs):
        self.configs = configs


def test_allowed_values_agree_with_the_iceberg_package():
    assert ICEBERG_MODES == iceberg_settings.MODES
    assert ICEBERG_INVALID_RECORD_ACTIONS == iceberg_settings.INVALID_RECORD_ACTIONS
    table, log = iceberg_settings.TopicTable(), LogConfig()  # the same defaults on both sides
    assert (log.iceberg_mode, log.iceberg_partition_spec, log.iceberg_target_lag_ms,
            log.iceberg_invalid_record_action) == (table.mode, table.partition_spec, table.target_lag_ms,
                                                   table.invalid_record_action)


def test_the_keys_are_pybrokers_own_topic_keys_only():
    assert set(catalog.PYBROKER_TOPIC) == set(DEFAULTS)
    assert set(DEFAULTS) <= set(TOPIC_NAMES.values()) and set(DEFAULTS) <= set(catalog.TOPIC)
    assert not set(DEFAULTS) & set(catalog.BROKER)  # no broker-level default key
    assert {k: catalog.TOPIC[k][0] for k in DEFAULTS} == {
        "iceberg.mode": "STRING", "iceberg.partition.spec": "STRING", "iceberg.target.lag.ms": "LONG",
        "iceberg.invalid.record.action": "STRING"}
    for key in DEFAULTS:
        doc = catalog.topic_documentation(key)
        assert doc.startswith("pybroker's own: ") and doc.endswith(".")
    assert "leading each partition" in catalog.topic_documentation("iceberg.mode")
    for mode in ICEBERG_MODES:
        assert mode in catalog.topic_documentation("iceberg.mode")


def test_described_with_defaults_and_overrides():
    described = {k: (v, o) for k, v, o in describe_topic_configs(Record({}), LogConfig())}
    assert {k: described[k] for k in DEFAULTS} == {k: (v, False) for k, v in DEFAULTS.items()}
    overrides = {"iceberg.mode": "value_schema_latest", "iceberg.partition.spec": "day(kafka.timestamp)",
                 "iceberg.target.lag.ms": "1000", "iceberg.invalid.record.action": "drop"}
    described = {k: (v, o) for k, v, o in describe_topic_configs(Record(overrides), LogConfig())}
    assert {k: described[k] for k in DEFAULTS} == {k: (v, True) for k, v in overrides.items()}


@pytest.mark.parametrize("mode", ICEBERG_MODES)
def test_every_mode_is_taken(mode):
    assert LogConfig.from_properties({"iceberg.mode": f" {mode} "}).iceberg_mode == mode


@pytest.mark.parametrize("key,value,message", [
    ("iceberg.mode", "KEY_VALUE", "Invalid value KEY_VALUE for configuration iceberg.mode: String must be one of: "
                                  "disabled, key_value, value_schema_id_prefix, value_schema_latest"),
    ("iceberg.mode", "", "Invalid value  for configuration iceberg.mode: String must be one of: "),
    ("iceberg.invalid.record.action", "dlq", "Invalid value dlq for configuration iceberg.invalid.record.action: "
                                             "String must be one of: dlq_table, drop"),
    ("iceberg.target.lag.ms", "0", "Invalid value 0 for configuration iceberg.target.lag.ms: Value must be at "
                                   "least 1"),
    ("iceberg.target.lag.ms", "-5", "Invalid value -5 for configuration iceberg.target.lag.ms: Value must be at "
                                    "least 1"),
    ("iceberg.target.lag.ms", "soon", "iceberg.target.lag.ms must be an integer, got 'soon'"),
    ("iceberg.partition.spec", "hours(kafka.timestamp)", "Invalid value hours(kafka.timestamp) for configuration "
                                                         "iceberg.partition.spec: unknown transform 'hours'"),
])
def test_bad_values_are_refused_in_kafkas_words(key, value, message):
    with pytest.raises(ValueError) as info:
        LogConfig.from_properties({key: value})
    assert str(info.value).startswith(message)


def test_target_lag_and_record_action_values():
    assert LogConfig.from_properties({"iceberg.target.lag.ms": "1"}).iceberg_target_lag_ms == 1
    big = LogConfig.from_properties({"iceberg.target.lag.ms": str(2**63 - 1)})
    assert big.iceberg_target_lag_ms == 2**63 - 1
    for action in ICEBERG_INVALID_RECORD_ACTIONS:
        assert LogConfig.from_properties({"iceberg.invalid.record.action": action}).iceberg_invalid_record_action \
            == action


@pytest.mark.parametrize("spec", sorted(GOOD_SPECS))
def test_good_partition_specs(spec):
    assert iceberg_partition_fields(spec) == GOOD_SPECS[spec]
    assert LogConfig.from_properties({"iceberg.partition.spec": spec}).iceberg_partition_spec == spec.strip()


@pytest.mark.parametrize("spec", sorted(BAD_SPECS))
def test_bad_partition_specs(spec):
    with pytest.raises(ValueError) as info:
        iceberg_partition_fields(spec)
    assert BAD_SPECS[spec] in str(info.value)
    with pytest.raises(ValueError) as info:
        LogConfig.from_properties({"iceberg.partition.spec": spec})
    assert str(info.value).startswith(f"Invalid value {spec.strip()} for configuration iceberg.partition.spec: ")
    assert BAD_SPECS[spec] in str(info.value)


@pytest.mark.parametrize("spec", sorted(s for s in GOOD_SPECS if "order." not in s))
def test_a_spec_taken_here_builds_the_tables_partition_spec(spec):
    """What the topic config takes, the table's creation reads into the same fields (columns of a
    key_value table)."""
    from pybroker.iceberg import catalog as table_catalog
    schema = table_catalog.table_schema("key_value")
    built = table_catalog.partition_spec(spec, schema)
    assert [(str(f.transform), schema.find_column_name(f.source_id)) for f in built.fields] == \
        [(f"{t}[{w}]" if w else t, column) for t, w, column in GOOD_SPECS[spec]]


def test_create_and_alter_answer_invalid_config_with_the_message():
    base = LogConfig()
    assert new_overrides({}, {"iceberg.mode": "key_value"}, False, base) == {"iceberg.mode": "key_value"}
    with pytest.raises(InvalidConfigError, match="^Invalid value maybe for configuration iceberg.mode: String must "
                                                 "be one of: disabled, key_value"):
        new_overrides({"iceberg.mode": "key_value"}, {"iceberg.mode": "maybe"}, False, base)
    with pytest.raises(InvalidConfigError, match="^Invalid value x for configuration iceberg.target.lag.ms: Not a "
                                                 "number of type LONG$"):
        new_overrides({}, {"iceberg.target.lag.ms": "x"}, True, base)
    with pytest.raises(InvalidConfigError, match="^Unknown topic config name: iceberg.modes$"):
        new_overrides({}, {"iceberg.modes": "key_value"}, False, base)
    kept = new_overrides({"iceberg.mode": "key_value", "iceberg.target.lag.ms": "5"}, {"iceberg.mode": None}, False,
                         base)
    assert kept == {"iceberg.target.lag.ms": "5"}  # deleted back to the default
