"""Streaming reads with spark.readStream.format("pybroker"): Trigger.AvailableNow, admission
limits, checkpoint restarts, new partitions, replays after task and query failures."""
import os

import pytest

from tests.spark_fixtures import *  # noqa: F401,F403 - fixtures and helpers

QUERY_TIMEOUT = 60  # seconds: bound on one availableNow run


def stream(spark, bootstrap, **options):
    return spark.readStream.format("pybroker").options(**read_opts(bootstrap, **options)).load()


def run_available_now(df, out: str, checkpoint: str):
    """Write ``df`` to parquet at ``out`` with Trigger.AvailableNow; the finished query."""
    query = (df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT), "the availableNow query did not finish"
    if query.exception() is not None:
        raise query.exception()
    return query


def written(spark, out: str) -> list:
    if not os.path.exists(os.path.join(out, "_spark_metadata")):
        return []
    return sorted((r["partition"], r["offset"], r["value"])
                  for r in spark.read.parquet(out).collect())


def expected_rows(counts: dict, prefix: str = "v") -> list:
    """Rows for produce_values runs: {partition: (start, count)} (offsets equal indexes)."""
    return sorted((p, i, f"{prefix}-{i}") for p, (start, n) in counts.items()
                  for i in range(start, start + n))


def input_rows(query) -> list:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_available_now_restart_and_new_partitions(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("stream"), 2)
    for p in range(2):
        produce_values(bs, topic, p, 30)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, bs, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=25)
    query = run_available_now(df, out, ckpt)
    assert written(spark, out) == expected_rows({0: (0, 30), 1: (0, 30)})
    sizes = input_rows(query)
    assert sum(sizes) == 60 and len(sizes) >= 3 and max(sizes) <= 26  # admitted ~25 per batch

    # more records and a new partition while the query is down: resumed from the checkpoint,
    # the new partition read from its beginning; nothing twice, nothing skipped
    produce_values(bs, topic, 0, 10, start=30)
    add_partitions(bs, topic, 3)
    produce_values(bs, topic, 2, 7)
    run_available_now(df, out, ckpt)
    assert written(spark, out) == expected_rows({0: (0, 40), 1: (0, 30), 2: (0, 7)})

    # nothing new: a restart writes nothing more
    run_available_now(df, out, ckpt)
    assert len(written(spark, out)) == 77


def test_starting_latest_and_json(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("latest"), 2)
    produce_values(bs, topic, 0, 5)
    produce_values(bs, topic, 1, 5)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, bs, subscribe=topic)  # streaming default: latest
    run_available_now(df, out, ckpt)
    assert written(spark, out) == []
    produce_values(bs, topic, 1, 4, start=5)
    run_available_now(df, out, ckpt)
    assert written(spark, out) == expected_rows({1: (5, 4)})

    out2, ckpt2 = str(tmp_path / "out2"), str(tmp_path / "ckpt2")
    df = stream(spark, bs, subscribe=topic, startingOffsets=f'{{"{topic}": {{"0": 3, "1": -1}}}}')
    run_available_now(df, out2, ckpt2)
    assert written(spark, out2) == expected_rows({0: (3, 2)})


