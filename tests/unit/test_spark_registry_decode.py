"""The Spark source's decoding of schema-registry framed keys and values, in-process: raw Arrow batches of the
source (as a read task gets them) become batches of the typed schema; records of an older writer schema are
resolved to the reader; unknown ids, unframed and truncated payloads follow mode PERMISSIVE / DROPMALFORMED /
FAILFAST; the registry options are checked on the driver."""
import io
import importlib
import json
import os
import socket
import sys

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "spark_source"))

from pybroker.client.schema_registry import RegistryError  # noqa: E402
from pybroker.schemas import parse  # noqa: E402
from pybroker.schemas.wire import frame  # noqa: E402
from pyspark_pybroker.options import OptionError, parse_read_options  # noqa: E402
from pyspark_pybroker.registry_decode import (  # noqa: E402
    CORRUPT_COLUMN, BatchDecoder, DecodeError, DecodePlan, ReaderSchema, decoded_schema,
)
from pyspark_pybroker.schema import arrow_schema  # noqa: E402

AVRO_V1 = {"type": "record", "name": "Reading", "namespace": "unit",
           "fields": [{"name": "sensor", "type": "string"}, {"name": "celsius", "type": "float"}]}
AVRO_V2 = {**AVRO_V1, "fields": [
    {"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"},  # float promoted to double
    {"name": "site", "type": ["null", "string"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    {"name": "count", "type": "long", "default": 5}]}

JSON_V1 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "title": "Reading",
           "properties": {"sensor": {"type": "string"}, "celsius": {"type": "number"}},
           "required": ["sensor"], "additionalProperties": False}
JSON_V2 = {**JSON_V1, "properties": {**JSON_V1["properties"], "site": {"type": "string"},
                                     "count": {"type": "integer"}}}

PROTO_V1 = 'syntax = "proto3";\npackage unit;\nmessage Reading {\n  string sensor = 1;\n  double celsius = 2;\n}\n'
PROTO_V2 = ('syntax = "proto3";\npackage unit;\nmessage Reading {\n  string sensor = 1;\n  double celsius = 2;\n'
            '  string site = 3;\n  repeated string tags = 4;\n  int64 count = 5;\n}\n')

TOPIC, PARTITION = "readings", 2


class Schemas:
    """Writer schemas by id, as the registry would answer them (an unknown id: 404 / 40403)."""

    def __init__(self):
        self.by_id = {}
        self.lookups = []

    def add(self, schema_id: int, schema_type: str, text: str):
        self.by_id[schema_id] = parse(schema_type, text)
        return self.by_id[schema_id]

    def parsed_schema(self, schema_id: int):
        self.lookups.append(schema_id)
        if schema_id not in self.by_id:
            raise RegistryError(404, 40403, "Schema not found")
        return self.by_id[schema_id]


def reader(part: str, schema_id: int, schema_type: str, text: str) -> ReaderSchema:
    return ReaderSchema(part, f"{TOPIC}-{part}", 2, schema_id, (schema_type, text, ()))


def raw_batch(rows, keys=None):
    """A raw batch of the source schema: values (and keys) as given, offsets 10, 11, ..."""
    n = len(rows)
    keys = keys if keys is not None else [f"k{i}".encode() for i in range(n)]
    return pa.RecordBatch.from_arrays([
        pa.array(keys, pa.binary()), pa.array(rows, pa.binary()), pa.array([TOPIC] * n, pa.string()),
        pa.array([PARTITION] * n, pa.int32()), pa.array(range(10, 10 + n), pa.int64()),
        pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32()),
    ], schema=arrow_schema(False))


def avro_bytes(schema: dict, value: dict) -> bytes:
    import fastavro
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def proto_bytes(parsed, value: dict) -> bytes:
    from pybroker.schemas.protobuf import encode_indexes
    cls = parsed.message_class("unit.Reading")
    return encode_indexes([0]) + cls(**value).SerializeToString()


