"""Broker config: Kafka defaults, Java Properties parsing, sources and overrides, validation errors."""
import io
import logging

import pytest

from pybroker.config import BrokerConfig, ConfigError, IGNORED, Listener, SUPPORTED
from pybroker.properties import parse_properties
from pybroker.log.config import LONG_MAX, LogConfig
from pybroker.logs import event, quote, setup_logging


def load(text: str | None = None, *overrides: str, tmp_path=None, env=None) -> BrokerConfig:
    path = None
    if text is not None:
        path = tmp_path / "server.properties"
        path.write_text(text, encoding="utf-8")
        path = str(path)
    return BrokerConfig.load(path, overrides, env={} if env is None else env)


def error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(None, overrides, env={})
    return str(info.value)


# -- defaults --------------------------------------------------------------------------------

def test_defaults_are_kafkas():
    c = BrokerConfig.load(env={})
    assert c == BrokerConfig()
    assert c.node_id == 0
    assert c.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert c.advertised_listeners == c.listeners
    assert c.log_dirs == ("./pybroker-data",)
    assert (c.num_partitions, c.default_replication_factor, c.min_insync_replicas) == (1, 1, 1)
    assert c.auto_create_topics_enable is True and c.delete_topic_enable is True
    assert c.socket_request_max_bytes == 104857600
    assert c.connections_max_idle_ms == 600000
    assert c.log_retention_check_interval_ms == 300000
    assert c.log_writeback_bytes == 8 << 20
    assert c.offsets_topic_num_partitions == 50
    assert c.offsets_retention_minutes == 10080
    assert c.group_initial_rebalance_delay_ms == 3000
    assert c.cluster_id is None and c.zookeeper_connect is None
    assert c.log_level == "INFO"
    assert c.log == LogConfig()
    assert c.log.segment_bytes == 1073741824
    assert c.log.segment_ms == 168 * 3600 * 1000
    assert c.log.retention_ms == 168 * 3600 * 1000
    assert c.log.retention_bytes == -1
    assert c.log.flush_messages == LONG_MAX
    assert c.log.index_interval_bytes == 4096
    assert c.log.segment_index_bytes == 10485760
    assert c.log.max_message_bytes == 1048588
    assert c.log.message_timestamp_type == "CreateTime"
    assert dict(c.raw) == {} and c.ignored == ()


# -- Java Properties syntax ------------------------------------------------------------------

