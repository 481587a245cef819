"""Avro schemas: parsing and its errors, canonical and normalized text, the specification's resolution rules
under every compatibility level, references, decoding older payloads and the Spark type of values."""
import datetime
import decimal
import io
import json
import uuid

import fastavro
import pytest

from pybroker.schemas import InvalidSchema, ParsedSchema, parse
from pybroker.schemas.avro import AvroSchema
from pybroker.schemas.compatibility import incompatibilities


def avro(schema, references=None) -> AvroSchema:
    text = schema if isinstance(schema, str) and schema[:1] in '{["' else json.dumps(schema)
    return parse("AVRO", text, references or {})


def record(*fields, name="R", **extra):
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def field(name, type_, **extra):
    return {"name": name, "type": type_, **extra}


def enum(*symbols, **extra):
    return {"type": "enum", "name": "E", "symbols": list(symbols), **extra}


A_INT = field("a", "int")
NODE = record(field("value", "int"), field("next", ["null", "Node"], default=None), name="Node")

# (case, versions oldest first, {level: compatible?}); the last version is the one being registered
EVOLUTIONS = [
    ("add a field with a default", [record(A_INT), record(A_INT, field("b", "string", default="x"))],
     {"BACKWARD": True, "FORWARD": True, "FULL": True}),
    ("add a field without a default", [record(A_INT), record(A_INT, field("b", "string"))],
     {"BACKWARD": False, "FORWARD": True, "FULL": False}),
    ("remove a field without a default", [record(A_INT, field("b", "string")), record(A_INT)],
     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    ("remove a field with a default", [record(A_INT, field("b", "string", default="")), record(A_INT)],
     {"BACKWARD": True, "FORWARD": True, "FULL": True}),
    ("promote int to long", [record(A_INT), record(field("a", "long"))],
     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    ("narrow long to int", [record(field("a", "long")), record(A_INT)],
     {"BACKWARD": False, "FORWARD": True, "FULL": False}),
    ("promote int to float", [record(A_INT), record(field("a", "float"))], {"BACKWARD": True}),
    ("promote long to double", [record(field("a", "long")), record(field("a", "double"))], {"BACKWARD": True}),
    ("promote float to double", [record(field("a", "float")), record(field("a", "double"))],
     {"BACKWARD": True, "FORWARD": False}),
    ("double to float", [record(field("a", "double")), record(field("a", "float"))], {"BACKWARD": False}),
    ("string and bytes", [record(field("a", "string")), record(field("a", "bytes"))], {"FULL": True}),
    ("int to string", [record(A_INT), record(field("a", "string"))], {"BACKWARD": False, "FORWARD": False}),
    ("promote array items", [record(field("a", {"type": "array", "items": "int"})),
                             record(field("a", {"type": "array", "items": "long"}))],
     {"BACKWARD": True, "FORWARD": False}),
    ("change map values", [record(field("a", {"type": "map", "values": "int"})),
                           record(field("a", {"type": "map", "values": "string"}))], {"BACKWARD": False}),
    ("add an enum symbol", [record(field("e", enum("A", "B"))), record(field("e", enum("A", "B", "C")))],
     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    ("add an enum symbol, the old enum has a default",
     [record(field("e", enum("A", "B", default="A"))), record(field("e", enum("A", "B", "C", default="A")))],
     {"BACKWARD": True, "FORWARD": True, "FULL": True}),
    ("remove an enum symbol", [record(field("e", enum("A", "B"))), record(field("e", enum("A")))],
     {"BACKWARD": False, "FORWARD": True}),
    ("remove an enum symbol, the new enum has a default",
     [record(field("e", enum("A", "B"))), record(field("e", enum("A", default="A")))], {"BACKWARD": True}),
    ("make a field nullable", [record(A_INT), record(field("a", ["null", "int"], default=None))],
     {"BACKWARD": True, "FORWARD": False}),
    ("add a union branch", [record(field("a", ["int", "string"])), record(field("a", ["int", "string", "boolean"]))],
     {"BACKWARD": True, "FORWARD": False}),
    ("remove a union branch", [record(field("a", ["int", "string", "boolean"])), record(field("a", ["int", "string"]))],
     {"BACKWARD": False, "FORWARD": True}),
    ("a union branch reads a promoted type", [record(A_INT), record(field("a", ["null", "string", "long"]))],
     {"BACKWARD": True}),
    ("rename a field with an alias", [record(A_INT), record(field("b", "int", aliases=["a"]))],
     {"BACKWARD": True, "FORWARD": False}),
    ("rename a field without an alias", [record(A_INT), record(field("b", "int"))], {"BACKWARD": False}),
    ("rename a record with an alias", [record(A_INT), record(A_INT, name="R2", aliases=["R"])],
     {"BACKWARD": True, "FORWARD": False}),
    ("rename a record without an alias", [record(A_INT), record(A_INT, name="R2")], {"BACKWARD": False}),
    ("move a record to another namespace", [record(A_INT, namespace="a"), record(A_INT, namespace="b")],
     {"FULL": True}),
    ("add a field with a default in a nested record",
     [record(field("n", record(A_INT, name="N"))), record(field("n", record(A_INT, field("b", "int", default=0),
                                                                            name="N")))], {"FULL": True}),
    ("change a type in a nested record",
     [record(field("n", record(A_INT, name="N"))), record(field("n", record(field("a", "string"), name="N")))],
     {"BACKWARD": False, "FORWARD": False}),
    ("add a field with a default to a recursive record",
     [NODE, record(*NODE["fields"], field("tag", "string", default=""), name="Node")], {"FULL": True}),
    ("change a type in a recursive record",
     [NODE, record(field("value", "string"), NODE["fields"][1], name="Node")], {"BACKWARD": False}),
    ("change a fixed's size", [record(field("f", {"type": "fixed", "name": "F", "size": 4})),
                               record(field("f", {"type": "fixed", "name": "F", "size": 8}))], {"BACKWARD": False}),
    ("rename a fixed", [record(field("f", {"type": "fixed", "name": "F", "size": 4})),
                        record(field("f", {"type": "fixed", "name": "G", "size": 4}))], {"BACKWARD": False}),
    ("top-level primitives", ["int", "long"], {"BACKWARD": True, "FORWARD": False}),
    ("a record becomes a union of itself and null", [record(A_INT), ["null", record(A_INT)]],
     {"BACKWARD": True, "FORWARD": False}),
    # transitive levels look at every earlier version, the plain ones at the latest only
    ("a field loses its default, the version before lacked the field",
     [record(A_INT), record(A_INT, field("b", "string", default="x")), record(A_INT, field("b", "string"))],
     {"BACKWARD": True, "BACKWARD_TRANSITIVE": False, "FORWARD_TRANSITIVE": True}),
    ("a field without a default removed after gaining one",
     [record(A_INT, field("b", "int")), record(A_INT, field("b", "int", default=0)), record(A_INT)],
     {"FORWARD": True, "FORWARD_TRANSITIVE": False, "BACKWARD_TRANSITIVE": True}),
    ("a field comes back with another type",
     [record(A_INT, field("b", "int", default=0)), record(A_INT), record(A_INT, field("b", "string", default=""))],
     {"FULL": True, "FULL_TRANSITIVE": False, "NONE": True}),
]


@pytest.mark.parametrize("case,versions,expected", EVOLUTIONS, ids=[c[0] for c in EVOLUTIONS])
def test_evolutions_under_each_level(case, versions, expected):
    *previous, new = [avro(v) for v in versions]
    for level, compatible in expected.items():
        errors = incompatibilities(level, new, previous)
        assert (errors == []) == compatible, (level, errors)


def test_errors_name_the_path_and_the_types():
    old = avro(record(A_INT, field("n", record(field("x", "long"), name="N"))))
    new = avro(record(A_INT, field("n", record(field("x", "int"), name="N")), field("c", "string")))
    assert new.compatibility_errors(old) == [
        "/fields/1/type/fields/0/type: reader type int cannot read writer type long",
        "/fields/2: reader field 'c' has no default value and is missing from the writer",
    ]
    assert avro(record(field("e", enum("A")))).compatibility_errors(avro(record(field("e", enum("A", "B", "C"))))) \
        == ["/fields/0/type/symbols: reader enum E lacks the writer's symbols B, C and has no default"]
    assert avro("int").compatibility_errors(avro('["int", "string"]')) == \
        ["/: reader type int cannot read writer type string"]
    assert avro('["int", "boolean"]').compatibility_errors(avro('"string"')) == \
        ['/: no branch of the reader union ["int","boolean"] can read writer type string']


def test_mutually_recursive_types_terminate():
    tree = record(field("children", {"type": "array", "items": {
        "type": "record", "name": "Child", "fields": [field("parent", ["null", "Tree"], default=None)]}}),
        name="Tree")
    bigger = json.loads(json.dumps(tree))
    bigger["fields"][0]["type"]["items"]["fields"].append(field("name", "string", default=""))
    assert avro(bigger).compatibility_errors(avro(tree)) == []
    assert avro(tree).compatibility_errors(avro(bigger)) == []


class OtherFormat(ParsedSchema):
    schema_type = "JSON"


def test_another_format_is_never_compatible():
    other = OtherFormat("{}", {})
    assert avro("int").compatibility_errors(other) == [
        "/: an Avro schema cannot read data written with a JSON schema"]
    with pytest.raises(ValueError):
        avro("int").decode(b"\x02", other)


def test_canonical_ignores_whitespace_and_key_order_and_keeps_everything_else():
    text = ('{"type": "record", "name": "User", "namespace": "com.example", "doc": "a user", "fields": [\n'
            '  {"name": "id", "type": {"type": "long"}, "doc": "the id", "custom": 1},\n'
            '  {"name": "when", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},\n'
            '  {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED"], "default": "RED"},'
            ' "aliases": ["colour"]}\n], "aliases": ["Person"]}')
    reordered = json.dumps({"fields": json.loads(text)["fields"], "aliases": ["Person"], "doc": "a user",
                            "name": "com.example.User", "type": "record"}, indent=4)
    first, second = avro(text), avro(reordered)
    assert first.canonical() == second.canonical() == (
        '{"type":"record","name":"User","namespace":"com.example","doc":"a user","fields":['
        '{"name":"id","type":"long","doc":"the id","custom":1},'
        '{"name":"when","type":{"type":"long","logicalType":"timestamp-millis"},"default":0},'
        '{"name":"color","type":{"type":"enum","name":"Color","symbols":["RED"],"default":"RED"},'
        '"aliases":["colour"]}],"aliases":["Person"]}')
    assert first == second and hash(first) == hash(second)
    assert avro(first.canonical()).canonical() == first.canonical()
    assert avro(record(A_INT)).canonical() != avro(record(field("a", "long"))).canonical()


def test_nested_names_are_written_relative_to_their_namespace():
    schema = avro(record(field("inner", record(A_INT, name="Inner")), field("other", record(A_INT, name="x.O")),
                         field("again", "Inner"), field("top", record(A_INT, name="T", namespace="")),
                         name="a.R"))
    assert json.loads(schema.canonical())["fields"] == [
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [A_INT]}},
        {"name": "other", "type": {"type": "record", "name": "O", "namespace": "x", "fields": [A_INT]}},
        {"name": "again", "type": "Inner"},
        {"name": "top", "type": {"type": "record", "name": "T", "namespace": "", "fields": [A_INT]}},
    ]
    normalized = json.loads(schema.normalized())["fields"]
    assert normalized[2] == {"name": "again", "type": "a.Inner"}
    assert normalized[3]["type"] == {"type": "record", "name": "T", "namespace": "", "fields": [A_INT]}
    for text in (schema.canonical(), schema.normalized()):  # both read back as the same schema
        again = avro(text)
        assert (again.canonical(), again.normalized()) == (schema.canonical(), schema.normalized())


def test_normalized_equates_equivalent_schemas_written_differently():
    first = avro(record(field("d", {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}),
                        aliases=["Old", "Older"], name="R", namespace="n"))
    second = avro(record(field("d", {"scale": 2, "precision": 5, "type": "bytes", "logicalType": "decimal"}),
                         aliases=["n.Older", "n.Old"], name="n.R"))
    assert first.canonical() != second.canonical()
    assert first.normalized() == second.normalized()
    assert first.parsing_canonical_form() == second.parsing_canonical_form()
    assert first.normalized() != avro(record(field("d", "bytes"), name="n.R")).normalized()


def test_parsing_canonical_form_and_fingerprint_match_fastavro():
    text = record(field("a", ["null", {"type": "map", "values": {"type": "array", "items": "int"}}]),
                  field("e", {"type": "enum", "name": "E", "namespace": "x", "symbols": ["Z"], "doc": "d"}),
                  field("f", {"type": "fixed", "name": "F", "size": 3}), field("again", "x.E"), name="p.R")
    schema = avro(text)
    assert schema.parsing_canonical_form() == fastavro.schema.to_parsing_canonical_form(text)
    assert schema.fingerprint() == fastavro.schema.fingerprint(schema.parsing_canonical_form(), "CRC-64-AVRO")
    # the specification's test vector: fingerprint64 of "null" is 7195948357588979594 (little-endian bytes)
    assert avro('"null"').fingerprint() == (7195948357588979594).to_bytes(8, "little").hex()


@pytest.mark.parametrize("text,message", [
    ('{"type": "record", "name": "R", "fields": [', "not JSON"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "integer"}]}', "unknown type 'integer'"),
    ('"Missing"', "unknown type 'Missing'"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}',
     "default \"x\" of field 'a' does not match"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": 3000000000}]}',
     "does not match"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", "int"], "default": "x"}]}',
     "does not match"),
    ('{"type": "record", "name": "R", "fields": [{"name": "e", "type": {"type": "enum", "name": "E",'
     ' "symbols": ["A"]}, "default": "B"}]}', "does not match"),
    ('{"type": "record", "name": "R", "fields": [{"name": "n", "type": {"type": "record", "name": "N",'
     ' "fields": [{"name": "x", "type": "int"}]}, "default": {}}]}', "does not match"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "a", "type": "int"}]}',
     "defined twice"),
    ('{"type": "record", "name": "1R", "fields": []}', "not a valid Avro name"),
    ('{"type": "record", "name": "R"}', '"fields" must be a list'),
    ('{"type": "fixed", "name": "F"}', '"size" must be a non-negative integer'),
    ('["int", "int"]', "the union has int twice"),
    ('["int", ["string"]]', "may not contain a union"),
    ('{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "unique"),
    ('{"type": "array"}', 'needs "items"'),
    ('{"name": "x"}', 'no "type"'),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": {"type": "record", "name": "R",'
     ' "fields": []}}]}', "redefined"),
    ('42', "is not a schema"),
])
def test_invalid_schemas_are_refused_with_a_reason(text, message):
    with pytest.raises(InvalidSchema, match="invalid Avro schema") as caught:
        parse("AVRO", text, {})
    assert message in str(caught.value)


