"""Registry-framed record values as Iceberg columns: schemas to structs, payloads to rows a real table
takes and gives back, schema evolution decisions, and the registry client against a real HTTP server."""
import base64
import datetime as dt
import io
import json
import re
import threading
import uuid
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pa = pytest.importorskip("pyarrow")
fastavro = pytest.importorskip("fastavro")
pytest.importorskip("pyiceberg")

from pyiceberg.catalog.sql import SqlCatalog  # noqa: E402
from pyiceberg.schema import Schema  # noqa: E402
from pyiceberg.types import (BinaryType, BooleanType, DateType, DecimalType, DoubleType, FixedType,  # noqa: E402
                             FloatType, IntegerType, ListType, LongType, MapType, NestedField, StringType,
                             StructType, TimestampType, TimestamptzType, TimeType, UUIDType)

from pybroker.iceberg import values  # noqa: E402
from pybroker.iceberg.values import RegistryClient, RegistryUnavailable, SchemaNotFound  # noqa: E402

UTC = dt.timezone.utc


@pytest.fixture
def catalog(tmp_path):
    cat = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    cat.create_namespace("kafka")
    return cat


def avro(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def write_and_read(table, rows: list[dict]) -> list[dict]:
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
    return table.scan().to_arrow().to_pylist()


def field_types(struct: StructType) -> dict:
    return {f.name: f.field_type for f in struct.fields}


def all_ids(iceberg_type) -> list[int]:
    if isinstance(iceberg_type, StructType):
        return [i for f in iceberg_type.fields for i in [f.field_id, *all_ids(f.field_type)]]
    if isinstance(iceberg_type, ListType):
        return [iceberg_type.element_id, *all_ids(iceberg_type.element_type)]
    if isinstance(iceberg_type, MapType):
        return [iceberg_type.key_id, iceberg_type.value_id, *all_ids(iceberg_type.value_type)]
    return []


def shape(iceberg_type) -> str:
    """A type without its field ids."""
    return re.sub(r"\b\d+: ", "", str(iceberg_type))


def sorted_by(rows, key):
    return sorted(rows, key=lambda r: r[key])


# ---- the wire format -------------------------------------------------------------------------------

def test_split_schema_id_reads_the_id_and_leaves_the_payload():
    schema_id, payload = values.split_schema_id(framed(258, b"payload"))
    assert schema_id == 258 and bytes(payload) == b"payload"
    schema_id, payload = values.split_schema_id(memoryview(bytearray(framed(7, b""))))
    assert schema_id == 7 and bytes(payload) == b""
    with pytest.raises(ValueError, match="shorter than the 5-byte"):
        values.split_schema_id(b"\x00\x00\x00\x01")
    with pytest.raises(ValueError, match="shorter than the 5-byte"):
        values.split_schema_id(b"")
    with pytest.raises(ValueError, match="magic byte"):
        values.split_schema_id(b"\x01\x00\x00\x00\x01payload")
    with pytest.raises(ValueError, match="magic byte"):
        values.split_schema_id(b'{"json": "without a prefix"}')


# ---- Avro: every type through a real table ---------------------------------------------------------

EVERY_TYPE = {
    "type": "record", "name": "Everything", "namespace": "test.values",
    "fields": [
        {"name": "s", "type": "string", "doc": "a string"},
        {"name": "b", "type": "bytes"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "flag", "type": "boolean"},
        {"name": "opt", "type": ["null", "long"], "default": None},
        {"name": "opt_last", "type": ["string", "null"]},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "Three", "size": 3}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "lts_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "lts_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3}},
        {"name": "dec_fixed", "type": {"type": "fixed", "name": "Money", "size": 8, "logicalType": "decimal",
                                       "precision": 18, "scale": 2}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "nanos", "type": {"type": "long", "logicalType": "timestamp-nanos"}},  # unknown: its base type
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "maybe", "type": {"type": "array", "items": ["null", "int"]}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
            {"name": "x", "type": "int"},
            {"name": "names", "type": {"type": "map", "values": {"type": "array", "items": "Color"}}}]}},
        {"name": "inner_again", "type": ["null", "Inner"]},  # a named type used again by its name
        {"name": "points", "type": {"type": "array", "items": {
            "type": "record", "name": "Point", "fields": [{"name": "px", "type": "double"},
                                                          {"name": "py", "type": ["null", "double"]}]}}},
    ]}

