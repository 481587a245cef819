"""JSON Schema: parsing against the metaschema, references, compatibility per level, Spark types and decoding."""
import datetime
import json

import pytest

from pybroker.schemas import InvalidSchema, parse
from pybroker.schemas.compatibility import incompatibilities


def js(doc, refs=None):
    return parse("JSON", json.dumps(doc), refs or {})


def obj(props, required=(), closed=True, **extra):
    doc = {"type": "object", "properties": props, "required": list(required), **extra}
    if closed:
        doc["additionalProperties"] = False
    return doc


S, INT, N = {"type": "string"}, {"type": "integer"}, {"type": "number"}

# (case, old, new, levels that must pass, levels that must fail)
CASES = [
    ("optional property added to a closed model", obj({"a": S}), obj({"a": S, "b": S}), {"BACKWARD"}, {"FORWARD"}),
    ("optional property removed from a closed model", obj({"a": S, "b": S}), obj({"a": S}), {"FORWARD"},
     {"BACKWARD"}),
    ("property added to an open model", obj({"a": S}, closed=False), obj({"a": S, "b": S}, closed=False),
     {"FORWARD"}, {"BACKWARD"}),
    ("property removed from an open model", obj({"a": S, "b": S}, closed=False), obj({"a": S}, closed=False),
     {"BACKWARD"}, {"FORWARD"}),
    ("required property added", obj({"a": S, "b": S}), obj({"a": S, "b": S}, required=["b"]), {"FORWARD"},
     {"BACKWARD", "FULL"}),
    ("integer widened to number", obj({"a": INT}), obj({"a": N}), {"BACKWARD"}, {"FORWARD"}),
    ("string changed to integer", obj({"a": S}), obj({"a": INT}), set(), {"BACKWARD", "FORWARD", "FULL"}),
    ("enum extended", {"enum": ["x", "y"]}, {"enum": ["x", "y", "z"]}, {"BACKWARD"}, {"FORWARD"}),
    ("maxLength tightened", {"type": "string", "maxLength": 10}, {"type": "string", "maxLength": 5}, {"FORWARD"},
     {"BACKWARD"}),
    ("minimum added", {"type": "integer"}, {"type": "integer", "minimum": 0}, {"FORWARD"}, {"BACKWARD"}),
    ("array items widened", {"type": "array", "items": INT}, {"type": "array", "items": N}, {"BACKWARD"},
     {"FORWARD"}),
    ("oneOf branch added", {"oneOf": [S, INT]}, {"oneOf": [S, INT, {"type": "boolean"}]}, {"BACKWARD"}, {"FORWARD"}),
    ("the same schema", obj({"a": S}), obj({"a": S}), {"BACKWARD", "FORWARD", "FULL", "NONE"}, set()),
    ("anything goes under NONE", obj({"a": S}), obj({"a": INT}), {"NONE"}, set()),
]


@pytest.mark.parametrize("case,old,new,ok,bad", CASES, ids=[c[0] for c in CASES])
def test_compatibility_per_level(case, old, new, ok, bad):
    for level in ok:
        assert incompatibilities(level, js(new), [js(old)]) == [], (case, level)
    for level in bad:
        assert incompatibilities(level, js(new), [js(old)]), (case, level)


def test_transitive_levels_check_every_version():
    v1, v2 = js(obj({"a": INT})), js(obj({"a": N}))
    v3b = js(obj({"a": N}, title="v3"))
    assert incompatibilities("FORWARD", v3b, [v1, v2]) == []  # v2 reads numbers
    assert incompatibilities("FORWARD_TRANSITIVE", v3b, [v1, v2])  # v1 does not


def test_messages_name_the_path():
    errors = js(obj({"a": {"type": "object", "properties": {"x": INT}, "additionalProperties": False}})) \
        .compatibility_errors(js(obj({"a": {"type": "object", "properties": {"x": S}, "additionalProperties": False}})))
    assert errors == ["TYPE_CHANGED at #/properties/a/properties/x: the reader does not accept string"]


@pytest.mark.parametrize("text", ["{not json", '{"type": 5}', '{"type": "object", "required": "a"}', "[1]"])
def test_invalid_schemas(text):
    with pytest.raises(InvalidSchema):
        parse("JSON", text, {})


def test_references_resolve_and_unknown_ones_are_refused():
    address = js(obj({"street": S}))
    user = js(obj({"addr": {"$ref": "address.json"}}), {"address.json": address})
    assert user.decode(b'{"addr": {"street": "Main"}}', user) == {"addr": {"street": "Main"}}
    with pytest.raises(InvalidSchema, match="address.json"):
        js(obj({"addr": {"$ref": "address.json"}}))
    changed = js(obj({"addr": {"$ref": "address.json"}}), {"address.json": js(obj({"street": INT}))})
    assert incompatibilities("BACKWARD", changed, [user])


def test_drafts_2020_12_and_7():
    d2020 = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array", "prefixItems": [S, INT]}
    assert js(d2020).canonical() == json.dumps(d2020, separators=(",", ":"))
    with pytest.raises(InvalidSchema):  # prefixItems must be an array in 2020-12
        js({"$schema": "https://json-schema.org/draft/2020-12/schema", "prefixItems": 3})


def test_canonical_keeps_order_and_normalized_sorts():
    a = parse("JSON", '{"type": "object",  "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}', {})
    b = parse("JSON", '{"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "type": "object"}', {})
    assert a.canonical() == '{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}'
    assert a.canonical() != b.canonical() and a.normalized() == b.normalized()


def test_spark_type_and_decode():
    from pyspark.sql import types as T
    s = js({"type": "object", "properties": {
        "name": S, "age": INT, "score": N, "ok": {"type": "boolean"}, "tags": {"type": "array", "items": S},
        "day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "date-time"},
        "maybe": {"oneOf": [{"type": "null"}, INT]}, "attrs": {"type": "object", "additionalProperties": S}}})
    assert s.spark_type() == T.StructType([
        T.StructField("name", T.StringType()), T.StructField("age", T.LongType()),
        T.StructField("score", T.DoubleType()), T.StructField("ok", T.BooleanType()),
        T.StructField("tags", T.ArrayType(T.StringType())), T.StructField("day", T.DateType()),
        T.StructField("at", T.TimestampType()), T.StructField("maybe", T.LongType()),
        T.StructField("attrs", T.MapType(T.StringType(), T.StringType()))])
    doc = {"name": "n", "age": 3, "score": 1, "ok": True, "tags": ["x"], "day": "2024-02-03",
           "at": "2024-02-03T04:05:06Z", "maybe": None, "attrs": {"k": "v"}}
    value = s.decode(json.dumps(doc).encode(), s)
    assert value == {**doc, "score": 1.0, "day": datetime.date(2024, 2, 3),
                     "at": datetime.datetime(2024, 2, 3, 4, 5, 6, tzinfo=datetime.timezone.utc)}
    T._make_type_verifier(s.spark_type())(value)
    with pytest.raises(ValueError):
        s.decode(b"{nope", s)
    with pytest.raises(ValueError):
        s.decode(b'{"age": "three"}', s)