def test_valid_defaults_of_every_kind_are_accepted():
    schema = avro(record(
        field("n", "null", default=None), field("b", "boolean", default=True), field("l", "long", default=2 ** 40),
        field("d", "double", default=1), field("s", "bytes", default="\u00ff"),
        field("f", {"type": "fixed", "name": "F", "size": 2}, default="ab"),
        field("a", {"type": "array", "items": "int"}, default=[1, 2]),
        field("m", {"type": "map", "values": "string"}, default={"k": "v"}),
        field("u", ["null", "string"], default="not the first branch"),  # accepted by Avro's Java parser too
        field("r", record(A_INT, field("z", "int", default=0), name="Inner"), default={"a": 1})))
    assert json.loads(schema.canonical())["fields"][9]["default"] == {"a": 1}


ADDRESS = {"type": "record", "name": "Address", "namespace": "com.example",
           "fields": [field("street", "string"), field("zip", {"type": "int", "logicalType": "date"})]}
USER = record(field("name", "string"), field("home", "com.example.Address"),
              field("work", ["null", "com.example.Address"], default=None), name="com.example.User")


def test_references_supply_named_types():
    address = avro(ADDRESS)
    with pytest.raises(InvalidSchema, match="unknown type 'com.example.Address'"):
        avro(USER)
    user = avro(USER, {"com.example.Address": address})
    assert json.loads(user.canonical())["fields"][1] == {"name": "home", "type": "Address"}
    assert '"name":"com.example.Address","type":"record"' in user.parsing_canonical_form()
    assert user.parsing_canonical_form().count("com.example.Address") == 2  # defined once, then named
    assert user.compatibility_errors(user) == []
    # a reference may itself use references
    outer = avro(record(field("user", "com.example.User"), name="Envelope"), {"user": user})
    assert "com.example.Address" in outer.named_types
    # a schema may not define a name its references already define
    with pytest.raises(InvalidSchema, match="already defined by a referenced schema"):
        avro(record(field("a", ADDRESS)), {"addr": address})
    with pytest.raises(InvalidSchema, match="reference 'x' is a JSON schema, not Avro"):
        avro(USER, {"x": OtherFormat("{}", {})})