EXPECTED_TYPES = {
    "s": StringType(), "b": BinaryType(), "i": IntegerType(), "l": LongType(), "f": FloatType(),
    "d": DoubleType(), "flag": BooleanType(), "opt": LongType(), "opt_last": StringType(), "color": StringType(),
    "fx": FixedType(3), "day": DateType(), "t_ms": TimeType(), "t_us": TimeType(), "ts_ms": TimestamptzType(),
    "ts_us": TimestamptzType(), "lts_ms": TimestampType(), "lts_us": TimestampType(), "dec": DecimalType(9, 3),
    "dec_fixed": DecimalType(18, 2), "id": UUIDType(), "nanos": LongType()}


def every_type_records():
    first = {
        "s": "héllo", "b": b"\x00\xff", "i": -(1 << 31), "l": (1 << 63) - 1, "f": 1.5, "d": -2.25, "flag": True,
        "opt": 42, "opt_last": "last", "color": "GREEN", "fx": b"abc", "day": dt.date(2024, 2, 29),
        "t_ms": dt.time(23, 59, 59, 999000), "t_us": dt.time(0, 0, 0, 1),
        "ts_ms": dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
        "ts_us": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "lts_ms": dt.datetime(2024, 5, 6, 7, 8, 9, 123000), "lts_us": dt.datetime(2000, 1, 1, 0, 0, 0, 1),
        "dec": Decimal("-123456.789"), "dec_fixed": Decimal("9999999999999999.99"),
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"), "nanos": 1_700_000_000_000_000_001,
        "tags": ["a", "b"], "maybe": [1, None, 3], "counts": {"x": 1, "y": -2},
        "inner": {"x": 7, "names": {"k": ["RED", "GREEN"], "empty": []}},
        "inner_again": {"x": 8, "names": {}},
        "points": [{"px": 1.0, "py": None}, {"px": 2.0, "py": 3.0}]}
    second = {
        "s": "", "b": b"", "i": (1 << 31) - 1, "l": -(1 << 63), "f": -0.0, "d": 1e300, "flag": False,
        "opt": None, "opt_last": None, "color": "RED", "fx": b"\x00\x00\x00", "day": dt.date(1, 1, 1),
        "t_ms": dt.time(0, 0), "t_us": dt.time(12, 30, 15, 500000),
        "ts_ms": dt.datetime(1970, 1, 1, tzinfo=UTC), "ts_us": dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
        "lts_ms": dt.datetime(1970, 1, 1), "lts_us": dt.datetime(1900, 6, 1, 12, 0),
        "dec": Decimal("0.001"), "dec_fixed": Decimal("-0.01"), "id": uuid.UUID(int=0), "nanos": -1,
        "tags": [], "maybe": [], "counts": {}, "inner": {"x": 0, "names": {}}, "inner_again": None,
        "points": []}
    return [first, second]


def as_read_back(record: dict) -> dict:
    """What pyarrow gives back for a written record: maps as lists of (key, value) pairs."""
    def maps(value, iceberg_type):
        if value is None:
            return None
        if isinstance(iceberg_type, MapType):
            return [(k, maps(v, iceberg_type.value_type)) for k, v in value.items()]
        if isinstance(iceberg_type, ListType):
            return [maps(v, iceberg_type.element_type) for v in value]
        if isinstance(iceberg_type, StructType):
            return {f.name: maps(value.get(f.name), f.field_type) for f in iceberg_type.fields}
        return value
    struct = values.value_struct("AVRO", json.dumps(EVERY_TYPE))
    return maps(record, struct)