# Per format: reader v2 (id 2), writer v1 (id 1), a v1 value, a v2 value, and the rows expected for them.
def format_case(name: str, schemas: Schemas):
    if name == "avro":
        schemas.add(1, "AVRO", json.dumps(AVRO_V1))
        v1 = frame(1, avro_bytes(AVRO_V1, {"sensor": "s1", "celsius": 1.5}))
        v2 = frame(2, avro_bytes(AVRO_V2, {"sensor": "s2", "celsius": 2.25, "site": "lab", "tags": ["x"],
                                           "count": 9}))
        return ("AVRO", json.dumps(AVRO_V2), v1, v2,
                [{"sensor": "s1", "celsius": 1.5, "site": None, "tags": [], "count": 5},
                 {"sensor": "s2", "celsius": 2.25, "site": "lab", "tags": ["x"], "count": 9}])
    if name == "json":
        schemas.add(1, "JSON", json.dumps(JSON_V1))
        v1 = frame(1, json.dumps({"sensor": "s1", "celsius": 1.5}).encode())
        v2 = frame(2, json.dumps({"sensor": "s2", "celsius": 2.25, "site": "lab", "count": 9}).encode())
        return ("JSON", json.dumps(JSON_V2), v1, v2,
                [{"sensor": "s1", "celsius": 1.5, "site": None, "count": None},
                 {"sensor": "s2", "celsius": 2.25, "site": "lab", "count": 9}])
    writer = schemas.add(1, "PROTOBUF", PROTO_V1)
    v2_parsed = parse("PROTOBUF", PROTO_V2)
    v1 = frame(1, proto_bytes(writer, {"sensor": "s1", "celsius": 1.5}))
    v2 = frame(2, proto_bytes(v2_parsed, {"sensor": "s2", "celsius": 2.25, "site": "lab", "tags": ["x"],
                                          "count": 9}))
    return ("PROTOBUF", PROTO_V2, v1, v2,
            [{"sensor": "s1", "celsius": 1.5, "site": "", "tags": [], "count": 0},
             {"sensor": "s2", "celsius": 2.25, "site": "lab", "tags": ["x"], "count": 9}])


def plan_of(mode: str, value: ReaderSchema | None = None, key: ReaderSchema | None = None,
            url: str = "http://127.0.0.1:1") -> DecodePlan:
    return DecodePlan(url, mode, key, value)


def check_schema(out, plan):
    from pyspark.sql.pandas.types import to_arrow_schema
    assert out.schema.equals(to_arrow_schema(decoded_schema(plan, False), timezone="UTC"))


FORMATS = ["avro", "json", "protobuf"]
MODULES = {"avro": "pybroker.schemas.avro", "json": "pybroker.schemas.json_schema",
           "protobuf": "pybroker.schemas.protobuf"}


@pytest.mark.parametrize("name", FORMATS)
def test_older_writer_resolved_to_the_reader(name):
    importlib.import_module(MODULES[name])
    schemas = Schemas()
    schema_type, text, v1, v2, expected = format_case(name, schemas)
    plan = plan_of("PERMISSIVE", reader("value", 2, schema_type, text))
    decoder = BatchDecoder(plan, False, TOPIC, PARTITION, registry=schemas)
    out = decoder.decode(raw_batch([v1, v2, None, v1]))
    check_schema(out, plan)
    assert out.column("value").to_pylist() == [expected[0], expected[1], None, expected[0]]  # null stays null
    assert out.column(CORRUPT_COLUMN).null_count == 4
    assert out.column("key").to_pylist() == [b"k0", b"k1", b"k2", b"k3"]  # other columns unchanged
    assert out.column("offset").to_pylist() == [10, 11, 12, 13]
    assert schemas.lookups == [1]  # the reader's own id needs no lookup; each writer id is fetched once


def avro_plan(mode: str, key: bool = False):
    importlib.import_module("pybroker.schemas.avro")
    schemas = Schemas()
    schema_type, text, v1, v2, expected = format_case("avro", schemas)
    schemas.add(50, "JSON", json.dumps(JSON_V1))
    key_reader = reader("key", 60, "AVRO", '"string"') if key else None
    plan = plan_of(mode, reader("value", 2, schema_type, text), key_reader)
    return plan, schemas, v1, v2, expected



