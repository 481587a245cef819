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
    ("required property with a default added", obj({"a": S}), obj({"a": S, "b": {**S, "default": "x"}}, ["b"]),
     {"BACKWARD"}, {"FORWARD"}),
    ("property with an empty schema added to an open model", obj({"a": S}, closed=False),
     obj({"a": S, "b": {}}, closed=False), {"BACKWARD", "FORWARD", "FULL"}, set()),
    ("property added under a partially open model", obj({"a": S}, closed=False, additionalProperties=S),
     obj({"a": S, "b": S}, closed=False, additionalProperties=S), {"BACKWARD"}, set()),
    ("property of another type under a partially open model", obj({"a": S}, closed=False, additionalProperties=S),
     obj({"a": S, "b": INT}, closed=False, additionalProperties=S), set(), {"BACKWARD"}),
    ("additionalProperties closed", obj({"a": S}, closed=False), obj({"a": S}), {"FORWARD"}, {"BACKWARD"}),
    ("type made nullable", obj({"a": S}), obj({"a": {"type": ["string", "null"]}}), {"BACKWARD"}, {"FORWARD"}),
    ("enum reduced", {"enum": ["x", "y", "z"]}, {"enum": ["x", "y"]}, {"FORWARD"}, {"BACKWARD"}),
    ("enum read as its string type", {"enum": ["x", "y"]}, S, {"BACKWARD"}, {"FORWARD"}),
    ("const changed", {"const": "x"}, {"const": "y"}, set(), {"BACKWARD", "FORWARD"}),
    ("maxItems tightened", {"type": "array", "items": S, "maxItems": 5}, {"type": "array", "items": S, "maxItems": 3},
     {"FORWARD"}, {"BACKWARD"}),
    ("minLength loosened", {"type": "string", "minLength": 3}, {"type": "string", "minLength": 1}, {"BACKWARD"},
     {"FORWARD"}),
    ("maxProperties added", {"type": "object"}, {"type": "object", "maxProperties": 2}, {"FORWARD"}, {"BACKWARD"}),
    ("pattern added", S, {"type": "string", "pattern": "^a"}, {"FORWARD"}, {"BACKWARD"}),
    ("not narrowed", {"not": {"type": "string"}}, {"not": {"type": "string", "maxLength": 3}}, {"BACKWARD"},
     {"FORWARD"}),
    ("anyOf read as one of its branches", {"anyOf": [S, INT]}, S, {"FORWARD"}, {"BACKWARD"}),
    ("prefixItems item changed", {"type": "array", "prefixItems": [S, INT]}, {"type": "array", "prefixItems": [S, S]},
     set(), {"BACKWARD", "FORWARD"}),
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
    # v1 closed {a}, v2 closed {a, b?}, v3 closed {a, b?} with b an integer: v3 reads v2's data only if b agrees
    c1, c2 = js(obj({"a": S})), js(obj({"a": S, "b": S}))
    c3 = js(obj({"a": S, "b": INT}))
    assert incompatibilities("BACKWARD", c3, [c1, c2]) and incompatibilities("BACKWARD_TRANSITIVE", c3, [c1, c2])
    c3 = js(obj({"a": S}, closed=False))  # reads anything v1 and v2 wrote
    assert incompatibilities("BACKWARD_TRANSITIVE", c3, [c1, c2]) == []
    assert incompatibilities("FULL", c3, [c1, c2])  # v2 cannot read what the open v3 may write
    n1, n2, n3 = js(obj({"a": N})), js(obj({"a": N}, title="t")), js(obj({"a": INT}))
    assert incompatibilities("FULL", n2, [n3, n1]) == []  # only the latest (n1) counts
    assert incompatibilities("FULL_TRANSITIVE", n2, [n3, n1])  # n3 (integer) cannot read n2's numbers


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


def test_error_names_follow_confluent():
    open_v1, open_v2 = js(obj({"a": S}, closed=False)), js(obj({"a": S, "x": INT}, closed=False))
    assert open_v2.compatibility_errors(open_v1)[0].startswith(
        "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at #/properties/x")
    closed_v1, closed_v2 = js(obj({"a": S})), js(obj({"a": S, "x": INT}, ["x"]))
    assert closed_v2.compatibility_errors(closed_v1) == [
        "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL at #/required: 'x'"]
    assert closed_v1.compatibility_errors(closed_v2) == ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at #/properties/x"]
    assert js({"type": "string", "maxLength": 3}).compatibility_errors(js(S)) == ["MAX_LENGTH_ADDED at #/maxLength"]