def test_every_avro_type_round_trips_through_a_table(catalog):
    text = json.dumps(EVERY_TYPE)
    struct = values.value_struct("AVRO", text)
    types = field_types(struct)
    assert {k: types[k] for k in EXPECTED_TYPES} == EXPECTED_TYPES
    assert types["tags"] == ListType(types["tags"].element_id, StringType(), element_required=False)
    assert types["counts"] == MapType(types["counts"].key_id, StringType(), types["counts"].value_id, LongType(),
                                      value_required=False)
    assert shape(types["inner"]) == shape(types["inner_again"]) == (
        "struct<x: optional int, names: optional map<string, list<string>>>")
    assert all(f.optional for f in struct.fields)
    assert struct.field_by_name("s").doc == "a string"
    ids = all_ids(struct)
    assert len(ids) == len(set(ids)) and min(ids) > 0  # "Inner" used twice still has ids of its own per use

    decode = values.decoder("AVRO", text)
    records = every_type_records()
    rows = [decode(memoryview(avro(EVERY_TYPE, r))) for r in records]
    assert rows[0]["ts_ms"] == records[0]["ts_ms"] and rows[0]["ts_ms"].tzinfo is not None
    assert rows[0]["lts_ms"].tzinfo is None

    table = catalog.create_table(("kafka", "every.type"), Schema(*struct.fields))
    back = write_and_read(table, rows)
    assert sorted_by(back, "i") == sorted_by([as_read_back(r) for r in records], "i")


def test_avro_values_of_a_json_text_schema_are_framed_payloads(catalog):
    """The usual path: a framed value, its id split off, its payload decoded."""
    schema = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                           {"name": "note", "type": ["null", "string"]}]}
    schema_id, payload = values.split_schema_id(framed(5, avro(schema, {"id": 1, "note": None})))
    assert schema_id == 5
    assert values.decoder("AVRO", json.dumps(schema))(payload) == {"id": 1, "note": None}
    assert values.decoder("", json.dumps(schema))(payload) == {"id": 1, "note": None}  # no schemaType: Avro


def test_avro_names_resolve_by_namespace():
    schema = {"type": "record", "name": "Outer", "namespace": "a.b", "fields": [
        {"name": "one", "type": {"type": "record", "name": "Inner", "fields": [{"name": "v", "type": "int"}]}},
        {"name": "two", "type": "a.b.Inner"},
        {"name": "three", "type": {"type": "record", "name": "Other", "namespace": "c",
                                   "fields": [{"name": "w", "type": "Inner2"}, {"name": "z", "type": "a.b.Inner"}]}},
        {"name": "four", "type": {"type": "fixed", "name": "c.Inner2", "size": 2}},
    ]}
    # "Inner2" inside namespace c must be defined before use: fastavro refuses the forward reference
    with pytest.raises(ValueError, match="invalid Avro schema"):
        values.value_struct("AVRO", json.dumps(schema))
    schema["fields"].insert(0, schema["fields"].pop())
    types = field_types(values.value_struct("AVRO", json.dumps(schema)))
    assert types["four"] == FixedType(2)
    assert field_types(types["two"]) == {"v": IntegerType()}
    assert shape(types["three"]) == "struct<w: optional fixed[2], z: optional struct<v: optional int>>"


