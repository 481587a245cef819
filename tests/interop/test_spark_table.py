"""The "pybroker" Spark source's table mode: a topic's Iceberg table (written here with pyiceberg into a
SQLite catalog) read with spark.read.format("pybroker").option("table", ...) equals pyiceberg's own scan."""
import datetime
import uuid
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.spark_fixtures import *  # noqa: F401,F403 - the shared Spark session

from pyspark_pybroker.options import OptionError  # noqa: E402 - needs spark_source on sys.path first
from pyspark_pybroker.source import PybrokerDataSource  # noqa: E402
from pyspark_pybroker.table import group_files, parse_table_options  # noqa: E402

UTC = datetime.timezone.utc
HOUR_US = 3_600_000_000
BASE_US = 1_700_000_000_000_000  # a fixed start: rows span a few hour partitions


def _catalog(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    (tmp_path / "wh").mkdir(exist_ok=True)
    catalog = SqlCatalog("pybroker", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace_if_not_exists("kafka")
    return catalog


def _options(tmp_path, table: str, **extra) -> dict:
    return {"table": table, "catalog.uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh",
            **{k: str(v) for k, v in extra.items()}}


def _topic_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import (BinaryType, IntegerType, ListType, LongType, NestedField, StringType, StructType,
                                 TimestamptzType)

    header = StructType(NestedField(101, "key", StringType(), required=False),
                        NestedField(102, "value", BinaryType(), required=False))
    kafka = StructType(NestedField(2, "partition", IntegerType(), required=True),
                       NestedField(3, "offset", LongType(), required=True),
                       NestedField(4, "timestamp", TimestamptzType(), required=True),
                       NestedField(5, "timestamp_type", IntegerType(), required=True),
                       NestedField(6, "headers", ListType(100, header, element_required=True), required=False),
                       NestedField(7, "key", BinaryType(), required=False))
    return Schema(NestedField(1, "kafka", kafka, required=True), NestedField(10, "key", BinaryType(), required=False),
                  NestedField(11, "value", BinaryType(), required=False))


def _records(table, partition: int, first: int, count: int, note: bool = False) -> pa.Table:
    """``count`` records of one partition from offset ``first``, spread over hours, some keyless,
    some with headers, one tombstone; with ``note`` also the added column."""
    rows = []
    for off in range(first, first + count):
        key = None if off % 3 == 0 else f"k{off}".encode()
        headers = [{"key": "h", "value": f"{off}".encode()}] if off % 2 else []
        stamp = datetime.datetime.fromtimestamp((BASE_US + off * HOUR_US // 2) / 1e6, UTC)
        rows.append({"kafka": {"partition": partition, "offset": off, "timestamp": stamp, "timestamp_type": 0,
                               "headers": headers, "key": key},
                     "key": key, "value": None if off == 4 else f"v{partition}-{off}".encode(),
                     **({"note": None if off % 4 == 0 else f"n{off}"} if note else {})})
    return pa.Table.from_pylist(rows, schema=table.schema().as_arrow())


def _topic_table(tmp_path):
    """kafka.orders.v1: three appends, a column added, two more appends. Returns (table, snapshot before the
    column was added)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import HourTransform
    from pyiceberg.types import StringType

    spec = PartitionSpec(PartitionField(source_id=4, field_id=1000, transform=HourTransform(),
                                        name="kafka_timestamp_hour"))
    table = _catalog(tmp_path).create_table(("kafka", "orders.v1"), schema=_topic_schema(), partition_spec=spec)
    for partition, first in ((0, 0), (1, 0), (0, 6)):
        table.append(_records(table, partition, first, 6))
    before = table.current_snapshot().snapshot_id
    with table.update_schema() as update:
        update.add_column("note", StringType())
    for partition, first in ((1, 6), (0, 12)):
        table.append(_records(table, partition, first, 5, note=True))
    return table, before


def _sorted_rows(arrow: pa.Table) -> list:
    rows = arrow.to_pylist()
    return sorted(rows, key=lambda r: (r["kafka"]["partition"], r["kafka"]["offset"]))


def _spark_rows(df) -> list:
    return _sorted_rows(df.toArrow())


def test_topic_table_reads_as_pyiceberg_does(spark, tmp_path):
    table, before = _topic_table(tmp_path)
    expected = table.scan().to_arrow()
    assert expected.num_rows == 28 and len(table.inspect.files()) > 5  # hour partitions: several files per append

    reader = spark.read.format("pybroker")
    df = reader.options(**_options(tmp_path, "kafka.orders.v1")).load()  # all files in one task
    assert df.schema.simpleString() == (
        "struct<kafka:struct<partition:int,offset:bigint,timestamp:timestamp,timestamp_type:int,"
        "headers:array<struct<key:string,value:binary>>,key:binary>,key:binary,value:binary,note:string>")
    assert not df.schema["kafka"].nullable and df.schema["note"].nullable
    sizes = table.inspect.files()["file_size_in_bytes"].to_pylist()
    split = reader.options(**_options(tmp_path, "kafka.orders.v1", **{"split-size": sum(sizes) // 3})).load()
    assert 3 <= split.rdd.getNumPartitions() <= 4 < len(sizes)  # about a third of the bytes per task, whole files
    got = _spark_rows(split)
    assert got == _sorted_rows(expected)  # row for row, nested headers and the timestamps (both UTC-aware) included
    old_rows = [r for r in got if r["kafka"]["partition"] == 0 and r["kafka"]["offset"] < 12
                or r["kafka"]["partition"] == 1 and r["kafka"]["offset"] < 6]
    assert len(old_rows) == 18 and all(r["note"] is None for r in old_rows)  # files older than the column
    assert any(r["note"] is not None for r in got)

    assert df.count() == 28
    agg = (df.where("kafka.partition = 0 AND value IS NOT NULL")
           .selectExpr("count(*) AS n", "sum(kafka.offset) AS s", "count(note) AS notes").collect()[0])
    part0 = expected.filter(pc.equal(pc.struct_field(expected["kafka"], "partition"), 0))
    part0 = part0.filter(pc.is_valid(part0["value"]))
    assert (agg.n, agg.s, agg.notes) == (part0.num_rows, pc.sum(pc.struct_field(part0["kafka"], "offset")).as_py(),
                                         pc.count(part0["note"]).as_py())
    assert agg.n == 16 and agg.notes == 3  # offsets 0-16 less the tombstone; notes at 13-15

    # an older snapshot reads with its own schema (no 'note') and rows; namespace given apart
    old = spark.read.format("pybroker").options(**_options(tmp_path, "orders.v1", namespace="kafka",
                                                           **{"snapshot-id": before})).load()
    assert "note" not in old.columns
    assert _spark_rows(old) == _sorted_rows(table.scan(snapshot_id=before).to_arrow())


def test_every_type_and_a_renamed_promoted_column(spark, tmp_path):
    from pyiceberg.schema import Schema
    from pyiceberg.types import (BooleanType, DateType, DecimalType, DoubleType, FixedType, FloatType, IntegerType,
                                 ListType, LongType, MapType, NestedField, StringType, StructType, TimestampType,
                                 TimeType, UUIDType)

    schema = Schema(
        NestedField(1, "id", IntegerType(), required=True),
        NestedField(2, "flag", BooleanType()), NestedField(3, "f", FloatType()), NestedField(4, "d", DoubleType()),
        NestedField(5, "dec", DecimalType(12, 3)), NestedField(6, "day", DateType()),
        NestedField(7, "tod", TimeType()), NestedField(8, "ntz", TimestampType()), NestedField(9, "u", UUIDType()),
        NestedField(10, "fx", FixedType(4)),
        NestedField(11, "tags", MapType(12, StringType(), 13, LongType(), value_required=False)),
        NestedField(14, "pts", ListType(15, StructType(NestedField(16, "x", IntegerType())))),
        NestedField(17, "old_name", IntegerType()))
    table = _catalog(tmp_path).create_table(("kafka", "types"), schema=schema)
    u = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")
    rows = [{"id": 1, "flag": True, "f": 1.5, "d": 2.25, "dec": Decimal("123.456"), "day": datetime.date(2024, 2, 29),
             "tod": datetime.time(13, 14, 15, 16), "ntz": datetime.datetime(2024, 1, 2, 3, 4, 5, 6),
             "u": u.bytes, "fx": b"abcd", "tags": [("a", 1), ("b", None)], "pts": [{"x": 1}, {"x": None}],
             "old_name": 7},
            {"id": 2, "flag": None, "f": None, "d": None, "dec": None, "day": None, "tod": None, "ntz": None,
             "u": None, "fx": None, "tags": None, "pts": None, "old_name": None}]
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
    with table.update_schema() as update:
        update.rename_column("old_name", "renamed")
    with table.update_schema() as update:
        update.update_column("renamed", LongType())  # int -> long promotion: old files keep int32
    df = spark.read.format("pybroker").options(**_options(tmp_path, "kafka.types")).load()
    assert df.schema.simpleString() == (
        "struct<id:int,flag:boolean,f:float,d:double,dec:decimal(12,3),day:date,tod:bigint,ntz:timestamp_ntz,"
        "u:string,fx:binary,tags:map<string,bigint>,pts:array<struct<x:int>>,renamed:bigint>")
    got = sorted(df.toArrow().to_pylist(), key=lambda r: r["id"])
    assert got[0] == {"id": 1, "flag": True, "f": 1.5, "d": 2.25, "dec": Decimal("123.456"),
                      "day": datetime.date(2024, 2, 29), "tod": ((13 * 60 + 14) * 60 + 15) * 1_000_000 + 16,
                      "ntz": datetime.datetime(2024, 1, 2, 3, 4, 5, 6), "u": str(u), "fx": b"abcd",
                      "tags": [("a", 1), ("b", None)], "pts": [{"x": 1}, {"x": None}], "renamed": 7}
    own = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    # pyiceberg 0.12 writes a null list as an empty one (its own scan reads [] too): take the file's word for it
    assert got[1] == {"id": 2, **{k: None for k in got[0] if k != "id"}, "pts": own[2]["pts"]}


def test_bad_table_name_and_options(spark, tmp_path):
    _catalog(tmp_path).create_table(("kafka", "empty"), schema=_topic_schema())
    assert spark.read.format("pybroker").options(**_options(tmp_path, "kafka.empty")).load().count() == 0
    with pytest.raises(Exception, match="no table 'missing' in namespace 'kafka'"):
        spark.read.format("pybroker").options(**_options(tmp_path, "kafka.missing")).load()
    with pytest.raises(OptionError, match="must be '<namespace>.<name>'"):
        parse_table_options(_options(tmp_path, "orders"))
    with pytest.raises(OptionError, match="unknown pybroker table option 'subscribe'"):
        parse_table_options(_options(tmp_path, "kafka.orders", subscribe="orders"))
    with pytest.raises(OptionError, match="no SQLite catalog"):
        PybrokerDataSource({"table": "kafka.t", "catalog.uri": f"sqlite:///{tmp_path}/none.db"}).schema()
    with pytest.raises(OptionError, match="reads Iceberg tables in batch only"):
        PybrokerDataSource(_options(tmp_path, "kafka.t")).streamReader(None)
    opts = parse_table_options(_options(tmp_path, "kafka.a.b", **{"catalog.s3.region": "x", "catalog.type": "REST"}))
    assert (opts.namespace, opts.name) == ("kafka", "a.b")  # split on the first dot
    assert opts.catalog["s3.region"] == "x" and opts.catalog["type"] == "rest"
    assert [p.files for p in group_files([("a", 60), ("b", 60), ("c", 200), ("d", 1)], 128)] == \
        [("a", "b"), ("c",), ("d",)]