BAD = {
    "unknown id": (frame(77, b"\x02a"), "unknown schema id 77"),
    "not framed": (b"plain text", "not schema-registry framed"),
    "too short": (b"\x00\x00\x01", "not schema-registry framed"),
    "truncated": (frame(2, b"\x08ab"), "schema id 2:"),  # a string of length 4 with 2 bytes
}


def test_permissive_keeps_bad_records_with_their_bytes_and_reason():
    plan, schemas, v1, v2, expected = avro_plan("PERMISSIVE")
    rows = [v1] + [raw for raw, _ in BAD.values()] + [v2]
    out = BatchDecoder(plan, False, TOPIC, PARTITION, registry=schemas).decode(raw_batch(rows))
    check_schema(out, plan)
    values = out.column("value").to_pylist()
    corrupt = out.column(CORRUPT_COLUMN).to_pylist()
    assert values[0] == expected[0] and values[-1] == expected[1]
    assert corrupt[0] is None and corrupt[-1] is None
    for i, (raw, reason) in enumerate(BAD.values(), start=1):
        assert values[i] is None
        assert corrupt[i]["value"] == raw and corrupt[i]["key"] is None
        assert corrupt[i]["error"].startswith("value: ") and reason in corrupt[i]["error"], corrupt[i]


def test_a_writer_of_another_format_is_corrupt():
    plan, schemas, v1, _, _ = avro_plan("PERMISSIVE")
    out = BatchDecoder(plan, False, TOPIC, PARTITION, registry=schemas).decode(
        raw_batch([frame(50, b'{"sensor": "x"}'), v1]))
    bad = out.column(CORRUPT_COLUMN).to_pylist()[0]
    assert "schema id 50 is a JSON schema" in bad["error"] and out.column("value")[1].is_valid


def test_dropmalformed_drops_the_bad_records():
    plan, schemas, v1, v2, expected = avro_plan("DROPMALFORMED")
    rows = [v1] + [raw for raw, _ in BAD.values()] + [None, v2]
    out = BatchDecoder(plan, False, TOPIC, PARTITION, registry=schemas).decode(raw_batch(rows))
    check_schema(out, plan)
    assert CORRUPT_COLUMN not in out.schema.names
    assert out.column("value").to_pylist() == [expected[0], None, expected[1]]  # a null value is not malformed
    assert out.column("offset").to_pylist() == [10, 15, 16]


def test_failfast_names_topic_partition_and_offset():
    plan, schemas, v1, _, _ = avro_plan("FAILFAST")
    decoder = BatchDecoder(plan, False, TOPIC, PARTITION, registry=schemas)
    assert decoder.decode(raw_batch([v1, v1])).num_rows == 2
    with pytest.raises(DecodeError) as info:
        decoder.decode(raw_batch([v1, v1, BAD["unknown id"][0]]))
    assert f"{TOPIC}-{PARTITION} at offset 12" in str(info.value)
    assert "unknown schema id 77" in str(info.value)