@pytest.mark.parametrize("schema, reason", [
    ({"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]}, "unsupported"),
    ({"type": "record", "name": "R", "fields": [{"name": "u", "type": ["null", "int", "string"]}]}, "unsupported"),
    ({"type": "record", "name": "R", "fields": [{"name": "n", "type": "null"}]}, "unsupported"),
    ({"type": "record", "name": "R", "fields": [{"name": "d", "type": {
        "type": "bytes", "logicalType": "decimal", "precision": 39, "scale": 0}}]}, "unsupported"),
    ({"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}, "recursive"),
    ({"type": "record", "name": "R", "fields": []}, "no fields"),
    ({"type": "array", "items": "long"}, "must be a record"),
    ("string", "must be a record"),
    ({"type": "record", "name": "R", "fields": [{"name": "x", "type": "Missing"}]}, "invalid Avro schema"),
    ("{not json", "not JSON"),
])
def test_avro_schemas_without_a_table_shape_are_refused(schema, reason):
    text = schema if isinstance(schema, str) and schema.startswith("{") else json.dumps(schema)
    with pytest.raises(ValueError, match=reason):
        values.value_struct("AVRO", text)
    with pytest.raises(ValueError, match=reason):
        values.decoder("AVRO", text)


def test_protobuf_and_unknown_schema_types_are_unsupported():
    for kind in ("PROTOBUF", "THRIFT"):
        with pytest.raises(ValueError, match="unsupported"):
            values.value_struct(kind, 'syntax = "proto3"; message M { int32 a = 1; }')
        with pytest.raises(ValueError, match="unsupported"):
            values.decoder(kind, "")


# ---- Avro: malformed payloads --------------------------------------------------------------------------

MALFORMED = {"type": "record", "name": "M", "fields": [
    {"name": "i", "type": "int"},
    {"name": "s", "type": ["null", "string"]},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}},
    {"name": "deep", "type": {"type": "map", "values": {"type": "array", "items": "int"}}},
]}


def zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def test_malformed_avro_payloads_raise_value_error():
    decode = values.decoder("AVRO", json.dumps(MALFORMED))
    good = avro(MALFORMED, {"i": 1, "s": "text", "e": "B", "dec": Decimal("12.34"), "deep": {"k": [1, 2]}})
    assert decode(good) == {"i": 1, "s": "text", "e": "B", "dec": Decimal("12.34"), "deep": {"k": [1, 2]}}
    for end in range(len(good)):
        with pytest.raises(ValueError, match="malformed Avro value"):
            decode(good[:end])
    # bytes after the value are ignored, as fastavro and Confluent's deserializer ignore them
    assert decode(good + b"trailing")["s"] == "text"
    s_null, enum_b, dec, empty_map = zigzag(0), zigzag(1), zigzag(2) + b"\x04\xd2", zigzag(0)  # 12.34
    rest = enum_b + dec + empty_map
    map_of_big_int = zigzag(1) + zigzag(1) + b"k" + zigzag(1) + zigzag(-(1 << 33)) + zigzag(0) + zigzag(0)
    cases = [
        ("IndexError", zigzag(1) + zigzag(5) + rest),  # union branch 5 of 2
        ("IndexError", zigzag(1) + s_null + zigzag(9) + dec + empty_map),  # enum symbol 9 of 2
        ("UnicodeDecodeError", zigzag(1) + zigzag(1) + zigzag(2) + b"\xff\xfe" + rest),
        ("EOFError", zigzag(1) + zigzag(1) + zigzag(-3) + rest),  # a negative string length
        ("int 1099511627776 does not fit", zigzag(1 << 40) + s_null + rest),
        ("int -8589934592 does not fit", zigzag(1) + s_null + enum_b + dec + map_of_big_int),
        ("1.000E\\+4 does not fit decimal\\(4, 2\\)",
         zigzag(1) + s_null + enum_b + zigzag(3) + (10**6).to_bytes(3, "big") + empty_map),
    ]
    for reason, payload in cases:
        with pytest.raises(ValueError, match="malformed Avro value: .*" + reason):
            decode(payload)
    assert decode(zigzag(-5) + s_null + rest) == {"i": -5, "s": None, "e": "B", "dec": Decimal("12.34"), "deep": {}}
    assert decode(zigzag(1) + s_null + enum_b + dec + map_of_big_int.replace(zigzag(-(1 << 33)), zigzag(-7))) == {
        "i": 1, "s": None, "e": "B", "dec": Decimal("12.34"), "deep": {"k": [-7]}}


# ---- JSON Schema ---------------------------------------------------------------------------------------

JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "who"},
        "age": {"type": "integer"},
        "score": {"type": ["number", "null"]},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}}},
        "friend": {"$ref": "#/definitions/person"},
        "anything": {},
        "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "free_form": {"type": "object"},
    },
    "definitions": {"person": {"type": "object", "properties": {"nick": {"type": "string"},
                                                                "friend": {"$ref": "#/definitions/person"}}}},
}