def test_recursive_schemas_are_compared_within_bounds():
    tree = {"type": "object", "properties": {"v": INT, "kids": {"type": "array", "items": {"$ref": "#"}}}}
    wider = {"type": "object", "properties": {"v": N, "kids": {"type": "array", "items": {"$ref": "#"}}}}
    assert js(wider).compatibility_errors(js(tree)) == []
    assert js(tree).compatibility_errors(js(wider))
    assert js(tree).spark_type().fieldNames() == ["v", "kids"]  # nesting bounded, not infinite


def test_references_of_references_and_relative_refs_inside_them():
    street = js({"$defs": {"name": S}, "type": "object", "properties": {"name": {"$ref": "#/$defs/name"}}})
    address = js(obj({"street": {"$ref": "street.json"}}), {"street.json": street})
    user = js(obj({"addr": {"$ref": "address.json"}}), {"address.json": address})
    assert user.decode(b'{"addr": {"street": {"name": "Main"}}}', user) == {"addr": {"street": {"name": "Main"}}}
    other = js({"$defs": {"name": INT}, "type": "object", "properties": {"name": {"$ref": "#/$defs/name"}}})
    changed = js(obj({"addr": {"$ref": "address.json"}}),
                 {"address.json": js(obj({"street": {"$ref": "street.json"}}), {"street.json": other})})
    assert changed.compatibility_errors(user) == [
        "TYPE_CHANGED at #/properties/addr/properties/street/properties/name: the reader does not accept string"]


def test_references_named_relative_to_the_schema_id():
    address = js(obj({"street": S}))
    user = js({"$id": "https://example.com/schemas/user.json", **obj({"addr": {"$ref": "address.json"}})},
              {"address.json": address})
    assert user.validator().is_valid({"addr": {"street": "x"}})
    assert not user.validator().is_valid({"addr": {"street": 1}})


def test_draft_04_and_unknown_keywords_kinds():
    d4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "maximum": 5,
          "exclusiveMaximum": True}
    assert js(d4).compatibility_errors(js(d4)) == []
    with pytest.raises(InvalidSchema):  # draft-04's exclusiveMaximum is a boolean
        js({**d4, "exclusiveMaximum": 4})
    with pytest.raises(InvalidSchema):  # a reference that is not a JSON schema
        parse("JSON", json.dumps({"$ref": "a.avsc"}), {"a.avsc": parse("AVRO", '"string"')})


def test_normalized_ignores_order_of_required_and_type_lists():
    a = js({"type": ["string", "null"], "required": ["b", "a"], "properties": {"b": S, "a": S}})
    b = js({"properties": {"a": S, "b": S}, "required": ["a", "b"], "type": ["null", "string"]})
    assert a.normalized() == b.normalized() and a.canonical() != b.canonical()


def test_decode_validates_against_the_writer_on_request():
    writer = js(obj({"a": {"type": "integer", "minimum": 0}}, ["a"]))
    reader = js(obj({"a": N}))
    assert reader.decode(b'{"a": -1}', writer) == {"a": -1.0}  # fast path: no validation
    with pytest.raises(ValueError, match="#/a"):
        reader.decode(b'{"a": -1}', writer, validate=True)
    assert reader.decode(b'{"a": 2}', writer, validate=True) == {"a": 2.0}
    with pytest.raises(ValueError):
        reader.decode(b"\xff\xfe", writer)
    assert reader.decode(b'{"a": null}', writer) == {"a": None}


def test_unmapped_values_are_json_text():
    from pyspark.sql import types as T
    s = js({"type": "object", "properties": {"any": {}, "either": {"oneOf": [S, INT]}}})
    assert s.spark_type() == T.StructType([T.StructField("any", T.StringType()),
                                           T.StructField("either", T.StringType())])
    assert s.decode(b'{"any": {"k": [1]}, "either": 3}', s) == {"any": '{"k": [1]}', "either": "3"}
