"""A topic's tables in the catalog: their schemas, creating or loading them, their progress, and the
commit that takes a batch exactly once.

Progress is the snapshot summary's PROGRESS_KEY: {partition: next offset} for every partition the
table holds, carried into each new snapshot. A commit names, for each partition it covers, the
progress it expects the table to have; if the table says otherwise (another broker wrote that
partition, or our own earlier commit landed after all), that partition's rows are left out and the
caller reads again from the table's progress. The catalog's optimistic concurrency (tables are
created with pyiceberg's own commit retries off) makes the check and the commit one step.
"""
from __future__ import annotations

import json
import logging
import os
import re

from pybroker.iceberg.settings import DLQ_SUFFIX, PROGRESS_KEY, IcebergSettings

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 10  # conflicts with other brokers' commits to the same table: refresh and check again
HISTORY_WALK = 1000  # snapshots looked through for the newest progress (others' snapshots may lack it)
TRANSFORM = re.compile(r"^\s*(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?([\w.]+)\s*\)\s*$")


def open_catalog(settings: IcebergSettings):
    from pyiceberg.catalog import load_catalog
    uri = settings.catalog_uri
    if settings.catalog_type == "sql" and uri.startswith("sqlite:///"):  # the default needs its directory
        os.makedirs(os.path.dirname(uri[len("sqlite:///"):]) or ".", exist_ok=True)
    if settings.warehouse.startswith("file://"):
        os.makedirs(settings.warehouse[len("file://"):], exist_ok=True)
    return load_catalog("pybroker", **settings.catalog_config())


def kafka_struct():
    """The ``kafka`` column every table has: where each row came from."""
    from pyiceberg.types import (BinaryType, IntegerType, ListType, LongType, NestedField, StringType, StructType,
                                 TimestamptzType)
    header = StructType(NestedField(101, "key", StringType(), required=False),
                        NestedField(102, "value", BinaryType(), required=False))
    return StructType(
        NestedField(2, "partition", IntegerType(), required=True),
        NestedField(3, "offset", LongType(), required=True),
        NestedField(4, "timestamp", TimestamptzType(), required=True),
        NestedField(5, "timestamp_type", IntegerType(), required=True),
        NestedField(6, "headers", ListType(100, header, element_required=True), required=False),
        NestedField(7, "key", BinaryType(), required=False))


def table_schema(mode: str, value_struct=None):
    """key_value: kafka, key, value; value_schema_*: kafka and the value's fields (all optional)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import BinaryType, NestedField
    fields = [NestedField(1, "kafka", kafka_struct(), required=True)]
    if mode == "key_value":
        fields += [NestedField(10, "key", BinaryType(), required=False),
                   NestedField(11, "value", BinaryType(), required=False)]
    elif value_struct is not None:
        next_id = 1000
        for f in value_struct.fields:
            if f.name == "kafka":
                raise ValueError("a value field named 'kafka' would hide the kafka column")
            fields.append(NestedField(next_id, f.name, f.field_type, required=False, doc=f.doc))
            next_id += 1
    return Schema(*fields)


def dlq_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import BinaryType, NestedField, StringType
    return Schema(NestedField(1, "kafka", kafka_struct(), required=True),
                  NestedField(10, "value", BinaryType(), required=False),
                  NestedField(11, "reason", StringType(), required=False))


def partition_spec(text: str, schema):
    """``hour(kafka.timestamp)``, ``bucket(8, kafka.key)``, ``kafka.partition`` (identity), comma-separated,
    optionally in parentheses; "" or "()" is unpartitioned."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import (BucketTransform, DayTransform, HourTransform, IdentityTransform,
                                      MonthTransform, TruncateTransform, VoidTransform, YearTransform)
    simple = {"identity": IdentityTransform, "year": YearTransform, "month": MonthTransform,
              "day": DayTransform, "hour": HourTransform, "void": VoidTransform}
    body = text.strip()
    if body.startswith("(") and body.endswith(")") and not TRANSFORM.match(body):
        body = body[1:-1]
    fields = []
    for i, part in enumerate(_split_top_level(body)):
        m = TRANSFORM.match(part)
        name, arg, column = (m.group(1).lower(), m.group(2), m.group(3)) if m else ("identity", None, part.strip())
        source = schema.find_field(column)  # raises ValueError for an unknown column
        if name in ("bucket", "truncate"):
            if arg is None:
                raise ValueError(f"{name}() needs a width: {name}(N, {column})")
            transform = BucketTransform(int(arg)) if name == "bucket" else TruncateTransform(int(arg))
        elif name in simple and arg is None:
            transform = simple[name]()
        else:
            raise ValueError(f"unknown partition transform {part.strip()!r}")
        label = column.replace(".", "_") + ("" if name == "identity" else f"_{name}") + (f"_{arg}" if arg else "")
        fields.append(PartitionField(source_id=source.field_id, field_id=1000 + i, transform=transform, name=label))
    return PartitionSpec(*fields)


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def identifier(settings: IcebergSettings, topic: str, dlq: bool = False) -> tuple[str, str]:
    return settings.namespace, topic + DLQ_SUFFIX if dlq else topic


