"""Typed keys and values: schema-registry framed records (magic byte 0, a 4-byte schema id, the payload)
decoded into Spark columns.

The driver resolves each part's reader schema once (``resolve_plan``: the subject's version, its references
followed recursively) and ships its text in a picklable ``DecodePlan``; the column type is the reader's
``spark_type()``. A read task parses the reader from that text, fetches every other writer schema by id from
the registry (cached for the task), and decodes each record with ``reader.decode(payload, writer)``, which
resolves older (or other) writer schemas to the reader. Records that cannot be decoded follow ``mode``:
PERMISSIVE nulls the part and fills ``_corrupt``, DROPMALFORMED drops the record, FAILFAST fails the task.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from pyspark_pybroker.options import OptionError, RegistryOptions

CORRUPT_COLUMN = "_corrupt"
_FORMAT_TYPES = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}
_HEADER = 5  # magic byte + 4-byte schema id
_MAX_REFERENCE_DEPTH = 64


class DecodeError(RuntimeError):
    """Under mode FAILFAST: a record's key or value could not be decoded; names its position."""


# A schema as shipped to executors: (schema_type, text, ((reference name, SchemaTree), ...)); hashable.
SchemaTree = tuple


@dataclass(frozen=True)
class ReaderSchema:
    """The reader schema of the key or the value, resolved on the driver."""
    part: str  # "key" | "value"
    subject: str
    version: int
    schema_id: int
    tree: SchemaTree

    @property
    def schema_type(self) -> str:
        return self.tree[0]


@dataclass(frozen=True)
class DecodePlan:
    """Everything a read task needs to decode: picklable, no client, no parsed schema."""
    url: str
    mode: str
    key: ReaderSchema | None
    value: ReaderSchema | None
    user_info: str | None = None
    ca_location: str | None = None

    def parts(self) -> list:
        return [p for p in (self.key, self.value) if p is not None]

    def client(self):
        from pybroker.client.schema_registry import RegistryClient
        return RegistryClient(self.url, self.user_info, self.ca_location)


def corrupt_type():
    """``_corrupt``: null for a record that decoded; else the raw bytes of each part that did not (null for a part
    that did) and why."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType
    return StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                       StructField("error", StringType())])


def decoded_schema(plan: DecodePlan, include_headers: bool):
    """The source schema with the decoded parts' types, plus ``_corrupt`` under PERMISSIVE."""
    from pyspark.sql.types import StructField, StructType

    from pyspark_pybroker.schema import spark_schema

    types = {r.part: parse_tree(r.tree).spark_type() for r in plan.parts()}
    fields = [StructField(f.name, types[f.name], True) if f.name in types else f
              for f in spark_schema(include_headers).fields]
    if plan.mode == "PERMISSIVE":
        fields.append(StructField(CORRUPT_COLUMN, corrupt_type(), True))
    return StructType(fields)


# --- driver ------------------------------------------------------------------------------------------------
def _tree(client, schema_type: str, text: str, references: list, depth: int = 0) -> SchemaTree:
    if depth > _MAX_REFERENCE_DEPTH:
        raise OptionError(f"schema references nest deeper than {_MAX_REFERENCE_DEPTH}")
    refs = []
    for ref in references:
        _, _, ref_type, ref_text, ref_refs = client.get_version(ref["subject"], ref["version"])
        refs.append((ref["name"], _tree(client, ref_type, ref_text, ref_refs, depth + 1)))
    return (schema_type, text, tuple(refs))


def _reader_schema(client, url: str, part) -> ReaderSchema:
    from pybroker.client.schema_registry import RegistryError

    try:
        schema_id, version, schema_type, text, refs = client.get_version(part.subject, part.version)
        tree = _tree(client, schema_type, text, refs)
    except RegistryError as exc:
        if exc.error_code in (40401, 40402):
            what = "subject" if exc.error_code == 40401 else f"version {part.version} of subject"
            raise OptionError(f"the schema registry at {url} has no {what} '{part.subject}' (the reader schema of "
                              f"the {part.part}s; register it, or set '{part.part}.subject' / "
                              f"'{part.part}.schema.version'): {exc.message}") from None
        raise OptionError(f"cannot get the reader schema of the {part.part}s (subject '{part.subject}', version "
                          f"{part.version}) from the schema registry at {url}: {exc}") from None
    expected = _FORMAT_TYPES.get(part.format)
    if expected is not None and schema_type != expected:
        raise OptionError(f"option '{part.part}.format' is '{part.format}' but subject '{part.subject}' version "
                          f"{version} is a {schema_type} schema (use '{part.part}.format' 'confluent' to take "
                          f"the registry's type)")
    reader = ReaderSchema(part.part, part.subject, version, schema_id, tree)
    try:
        parse_tree(tree).spark_type()
    except Exception as exc:  # noqa: BLE001 - any failure here means the schema cannot type a column
        raise OptionError(f"the reader schema of the {part.part}s (subject '{part.subject}' version {version}) "
                          f"cannot be read as Spark columns: {exc}") from None
    return reader