def written(schema_json, value) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema_json), value)
    return out.getvalue()


def test_decode_resolves_older_payloads_to_the_reader_schema():
    writer_json = record(field("id", "int"), field("old_name", "string"), field("dropped", "double"),
                         field("color", enum("RED", "GREEN", "BLUE")), field("tags", {"type": "array", "items": "int"}),
                         name="com.example.Event")
    reader_json = record(
        field("id", "long"), field("new_name", "string", aliases=["old_name"]),
        field("color", enum("RED", "GREEN", default="RED")), field("tags", {"type": "array", "items": "double"}),
        field("added", ["null", "string"], default=None), field("count", "int", default=7),
        name="com.example.Event")
    writer, reader = avro(writer_json), avro(reader_json)
    assert reader.compatibility_errors(writer) == []
    payload = written(writer_json, {"id": 5, "old_name": "x", "dropped": 1.5, "color": "BLUE", "tags": [1, 2]})
    assert reader.decode(payload, writer) == {"id": 5, "new_name": "x", "color": "RED", "tags": [1.0, 2.0],
                                              "added": None, "count": 7}
    assert writer.decode(payload, writer)["dropped"] == 1.5


def test_decode_converts_logical_types_by_the_reader_schema():
    logical = record(
        field("day", {"type": "int", "logicalType": "date"}),
        field("at", {"type": "long", "logicalType": "timestamp-millis"}),
        field("at_us", {"type": "long", "logicalType": "timestamp-micros"}),
        field("local", {"type": "long", "logicalType": "local-timestamp-millis"}),
        field("price", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}),
        field("fixed_price", {"type": "fixed", "name": "Money", "size": 8, "logicalType": "decimal",
                              "precision": 12, "scale": 3}),
        field("id", {"type": "string", "logicalType": "uuid"}),
        field("maybe_day", ["null", {"type": "int", "logicalType": "date"}], default=None))
    schema = avro(logical)
    at = datetime.datetime(2024, 2, 29, 12, 30, 1, 123000, tzinfo=datetime.timezone.utc)
    key = uuid.UUID(int=42)
    value = {"day": datetime.date(2024, 2, 29), "at": at, "at_us": at.replace(microsecond=123456),
             "local": datetime.datetime(2024, 1, 1, 8), "price": decimal.Decimal("-1234567.89"),
             "fixed_price": decimal.Decimal("12.345"), "id": str(key), "maybe_day": datetime.date(1969, 12, 31)}
    decoded = schema.decode(written(logical, value), schema)
    assert decoded == value
    assert type(decoded["id"]) is str and decoded["at"].tzinfo is not None and decoded["local"].tzinfo is None
    # the writer's plain long read as the reader's timestamp (and the other way round)
    plain = record(field("at", "long"))
    stamped = avro(record(field("at", {"type": "long", "logicalType": "timestamp-millis"})))
    assert stamped.decode(written(plain, {"at": 1000}), avro(plain)) == \
        {"at": datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.timezone.utc)}
    assert avro(plain).decode(written(stamped.raw, {"at": 1000}), stamped) == {"at": 1000}