def test_min_offsets_per_trigger_waits_then_gives_in(spark_broker):
    """Driven directly (the trigger clock is the reader's own): a batch waits for
    minOffsetsPerTrigger records until maxTriggerDelay has passed."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows

    from pyspark_pybroker.options import parse_read_options
    from pyspark_pybroker.stream import StreamReader

    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("minrows"), 1)
    reader = StreamReader(parse_read_options(
        read_opts(bs, subscribe=topic, startingOffsets="earliest", minOffsetsPerTrigger=20,
                  maxTriggerDelay="1h"), streaming=True))
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 0}}
        limit = reader.getDefaultReadLimit()
        assert limit == ReadMinRows(20)
        produce_values(bs, topic, 0, 5)
        first = reader.latestOffset(start, limit)  # the first trigger never waits
        assert first == {topic: {"0": 5}}
        produce_values(bs, topic, 0, 5, start=5)
        assert reader.latestOffset(first, limit) == first  # 5 < 20 and the delay has not passed
        assert reader.latestOffset(first, ReadAllAvailable()) == {topic: {"0": 10}}
        reader._last_trigger_ms -= 3_600_000  # an hour later: the delay forces a batch
        assert reader.latestOffset(first, limit) == {topic: {"0": 10}}
        produce_values(bs, topic, 0, 20, start=10)
        assert reader.latestOffset({topic: {"0": 10}}, limit) == {topic: {"0": 30}}  # enough now
        parts = reader.partitions({topic: {"0": 10}}, {topic: {"0": 30}})
        assert [(p.start, p.end) for p in parts] == [(10, 30)]
        assert reader.partitions(first, first) == []
    finally:
        reader.stop()


def test_replay_after_task_failure_and_query_restart(spark, spark_broker, tmp_path):
    from pyspark.sql.functions import udf

    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("replay"), 2)
    for p in range(2):
        produce_values(bs, topic, p, 25)
    marker = str(tmp_path / "failed-once")
    gate = str(tmp_path / "fail-query")

    @udf("string")
    def fail_once(value):
        # the first task to see offset 7 fails once (retried); while the gate file exists,
        # every attempt fails, so the query dies until the gate is removed
        if value == "v-7" and (os.path.exists(gate) or not os.path.exists(marker)):
            open(marker, "w").close()
            raise RuntimeError("injected failure")
        return value

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, bs, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=20)
    df = df.withColumn("value", fail_once(df["value"].cast("string")))
    run_available_now(df, out, ckpt)  # a task fails once and is retried with the same range
    assert os.path.exists(marker)
    assert written(spark, out) == expected_rows({0: (0, 25), 1: (0, 25)})

    # the query itself fails in its first batch; the restart replays the same offsets
    for p in range(2):
        produce_values(bs, topic, p, 10, start=25)
    produce_values(bs, topic, 0, 1, prefix="x", start=35)  # marks the end of this round
    open(gate, "w").close()
    df2 = stream(spark, bs, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=20)
    df2 = df2.withColumn("value", fail_once(df2["value"].cast("string")))
    out2, ckpt2 = str(tmp_path / "out2"), str(tmp_path / "ckpt2")
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(df2, out2, ckpt2)
    planned = [n for n in os.listdir(os.path.join(ckpt2, "offsets")) if not n.startswith(".")]
    assert planned == ["0"]  # batch 0 was planned (its offsets logged) but never committed
    os.remove(gate)
    run_available_now(df2, out2, ckpt2)
    want = expected_rows({0: (0, 35), 1: (0, 35)}) + [(0, 35, "x-35")]
    assert written(spark, out2) == sorted(want)


def test_data_loss_while_stopped(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("sloss"), 1)
    produce_values(bs, topic, 0, 10)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, bs, subscribe=topic, startingOffsets="earliest")
    run_available_now(df, out, ckpt)
    produce_values(bs, topic, 0, 10, start=10)
    delete_records(bs, topic, 0, 15)  # 10..14 were never read
    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(df, out, ckpt)
    lenient = stream(spark, bs, subscribe=topic, startingOffsets="earliest", failOnDataLoss="false")
    run_available_now(lenient, out, ckpt)
    assert written(spark, out) == expected_rows({0: (0, 10)}) + expected_rows({0: (15, 5)})


def test_topic_created_after_the_query_started(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    topic = unique_topic("later")
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, bs, subscribePattern=topic + "|" + topic + "-b")
    run_available_now(df, out, ckpt)  # nothing matches yet: an empty start
    assert written(spark, out) == []
    create_topic(bs, topic, 2)
    produce_values(bs, topic, 1, 6)
    run_available_now(df, out, ckpt)  # partitions that appear are read from their beginning
    assert written(spark, out) == expected_rows({1: (0, 6)})


def test_new_partition_starts_where_its_log_starts(spark_broker):
    """A partition that appears while the query runs is read (and rate-limited) from its log
    start, looked up on the driver; records removed before it was seen are reported as lost."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from pyspark_pybroker.metadata import DataLossError
    from pyspark_pybroker.options import parse_read_options
    from pyspark_pybroker.stream import StreamReader

    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("newpart"), 1)
    produce_values(bs, topic, 0, 10)

    def reader(**extra):
        return StreamReader(parse_read_options(
            read_opts(bs, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=10,
                      **extra), streaming=True))

    strict, lenient = reader(), reader(failOnDataLoss="false")
    try:
        start = strict.initialOffset()
        assert start == {topic: {"0": 0}}
        add_partitions(bs, topic, 2)
        produce_values(bs, topic, 1, 40)
        delete_records(bs, topic, 1, 30)  # partition 1 now starts at 30
        end = strict.latestOffset(start, ReadMaxRows(10))
        # backlogs 10 (0..9) and 10 (30..39): five each, partition 1 counted from 30, not 0
        assert end == {topic: {"0": 5, "1": 35}}
        with pytest.raises(DataLossError, match="starts at offset 30"):
            strict.partitions(start, end)
        parts = lenient.partitions(start, end)
        assert sorted((p.partition, p.start, p.end) for p in parts) == [(0, 0, 5), (1, 30, 35)]
    finally:
        strict.stop()
        lenient.stop()


def test_available_now_from_a_timestamp(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    topic = create_topic(bs, unique_topic("fromts"), 2)
    base = 1_700_000_000_000
    for p in range(2):
        produce_values(bs, topic, p, 12, base_ts=base)  # record i has timestamp base + i
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, bs, subscribe=topic, startingTimestamp=base + 7, maxOffsetsPerTrigger=6)
    run_available_now(df, out, ckpt)
    assert written(spark, out) == expected_rows({0: (7, 5), 1: (7, 5)})
    out2, ckpt2 = str(tmp_path / "out2"), str(tmp_path / "ckpt2")
    by_partition = f'{{"{topic}": {{"0": {base + 10}, "1": {base}}}}}'
    df = stream(spark, bs, subscribe=topic, startingOffsetsByTimestamp=by_partition)
    produce_values(bs, topic, 0, 2, start=12, base_ts=base)  # later, while the query is down
    run_available_now(df, out2, ckpt2)
    assert written(spark, out2) == expected_rows({0: (10, 4), 1: (0, 12)})