def test_key_and_value_decoded_and_both_reported():
    plan, schemas, v1, _, expected = avro_plan("PERMISSIVE", key=True)
    key = frame(60, avro_bytes("string", "sensor-key"))
    out = BatchDecoder(plan, False, TOPIC, PARTITION, registry=schemas).decode(
        raw_batch([v1, b"junk"], keys=[key, b"junk-key"]))
    check_schema(out, plan)
    assert out.column("key").to_pylist() == ["sensor-key", None]
    assert out.column("value").to_pylist() == [expected[0], None]
    bad = out.column(CORRUPT_COLUMN).to_pylist()[1]
    assert (bad["key"], bad["value"]) == (b"junk-key", b"junk")
    assert bad["error"].startswith("key: not schema-registry framed") and "; value: not" in bad["error"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_registry_fails_the_task_whatever_the_mode():
    plan, _, v1, _, _ = avro_plan("PERMISSIVE")
    plan = DecodePlan(f"http://127.0.0.1:{closed_port()}", "PERMISSIVE", None, plan.value)
    decoder = BatchDecoder(plan, False, TOPIC, PARTITION)  # writer id 1 must be fetched over HTTP
    assert decoder.decode(raw_batch([frame(2, avro_bytes(AVRO_V2, {"sensor": "s", "celsius": 1.0, "site": None,
                                                                    "tags": [], "count": 1}))])).num_rows == 1
    with pytest.raises(RegistryError) as info:
        decoder.decode(raw_batch([v1]))
    assert info.value.status == 0 and "unreachable" in str(info.value)


# --- options ---------------------------------------------------------------------------------------------
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t1"}


def test_options_default_subject_and_version():
    opts = parse_read_options({**BASE, "value.format": "AVRO", "schema.registry.url": "http://h:8081"}, False)
    assert (opts.registry.value.subject, opts.registry.value.version, opts.registry.mode) == \
        ("t1-value", "latest", "PERMISSIVE")
    assert opts.registry.key is None
    opts = parse_read_options({**BASE, "key.format": "confluent", "key.schema.version": "3", "mode": "failfast",
                               "schema.registry.url": "https://h:8081"}, False)
    assert (opts.registry.key.subject, opts.registry.key.version, opts.registry.mode) == ("t1-key", "3", "FAILFAST")
    assert parse_read_options(BASE, False).registry is None  # raw: nothing changes


@pytest.mark.parametrize("extra,message", [
    ({"value.format": "avro"}, "'schema.registry.url' must be set"),
    ({"value.format": "xml", "schema.registry.url": "http://h"}, "'value.format' must be one of"),
    ({"value.format": "avro", "schema.registry.url": "h:8081"}, "http:// or https://"),
    ({"value.format": "avro", "schema.registry.url": "http://h", "mode": "lenient"}, "'mode' must be one of"),
    ({"value.format": "avro", "schema.registry.url": "http://h", "value.schema.version": "0"}, "version number"),
    ({"value.subject": "s"}, "needs 'value.format'"),
    ({"value.format": "avro", "schema.registry.url": "http://h", "subscribe": "t1,t2"}, "'value.subject' must be set"),
    ({"value.format": "avro", "schema.registry.url": "http://h", "subscribe": None, "subscribePattern": "t.*"},
     "'value.subject' must be set"),
    ({"value.fromat": "avro"}, "did you mean 'value.format'"),
])
def test_bad_registry_options(extra, message):
    options = {k: v for k, v in {**BASE, **extra}.items() if v is not None}
    with pytest.raises(OptionError) as info:
        parse_read_options(options, False)
    assert message in str(info.value)


def test_several_topics_with_an_explicit_subject():
    opts = parse_read_options({**BASE, "subscribe": "t1,t2", "value.format": "json", "value.subject": "shared",
                               "schema.registry.url": "http://h"}, True)
    assert opts.registry.value.subject == "shared"


# --- the columnar Avro path (one writer schema per batch) ------------------------------------------------
COL_V1 = {"type": "record", "name": "Event", "namespace": "unit", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}, {"name": "ratio", "type": "float"},
    {"name": "small", "type": "int"}, {"name": "ok", "type": "boolean"}, {"name": "blob", "type": "bytes"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "where", "type": ["null", {"type": "record", "name": "Place", "fields": [
        {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}]},
    {"name": "dropped", "type": "string"}]}
COL_V2 = {"type": "record", "name": "Event", "namespace": "unit", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}, {"name": "ratio", "type": "double"},
    {"name": "small", "type": "long"}, {"name": "ok", "type": "boolean"}, {"name": "blob", "type": "bytes"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "where", "type": ["null", {"type": "record", "name": "Place", "fields": [
        {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}]},
    {"name": "site", "type": ["null", "string"], "default": None},
    {"name": "count", "type": "long", "default": 5}]}


def col_values(n: int) -> list:
    return [{"id": i * 7919 - 2 ** 40, "name": f"név-{i}", "ratio": i / 4, "small": -i, "ok": i % 2 == 0,
             "blob": bytes([i % 256]) * (i % 5), "kind": "AB"[i % 2], "dropped": "x" * (i % 3),
             "where": None if i % 3 == 0 else {"city": f"c{i}", "zip": None if i % 4 == 0 else i}}
            for i in range(n)]


@pytest.mark.parametrize("writer_schema", [COL_V1, COL_V2], ids=["older-writer", "same-schema"])
def test_columnar_avro_equals_the_record_path(writer_schema):
    importlib.import_module("pybroker.schemas.avro")
    from pyspark_pybroker.registry_decode import PartDecoder
    schemas = Schemas()
    schemas.add(1, "AVRO", json.dumps(COL_V1))
    schemas.add(2, "AVRO", json.dumps(COL_V2))
    writer_id = 1 if writer_schema is COL_V1 else 2
    values = col_values(300)
    if writer_schema is COL_V2:
        values = [{**{k: v for k, v in value.items() if k != "dropped"}, "site": None if i % 2 else "s", "count": i}
                  for i, value in enumerate(values)]
    rows = [frame(writer_id, avro_bytes(writer_schema, v)) for v in values]
    rows[5] = None  # a null value in the middle
    column = pa.array(rows, pa.binary()).slice(1)  # a sliced column, as a task's last batch can be
    plan = plan_of("PERMISSIVE", reader("value", 2, "AVRO", json.dumps(COL_V2)))
    columnar = PartDecoder(plan, plan.value, lambda: schemas)
    array, bad = columnar.decode_column(column)
    assert columnar._columnar[writer_id] is not None and not bad  # the columnar path was taken
    record_path, bad = PartDecoder(plan, plan.value, lambda: schemas).decode(column.to_pylist())
    assert not bad and array.type.equals(record_path.type)
    assert array.to_pylist() == record_path.to_pylist()
    assert array.to_pylist()[4] is None and array.to_pylist()[0]["name"] == "név-1"


@pytest.mark.parametrize("damage", ["truncated", "trailing byte", "bad utf-8", "bad union branch"])
def test_columnar_avro_falls_back_on_a_bad_record(damage):
    importlib.import_module("pybroker.schemas.avro")
    schemas = Schemas()
    schemas.add(1, "AVRO", json.dumps(COL_V1))
    rows = [frame(1, avro_bytes(COL_V1, v)) for v in col_values(20)]
    good = rows[7]
    rows[7] = {"truncated": good[:-3], "trailing byte": good + b"\x00",
               "bad utf-8": good[:-1] + b"\xff",  # the dropped string's last byte
               "bad union branch": frame(1, _with_branch(col_values(20)[7], 4))}[damage]  # branch 2 of 2
    plan = plan_of("PERMISSIVE", reader("value", 1, "AVRO", json.dumps(COL_V1)))
    out = BatchDecoder(plan, False, TOPIC, PARTITION, registry=schemas).decode(raw_batch(rows))
    corrupt = out.column(CORRUPT_COLUMN).to_pylist()
    if damage == "bad utf-8" and corrupt[7] is None:
        pytest.fail("invalid UTF-8 decoded as a string")
    assert [i for i, c in enumerate(corrupt) if c] == [7], corrupt
    assert out.column("value").to_pylist()[8]["id"] == col_values(20)[8]["id"]


def _with_branch(value: dict, branch_byte: int) -> bytes:
    """``value`` encoded with its ``where`` union branch index replaced by the raw varint byte ``branch_byte``."""
    before = avro_bytes({**COL_V1, "fields": COL_V1["fields"][:7]}, {k: value[k] for k in
                                                                    ("id", "name", "ratio", "small", "ok", "blob",
                                                                     "kind")})
    after = avro_bytes({"type": "string"}, value["dropped"])
    return before + bytes([branch_byte]) + after
