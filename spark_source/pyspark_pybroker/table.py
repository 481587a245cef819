"""Table mode: ``option("table", "<namespace>.<name>")`` reads an Iceberg table (a topic's, as pybroker
writes them, or any other) instead of a topic, with no Iceberg JVM jar.

The driver loads the table with pyiceberg, maps its schema to Spark's and plans the data files into
input partitions; the executors read those Parquet files with pyarrow, match their columns to the table
schema by Iceberg field id (so renamed, reordered, added and dropped columns read right) and yield Arrow
batches of exactly the Spark schema. Only tables without delete files are read (appends and rewrites).
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field

from pyspark.sql.datasource import DataSourceReader, InputPartition

from pyspark_pybroker.options import SOURCE_NAME, OptionError, _lower_map

CATALOG_TYPES = ("sql", "rest")
CATALOG_NAME = "pybroker"  # the name pybroker's brokers give the catalog (a SQL catalog keys its rows by it)
SPLIT_SIZE = 128 * 1024 * 1024  # bytes of data files per Spark task (at least one file)
BATCH_ROWS = 10_000  # rows per Arrow batch handed to Spark (Spark's own default batch size)
FIELD_ID = b"PARQUET:field_id"

_TABLE_OPTIONS = {"table", "namespace", "warehouse", "snapshot-id", "split-size"}


@dataclass(frozen=True)
class TableOptions:
    namespace: str
    name: str
    snapshot_id: int | None = None
    split_size: int = SPLIT_SIZE
    catalog_name: str = CATALOG_NAME
    catalog: dict = field(default_factory=dict, repr=False)  # load_catalog properties (may hold credentials)

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"


def parse_table_options(options) -> TableOptions:
    """Check the table-mode options; a topic-mode option or an unknown one is refused by name."""
    opts = _lower_map(options)
    for key in opts:
        if key in _TABLE_OPTIONS or key.startswith("catalog."):
            continue
        close = difflib.get_close_matches(key, sorted(_TABLE_OPTIONS | {"catalog.uri", "catalog.type"}), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else " (options of a topic read do not apply to a table)"
        raise OptionError(f"unknown {SOURCE_NAME} table option '{key}'{hint}")
    table = (opts.get("table") or "").strip()
    namespace = (opts.get("namespace") or "").strip()
    if not namespace:
        namespace, dot, table = table.partition(".")  # the first dot: topic names may hold dots
        if not dot:
            namespace, table = "", namespace
    if not namespace or not table:
        raise OptionError(f"option 'table' must be '<namespace>.<name>' (e.g. 'kafka.orders'), or the bare name "
                          f"with option 'namespace'; got '{opts.get('table')}'")
    catalog = {"type": (opts.get("catalog.type") or "sql").strip().lower()}
    if catalog["type"] not in CATALOG_TYPES:
        raise OptionError(f"option 'catalog.type' must be one of {', '.join(CATALOG_TYPES)}, "
                          f"got '{opts['catalog.type']}'")
    for key, value in opts.items():
        if key.startswith("catalog.") and key not in ("catalog.type", "catalog.name"):
            catalog[key[len("catalog."):]] = value
    if opts.get("warehouse"):
        catalog["warehouse"] = opts["warehouse"]
    if not catalog.get("uri"):
        raise OptionError("option 'catalog.uri' must be set (e.g. sqlite:////var/lib/pybroker/iceberg/catalog.db "
                          "or http://rest-catalog:8181)")
    return TableOptions(namespace=namespace, name=table, snapshot_id=_positive(opts, "snapshot-id"),
                        split_size=_positive(opts, "split-size") or SPLIT_SIZE,
                        catalog_name=(opts.get("catalog.name") or CATALOG_NAME).strip(), catalog=catalog)


def _positive(opts: dict, name: str) -> int | None:
    raw = opts.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise OptionError(f"option '{name}' must be a positive integer, got '{raw}'")
    return value


def load_table(opts: TableOptions):
    """The pyiceberg table the options name; a missing catalog or table raises OptionError."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    uri = opts.catalog["uri"]
    if opts.catalog["type"] == "sql" and uri.startswith("sqlite:///") and not os.path.exists(uri[len("sqlite:///"):]):
        raise OptionError(f"option 'catalog.uri': no SQLite catalog at {uri[len('sqlite:///'):]}")  # no empty one made
    catalog = load_catalog(opts.catalog_name, **opts.catalog)
    try:
        return catalog.load_table((opts.namespace, opts.name))
    except (NoSuchTableError, NoSuchNamespaceError):
        raise OptionError(f"option 'table': no table '{opts.name}' in namespace '{opts.namespace}' of the "
                          f"{opts.catalog['type']} catalog at {uri}") from None