def test_json_schema_values_round_trip_through_a_table(catalog):
    text = json.dumps(JSON_SCHEMA)
    struct = values.value_struct("JSON", text)
    types = field_types(struct)
    assert {k: types[k] for k in ("name", "age", "score", "ok", "anything", "either", "free_form")} == {
        "name": StringType(), "age": LongType(), "score": DoubleType(), "ok": BooleanType(),
        "anything": StringType(), "either": StringType(), "free_form": StringType()}
    assert types["tags"].element_type == StringType()
    assert field_types(types["address"]) == {"city": StringType(), "zip": LongType()}
    assert field_types(types["friend"]) == {"nick": StringType(), "friend": StringType()}  # the cycle: JSON text
    assert struct.field_by_name("name").doc == "who"

    decode = values.decoder("JSON", text)
    payloads = [
        {"name": "ann", "age": 30, "score": 1, "ok": True, "tags": ["a", None], "address": {"city": "x", "zip": 2.0},
         "friend": {"nick": "b", "friend": {"nick": "c"}}, "anything": [1, {"a": "é"}], "either": "s",
         "free_form": {"k": 1}, "not_in_schema": 1},
        {"name": None, "age": -(1 << 63)},
    ]
    rows = [decode(json.dumps(p).encode()) for p in payloads]
    assert rows[0]["score"] == 1.0 and isinstance(rows[0]["score"], float)
    assert rows[0]["anything"] == '[1,{"a":"é"}]' and rows[0]["friend"]["friend"] == '{"nick":"c"}'
    assert "not_in_schema" not in rows[0] and rows[1]["tags"] is None

    table = catalog.create_table(("kafka", "json"), Schema(*struct.fields))
    back = sorted_by(write_and_read(table, rows), "age")
    assert back[1] == rows[0] | {"address": {"city": "x", "zip": 2}}
    assert back[0] == rows[1]


@pytest.mark.parametrize("payload, reason", [
    (b'{"age": "30"}', "age: expected an integer"),
    (b'{"age": 1.5}', "age: expected an integer"),
    (b'{"age": 9223372036854775808}', "does not fit in 64 bits"),
    (b'{"ok": 1}', "ok: expected a boolean"),
    (b'{"score": "1"}', "score: expected a number"),
    (b'{"score": 1e400}', "does not fit in a double"),
    (b'{"tags": "a"}', "tags: expected an array"),
    (b'{"tags": [1]}', r"tags\[\]: expected a string"),
    (b'{"address": {"zip": true}}', "address.zip: expected an integer"),
    (b'[1, 2]', "expected a JSON object"),
    (b'{"name": ', None),
    (b'\xff\xfe{', None),
])
def test_malformed_json_values_raise_value_error(payload, reason):
    with pytest.raises(ValueError, match=reason):
        values.decoder("JSON", json.dumps(JSON_SCHEMA))(payload)


def test_json_schemas_without_properties_are_refused():
    for schema in ({"type": "string"}, {"type": "object"}, [1], {"$ref": "#/nowhere"}):
        with pytest.raises(ValueError, match="object schema with properties"):
            values.value_struct("JSON", json.dumps(schema))


# ---- evolution -----------------------------------------------------------------------------------------

def struct_of(**types) -> StructType:
    return StructType(*[NestedField(i, name, t, required=False) for i, (name, t) in enumerate(types.items(), 1)])