def resolve_plan(registry: RegistryOptions) -> DecodePlan:
    """On the driver: each decoded part's reader schema from the registry (one lookup per part and reference)."""
    from pybroker.client.schema_registry import RegistryClient

    client = RegistryClient(registry.url, registry.user_info, registry.ca_location)
    key = _reader_schema(client, registry.url, registry.key) if registry.key else None
    value = _reader_schema(client, registry.url, registry.value) if registry.value else None
    return DecodePlan(registry.url, registry.mode, key, value, registry.user_info, registry.ca_location)


# --- parsing, cached per Python worker ------------------------------------------------------------------------
_PARSED: dict = {}  # SchemaTree -> ParsedSchema: the text decides the parse, so this never goes stale
_PARSED_LOCK = threading.Lock()


def parse_tree(tree: SchemaTree):
    parsed = _PARSED.get(tree)
    if parsed is None:
        from pybroker.schemas import parse

        schema_type, text, refs = tree
        parsed = parse(schema_type, text, {name: parse_tree(sub) for name, sub in refs})
        with _PARSED_LOCK:
            _PARSED[tree] = parsed
    return parsed


# --- executors --------------------------------------------------------------------------------------------
class _Unreadable(Exception):
    """This record's part cannot be decoded (the reason is the message)."""