def load_or_create(catalog, settings: IcebergSettings, topic: str, schema, spec_text: str, dlq: bool = False):
    """The topic's table (or its DLQ table), created on first use with the topic's partition spec."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
    ident = identifier(settings, topic, dlq)
    try:
        return catalog.load_table(ident)
    except NoSuchTableError:
        pass
    catalog.create_namespace_if_not_exists(settings.namespace)
    properties = {"commit.retry.num-retries": "0",  # our commit checks progress before trying again
                  "write.target-file-size-bytes": str(settings.target_file_size_bytes)}
    try:
        spec = partition_spec(spec_text, schema)
    except ValueError as e:
        log.error("table %s: partition spec %r: %s; the table is created unpartitioned", ".".join(ident), spec_text, e)
        spec = partition_spec("", schema)
    try:
        table = catalog.create_table(ident, schema=schema, partition_spec=spec, properties=properties)
        log.info("created Iceberg table %s", ".".join(ident))
        return table
    except TableAlreadyExistsError:  # another broker created it first
        return catalog.load_table(ident)


def align_spec(table, spec_text: str):
    """Evolve the table's partition spec to the topic's iceberg.partition.spec when it was changed (new files
    are partitioned the new way; files already written keep theirs). Returns the table."""
    try:
        wanted = partition_spec(spec_text, table.schema())
    except ValueError as e:
        log.error("table %s: partition spec %r: %s; the table keeps its spec", ".".join(table.name()), spec_text, e)
        return table
    current = table.spec()
    shape = lambda spec: [(f.source_id, str(f.transform)) for f in spec.fields]  # noqa: E731
    if shape(current) == shape(wanted):
        return table
    with table.update_spec() as update:
        for field in current.fields:
            update.remove_field(field.name)
        for field in wanted.fields:
            update.add_field(table.schema().find_column_name(field.source_id), field.transform, field.name)
    log.info("table %s: partition spec is now %s", ".".join(table.name()), spec_text)
    table.refresh()
    return table


def read_progress(table) -> dict[int, int]:
    """{partition: next offset} the table holds: the newest snapshot summary that has it."""
    snapshot = table.current_snapshot()
    for _ in range(HISTORY_WALK):
        if snapshot is None:
            return {}
        summary = snapshot.summary
        text = summary.additional_properties.get(PROGRESS_KEY) if summary is not None else None
        if text is not None:
            return {int(p): int(o) for p, o in json.loads(text).items()}
        if snapshot.parent_snapshot_id is None:
            return {}
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return {}


def commit(table, rows, expected: dict[int, int | None], ends: dict[int, int], new_schema=None):
    """Append ``rows`` (a pyarrow Table with the ``kafka`` column) and move progress to ``ends``.

    ``expected``: the progress each partition of ``ends`` must still have in the table (None: absent).
    Returns (table, stale): the refreshed table and the partitions left out because the table's
    progress differed (their rows were not written). ``new_schema``: a schema to union into the
    table's first (new value fields, widened types) in the same commit."""
    from pyiceberg.exceptions import CommitFailedException
    for attempt in range(COMMIT_ATTEMPTS):
        table.refresh()
        progress = read_progress(table)
        stale = {p for p in ends if progress.get(p) != expected.get(p)}
        keep = [p for p in ends if p not in stale]
        if not keep:
            return table, stale
        batch = rows if not stale or rows.num_rows == 0 else _only_partitions(rows, keep)
        merged = progress | {p: ends[p] for p in keep}
        tx = table.transaction()
        if new_schema is not None:
            with tx.update_schema() as update:
                update.union_by_name(new_schema)
        batch = batch.cast(tx.table_metadata.schema().as_arrow())  # the table's field ids, after any evolution
        append(tx, table.io, batch, {PROGRESS_KEY: json.dumps({str(p): o for p, o in sorted(merged.items())})})
        try:
            tx.commit_transaction()
            return table, stale
        except CommitFailedException:
            log.info("table %s changed while committing (attempt %d): checking its progress again",
                     table.name(), attempt + 1)
    raise CommitConflict(f"table {table.name()}: {COMMIT_ATTEMPTS} conflicting commits in a row")


