"""The catalog side of Iceberg tables on a real SQLite catalog: schemas, partition specs, progress in
snapshot summaries, and the commit that leaves out partitions another writer moved on."""
import datetime

import pytest

pytest.importorskip("pyiceberg")
import pyarrow as pa  # noqa: E402

from pybroker.iceberg import catalog as cat  # noqa: E402
from pybroker.iceberg import rows as rowlib  # noqa: E402
from pybroker.iceberg.settings import PROGRESS_KEY, IcebergSettings  # noqa: E402


@pytest.fixture
def setup(tmp_path):
    settings = IcebergSettings(catalog_uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    return settings, cat.open_catalog(settings)


def fetched(partition_offsets):
    """Rows as the consumer's poll_batch gives them (pybroker/client/arrow.py's columns)."""
    n = len(partition_offsets)
    ts = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    return pa.table({
        "key": pa.array([b"k"] * n, pa.binary()), "value": pa.array([b"v%d" % o for _, o in partition_offsets]),
        "topic": pa.array(["t"] * n), "partition": pa.array([p for p, _ in partition_offsets], pa.int32()),
        "offset": pa.array([o for _, o in partition_offsets], pa.int64()),
        "timestamp": pa.array([ts] * n, pa.timestamp("ms", tz="UTC")),
        "timestamp_type": pa.array([0] * n, pa.int32()),
        "headers": pa.array([[{"key": "h", "value": b"x"}]] * n,
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))})


def test_commit_records_progress_and_leaves_out_moved_partitions(setup):
    settings, catalog = setup
    table = cat.load_or_create(catalog, settings, "t.with.dots", cat.table_schema("key_value"), "hour(kafka.timestamp)")
    assert table.name() == ("kafka", "t.with.dots")
    assert cat.read_progress(table) == {}
    rows = rowlib.key_value_rows(fetched([(0, 0), (0, 1), (1, 0)]))
    table, stale = cat.commit(table, rows, {0: None, 1: None}, {0: 2, 1: 1})
    assert stale == set() and cat.read_progress(table) == {0: 2, 1: 1}
    # a second writer that still believes partition 0 is empty: its partition 0 rows are left out
    other = catalog.load_table(("kafka", "t.with.dots"))
    more = rowlib.key_value_rows(fetched([(0, 0), (0, 1), (1, 1)]))
    other, stale = cat.commit(other, more, {0: None, 1: 1}, {0: 2, 1: 2})
    assert stale == {0}
    assert cat.read_progress(other) == {0: 2, 1: 2}
    offsets = sorted((r["kafka"]["partition"], r["kafka"]["offset"]) for r in other.scan().to_arrow().to_pylist())
    assert offsets == [(0, 0), (0, 1), (1, 0), (1, 1)]  # each once
    # a progress-only commit (nothing to write) still moves the summary on
    other, stale = cat.commit(other, cat.table_schema("key_value").as_arrow().empty_table(), {1: 2}, {1: 5})
    assert cat.read_progress(other) == {0: 2, 1: 5}
    assert other.current_snapshot().summary.additional_properties[PROGRESS_KEY] == '{"0": 2, "1": 5}'


def test_a_deposed_writers_commit_is_refused(setup):
    """Two handles on one table, both planning from the same snapshot: the catalog refuses the second
    (commit.retry.num-retries=0), and our check then finds the partition moved on."""
    settings, catalog = setup
    a = cat.load_or_create(catalog, settings, "t", cat.table_schema("key_value"), "")
    assert a.properties["commit.retry.num-retries"] == "0"
    b = catalog.load_table(("kafka", "t"))
    a, stale_a = cat.commit(a, rowlib.key_value_rows(fetched([(0, 0)])), {0: None}, {0: 1})
    b, stale_b = cat.commit(b, rowlib.key_value_rows(fetched([(0, 0)])), {0: None}, {0: 1})
    assert stale_a == set() and stale_b == {0}
    assert len(b.scan().to_arrow()) == 1