def test_properties_separators_comments_whitespace():
    text = ("# a comment\n"
            "! another comment\n"
            "\n"
            "   \t\n"
            "a=1\n"
            "b: 2\n"
            "c 3\n"
            "  d   =   4   \n"
            "e\t:\t5\n"
            "f\n"
            "g=\n"
            "h = x=y:z\n"
            "i::j\n"
            "   # indented comment\n"
            "a=last wins\n")
    assert [(k, v) for k, v, _ in parse_properties(text)] == [
        ("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("e", "5"), ("f", ""), ("g", ""),
        ("h", "x=y:z"), ("i", ":j"), ("a", "last wins")]


def test_properties_continuation_and_escapes():
    text = ("listeners=PLAINTEXT://127.0.0.1:9092,\\\n"
            "          OTHER://127.0.0.1:9093\n"
            "two=a\\\\\n"                  # an even number of backslashes: no continuation
            "three=x\\\n"
            "# not a comment: continued\n"
            "key\\ with\\=sep = v\\tw\\u0041\n"
            "# comment ending in a backslash \\\n"
            "next=1\n"
            "trail=end\\")                 # a continuation at end of input ends the value
    got = {k: v for k, v, _ in parse_properties(text)}
    assert got == {"listeners": "PLAINTEXT://127.0.0.1:9092,OTHER://127.0.0.1:9093",
                   "two": "a\\", "three": "x# not a comment: continued",
                   "key with=sep": "v\twA", "next": "1", "trail": "end"}


def test_properties_line_numbers_and_crlf():
    entries = parse_properties("# c\r\na=1\r\n\r\nb=2\rc=3")
    assert entries == [("a", "1", 2), ("b", "2", 4), ("c", "3", 5)]


def test_properties_bad_unicode_escape_names_the_line():
    with pytest.raises(ConfigError, match=r"f:2: malformed \\uxxxx"):
        parse_properties("a=1\nb=\\u12G4\n", "f")


def test_file_then_env_then_overrides(tmp_path):
    text = "num.partitions=3\nlog.dirs = /a , /b\nnode.id=4\nlog.segment.bytes=1000\n"
    env = {"PYBROKER_CFG_NUM_PARTITIONS": "5", "PYBROKER_CFG_LOG_RETENTION_BYTES": "777",
           "PYBROKER_IMPL": "pure", "HOME": "/x"}
    c = load(text, "num.partitions=7", "log.segment.bytes = 2000 ", tmp_path=tmp_path, env=env)
    assert c.num_partitions == 7
    assert c.log_dirs == ("/a", "/b")
    assert c.node_id == 4
    assert c.log.segment_bytes == 2000
    assert c.log.retention_bytes == 777
    assert c.raw["num.partitions"] == "7" and c.raw["log.retention.bytes"] == "777"
    assert c.raw["log.dirs"] == "/a , /b"


def test_override_value_may_contain_equals():
    c = BrokerConfig.load(overrides=["zookeeper.connect=h:2181/chroot=x"], env={})
    assert c.zookeeper_connect == "h:2181/chroot=x"


@pytest.mark.parametrize("bad", ["novalue", "=5", "  =x"])
def test_malformed_override(bad):
    assert "expected KEY=VALUE" in error(bad)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        BrokerConfig.load(str(tmp_path / "nope.properties"), env={})


def test_kafka_stock_kraft_properties_load(tmp_path):
    text = """
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""
    c = load(text, tmp_path=tmp_path)
    assert c.node_id == 1
    assert c.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)  # controller listener not served
    assert c.advertised_listeners == (Listener("PLAINTEXT", "localhost", 9092),)
    assert set(c.ignored) == {"num.network.threads", "num.io.threads", "socket.send.buffer.bytes",
                              "socket.receive.buffer.bytes", "num.recovery.threads.per.data.dir"}
    assert c.transaction_state_log_replication_factor == 1 and c.transaction_state_log_min_isr == 1
    assert c.offsets_topic_replication_factor == 1 and c.inter_broker_listener.name == "PLAINTEXT"


def test_ignored_keys_are_logged_once_each(caplog):
    caplog.set_level(logging.INFO, logger="pybroker.config")
    c = BrokerConfig.load(overrides=["num.io.threads=8", "num.network.threads=3"], env={})
    assert c.ignored == ("num.io.threads", "num.network.threads")
    lines = [r.getMessage() for r in caplog.records if r.name == "pybroker.config"]
    assert len(lines) == 2 and all("ignoring config" in line for line in lines)
    assert set(IGNORED) & SUPPORTED == set()


# -- validation ------------------------------------------------------------------------------

def test_unknown_key_suggests_a_close_match(tmp_path):
    with pytest.raises(ConfigError) as info:
        load("num.partitions=1\nlog.segmnt.bytes=5\n", tmp_path=tmp_path)
    msg = str(info.value)
    assert "unknown config key 'log.segmnt.bytes'" in msg
    assert "did you mean 'log.segment.bytes'" in msg
    assert "server.properties:2" in msg and info.value.key == "log.segmnt.bytes"
    assert "unknown config key 'zzz'" in error("zzz=1") and "did you mean" not in error("zzz=1")
    # a topic-level name at broker level points at the broker-level one
    assert "did you mean 'log.retention.ms'" in error("retention.ms=5")


@pytest.mark.parametrize("item, words", [
    ("num.partitions=abc", ["num.partitions", "'abc'", "integer"]),
    ("num.partitions=0", ["num.partitions", "'0'", "at least 1"]),
    ("num.partitions=1.5", ["num.partitions", "integer"]),
    ("node.id=-1", ["node.id", "at least 0"]),
    ("node.id=99999999999", ["node.id", "between 0 and 2147483647"]),
    ("socket.request.max.bytes=0", ["socket.request.max.bytes", "at least 1"]),
    ("log.segment.bytes=13", ["log.segment.bytes", "at least 14"]),
    ("log.flush.interval.messages=0", ["log.flush.interval.messages", "at least 1"]),
    ("log.retention.bytes=x", ["log.retention.bytes", "integer"]),
    ("auto.create.topics.enable=yes", ["auto.create.topics.enable", "'yes'", "true or false"]),
    ("delete.topic.enable=1", ["delete.topic.enable", "true or false"]),
    ("log.level=LOUD", ["log.level", "'LOUD'", "DEBUG"]),
    ("log.message.timestamp.type=Now", ["log.message.timestamp.type", "CreateTime or LogAppendTime"]),
    ("cluster.id=my-cluster", ["cluster.id", "'my-cluster'", "22 characters"]),
    ("log.dirs= , ", ["log.dirs", "at least one log directory"]),
    ("log.dir=", ["log.dir", "at least one"]),
    ("listeners=localhost:9092", ["listeners", "'localhost:9092'", "NAME://host:port"]),
    ("listeners=PLAINTEXT://h:99999", ["listeners", "between 0 and 65535"]),
    ("listeners=PLAINTEXT://h:", ["listeners", "NAME://host:port"]),
    ("listeners=SSL://h:9093", ["listener SSL", "TLS", "ssl.keystore.location"]),
    ("listeners=PLAINTEXT://h:1,PLAINTEXT://h:2", ["listeners", "PLAINTEXT", "more than once"]),
    ("listeners=A://h:1", ["listeners", "no security protocol", "listener.security.protocol.map"]),
    ("listeners=PLAINTEXT://0.0.0.0:9092", ["0.0.0.0", "advertised.listeners"]),
    ("advertised.listeners=OTHER://h:1", ["advertised.listeners", "OTHER", "names no listener"]),
    ("process.roles=broker", ["process.roles", "broker,controller"]),
    ("controller.quorum.voters=1@h:9093,2@g:9093", ["controller.quorum.voters", "single voter"]),
    ("controller.quorum.voters=5@h:9093", ["controller.quorum.voters", "0@host:port"]),
    ("controller.quorum.bootstrap.servers=a:1,b:2", ["controller.quorum.bootstrap.servers", "one server"]),
    ("listener.security.protocol.map=A:TLS", ["listener.security.protocol.map", "A:TLS"]),
])
def test_validation_errors_name_key_value_and_rule(item, words):
    msg = error(item)
    for word in words:
        assert word in msg, (word, msg)


def test_conflicting_aliases_and_modes():
    assert "broker.id=2 and node.id=1 differ" in error("node.id=1", "broker.id=2")
    assert BrokerConfig.load(overrides=["broker.id=3"], env={}).node_id == 3
    assert "exclude each other" in error("process.roles=broker,controller", "zookeeper.connect=h:2181")
    assert "two listeners on h:1" in error("listeners=A://h:1,B://h:1",
                                           "listener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT")


def test_listeners():
    c = BrokerConfig.load(overrides=[
        "listeners=plaintext://:9092, INTERNAL://[::1]:0 ,EXTERNAL://0.0.0.0:19092",
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:plaintext,PLAINTEXT:PLAINTEXT",
        "advertised.listeners=PLAINTEXT://localhost:9092,EXTERNAL://broker.example:19092"], env={})
    assert c.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092), Listener("INTERNAL", "::1", 0),
                           Listener("EXTERNAL", "0.0.0.0", 19092))
    assert c.advertised_listeners == (Listener("PLAINTEXT", "localhost", 9092),
                                      Listener("EXTERNAL", "broker.example", 19092))
    assert str(c.listeners[1]) == "INTERNAL://[::1]:0"
    # an explicit 0.0.0.0 binds every interface once advertised.listeners says where to connect
    c = BrokerConfig.load(overrides=["listeners=PLAINTEXT://0.0.0.0:9092",
                                     "advertised.listeners=PLAINTEXT://10.1.2.3:9092"], env={})
    assert c.listeners[0].host == "0.0.0.0" and c.advertised_listeners[0].host == "10.1.2.3"


def test_kraft_single_node_keys_are_accepted():
    c = BrokerConfig.load(overrides=["node.id=2", "process.roles=controller, broker",
                                     "controller.quorum.voters=2@localhost:9093",
                                     "controller.quorum.bootstrap.servers=localhost:9093"], env={})
    assert c.node_id == 2


def test_topic_defaults_reach_log_config():
    c = BrokerConfig.load(overrides=[
        "log.segment.bytes=1048576", "log.roll.hours=2", "log.retention.minutes=30",
        "log.retention.hours=1", "log.retention.bytes=5000000", "log.flush.interval.messages=10",
        "log.flush.interval.ms=250", "log.index.interval.bytes=128", "log.index.size.max.bytes=4096",
        "message.max.bytes=2000000", "log.message.timestamp.type=LogAppendTime"], env={})
    assert c.log == LogConfig(segment_bytes=1048576, segment_ms=2 * 3600_000, segment_index_bytes=4096,
                              index_interval_bytes=128, retention_ms=30 * 60_000, retention_bytes=5000000,
                              flush_messages=10, flush_ms=250, max_message_bytes=2000000,
                              message_timestamp_type="LogAppendTime")


def test_roll_and_retention_precedence():
    c = BrokerConfig.load(overrides=["log.roll.ms=1000", "log.roll.hours=5", "log.retention.ms=42",
                                     "log.retention.minutes=3"], env={})
    assert c.log.segment_ms == 1000 and c.log.retention_ms == 42
    assert BrokerConfig.load(overrides=["log.retention.hours=2"], env={}).log.retention_ms == 7_200_000
    assert BrokerConfig.load(overrides=["log.retention.ms=-5"], env={}).log.retention_ms == -1
    assert BrokerConfig.load(overrides=["log.retention.hours=-1"], env={}).log.retention_ms == -1


def test_misc_values():
    c = BrokerConfig.load(overrides=["auto.create.topics.enable=FALSE", "delete.topic.enable= True ",
                                     "log.level=warn", "cluster.id=MkU3OEVBNTcwNTJENDM2Qg",
                                     "connections.max.idle.ms=-1", "log.dir=/only"], env={})
    assert c.auto_create_topics_enable is False and c.delete_topic_enable is True
    assert c.log_level == "WARNING" and c.cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    assert c.connections_max_idle_ms == -1 and c.log_dirs == ("/only",)
    c = BrokerConfig.load(overrides=["log.dir=/ignored", "log.dirs=/x,/y"], env={})
    assert c.log_dirs == ("/x", "/y")


def test_describe_covers_every_supported_key():
    d = BrokerConfig.load(env={}).describe()
    assert set(d) == set(SUPPORTED)
    assert all(is_default for _, is_default in d.values())
    assert d["num.partitions"] == ("1", True)
    assert d["listeners"] == ("PLAINTEXT://127.0.0.1:9092", True)
    assert d["log.segment.bytes"] == ("1073741824", True)
    assert d["log.retention.ms"] == (None, True)  # as Kafka: no value until set (log.retention.hours applies)
    assert d["auto.create.topics.enable"] == ("true", True)
    assert d["cluster.id"] == (None, True)
    d = BrokerConfig.load(overrides=["num.partitions=3", "log.retention.hours=1", "broker.id=7",
                                     "log.dirs=/a,/b", "delete.topic.enable=false"], env={}).describe()
    assert d["num.partitions"] == ("3", False)
    assert d["log.retention.ms"] == (None, False) and d["log.retention.hours"] == ("1", False)
    assert d["log.retention.minutes"] == (None, True)
    assert d["node.id"] == ("7", False) and d["broker.id"] == ("7", False)
    assert d["log.dirs"] == ("/a,/b", False)
    assert d["delete.topic.enable"] == ("false", False)
    assert d["min.insync.replicas"] == ("1", True)


# -- structured logging ----------------------------------------------------------------------

def test_logfmt_lines():
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        setup_logging("info", stream)
        setup_logging("DEBUG", stream)  # idempotent: still one handler
        assert sum(1 for h in root.handlers if getattr(h, "_pybroker_handler", False)) == 1
        lg = logging.getLogger("pybroker.test")
        lg.debug("hello %s", "world")
        event(lg, 'rolled "x"', topic="t", partition=0, path="/a b", level_ok=True, msg="m", empty="")
        lg.info("with extra", extra={"fields": {"n": 1.5, "none": None}})
        try:
            raise ValueError("boom")
        except ValueError:
            lg.exception("failed\nbadly")
        lines = stream.getvalue().splitlines()
        assert len(lines) == 4
        assert lines[0].startswith("ts=") and lines[0][3:27].endswith("Z") and lines[0][26] == "Z"
        assert ' level=DEBUG logger=pybroker.test msg="hello world"' in lines[0]
        assert lines[1].endswith('msg="rolled \\"x\\"" topic=t partition=0 path="/a b" level_ok=true '
                                 '_msg=m empty=""')
        assert lines[2].endswith('msg="with extra" n=1.5 none=null')
        assert 'msg="failed\\nbadly" exc="Traceback' in lines[3] and "ValueError: boom" in lines[3]
    finally:
        for h in [h for h in root.handlers if getattr(h, "_pybroker_handler", False)]:
            root.removeHandler(h)
        root.setLevel(saved[0])
    with pytest.raises(ValueError, match="LOUD"):
        setup_logging("LOUD", stream)


def test_quote():
    assert quote("plain") == "plain"
    assert quote("a b") == '"a b"' and quote("a=b") == '"a=b"' and quote("") == '""'
    assert quote('q"\\') == '"q\\"\\\\"' and quote("x\ny") == '"x\\ny"'
    assert quote(3) == "3" and quote(False) == "false" and quote(None) == "null"


def test_security_inter_broker_protocol_names_the_inter_broker_listener():
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
            'password="secret" user_broker="secret";')
    c = BrokerConfig.from_properties({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})
    assert c.inter_broker_listener.name == "SASL_PLAINTEXT"
    with pytest.raises(ConfigError, match="Only one of inter.broker.listener.name and security.inter.broker.protocol"):
        BrokerConfig.from_properties({"inter.broker.listener.name": "PLAINTEXT",
                                      "security.inter.broker.protocol": "PLAINTEXT"})
    with pytest.raises(ConfigError, match="security.inter.broker.protocol=SSL: no such advertised listener"):
        BrokerConfig.from_properties({"security.inter.broker.protocol": "SSL"})
