"""Writes with df.write / df.writeStream .format("pybroker"), read back with confluent-kafka."""
import pytest

from tests.spark_fixtures import *  # noqa: F401,F403 - fixtures and helpers

QUERY_TIMEOUT = 60


def sink(bootstrap, **options):
    return {"kafka.bootstrap.servers": bootstrap, **{k: str(v) for k, v in options.items()}}


def records(msgs):
    return sorted((m.partition(), m.offset(), m.key(), m.value()) for m in msgs)


def test_batch_write_with_topic_option(spark, spark_broker):
    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("wr"), 3)
    df = spark.range(300).selectExpr("CAST(id AS STRING) AS key", "concat('value-', id) AS value")
    df.write.format("pybroker").options(**sink(bs, topic=topic)).mode("append").save()
    got = consume_all(bs, topic, 300)
    assert len(got) == 300
    pairs = sorted((m.key(), m.value()) for m in got)
    assert pairs == sorted((str(i).encode(), f"value-{i}".encode()) for i in range(300))
    # keyed records follow the Java partitioner (murmur2): one key, one partition
    from pybroker import core
    for m in got:
        assert m.partition() == core.client_codec.partition_for_key(m.key(), 3)


def test_topic_and_partition_columns_binary_and_null_keys(spark, spark_broker):
    bs = spark_broker.bootstrap
    a = create_topic(bs, unique_topic("wa"), 2)
    b = create_topic(bs, unique_topic("wb"), 2)
    rows = [(None if i % 5 == 0 else f"k{i}".encode(), f"v{i}".encode(), a if i % 2 else b, i % 2)
            for i in range(40)]
    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int")
    df.write.format("pybroker").options(**sink(bs)).mode("append").save()
    got_a, got_b = consume_all(bs, a, 20), consume_all(bs, b, 20)
    assert len(got_a) == len(got_b) == 20
    assert {m.partition() for m in got_a} == {1} and {m.partition() for m in got_b} == {0}
    assert sorted((m.value(), m.key()) for m in got_a + got_b) == \
        sorted((v, k) for k, v, _, _ in rows)


def test_headers_column(spark, spark_broker):
    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("wh"), 1)
    df = spark.createDataFrame(
        [("a", [("h1", bytearray(b"x")), ("h2", None)]), ("b", None), ("c", [])],
        "value string, headers array<struct<key:string,value:binary>>")
    df.write.format("pybroker").options(**sink(bs, topic=topic)).mode("append").save()
    got = {m.value(): m.headers() for m in consume_all(bs, topic, 3)}
    assert got[b"a"] == [("h1", b"x"), ("h2", None)]
    assert not got[b"b"] and not got[b"c"]


def test_round_trip_through_the_source(spark, spark_broker):
    """Rows read with the source (key, value, topic) written back to another topic."""
    bs = spark_broker.bootstrap
    src = create_topic(bs, unique_topic("src"), 2)
    dst = create_topic(bs, unique_topic("dst"), 2)
    produce_values(bs, src, 0, 25)
    produce_values(bs, src, 1, 25)
    df = spark.read.format("pybroker").options(**read_opts(bs, subscribe=src)).load()
    df.select("key", "value", "partition").write.format("pybroker") \
        .options(**sink(bs, topic=dst)).mode("append").save()
    got = consume_all(bs, dst, 50)
    assert sorted((m.partition(), m.value()) for m in got) == \
        sorted((p, f"v-{i}".encode()) for p in range(2) for i in range(25))


def test_source_dataframe_written_back_as_is(spark, spark_broker):
    """A DataFrame read with the source (every column, headers included) written back without a
    select: columns the sink does not take (offset, timestamp, ...) are ignored, headers kept.
    Runs of records sharing their headers are long enough here for the bulk path."""
    bs = spark_broker.bootstrap
    src = create_topic(bs, unique_topic("asis"), 2)
    dst = create_topic(bs, unique_topic("asis-dst"), 2)
    tagged = [("trace", b"t1"), ("empty", None)]
    for p in range(2):
        produce(bs, src, [(f"k{i}".encode(), f"p{p}-{i}".encode(), tagged if i < 50 else None, None)
                          for i in range(100)], partition=p)
    df = spark.read.format("pybroker").options(
        **read_opts(bs, subscribe=src, includeHeaders="true")).load()
    assert "offset" in df.columns and "timestamp" in df.columns
    df.write.format("pybroker").options(**sink(bs, topic=dst)).mode("append").save()
    got = consume_all(bs, dst, 200)
    assert len(got) == 200
    want = sorted((p, f"k{i}".encode(), f"p{p}-{i}".encode(), tuple(tagged) if i < 50 else ())
                  for p in range(2) for i in range(100))
    assert sorted((m.partition(), m.key(), m.value(), tuple(m.headers() or ())) for m in got) == want
    by_partition = {}
    for m in got:  # order within a partition is kept
        by_partition.setdefault(m.partition(), []).append((m.offset(), m.value()))
    for p, rows in by_partition.items():
        assert [v for _, v in sorted(rows)] == [f"p{p}-{i}".encode() for i in range(100)]


def test_stream_write_available_now(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    src = create_topic(bs, unique_topic("ssrc"), 2)
    dst = create_topic(bs, unique_topic("sdst"), 1)
    produce_values(bs, src, 0, 30)
    produce_values(bs, src, 1, 30)
    ckpt = str(tmp_path / "ckpt")

    def run():
        df = spark.readStream.format("pybroker").options(
            **read_opts(bs, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger=25)).load()
        query = (df.selectExpr("key", "value").writeStream.format("pybroker")
                 .options(**sink(bs, topic=dst)).option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(QUERY_TIMEOUT)
        assert query.exception() is None
        return query

    query = run()
    assert sum(p["numInputRows"] for p in query.recentProgress) == 60
    produce_values(bs, src, 1, 5, start=30)
    run()
    got = consume_all(bs, dst, 65)
    assert sorted(m.value() for m in got) == sorted(
        [f"v-{i}".encode() for i in range(30)] + [f"v-{i}".encode() for i in range(35)])


def test_commit_message_counts_and_offsets(spark_broker):
    import pyarrow as pa

    from pyspark_pybroker.options import parse_write_options
    from pyspark_pybroker.sink import WriteResult, produce_rows

    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("wc"), 2)
    opts = parse_write_options(sink(bs, topic=topic))
    batches = [pa.record_batch({"value": pa.array([f"x{i}" for i in range(n)]),
                                "partition": pa.array([i % 2 for i in range(n)], pa.int32())})
               for n in (7, 0, 5)]
    result = produce_rows(opts, iter(batches))
    assert isinstance(result, WriteResult) and result.rows == 12
    assert result.partitions == {(topic, 0): [0, 6, 7], (topic, 1): [0, 4, 5]}
    again = produce_rows(opts, iter(batches[:1]))
    assert again.partitions == {(topic, 0): [7, 10, 4], (topic, 1): [5, 7, 3]}


def test_bad_producer_setting_fails_before_tasks(spark, spark_broker):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="linger.ms"):
        df.write.format("pybroker").options(**sink(spark_broker.bootstrap, topic="t")) \
            .option("kafka.linger.ms", "soon").mode("append").save()
    with pytest.raises(Exception, match="fetch.max.wait.ms"):
        spark.read.format("pybroker").options(**read_opts(spark_broker.bootstrap, subscribe="t")) \
            .option("kafka.fetch.max.wait.ms", "soon").load().count()