def test_partition_specs(setup):
    settings, catalog = setup
    schema = cat.table_schema("key_value")
    spec = cat.partition_spec("(hour(kafka.timestamp), bucket(8, kafka.partition), kafka.partition)", schema)
    assert [(f.name, str(f.transform)) for f in spec.fields] == [
        ("kafka_timestamp_hour", "hour"), ("kafka_partition_bucket_8", "bucket[8]"), ("kafka_partition", "identity")]
    assert cat.partition_spec("", schema).fields == () and cat.partition_spec("()", schema).fields == ()
    with pytest.raises(ValueError):
        cat.partition_spec("hour(no.such)", schema)
    with pytest.raises(ValueError):
        cat.partition_spec("bucket(kafka.partition)", schema)
    table = cat.load_or_create(catalog, settings, "s", schema, "hour(kafka.timestamp)")
    table = cat.align_spec(table, "day(kafka.timestamp)")
    assert [str(f.transform) for f in table.spec().fields] == ["day"]
    spec_id = table.spec().spec_id
    assert cat.align_spec(table, "day(kafka.timestamp)").spec().spec_id == spec_id  # unchanged: no new spec


def test_value_tables_keep_the_kafka_column_first(setup):
    from pyiceberg.types import LongType, NestedField, StructType
    schema = cat.table_schema("value_schema_id_prefix", StructType(NestedField(100000, "n", LongType())))
    assert [f.name for f in schema.fields] == ["kafka", "n"] and not schema.find_field("n").required
    with pytest.raises(ValueError):
        cat.table_schema("value_schema_id_prefix", StructType(NestedField(100000, "kafka", LongType())))


def test_rows_of_one_partition_are_written_as_pyiceberg_would(setup):
    """The single-partition write path gives the same files' partition values and rows as pyiceberg's
    general one, which still takes batches spanning several partitions."""
    settings, catalog = setup
    table = cat.load_or_create(catalog, settings, "hours", cat.table_schema("key_value"), "hour(kafka.timestamp)")
    hour = datetime.datetime(2026, 1, 1, 5, tzinfo=datetime.timezone.utc)

    def at(times, first):
        rows = fetched([(0, first + i) for i in range(len(times))])
        return rows.set_column(rows.schema.get_field_index("timestamp"), "timestamp",
                               pa.array(times, pa.timestamp("ms", tz="UTC")))
    one_hour = at([hour + datetime.timedelta(minutes=m) for m in (1, 2, 3)], 0)
    meta = table.metadata
    assert cat.single_partition_key(meta.spec(), meta.schema(), rowlib.key_value_rows(one_hour)) is not None
    table, _ = cat.commit(table, rowlib.key_value_rows(one_hour), {0: None}, {0: 3})
    two_hours = at([hour + datetime.timedelta(minutes=59), hour + datetime.timedelta(minutes=61)], 3)
    assert cat.single_partition_key(meta.spec(), meta.schema(), rowlib.key_value_rows(two_hours)) is None
    table, _ = cat.commit(table, rowlib.key_value_rows(two_hours), {0: 3}, {0: 5})
    files = table.inspect.files().to_pylist()
    hours_since_epoch = int(hour.timestamp() // 3600)
    assert sorted((f["partition"]["kafka_timestamp_hour"], f["record_count"]) for f in files) == \
        [(hours_since_epoch, 1), (hours_since_epoch, 3), (hours_since_epoch + 1, 1)]
    assert sorted(r["kafka"]["offset"] for r in table.scan().to_arrow().to_pylist()) == [0, 1, 2, 3, 4]
    from pyiceberg.expressions import GreaterThanOrEqual
    later = table.scan(row_filter=GreaterThanOrEqual("kafka.timestamp", (hour + datetime.timedelta(hours=1))
                                                     .isoformat())).to_arrow()
    assert [r["kafka"]["offset"] for r in later.to_pylist()] == [4]
