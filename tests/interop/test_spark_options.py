"""The "pybroker" Spark source's options, schema and offset arithmetic, checked without a broker
(the Spark-level error paths at the end use the shared session)."""
import json

import pytest

from tests.spark_fixtures import *  # noqa: F401,F403 - fixtures and helpers

from pyspark_pybroker.offsets import (  # noqa: E402 - needs spark_source on sys.path first
    OffsetRange, backlog, from_json_dict, plan_ranges, rate_limit, to_json_dict,
)
from pyspark_pybroker.options import (  # noqa: E402
    OptionError, parse_read_options, parse_write_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def opts(**extra):
    return {**BASE, **extra}


# --- options ------------------------------------------------------------------------------
def test_defaults_batch_and_stream():
    batch = parse_read_options(BASE, streaming=False)
    assert batch.starting == ("earliest",) and batch.ending == ("latest",)
    assert batch.fail_on_data_loss is True and batch.include_headers is False
    assert batch.min_partitions is None and batch.max_records_per_partition is None
    stream = parse_read_options(BASE, streaming=True)
    assert stream.starting == ("latest",) and stream.ending is None
    assert stream.max_trigger_delay_ms == 15 * 60_000


def test_short_bootstrap_alias_and_client_settings():
    o = parse_read_options({"bootstrapServers": "h1:1, h2:2", "subscribe": "a,b,a",
                            "kafka.client.id": "me", "kafka.group.id": "ignored"}, streaming=False)
    assert o.bootstrap == "h1:1,h2:2"
    assert o.subscription.topics == ("a", "b")
    assert o.client_config() == {"bootstrap.servers": "h1:1,h2:2", "client.id": "me"}


def test_option_names_are_case_insensitive():
    o = parse_read_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBE": "t",
                            "STARTINGOFFSETS": "earliest", "minpartitions": "3"}, streaming=False)
    assert o.min_partitions == 3


def test_offsets_json_and_timestamps():
    o = parse_read_options(opts(startingOffsets='{"t": {"0": 5, "1": -2}}',
                                endingOffsets='{"t": {"0": 9, "1": -1}}'), streaming=False)
    assert o.starting == ("offsets", {("t", 0): 5, ("t", 1): -2})
    assert o.ending == ("offsets", {("t", 0): 9, ("t", 1): -1})
    o = parse_read_options(opts(startingOffsetsByTimestamp='{"t": {"0": 1000}}',
                                startingOffsets="earliest"), streaming=True)
    assert o.starting == ("timestamps", {("t", 0): 1000})  # the timestamp option wins
    o = parse_read_options(opts(startingTimestamp="1000", startingOffsetsByTimestamp='{"t": {"0": 5}}'),
                           streaming=False)
    assert o.starting == ("timestamp", 1000)  # the global timestamp wins over both
    o = parse_read_options(opts(endingTimestamp="2000"), streaming=False)
    assert o.ending == ("timestamp", 2000)


def test_assign_and_pattern():
    o = parse_read_options({"bootstrapServers": "h:1", "assign": '{"b": [1, 0], "a": [2]}'},
                           streaming=False)
    assert o.subscription.kind == "assign"
    assert o.subscription.partitions == (("a", 2), ("b", 0), ("b", 1))
    o = parse_read_options({"bootstrapServers": "h:1", "subscribePattern": "ev.*"}, streaming=True)
    assert o.subscription.pattern == "ev.*"