def test_decode_reads_unions_as_spark_does():
    inner = record(A_INT, name="Inner")
    union_json = record(field("u", ["null", "string", "int", inner, enum("X", "Y")]),
                        field("n", ["null", "Inner"], default=None), field("num", ["int", "long"]),
                        field("m", {"type": "map", "values": ["string", "boolean"]}))
    schema = avro(union_json)
    members = {f"member{i}": None for i in range(4)}
    for value, member in (("s", {"member0": "s"}), (3, {"member1": 3}), ({"a": 1}, {"member2": {"a": 1}}),
                          ("Y", {"member3": "Y"})):
        payload = written(union_json, {"u": value if not isinstance(value, str) or value == "s" else ("E", value),
                                       "n": {"a": 2}, "num": 5, "m": {"k": True}})
        assert schema.decode(payload, schema) == {"u": {**members, **member}, "n": {"a": 2}, "num": 5,
                                                  "m": {"k": {"member0": None, "member1": True}}}
    assert schema.decode(written(union_json, {"u": None, "n": None, "num": 1, "m": {}}), schema)["u"] is None


def test_decode_reads_a_plain_writer_into_a_reader_union():
    writer_json = record(field("u", record(A_INT, name="Inner")))
    reader = avro(record(field("u", ["string", record(A_INT, name="Inner")])))
    assert reader.decode(written(writer_json, {"u": {"a": 4}}), avro(writer_json)) == \
        {"u": {"member0": None, "member1": {"a": 4}}}