def _scan(table, opts: TableOptions):
    if opts.snapshot_id is not None and table.snapshot_by_id(opts.snapshot_id) is None:
        raise OptionError(f"option 'snapshot-id': table {opts.identifier} has no snapshot {opts.snapshot_id}")
    return table.scan(snapshot_id=opts.snapshot_id)


def table_schema(options):
    """The Spark schema of the table (of the snapshot read, with 'snapshot-id')."""
    opts = parse_table_options(options)
    return spark_schema_of(_scan(load_table(opts), opts).projection())


# --- Iceberg schema -> Spark schema, and the field-id layout the executors match files with -----------------
def spark_schema_of(schema):
    from pyspark.sql.types import StructType

    return StructType(_struct_fields(schema.fields, ""))


def _struct_fields(fields, path: str) -> list:
    from pyspark.sql.types import StructField

    return [StructField(f.name, spark_type(f.field_type, path + f.name), nullable=not f.required) for f in fields]


def spark_type(t, path: str):
    """The Spark type of Iceberg type ``t`` (``path`` names the column in errors)."""
    from pyiceberg import types as it
    from pyspark.sql import types as st

    if isinstance(t, it.StructType):
        return st.StructType(_struct_fields(t.fields, path + "."))
    if isinstance(t, it.ListType):
        return st.ArrayType(spark_type(t.element_type, path + ".element"), containsNull=not t.element_required)
    if isinstance(t, it.MapType):
        return st.MapType(spark_type(t.key_type, path + ".key"), spark_type(t.value_type, path + ".value"),
                          valueContainsNull=not t.value_required)
    if isinstance(t, it.DecimalType):
        return st.DecimalType(t.precision, t.scale)
    simple = {it.BooleanType: st.BooleanType, it.IntegerType: st.IntegerType, it.LongType: st.LongType,
              it.FloatType: st.FloatType, it.DoubleType: st.DoubleType, it.DateType: st.DateType,
              it.TimeType: st.LongType,  # microseconds of the day: Spark has no time-of-day type
              it.TimestamptzType: st.TimestampType, it.TimestampType: st.TimestampNTZType,
              it.StringType: st.StringType, it.UUIDType: st.StringType, it.BinaryType: st.BinaryType,
              it.FixedType: st.BinaryType}
    for iceberg_type, spark in simple.items():
        if isinstance(t, iceberg_type):
            return spark()
    raise OptionError(f"column '{path}' has Iceberg type {t}, which the {SOURCE_NAME} table mode does not read")


def field_layout(schema) -> tuple:
    """The table schema as plain tuples for the executors (no pyiceberg there but the file IO):
    struct: ("struct", ((id, name, required, child), ...)), list: ("list", element), map: ("map", key, value),
    other: ("uuid",), ("time",) or ("cast",)."""
    return ("struct", tuple((f.field_id, f.name, f.required, _layout(f.field_type)) for f in schema.fields))