def listof(element, required=False):
    return ListType(90, element, element_required=required)


def mapof(value, key=StringType()):
    return MapType(91, key, 92, value, value_required=False)


@pytest.mark.parametrize("table, new, outcome", [
    (struct_of(a=LongType(), b=StringType()), struct_of(a=LongType(), b=StringType()), "same"),
    (struct_of(a=LongType(), b=StringType()), struct_of(b=StringType()), "same"),
    (struct_of(a=LongType()), struct_of(a=IntegerType()), "same"),
    (struct_of(a=DoubleType()), struct_of(a=FloatType()), "same"),
    (struct_of(a=DecimalType(10, 2)), struct_of(a=DecimalType(7, 2)), "same"),
    (struct_of(a=listof(LongType())), struct_of(a=listof(IntegerType())), "same"),
    (struct_of(a=mapof(struct_of(x=DoubleType()))), struct_of(a=mapof(struct_of(x=FloatType()))), "same"),
    (struct_of(a=LongType()), struct_of(a=LongType(), b=StringType()), "evolve"),
    (struct_of(a=IntegerType()), struct_of(a=LongType()), "evolve"),
    (struct_of(a=FloatType()), struct_of(a=DoubleType()), "evolve"),
    (struct_of(a=DecimalType(7, 2)), struct_of(a=DecimalType(10, 2)), "evolve"),
    (struct_of(s=struct_of(x=LongType())), struct_of(s=struct_of(x=LongType(), y=DateType())), "evolve"),
    (struct_of(a=listof(IntegerType())), struct_of(a=listof(LongType())), "evolve"),
    (struct_of(a=listof(LongType(), required=True)), struct_of(a=listof(LongType())), "evolve"),
    (struct_of(a=mapof(struct_of(x=LongType()))), struct_of(a=mapof(struct_of(x=LongType(), y=LongType()))),
     "evolve"),
    (StructType(NestedField(1, "a", LongType(), required=True)), struct_of(a=LongType()), "evolve"),
])
def test_evolution_same_or_evolve(table, new, outcome):
    assert values.evolution(table, new) == (outcome, "")


@pytest.mark.parametrize("table, new, where", [
    (struct_of(a=StringType()), struct_of(a=LongType()), "a: the table has string, the schema has long"),
    (struct_of(a=LongType()), struct_of(a=IntegerType(), b=DoubleType(), c=StringType()), None),
    (struct_of(a=LongType()), struct_of(a=DoubleType()), "a: the table has long"),
    (struct_of(a=StringType()), struct_of(a=BinaryType()), "a: "),
    (struct_of(a=DecimalType(10, 2)), struct_of(a=DecimalType(10, 3)), "a: the table has decimal(10, 2)"),
    (struct_of(a=FixedType(3)), struct_of(a=FixedType(4)), "a: "),
    (struct_of(a=TimestampType()), struct_of(a=TimestamptzType()), "a: "),
    (struct_of(s=struct_of(x=LongType())), struct_of(s=LongType()), "s: the table has struct"),
    (struct_of(s=LongType()), struct_of(s=struct_of(x=LongType())), "s: the table has long"),
    (struct_of(s=struct_of(x=LongType())), struct_of(s=struct_of(x=StringType())), "s.x: "),
    (struct_of(a=listof(LongType())), struct_of(a=listof(StringType())), "a.element: "),
    (struct_of(a=listof(LongType())), struct_of(a=mapof(LongType())), "a: the table has list"),
    (struct_of(a=mapof(struct_of(x=LongType()))), struct_of(a=mapof(struct_of(x=BooleanType()))), "a.value.x: "),
    (struct_of(a=mapof(LongType(), key=IntegerType())), struct_of(a=mapof(LongType(), key=LongType())),
     "a.key: "),
])
def test_evolution_incompatible(table, new, where):
    outcome, reason = values.evolution(table, new)
    if where is None:
        assert (outcome, reason) == ("evolve", "")
        return
    assert outcome == "incompatible"
    assert reason.startswith(where), reason