@pytest.mark.parametrize("options, streaming, fragment", [
    ({"subscribe": "t"}, False, "'kafka.bootstrap.servers'"),
    ({"kafka.bootstrap.servers": "h:1"}, False, "'subscribe', 'subscribePattern' or 'assign'"),
    (opts(assign='{"t": [0]}'), False, "only one of"),
    (opts(subscribePattern="x"), True, "only one of"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": " , "}, False, "'subscribe' names no topics"),
    ({"kafka.bootstrap.servers": "h:1", "assign": "[0]"}, False, "'assign' must be a JSON object"),
    ({"kafka.bootstrap.servers": "h:1", "assign": '{"t": ["x"]}'}, False, "'assign'"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, False, "'subscribePattern'"),
    ({"kafka.bootstrap.servers": "nope", "subscribe": "t"}, False, "HOST:PORT"),
    ({"kafka.bootstrap.servers": "h:1", "bootstrapServers": "h:2", "subscribe": "t"}, False,
     "'bootstrapServers'"),
    (opts(startingOffsets="latest"), False, "'startingOffsets' cannot be 'latest'"),
    (opts(endingOffsets="earliest"), False, "'endingOffsets' cannot be 'earliest'"),
    (opts(startingOffsets='{"t": {"0": -1}}'), False, "-1 (latest) is not allowed"),
    (opts(endingOffsets='{"t": {"0": -2}}'), False, "-2 (earliest) is not allowed"),
    (opts(startingOffsets='{"t": {"0": -3}}'), True, "'startingOffsets'"),
    (opts(startingOffsets="soon"), True, "'startingOffsets' must be"),
    (opts(startingOffsets='{"t": {"a": 1}}'), True, "not a partition number"),
    (opts(startingOffsets='{"t": 5}'), True, "'startingOffsets'"),
    (opts(endingOffsets="latest"), True, "'endingOffsets' is for batch queries only"),
    (opts(endingTimestamp="5"), True, "'endingTimestamp' is for batch queries only"),
    (opts(startingTimestamp="-5"), False, "'startingTimestamp'"),
    (opts(startingOffsetsByTimestamp='{"t": {"0": -1}}'), False, "'startingOffsetsByTimestamp'"),
    (opts(startingOffsetsByTimestampStrategy="maybe"), False, "'startingOffsetsByTimestampStrategy'"),
    (opts(failOnDataLoss="yes"), False, "'failOnDataLoss'"),
    (opts(includeHeaders="1"), False, "'includeHeaders'"),
    (opts(minPartitions="0"), False, "'minPartitions' must be a positive integer"),
    (opts(maxRecordsPerPartition="-4"), False, "'maxRecordsPerPartition'"),
    (opts(maxOffsetsPerTrigger="many"), True, "'maxOffsetsPerTrigger' must be an integer"),
    (opts(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5"), True, "'minOffsetsPerTrigger'"),
    (opts(maxTriggerDelay="soon"), True, "'maxTriggerDelay'"),
    (opts(startingOffset="earliest"), False, "did you mean 'startingOffsets'"),
    (opts(topic="t"), False, "'topic' is a sink option"),
    (opts(path="/x"), False, "takes no path"),
    (opts(**{"kafka.auto.offset.reset": "earliest"}), False, "'kafka.auto.offset.reset'"),
    (opts(**{"kafka.key.deserializer": "x"}), False, "'kafka.key.deserializer'"),
    (opts(**{"kafka.enable.auto.commit": "true"}), True, "'kafka.enable.auto.commit'"),
    ({"kafka.bootstrap.servers": "h:1", "assign": '{"t": [0, 1]}',
      "startingOffsets": '{"t": {"0": 1}}'}, False, "missing t-1"),
])
def test_bad_read_options(options, streaming, fragment):
    with pytest.raises(OptionError) as info:
        parse_read_options(options, streaming=streaming)
    assert fragment in str(info.value)


def test_write_options():
    w = parse_write_options({"kafka.bootstrap.servers": "h:1", "topic": "out",
                             "kafka.linger.ms": "20"})
    assert w.topic == "out" and w.client_config() == {"bootstrap.servers": "h:1", "linger.ms": "20"}
    with pytest.raises(OptionError, match="'subscribe' is a source option"):
        parse_write_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})
    with pytest.raises(OptionError, match="'kafka.value.serializer'"):
        parse_write_options({"kafka.bootstrap.servers": "h:1", "kafka.value.serializer": "x"})
    with pytest.raises(OptionError, match="'kafka.bootstrap.servers'"):
        parse_write_options({"topic": "t"})


def test_java_client_keys_accepted_or_refused():
    java_read = {"kafka.max.poll.records": "500", "kafka.session.timeout.ms": "30000",
                 "kafka.heartbeat.interval.ms": "3000", "kafka.max.poll.interval.ms": "300000",
                 "kafka.request.timeout.ms": "40000", "kafka.receive.buffer.bytes": "65536",
                 "kafka.security.protocol": "PLAINTEXT", "kafka.metric.reporters": ""}
    o = parse_read_options(opts(**java_read), streaming=False)
    assert o.client_config() == {"bootstrap.servers": "127.0.0.1:9092", "request.timeout.ms": "40000",
                                 "security.protocol": "PLAINTEXT"}
    from pyspark_pybroker.fetch import read_config
    assert read_config(o)["request.timeout.ms"] == 40000  # the consumer's table accepts the rest
    w = parse_write_options({"kafka.bootstrap.servers": "h:1", "kafka.compression.zstd.level": "3",
                             "kafka.send.buffer.bytes": "131072", "kafka.acks": "1"})
    assert w.client_config() == {"bootstrap.servers": "h:1", "acks": "1"}
    for bad, fragment in [({"kafka.no.such.setting": "1"}, "no.such.setting"),
                          ({"kafka.security.protocol": "SASL_SSL"}, "sasl.mechanism"),
                          ({"kafka.sasl.jaas.config": "x"}, "sasl.jaas.config"),
                          ({"kafka.ssl.truststore.location": "/x"}, "ssl.truststore.location"),
                          ({"kafka.security.providers": "x"}, "security.providers")]:
        with pytest.raises(ValueError, match=fragment):
            read_config(parse_read_options(opts(**bad), streaming=False))
    with pytest.raises(OptionError, match="transactions"):
        parse_write_options({"kafka.bootstrap.servers": "h:1", "kafka.transactional.id": "x"})
    with pytest.raises(OptionError, match="'max.poll.records'"):  # a consumer key, not a producer's
        from pyspark_pybroker.sink import write_config
        write_config(parse_write_options({"kafka.bootstrap.servers": "h:1",
                                          "kafka.max.poll.records": "5"}))


# --- offset arithmetic --------------------------------------------------------------------
def R(p, start, end, topic="t"):
    return OffsetRange(topic, p, start, end)


def test_one_range_per_partition_and_empty_dropped():
    assert plan_ranges([R(1, 0, 10), R(0, 5, 5), R(2, 3, 4)]) == [R(1, 0, 10), R(2, 3, 4)]


def test_min_partitions_splits_in_proportion():
    # Spark's KafkaOffsetRangeCalculator example: sizes 1, 1, 8 with minPartitions 4 -> 1, 1, 2+2
    got = plan_ranges([R(0, 0, 1), R(1, 0, 1), R(2, 0, 8)], min_partitions=4)
    assert got == [R(0, 0, 1), R(1, 0, 1), R(2, 0, 4), R(2, 4, 8)]
    got = plan_ranges([R(0, 0, 100)], min_partitions=3)
    assert got == [R(0, 0, 33), R(0, 33, 66), R(0, 66, 100)]
    # enough partitions already: no split
    assert plan_ranges([R(0, 0, 100), R(1, 0, 5)], min_partitions=2) == [R(0, 0, 100), R(1, 0, 5)]


def test_max_records_per_partition_then_min_partitions():
    got = plan_ranges([R(0, 0, 10), R(1, 0, 3)], max_records_per_partition=4)
    assert got == [R(0, 0, 3), R(0, 3, 6), R(0, 6, 10), R(1, 0, 3)]
    assert all(r.size <= 4 for r in got)
    got = plan_ranges([R(0, 0, 10)], min_partitions=4, max_records_per_partition=6)
    assert len(got) >= 4 and sum(r.size for r in got) == 10
    assert [r.start for r in got] == sorted(r.start for r in got)
    assert all(a.end == b.start for a, b in zip(got, got[1:]))


def test_rate_limit_proportional():
    # t-2 is new: its start is where its log starts (looked up by the reader), here 30
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 30}
    end = {("t", 0): 100, ("t", 1): 400, ("t", 2): 50}
    got = rate_limit(84, start, end)
    assert got == {("t", 0): 20, ("t", 1): 160, ("t", 2): 34}
    assert backlog(start, got) == 84
    # a tiny share still admits one record
    got = rate_limit(10, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1})
    assert got[("t", 1)] == 1 and got[("t", 0)] == 9
    assert rate_limit(10, end, end) == end
    # a partition without a start is not silently counted from 0
    with pytest.raises(ValueError, match="t-2"):
        rate_limit(10, {("t", 0): 0}, {("t", 0): 5, ("t", 2): 50})
    with pytest.raises(ValueError, match="t-2"):
        backlog({("t", 0): 0}, {("t", 0): 5, ("t", 2): 50})