def _layout(t) -> tuple:
    from pyiceberg import types as it

    if isinstance(t, it.StructType):
        return field_layout(t)
    if isinstance(t, it.ListType):
        return ("list", _layout(t.element_type))
    if isinstance(t, it.MapType):
        return ("map", _layout(t.key_type), _layout(t.value_type))
    if isinstance(t, it.UUIDType):
        return ("uuid",)
    if isinstance(t, it.TimeType):
        return ("time",)
    return ("cast",)


# --- driver: planning --------------------------------------------------------------------------------------
class TablePartition(InputPartition):
    """One Spark task: whole data files, read in order."""

    def __init__(self, files: tuple):
        self.files = files  # paths

    def __eq__(self, other):
        return isinstance(other, TablePartition) and self.files == other.files

    def __hash__(self):
        return hash(self.files)


def group_files(files: list, split_size: int) -> list:
    """[(path, size)] in partitions of about ``split_size`` bytes each, every partition at least one file."""
    groups, current, size = [], [], 0
    for path, file_size in files:
        if current and size + file_size > split_size:
            groups.append(tuple(current))
            current, size = [], 0
        current.append(path)
        size += file_size
    if current:
        groups.append(tuple(current))
    return [TablePartition(g) for g in groups]


def plan_table_read(options, schema) -> "TableReader":
    """Load the table and plan its files; ``schema`` (what Spark planned with) must still be the table's."""
    from pyiceberg.manifest import FileFormat

    opts = parse_table_options(options)
    table = load_table(opts)
    scan = _scan(table, opts)
    projection = scan.projection()
    expected = spark_schema_of(projection)
    given = _as_struct(schema)
    if given is not None and given.simpleString() != expected.simpleString():
        raise OptionError(f"table {opts.identifier} has the schema {expected.simpleString()}, not "
                          f"{given.simpleString()} (a .schema(...) was given, or the table's schema changed while "
                          f"the query was planned: run it again)")
    files = []
    for task in scan.plan_files():
        data = task.file
        if task.delete_files:
            raise OptionError(f"table {opts.identifier}: data file {data.file_path} has {len(task.delete_files)} "
                              f"delete file(s); the {SOURCE_NAME} table mode reads only tables without deletes "
                              f"(rewrite the table's data files first, or read it with pyiceberg)")
        if data.file_format != FileFormat.PARQUET:
            raise OptionError(f"table {opts.identifier}: data file {data.file_path} is {data.file_format}; "
                              f"the {SOURCE_NAME} table mode reads Parquet files only")
        files.append((data.file_path, data.file_size_in_bytes))
    return TableReader(opts.identifier, field_layout(projection), expected, dict(table.io.properties),
                       group_files(files, opts.split_size))


def _as_struct(schema):
    if isinstance(schema, str):
        from pyspark.sql.types import _parse_datatype_string

        return _parse_datatype_string(schema)
    return schema


class TableReader(DataSourceReader):
    """Reads planned data files; picklable (plain values, the Spark schema and the file IO properties)."""

    def __init__(self, identifier: str, layout: tuple, schema, io_properties: dict, partitions: list):
        self.identifier = identifier
        self.layout = layout
        self.schema = schema
        self.io_properties = io_properties  # may hold credentials: the executors open the files with them
        self.planned = partitions

    def partitions(self):
        return self.planned

    def read(self, partition):
        if not isinstance(partition, TablePartition):
            return iter(())  # an empty table: Spark still runs one task with a placeholder
        return read_files(self.identifier, self.layout, self.schema, self.io_properties, partition.files)