def test_union_by_name_evolves_a_real_table(catalog):
    v1 = {"type": "record", "name": "Reading", "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "count", "type": "int"},
        {"name": "level", "type": "float"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}},
        {"name": "where", "type": {"type": "record", "name": "Where", "fields": [{"name": "room", "type": "int"}]}},
        {"name": "history", "type": {"type": "array", "items": {
            "type": "record", "name": "Past", "fields": [{"name": "n", "type": "int"}]}}},
    ]}
    v2 = json.loads(json.dumps(v1))
    v2["fields"][1]["type"] = "long"
    v2["fields"][2]["type"] = "double"
    v2["fields"][3]["type"]["precision"] = 12
    v2["fields"][4]["type"]["fields"].append({"name": "floor", "type": ["null", "int"], "default": None})
    v2["fields"][5]["type"]["items"]["fields"].append({"name": "note", "type": "string"})
    v2["fields"].append({"name": "unit", "type": ["null", "string"], "default": None})
    v3 = json.loads(json.dumps(v2))
    v3["fields"][0]["type"] = "long"

    s1, s2, s3 = (values.value_struct("AVRO", json.dumps(s)) for s in (v1, v2, v3))
    table = catalog.create_table(("kafka", "readings"), Schema(*s1.fields))
    old = values.decoder("AVRO", json.dumps(v1))(avro(v1, {
        "sensor": "a", "count": 1, "level": 0.5, "price": Decimal("123.45"), "where": {"room": 3},
        "history": [{"n": 1}]}))
    write_and_read(table, [old])

    assert values.evolution(table.schema().as_struct(), s1) == ("same", "")
    assert values.evolution(table.schema().as_struct(), s2) == ("evolve", "")
    outcome, reason = values.evolution(table.schema().as_struct(), s3)
    assert outcome == "incompatible" and reason.startswith("sensor: ")
    with table.update_schema() as update:
        update.union_by_name(Schema(*s2.fields))
    assert values.evolution(table.schema().as_struct(), s2) == ("same", "")
    assert values.evolution(table.schema().as_struct(), s1) == ("same", "")  # v1 rows still fit the wider table

    new = values.decoder("AVRO", json.dumps(v2))(avro(v2, {
        "sensor": "b", "count": 1 << 40, "level": 1e300, "price": Decimal("1234567890.12"),
        "where": {"room": 4, "floor": 2}, "history": [{"n": 2, "note": "x"}], "unit": "C"}))
    again_old = dict(old, sensor="c")
    back = {r["sensor"]: r for r in write_and_read(table, [new, again_old])}
    assert back["a"] == {"sensor": "a", "count": 1, "level": 0.5, "price": Decimal("123.45"),
                         "where": {"room": 3, "floor": None}, "history": [{"n": 1, "note": None}], "unit": None}
    assert back["c"] == dict(back["a"], sensor="c")
    assert back["b"] == new


# ---- the registry client -------------------------------------------------------------------------------

class Registry:
    """A small HTTP server answering the two endpoints from ``answers`` {path: (status, body)}."""

    def __init__(self, answers: dict, password: str | None = None):
        self.answers = answers
        self.requests: list[str] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                registry.requests.append(self.path)
                expected = "Basic " + base64.b64encode(f"user:{password}".encode()).decode()
                if password is not None and self.headers.get("Authorization") != expected:
                    status, body = 401, {"error_code": 401, "message": "Unauthorized"}
                else:
                    status, body = registry.answers.get(self.path, (404, {"error_code": 40401,
                                                                          "message": "Subject not found"}))
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def registry():
    avro_text = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
    server = Registry({
        "/schemas/ids/1": (200, {"schema": avro_text}),
        "/schemas/ids/2": (200, {"schema": '{"type": "object"}', "schemaType": "JSON"}),
        "/schemas/ids/3": (404, {"error_code": 40403, "message": "Schema 3 not found"}),
        "/schemas/ids/4": (500, {"error_code": 50001, "message": "Error in the backend data store"}),
        "/schemas/ids/5": (200, b"<html>not json</html>"),
        "/subjects/orders-value/versions/latest": (200, {"subject": "orders-value", "id": 7, "version": 2,
                                                         "schema": avro_text}),
        "/subjects/a%2Fb.c-value/versions/latest": (200, {"id": 8, "version": 1, "schema": "{}",
                                                          "schemaType": "JSON"}),
    })
    yield server
    server.stop()


