"""Batch reads with spark.read.format("pybroker") against a real broker, data produced by
confluent-kafka: exact offset ranges, splits, timestamps, headers, offset options, data loss."""
import time

import pytest

from tests.spark_fixtures import *  # noqa: F401,F403 - fixtures and helpers

PARTS = 3
PER_PART = 40
BASE_TS = 1_700_000_000_000  # record i of partition p has timestamp BASE_TS + 1000 * i + p


@pytest.fixture(scope="module")
def filled(spark_broker):
    """A 3-partition topic: 40 records per partition, keys, headers, one null key and one null
    value, timestamps BASE_TS + 1000 * i + p."""
    topic = create_topic(spark_broker.bootstrap, unique_topic("batch"), PARTS)
    expected = {}
    for p in range(PARTS):
        records = []
        for i in range(PER_PART):
            key = None if i == 3 else f"k{p}-{i}".encode()
            value = None if i == 4 else f"v{p}-{i}".encode()
            headers = [("seq", str(i).encode()), ("part", str(p).encode())] if i % 2 == 0 else None
            records.append((key, value, headers, BASE_TS + 1000 * i + p))
        acked = produce(spark_broker.bootstrap, topic, records, partition=p)
        for (key, value, headers, ts), (part, offset) in zip(records, acked):
            expected[(part, offset)] = (key, value, headers or [], ts)
    return topic, expected


def load(spark, bootstrap, **options):
    return spark.read.format("pybroker").options(**read_opts(bootstrap, **options)).load()


def rows_by_position(df):
    return {(r["partition"], r["offset"]): r for r in df.collect()}


def test_reads_every_record_exactly(spark, spark_broker, filled):
    topic, expected = filled
    df = load(spark, spark_broker.bootstrap, subscribe=topic)
    assert df.rdd.getNumPartitions() == PARTS  # one Spark partition per topic-partition
    got = df.selectExpr("key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts",
                        "timestampType").collect()
    assert len(got) == len(expected) == PARTS * PER_PART
    for r in got:
        key, value, _, ts = expected[(r["partition"], r["offset"])]
        assert (r["key"], r["value"], r["topic"], r["ts"], r["timestampType"]) == \
            (key, value, topic, ts, 0)


def test_timestamp_column_is_utc_instant(spark, spark_broker, filled):
    topic, _ = filled
    df = load(spark, spark_broker.bootstrap, subscribe=topic,
              startingOffsets=f'{{"{topic}": {{"0": 1, "1": 0, "2": 0}}}}',
              endingOffsets=f'{{"{topic}": {{"0": 2, "1": 0, "2": 0}}}}')
    table = df.toArrow()
    assert table.num_rows == 1
    assert table.column("timestamp").cast("int64")[0].as_py() == (BASE_TS + 1000) * 1000  # micros
    assert str(table.schema.field("timestamp").type).startswith("timestamp[us")


def test_headers_column(spark, spark_broker, filled):
    topic, expected = filled
    df = load(spark, spark_broker.bootstrap, subscribe=topic, includeHeaders="true")
    got = rows_by_position(df)
    assert len(got) == len(expected)
    for pos, r in got.items():
        headers = [(h["key"], h["value"]) for h in (r["headers"] or [])]
        assert headers == [(k, bytes(v)) for k, v in expected[pos][2]]


def test_json_offsets_read_exact_ranges(spark, spark_broker, filled):
    topic, _ = filled
    df = load(spark, spark_broker.bootstrap, subscribe=topic,
              startingOffsets=f'{{"{topic}": {{"0": 10, "1": -2, "2": 39}}}}',
              endingOffsets=f'{{"{topic}": {{"0": 17, "1": 5, "2": -1}}}}')
    got = sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())
    want = [(0, o) for o in range(10, 17)] + [(1, o) for o in range(0, 5)] + [(2, 39)]
    assert got == want


def test_earliest_latest_words(spark, spark_broker, filled):
    topic, expected = filled
    df = load(spark, spark_broker.bootstrap, subscribe=topic, startingOffsets="earliest",
              endingOffsets="latest")
    assert df.count() == len(expected)


def test_min_partitions_split(spark, spark_broker, filled):
    topic, expected = filled
    df = load(spark, spark_broker.bootstrap, subscribe=topic, minPartitions="7")
    assert df.rdd.getNumPartitions() >= 6
    got = sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())
    assert got == sorted(expected)  # each record once, none lost at a split


def test_max_records_per_partition_split(spark, spark_broker, filled):
    topic, expected = filled
    df = load(spark, spark_broker.bootstrap, subscribe=topic, maxRecordsPerPartition="15")
    assert df.rdd.getNumPartitions() == PARTS * 3  # 40 records -> 15 + 15 + 10
    sizes = df.rdd.glom().map(len).collect()
    assert max(sizes) <= 15 and sum(sizes) == len(expected)
    got = sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())
    assert got == sorted(expected)