# --- executors: reading files ------------------------------------------------------------------------------
def read_files(identifier: str, layout: tuple, schema, io_properties: dict, paths):
    """Arrow batches of exactly Spark's Arrow form of ``schema`` from the data files ``paths``."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema, timezone="UTC")  # what Spark checks every batch against
    target_struct = pa.struct(list(target))
    for path in paths:
        with _open(path, io_properties) as stream:
            parquet = pq.ParquetFile(stream)
            ids = _ids(parquet.schema_arrow, f"{identifier}: data file {path}")
            wanted = {f_id for f_id, *_ in layout[1]}
            columns = [parquet.schema_arrow.field(i).name for f_id, i in ids.items() if f_id in wanted]
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns, use_threads=False):
                rows = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))
                conformed = _conform(rows, layout, target_struct, f"{identifier}: data file {path}")
                yield pa.RecordBatch.from_struct_array(conformed)


def _open(path: str, io_properties: dict):
    """A seekable file: local ones with pyarrow alone, others (s3://, gs://, ...) through pyiceberg's file IO,
    which knows the catalog's credentials (and costs half a second to import)."""
    if path.startswith("file:") or path.startswith("/"):
        import pyarrow as pa
        from urllib.parse import urlparse

        return pa.OSFile(urlparse(path).path if path.startswith("file:") else path)  # not unquoted: as pyiceberg
    from pyiceberg.io import load_file_io

    return load_file_io(io_properties, path).new_input(path).open()


def _ids(fields, where: str) -> dict:
    """{Iceberg field id: child index} of an Arrow schema or struct type."""
    out = {}
    for i, f in enumerate(fields):
        raw = (f.metadata or {}).get(FIELD_ID)
        if raw is None:
            raise OptionError(f"{where}: column '{f.name}' has no Iceberg field id (files written outside "
                              f"Iceberg are not read)")
        out[int(raw)] = i
    return out


def _conform(array, layout: tuple, target, where: str):
    """``array`` (a file's column) as Arrow type ``target``, children matched by field id."""
    import pyarrow as pa

    kind = layout[0]
    mask = array.is_null() if array.null_count else None
    if kind == "struct":
        ids = _ids(array.type, where)
        children = []
        for (f_id, name, required, child), tf in zip(layout[1], target):
            if f_id in ids:
                children.append(_conform(array.field(ids[f_id]), child, tf.type, f"{where}, '{name}'"))
            elif required:
                raise OptionError(f"{where} lacks the required column '{name}' (field id {f_id})")
            else:
                children.append(pa.nulls(len(array), tf.type))  # a column added after this file was written
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if kind == "list":
        values = _conform(array.values, layout[1], target.value_type, where)
        return pa.ListArray.from_arrays(array.offsets.cast(pa.int32()), values, type=target, mask=mask)
    if kind == "map":
        keys = _conform(array.keys, layout[1], target.key_type, where)
        items = _conform(array.items, layout[2], target.item_type, where)
        return pa.MapArray.from_arrays(array.offsets.cast(pa.int32()), keys, items, type=target, mask=mask)
    if isinstance(array.type, pa.ExtensionType):
        array = array.storage
    if kind == "uuid":
        return _uuid_strings(array)
    return array.cast(target)  # a time-of-day (time64[us]) becomes its microseconds


def _uuid_strings(array):
    """16-byte UUIDs as their canonical 8-4-4-4-12 hex strings, without a loop per value."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    raw = array.cast(pa.binary(16))
    filled = raw.fill_null(pa.scalar(b"\0" * 16, pa.binary(16)))
    data = np.frombuffer(filled.buffers()[1], dtype=np.uint8, count=16 * len(filled),
                         offset=16 * filled.offset).reshape(-1, 16)
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    hexed = np.empty((len(filled), 32), dtype=np.uint8)
    hexed[:, 0::2] = digits[data >> 4]
    hexed[:, 1::2] = digits[data & 15]
    dash = np.full((len(filled), 1), ord("-"), dtype=np.uint8)
    text = np.hstack([hexed[:, :8], dash, hexed[:, 8:12], dash, hexed[:, 12:16], dash, hexed[:, 16:20], dash,
                      hexed[:, 20:]])
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(36), len(filled), [None, pa.py_buffer(text.tobytes())])
    strings = fixed.cast(pa.binary()).cast(pa.string())
    return strings if not raw.null_count else pc.if_else(raw.is_null(), pa.nulls(len(raw), pa.string()), strings)