def test_registry_client_reads_and_caches_schemas(registry):
    client = RegistryClient(registry.url, timeout_s=5.0)
    avro_text = registry.answers["/schemas/ids/1"][1]["schema"]
    assert client.by_id(1) == ("AVRO", avro_text)
    assert client.by_id(2) == ("JSON", '{"type": "object"}')
    assert client.by_id(1) == ("AVRO", avro_text)
    assert registry.requests == ["/schemas/ids/1", "/schemas/ids/2"]  # an id's schema is fetched once

    assert client.latest("orders-value") == (7, "AVRO", avro_text)
    assert client.latest("orders-value") == (7, "AVRO", avro_text)
    assert registry.requests.count("/subjects/orders-value/versions/latest") == 1  # within ttl_s
    assert client.by_id(7) == ("AVRO", avro_text)  # the latest answer fills the id cache too
    assert client.latest("a/b.c-value") == (8, "JSON", "{}")  # the subject is quoted into the path

    fresh = RegistryClient(registry.url + "/", ttl_s=0)
    fresh.latest("orders-value")
    fresh.latest("orders-value")
    assert registry.requests.count("/subjects/orders-value/versions/latest") == 3  # expired: asked again


def test_registry_client_not_found_and_failures(registry):
    client = RegistryClient(registry.url)
    with pytest.raises(SchemaNotFound, match="Schema 3 not found"):
        client.by_id(3)
    with pytest.raises(SchemaNotFound, match="Subject not found"):
        client.latest("missing-value")
    assert issubclass(SchemaNotFound, ValueError)
    with pytest.raises(SchemaNotFound):
        client.by_id(3)
    assert registry.requests.count("/schemas/ids/3") == 1  # a missing id is remembered for ttl_s
    with pytest.raises(RegistryUnavailable, match="HTTP 500 Error in the backend data store"):
        client.by_id(4)
    with pytest.raises(RegistryUnavailable, match="not JSON"):
        client.by_id(5)
    with pytest.raises(RegistryUnavailable):  # a 5xx is not remembered: the next call asks again
        client.by_id(4)
    assert registry.requests.count("/schemas/ids/4") == 2
    assert client.by_id(1)[0] == "AVRO"

    registry.stop()
    with pytest.raises(RegistryUnavailable, match="schema registry unavailable"):
        RegistryClient(registry.url, timeout_s=2.0).by_id(1)
    assert client.by_id(1) == ("AVRO", registry.answers["/schemas/ids/1"][1]["schema"])  # cached: no server


def test_registry_client_tries_each_url_and_sends_basic_auth():
    avro_text = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
    live = Registry({"/schemas/ids/1": (200, {"schema": avro_text})}, password="secret")
    dead = Registry({})
    dead.stop()
    try:
        client = RegistryClient(f"{dead.url}, {live.url}", user_info="user:secret")
        assert client.by_id(1) == ("AVRO", avro_text)
        with pytest.raises(RegistryUnavailable, match="HTTP 401"):
            RegistryClient(live.url, user_info="user:wrong").by_id(1)
        with pytest.raises(RegistryUnavailable, match="HTTP 401"):
            RegistryClient(live.url).by_id(1)
    finally:
        live.stop()