def test_by_timestamp_bounds(spark, spark_broker, filled):
    topic, _ = filled
    # global: record i of every partition has timestamp >= BASE_TS + 1000 * i
    df = load(spark, spark_broker.bootstrap, subscribe=topic, startingTimestamp=str(BASE_TS + 30_000),
              endingTimestamp=str(BASE_TS + 35_000))
    got = sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())
    # partition 0 reaches 35_000 exactly at i=35; partitions 1, 2 at i=35 too (ts +p)
    assert got == [(p, o) for p in range(PARTS) for o in range(30, 35)]
    stamps = f'{{"{topic}": {{"0": {BASE_TS + 5_000}, "1": {BASE_TS}, "2": {BASE_TS + 39_000}}}}}'
    df = load(spark, spark_broker.bootstrap, subscribe=topic, startingOffsetsByTimestamp=stamps,
              endingOffsetsByTimestamp=f'{{"{topic}": {{"0": {BASE_TS + 7_000}, "1": {BASE_TS + 2},'
                                       f' "2": {BASE_TS + 99_000_000}}}}}')
    got = sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())
    # p0 [5, 7); p1 [0, 1) (record 1 is the first at or after BASE+2); p2 from 39 (BASE+39002),
    # its end timestamp matches no record -> the log end
    assert got == [(0, 5), (0, 6), (1, 0), (2, 39)]


def test_by_timestamp_strategy(spark, spark_broker, filled):
    topic, _ = filled
    future = str(BASE_TS + 10**9)
    df = load(spark, spark_broker.bootstrap, subscribe=topic, startingTimestamp=future)
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        df.count()
    df = load(spark, spark_broker.bootstrap, subscribe=topic, startingTimestamp=future,
              startingOffsetsByTimestampStrategy="latest")
    assert df.count() == 0


def test_offsets_must_cover_subscription(spark, spark_broker, filled):
    topic, _ = filled
    df = load(spark, spark_broker.bootstrap, subscribe=topic, startingOffsets=f'{{"{topic}": {{"0": 1}}}}')
    with pytest.raises(Exception, match=f"missing {topic}-1"):
        df.count()
    df = load(spark, spark_broker.bootstrap, subscribe=topic,
              endingOffsets=f'{{"{topic}": {{"0": 999, "1": 1, "2": 1}}}}')
    with pytest.raises(Exception, match="past the end of its log"):
        df.count()


def test_assign_and_pattern(spark, spark_broker, filled):
    topic, _ = filled
    df = load(spark, spark_broker.bootstrap, assign=f'{{"{topic}": [2]}}')
    assert sorted(r[0] for r in df.select("partition").distinct().collect()) == [2]
    assert df.count() == PER_PART
    df = load(spark, spark_broker.bootstrap, subscribePattern=topic[:-2] + ".*")
    assert df.count() == PARTS * PER_PART
    df = load(spark, spark_broker.bootstrap, assign=f'{{"{topic}": [7]}}')
    with pytest.raises(Exception, match="do\\(es\\) not exist"):
        df.count()


def test_missing_topic_reads_nothing(spark, spark_broker):
    assert load(spark, spark_broker.bootstrap, subscribe=unique_topic("absent")).count() == 0


def test_fail_on_data_loss(spark, spark_broker):
    topic = create_topic(spark_broker.bootstrap, unique_topic("loss"), 1)
    produce_values(spark_broker.bootstrap, topic, 0, 30)
    delete_records(spark_broker.bootstrap, topic, 0, 20)
    start = f'{{"{topic}": {{"0": 5}}}}'
    df = load(spark, spark_broker.bootstrap, subscribe=topic, startingOffsets=start)
    with pytest.raises(Exception, match="failOnDataLoss"):
        df.count()
    df = load(spark, spark_broker.bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert sorted(r[0] for r in df.select("offset").collect()) == list(range(20, 30))
    # earliest follows the moved log start without any loss
    assert load(spark, spark_broker.bootstrap, subscribe=topic).count() == 10


def test_no_progress_is_a_timeout_not_data_loss(spark_broker):
    """A read that gets nothing for kafkaConsumer.pollTimeoutMs while its records are still due
    fails with a timeout, even with failOnDataLoss=false (the range is never cut short)."""
    from pyspark_pybroker.fetch import FetchTimeoutError, read_range
    from pyspark_pybroker.options import parse_read_options

    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("slow"), 1)
    produce_values(bs, topic, 0, 5)
    opts = parse_read_options(read_opts(bs, subscribe=topic, failOnDataLoss="false",
                                        **{"kafkaConsumer.pollTimeoutMs": 700}), streaming=False)
    rows = []
    with pytest.raises(FetchTimeoutError, match="kafkaConsumer.pollTimeoutMs"):
        for batch in read_range(opts, topic, 0, 0, 8):  # offsets 5..7 are not there (yet)
            rows.extend(batch.column("offset").to_pylist())
    assert rows == [0, 1, 2, 3, 4]


def test_stops_inside_a_producer_batch(spark, spark_broker):
    topic = create_topic(spark_broker.bootstrap, unique_topic("mid"), 1)
    produce_values(spark_broker.bootstrap, topic, 0, 500)  # lingered into a few large batches
    df = load(spark, spark_broker.bootstrap, subscribe=topic,
              startingOffsets=f'{{"{topic}": {{"0": 123}}}}', endingOffsets=f'{{"{topic}": {{"0": 377}}}}',
              minPartitions="3")
    got = sorted(r[0] for r in df.select("offset").collect())
    assert got == list(range(123, 377))
    values = {r[0] for r in df.selectExpr("CAST(value AS STRING)").collect()}
    assert values == {f"v-{i}" for i in range(123, 377)}


def test_planning_is_repeatable(spark, spark_broker, filled):
    from pyspark_pybroker.batch import BatchReader
    from pyspark_pybroker.options import parse_read_options

    topic, _ = filled
    reader = BatchReader(parse_read_options(read_opts(spark_broker.bootstrap, subscribe=topic,
                                                      minPartitions=5), streaming=False))
    first = reader.partitions()
    time.sleep(0.01)
    assert reader.partitions() == first
    assert sum(p.end - p.start for p in first) == PARTS * PER_PART