class PartDecoder:
    """Decodes one part (key or value) of a task's records; writer schemas by id cached for the task."""

    def __init__(self, plan: DecodePlan, reader: ReaderSchema, client_factory):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_type

        self.part = reader.part
        self.reader_info = reader
        self.reader = parse_tree(reader.tree)
        self.arrow_type = to_arrow_type(self.reader.spark_type(), timezone="UTC")
        self.null_array = pa.nulls(0, self.arrow_type)
        self._writers = {reader.schema_id: self.reader}  # id -> ParsedSchema, or the reason it is unusable
        self._client_factory = client_factory
        self._columnar = {}  # writer id -> avro_columns decoder, or None when that pair needs the record path

    def _writer(self, schema_id: int):
        from pybroker.client.schema_registry import RegistryError
        from pybroker.schemas import InvalidSchema

        try:
            writer = self._client_factory().parsed_schema(schema_id)
        except RegistryError as exc:
            if exc.status != 404:  # the registry is down or refuses us: not a property of the record
                raise
            writer = f"unknown schema id {schema_id} ({exc.message})"
        except InvalidSchema as exc:
            writer = f"the writer schema {schema_id} does not parse: {exc}"
        if not isinstance(writer, str) and writer.schema_type != self.reader.schema_type:
            writer = (f"schema id {schema_id} is a {writer.schema_type} schema; the reader schema of the "
                      f"{self.part}s is {self.reader.schema_type}")
        self._writers[schema_id] = writer
        return writer

    def decode_one(self, raw: bytes):
        if len(raw) < _HEADER or raw[0] != 0:
            raise _Unreadable("not schema-registry framed (magic byte 0 and a 4-byte schema id)")
        schema_id = int.from_bytes(raw[1:_HEADER], "big")
        writer = self._writers.get(schema_id)
        if writer is None:
            writer = self._writer(schema_id)
        if isinstance(writer, str):
            raise _Unreadable(writer)
        try:
            return self.reader.decode(raw[_HEADER:], writer)
        except Exception as exc:  # noqa: BLE001 - arbitrary bytes can break a decoder in any way
            raise _Unreadable(f"schema id {schema_id}: {type(exc).__name__}: {exc}") from None

    def decode_column(self, column):
        """(Arrow array of the decoded values, {row: reason}): a column of one Avro writer schema in one go when
        avro_columns can (no Python object per record), else record by record."""
        if self.reader.schema_type == "AVRO":
            from pyspark_pybroker.avro_columns import Unsupported

            try:
                array = self._avro_column(column)
            except Unsupported:
                array = None
            if array is not None:
                return array, {}
        return self.decode(column.to_pylist())

    def _avro_column(self, column):
        import numpy as np
        import pyarrow as pa

        from pyspark_pybroker import avro_columns

        n = len(column)
        if n == 0 or column.null_count == n or not pa.types.is_binary(column.type):
            return None
        valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), bool)
        offsets = np.frombuffer(column.buffers()[1], np.int32)[column.offset:column.offset + n + 1]
        data = np.frombuffer(column.buffers()[2], np.uint8)
        starts, ends = offsets[:-1][valid].astype(np.int64), offsets[1:][valid].astype(np.int64)
        if ((ends - starts) < _HEADER).any() or data[starts].any():
            return None  # an unframed record: the record path says which
        ids = (data[starts + 1].astype(np.uint32) << 24) | (data[starts + 2].astype(np.uint32) << 16) | \
            (data[starts + 3].astype(np.uint32) << 8) | data[starts + 4].astype(np.uint32)
        schema_id = int(ids[0])
        if (ids != schema_id).any():
            return None  # several writer schemas in one batch: record by record
        if schema_id not in self._columnar:
            writer = self._writers.get(schema_id)
            if writer is None:
                writer = self._writer(schema_id)
            decoder = None
            if not isinstance(writer, str) and hasattr(writer, "parsed") and hasattr(self.reader, "parsed"):
                try:
                    decoder = avro_columns.compile_pair(writer.parsed, writer.named_types, self.reader.parsed,
                                                        self.reader.named_types)
                except avro_columns.Unsupported:
                    decoder = None
            self._columnar[schema_id] = decoder
        decoder = self._columnar[schema_id]
        if decoder is None:
            return None
        padded = np.concatenate([data, np.zeros(avro_columns.PAD, np.uint8)])
        array = avro_columns.decode_column(decoder, padded, starts + _HEADER, ends)
        if not array.type.equals(self.arrow_type):  # this decoder's typing differs from spark_type(): not here
            self._columnar[schema_id] = None
            return None
        return avro_columns.with_nulls(valid, array)

    def decode(self, raws: list):
        """(Arrow array of the decoded values, {row: reason} for the rows that could not be decoded)."""
        import pyarrow as pa

        values = []
        bad = {}
        append = values.append
        decode_one = self.decode_one
        for i, raw in enumerate(raws):
            if raw is None:  # a null key or value (a tombstone) stays null
                append(None)
                continue
            try:
                append(decode_one(raw))
            except _Unreadable as exc:
                bad[i] = str(exc)
                append(None)
        try:
            return pa.array(values, type=self.arrow_type), bad
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return self._convert_rows(values, bad)

    def _convert_rows(self, values: list, bad: dict):
        """Row by row: the values that do not fit the column type become unreadable records."""
        import pyarrow as pa

        for i, value in enumerate(values):
            try:
                pa.array([value], type=self.arrow_type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                bad[i] = f"the decoded value does not fit the column type {self.arrow_type}: {exc}"
                values[i] = None
        return pa.array(values, type=self.arrow_type), bad


class BatchDecoder:
    """Turns the source's raw Arrow batches of one topic-partition into batches of the decoded schema."""

    def __init__(self, plan: DecodePlan, include_headers: bool, topic: str, partition: int, registry=None):
        """``registry``: what writer schemas are fetched from (``parsed_schema(id)``); by default a
        RegistryClient of the plan's URL, made on the first unknown id."""
        from pyspark.sql.pandas.types import to_arrow_schema

        self.plan = plan
        self.topic, self.partition = topic, partition
        self._client = registry
        self.parts = [PartDecoder(plan, r, self._registry) for r in plan.parts()]
        self.schema = to_arrow_schema(decoded_schema(plan, include_headers), timezone="UTC")

    def _registry(self):
        if self._client is None:
            self._client = self.plan.client()
        return self._client

    def decode(self, batch):
        import pyarrow as pa

        columns = {name: batch.column(i) for i, name in enumerate(batch.schema.names)}
        failures: dict[int, dict[str, str]] = {}
        for part in self.parts:
            raw = columns[part.part]
            array, bad = part.decode_column(raw)
            columns[part.part] = array
            for row, reason in bad.items():
                failures.setdefault(row, {})[part.part] = reason
        if failures and self.plan.mode == "FAILFAST":
            row = min(failures)
            offset = batch.column(batch.schema.get_field_index("offset"))[row].as_py()
            reasons = "; ".join(f"{part}: {reason}" for part, reason in failures[row].items())
            raise DecodeError(f"cannot decode the record of {self.topic}-{self.partition} at offset {offset} "
                              f"({reasons}); mode is FAILFAST (mode PERMISSIVE keeps such records with their bytes "
                              f"in '{CORRUPT_COLUMN}', DROPMALFORMED drops them)")
        if self.plan.mode == "PERMISSIVE":
            columns[CORRUPT_COLUMN] = self._corrupt_column(batch, failures)
        out = pa.RecordBatch.from_arrays([columns[f.name] for f in self.schema], schema=self.schema)
        if failures and self.plan.mode == "DROPMALFORMED":
            keep = [i for i in range(batch.num_rows) if i not in failures]
            out = out.take(pa.array(keep, type=pa.int32()))
        return out

    def _corrupt_column(self, batch, failures: dict):
        import pyarrow as pa

        arrow_type = self.schema.field(CORRUPT_COLUMN).type
        if not failures:
            return pa.nulls(batch.num_rows, arrow_type)
        raws = {name: batch.column(batch.schema.get_field_index(name)) for name in ("key", "value")}
        rows = [None] * batch.num_rows
        for row, reasons in failures.items():
            rows[row] = {"key": raws["key"][row].as_py() if "key" in reasons else None,
                         "value": raws["value"][row].as_py() if "value" in reasons else None,
                         "error": "; ".join(f"{part}: {reason}" for part, reason in reasons.items())}
        return pa.array(rows, type=arrow_type)


def decode_batches(plan: DecodePlan, include_headers: bool, batches, topic: str, partition: int):
    """The raw batches of one read task, decoded (empty batches left out)."""
    decoder = None
    for batch in batches:
        if decoder is None:
            decoder = BatchDecoder(plan, include_headers, topic, partition)
        out = decoder.decode(batch)
        if out.num_rows:
            yield out