def test_offsets_json_is_canonical():
    offsets = {("b", 10): 5, ("b", 2): 7, ("a", 0): 1}
    value = to_json_dict(offsets)
    assert json.dumps(value) == '{"a": {"0": 1}, "b": {"2": 7, "10": 5}}'
    assert from_json_dict(json.loads(json.dumps(value))) == offsets


# --- through Spark: discovery, schema, errors before any task ----------------------------
def test_discovered_by_name_and_schema(spark):
    df = spark.read.format("pybroker").options(**BASE).load()
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,"
                                        "offset:bigint,timestamp:timestamp,timestampType:int>")
    assert all(f.nullable for f in df.schema.fields)
    df = spark.read.format("pybroker").options(**BASE, includeHeaders="true").load()
    assert df.schema.fields[-1].dataType.simpleString() == "array<struct<key:string,value:binary>>"


def test_explicit_registration(spark):
    from pyspark_pybroker import PybrokerDataSource

    spark.dataSource.register(PybrokerDataSource)
    assert spark.read.format("pybroker").options(**BASE).load().columns[0] == "key"


def test_user_schema_refused_unless_it_is_the_source_schema(spark, spark_broker):
    from pyspark_pybroker.schema import spark_schema

    base = read_opts(spark_broker.bootstrap, subscribe=unique_topic("none"))
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("pybroker").schema("value string").options(**base).load().collect()
    with pytest.raises(Exception, match="fixed schema"):
        sdf = spark.readStream.format("pybroker").schema("key binary, value string") \
            .options(**base).load()
        query = sdf.writeStream.format("noop").start()
        try:
            query.awaitTermination(DEADLINE)
            if query.exception() is not None:
                raise query.exception()
        finally:
            query.stop()
    same = spark.read.format("pybroker").schema(spark_schema()).options(**base).load()
    assert same.collect() == []