def test_decode_with_references_and_recursion():
    address = avro(ADDRESS)
    user = avro(USER, {"com.example.Address": address})
    home = {"street": "Main", "zip": datetime.date(2000, 1, 1)}
    expanded = fastavro.parse_schema(USER, {"com.example.Address": fastavro.parse_schema(ADDRESS)})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, expanded, {"name": "ann", "home": home, "work": home})
    assert user.decode(out.getvalue(), user) == {"name": "ann", "home": home, "work": home}
    node = avro(NODE)
    chain = {"value": 1, "next": {"value": 2, "next": None}}
    assert node.decode(written(NODE, chain), node) == chain


def test_bad_payloads_raise_value_error():
    schema = avro(record(field("s", "string"), field("n", "long")))
    good = written(schema.raw, {"s": "abc", "n": 1})
    for bad in (good[:2], good + b"\x00", b"\x7f", b""):
        with pytest.raises(ValueError):
            schema.decode(bad, schema)
    with pytest.raises(ValueError):  # no resolution of a string into an int
        avro(record(field("s", "int"), field("n", "long"))).decode(good, schema)


def test_spark_types_of_every_avro_type():
    T = pytest.importorskip("pyspark.sql.types")
    schema = avro(record(
        field("b", "boolean"), field("i", "int"), field("l", "long"), field("f", "float"), field("d", "double"),
        field("s", "string"), field("y", "bytes"), field("e", enum("A")), field("x", {"type": "fixed", "name": "F",
                                                                                      "size": 2}),
        field("day", {"type": "int", "logicalType": "date"}),
        field("ts", {"type": "long", "logicalType": "timestamp-micros"}),
        field("local", {"type": "long", "logicalType": "local-timestamp-millis"}),
        field("dec", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3}),
        field("id", {"type": "string", "logicalType": "uuid"}),
        field("opt", ["null", "string"]), field("wide", ["int", "long"]), field("real", ["null", "float", "double"]),
        field("any", ["null", "int", "string"]), field("arr", {"type": "array", "items": ["null", "int"]}),
        field("map", {"type": "map", "values": "long"}), field("rec", record(A_INT, name="Inner")),
        field("nothing", "null")))
    expected = T.StructType([
        T.StructField("b", T.BooleanType(), False), T.StructField("i", T.IntegerType(), False),
        T.StructField("l", T.LongType(), False), T.StructField("f", T.FloatType(), False),
        T.StructField("d", T.DoubleType(), False), T.StructField("s", T.StringType(), False),
        T.StructField("y", T.BinaryType(), False), T.StructField("e", T.StringType(), False),
        T.StructField("x", T.BinaryType(), False), T.StructField("day", T.DateType(), False),
        T.StructField("ts", T.TimestampType(), False), T.StructField("local", T.TimestampNTZType(), False),
        T.StructField("dec", T.DecimalType(10, 3), False), T.StructField("id", T.StringType(), False),
        T.StructField("opt", T.StringType(), True), T.StructField("wide", T.LongType(), False),
        T.StructField("real", T.DoubleType(), True),
        T.StructField("any", T.StructType([T.StructField("member0", T.IntegerType(), True),
                                           T.StructField("member1", T.StringType(), True)]), True),
        T.StructField("arr", T.ArrayType(T.IntegerType(), True), False),
        T.StructField("map", T.MapType(T.StringType(), T.LongType(), False), False),
        T.StructField("rec", T.StructType([T.StructField("a", T.IntegerType(), False)]), False),
        T.StructField("nothing", T.NullType(), True)])
    assert schema.spark_type() == expected
    with pytest.raises(ValueError, match="recursive"):
        avro(NODE).spark_type()


def test_decoded_values_fit_the_spark_type():
    T = pytest.importorskip("pyspark.sql.types")
    union_json = record(field("u", ["null", "string", record(A_INT, name="Inner")]),
                        field("at", {"type": "long", "logicalType": "timestamp-millis"}),
                        field("dec", {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 1}))
    schema = avro(union_json)
    value = schema.decode(written(union_json, {"u": {"a": 1}, "at": 5, "dec": decimal.Decimal("1.5")}), schema)
    struct = schema.spark_type()
    row = struct.fromInternal(struct.toInternal(value))  # pyspark's own conversion accepts the values
    assert row.u.member1.a == 1 and row.dec == decimal.Decimal("1.5")
    assert isinstance(struct, T.StructType)