def append(tx, io, rows, properties: dict) -> None:
    """``tx.append(rows)``, but when every row falls in one partition (a flush window rarely spans two
    hours) the files are written straight from the rows: pyiceberg's general path filters and copies
    the whole batch once per partition it finds."""
    meta = tx.table_metadata
    key = single_partition_key(meta.spec(), meta.schema(), rows) if rows.num_rows else None
    if key is None:
        tx.append(rows, snapshot_properties=properties)
        return
    from pyiceberg.io.pyarrow import bin_pack_arrow_table, pyarrow_to_schema, write_file
    from pyiceberg.table import TableProperties, WriteTask
    target = int(meta.properties.get(TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                                     TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT))
    task_schema = pyarrow_to_schema(rows.schema, name_mapping=meta.schema().name_mapping,
                                    format_version=meta.format_version)
    with tx.update_snapshot(snapshot_properties=properties).fast_append() as files:
        tasks = (WriteTask(write_uuid=files.commit_uuid, task_id=i, record_batches=batches, partition_key=key,
                           schema=task_schema)
                 for i, batches in enumerate(bin_pack_arrow_table(rows, target)))
        for data_file in write_file(io=io, table_metadata=meta, tasks=tasks):
            files.append_data_file(data_file)


def single_partition_key(spec, schema, rows):
    """The PartitionKey all of ``rows`` share, or None (unpartitioned, several partitions, or a transform
    this cannot compute: pyiceberg's general path decides then)."""
    import pyarrow.compute as pc
    from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
    if spec.is_unpartitioned():
        return None
    values = []
    try:
        for field in spec.fields:
            source = schema.find_field(field.source_id)
            column = _nested_column(rows, schema.find_column_name(field.source_id))
            transformed = field.transform.pyarrow_transform(source.field_type)(column)
            if transformed.null_count:
                return None
            bounds = pc.min_max(transformed)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if low != high:
                return None
            values.append(PartitionFieldValue(field=field, value=low))
    except (NotImplementedError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return PartitionKey(field_values=values, partition_spec=spec, schema=schema)


def _nested_column(rows, dotted: str):
    import pyarrow.compute as pc
    head, *rest = dotted.split(".")
    column = rows.column(head)
    for name in rest:
        column = pc.struct_field(column, name)
    return column


class CommitConflict(Exception):
    """Other writers kept committing first; the batch is tried again later."""


def _only_partitions(rows, partitions):
    import pyarrow as pa
    import pyarrow.compute as pc
    mask = pc.is_in(pc.struct_field(rows.column("kafka"), "partition"), value_set=pa.array(partitions, pa.int32()))
    return rows.filter(mask)