def test_bad_option_fails_at_load(spark):
    with pytest.raises(Exception, match="minPartitions"):
        spark.read.format("pybroker").options(**BASE, minPartitions="zero").load()
    with pytest.raises(Exception, match="subscribePattern"):
        spark.read.format("pybroker").options(**BASE, subscribePattern="x").load()


def test_batch_only_option_fails_when_planned(spark):
    df = spark.read.format("pybroker").options(**BASE, startingOffsets="latest").load()
    with pytest.raises(Exception, match="cannot be 'latest'"):
        df.count()
    sdf = spark.readStream.format("pybroker").options(**BASE, endingOffsets="latest").load()
    with pytest.raises(Exception, match="batch queries only"):
        sdf.writeStream.format("noop").start().awaitTermination(DEADLINE)


def test_write_mode_and_columns_checked(spark):
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    sink = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t"}
    with pytest.raises(Exception, match="only appends"):
        df.write.format("pybroker").options(**sink).mode("overwrite").save()
    with pytest.raises(Exception, match="Append"):  # Spark itself refuses ErrorIfExists
        df.write.format("pybroker").options(**sink).save()
    with pytest.raises(Exception, match="'value' column"):
        df.selectExpr("key").write.format("pybroker").options(**sink).mode("append").save()
    with pytest.raises(Exception, match="no topic"):
        df.write.format("pybroker").options(**{"kafka.bootstrap.servers": "127.0.0.1:9"}) \
            .mode("append").save()
    with pytest.raises(Exception, match="column 'partition' must be int"):
        df.selectExpr("value", "'x' AS partition").write.format("pybroker").options(**sink) \
            .mode("append").save()
