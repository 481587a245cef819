"""Protobuf schemas: parsing text and base64 descriptors, references, printing, Confluent's compatibility
rules, message indexes, decoding and Spark types."""
from __future__ import annotations

import base64
import datetime
import decimal
import io

import pytest
from confluent_kafka.schema_registry.common.protobuf import _schema_to_str
from confluent_kafka.schema_registry.common.serde import SchemaId
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from google.protobuf import descriptor_pb2

from pybroker.schemas import InvalidSchema, parse
from pybroker.schemas import protobuf
from pybroker.schemas.compatibility import incompatibilities
from pybroker.schemas.wire import frame, unframe

ADDRESS = """syntax = "proto3";
package geo;
message Address { string street = 1; int32 zip = 2; }
"""

ORDER = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "address.proto";

// an order
message Order {
  int64 id = 1;
  google.protobuf.Timestamp at = 2;
  geo.Address ship_to = 3;
  map<string, Item> items = 4;
  repeated string tags = 5;
  oneof pay { string card = 6; bytes token = 7; }
  optional uint64 big = 8;
  Status status = 9;
  enum Status { NEW = 0; DONE = 1; }
  message Item { string sku = 1; double price = 2 [deprecated = true]; }
  reserved 20 to 25, 30;
  reserved "old";
}
message Node { Node next = 1; sint32 v = 2; }
"""


def proto(body: str, syntax: str = "proto3", package: str = "t") -> protobuf.ProtobufSchema:
    return parse("PROTOBUF", f'syntax = "{syntax}";\npackage {package};\n{body}\n')


@pytest.fixture(scope="module")
def address():
    return parse("PROTOBUF", ADDRESS)


@pytest.fixture(scope="module")
def order(address):
    return parse("PROTOBUF", ORDER, {"address.proto": address})


# -- parsing -----------------------------------------------------------------------------------------------

def test_parse_text_keeps_text_and_descriptor(order):
    assert isinstance(order, protobuf.ProtobufSchema) and order.schema_type == "PROTOBUF"
    assert order.canonical() == ORDER.rstrip()
    assert order.file.package == "shop"
    assert order.message_names() == ["shop.Order", "shop.Node"]
    assert list(order.file.dependency) == ["google/protobuf/timestamp.proto", "address.proto"]
    assert list(order.dependencies) == ["google/protobuf/timestamp.proto", "address.proto"]


@pytest.mark.parametrize("text, message", [
    ('syntax = "proto3";\nmessage A { int32 f = 1 }\n', 'Expected ";"'),
    ('syntax = "proto3";\nmessage A { Foo f = 1; }\n', '"Foo" is not defined'),
    ('syntax = "proto3";\nimport "missing.proto";\nmessage A { int32 f = 1; }\n', "missing.proto"),
    ('syntax = "proto3";\nmessage A { int32 f = 1; int64 g = 1; }\n', "already been used"),
    ('syntax = "proto4";\nmessage A {}\n', "proto4"),
    ("{not at all}", "Expected"),
])
def test_invalid_text_raises_protoc_message(text, message):
    with pytest.raises(InvalidSchema, match=message) as info:
        parse("PROTOBUF", text)
    assert "schema.proto:" in str(info.value)  # protoc's file:line:column


def test_protoc_lines_count_from_one():
    with pytest.raises(InvalidSchema, match=r"schema\.proto:3:\d+: .*Bar"):
        parse("PROTOBUF", 'syntax = "proto3";\nmessage A {\n  Bar b = 1;\n}\n')


def test_unresolved_reference_and_wrong_reference_type(address):
    with pytest.raises(InvalidSchema, match="other.proto"):
        parse("PROTOBUF", 'syntax = "proto3";\nimport "other.proto";\nmessage A { geo.Address a = 1; }\n',
              {"address.proto": address})
    avro_like = type("Avro", (protobuf.ParsedSchema,), {"schema_type": "AVRO"})("{}", {})
    with pytest.raises(InvalidSchema, match="not PROTOBUF"):
        parse("PROTOBUF", ADDRESS, {"x.proto": avro_like})


def test_well_known_imports_need_no_reference():
    schema = proto('import "google/protobuf/wrappers.proto";\nimport "google/protobuf/any.proto";\n'
                   'import "google/protobuf/struct.proto";\nimport "google/type/date.proto";\n'
                   "message A { google.protobuf.StringValue s = 1; google.protobuf.Any any = 2;\n"
                   "  google.protobuf.Struct st = 3; google.type.Date d = 4; }")
    assert "google/type/date.proto" in schema.dependencies
    assert schema.message_class("t.A")(d={"year": 2024}).d.year == 2024


def test_confluent_builtin_imports_and_custom_options():
    schema = proto('import "confluent/meta.proto";\nimport "confluent/type/decimal.proto";\n'
                   'message A { confluent.type.Decimal d = 1 [(confluent.field_meta) = { doc: "amount" }]; }')
    assert '[(confluent.field_meta) = { doc: "amount" }]' in schema.normalized()
    from_base64 = parse("PROTOBUF", schema.serialized())
    assert from_base64.canonical() == schema.normalized()


def test_references_chain_through_their_own_references(address):
    customer = parse("PROTOBUF", 'syntax = "proto3";\npackage crm;\nimport "geo/address.proto";\n'
                     "message Customer { string name = 1; geo.Address home = 2; }\n",
                     {"geo/address.proto": address})
    visit = parse("PROTOBUF", 'syntax = "proto3";\nimport "crm/customer.proto";\n'
                  "message Visit { crm.Customer who = 1; }\n", {"crm/customer.proto": customer})
    assert list(visit.dependencies) == ["geo/address.proto", "crm/customer.proto"]
    cls = visit.message_class("Visit")
    payload = cls(who={"name": "ann", "home": {"zip": 7}}).SerializeToString()
    assert visit.decode(b"\x00" + payload, visit) == {"who": {"name": "ann", "home": {"street": "", "zip": 7}}}


def test_parse_base64_descriptor_from_confluent_serializer(order, address):
    cls = order.message_class("shop.Order")
    text = _schema_to_str(cls.DESCRIPTOR.file)  # what ProtobufSerializer registers
    schema = parse("PROTOBUF", text, {"address.proto": address})
    assert schema.from_descriptor and schema.text == text
    assert schema.normalized() == order.normalized()
    printed = schema.canonical()
    assert printed.startswith('syntax = "proto3";\npackage shop;\n')
    assert "map<string, .shop.Order.Item> items = 4;" in printed and "oneof pay {" in printed
    assert "optional uint64 big = 8;" in printed and "reserved 20 to 25, 30;" in printed
    # the printed text is itself a valid schema describing the same file
    reparsed = parse("PROTOBUF", printed, {"address.proto": address})
    assert reparsed.normalized() == order.normalized()


def test_base64_of_a_constructed_descriptor():
    file = descriptor_pb2.FileDescriptorProto(name="x.proto", package="p", syntax="proto2")
    message = file.message_type.add(name="M")
    message.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED)
    message.field.add(name="label", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, default_value='say "hi"')
    schema = parse("PROTOBUF", base64.b64encode(file.SerializeToString()).decode())
    assert schema.canonical() == ('syntax = "proto2";\npackage p;\nmessage M {\n  required int32 id = 1;\n'
                                  '  optional string label = 2 [default = "say \\"hi\\""];\n}\n')
    assert parse("PROTOBUF", schema.canonical()).normalized() == schema.normalized()


def test_base64_with_unknown_type_is_invalid():
    file = descriptor_pb2.FileDescriptorProto(name="x.proto", syntax="proto3")
    file.message_type.add(name="M").field.add(
        name="f", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE, type_name=".Nope",
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    with pytest.raises(InvalidSchema, match="Nope"):
        parse("PROTOBUF", base64.b64encode(file.SerializeToString()).decode())


# -- printing ----------------------------------------------------------------------------------------------

def test_normalized_ignores_layout_comments_and_order():
    a = proto('import "google/protobuf/timestamp.proto";\nimport "google/protobuf/duration.proto";\n'
              "message A {\n  // c\n  string b = 2;\n  int32 a = 1;\n  enum E { X = 0; Z = 2; Y = 1; }\n}")
    b = proto('import "google/protobuf/duration.proto";\nimport "google/protobuf/timestamp.proto";\n'
              "message A { int32 a = 1; string b = 2; enum E { X = 0; Y = 1; Z = 2; } }")
    assert a.canonical() != b.canonical()
    assert a.normalized() == b.normalized()
    assert a.normalized().index("int32 a = 1") < a.normalized().index("string b = 2")
    assert a != b and proto("message A { int32 a = 1; }") == proto("message A { int32 a = 1; }")


def test_printer_round_trips_proto2_features():
    text = """syntax = "proto2";
package legacy;
option java_package = "com.example";
option optimize_for = SPEED;
message Outer {
  required int32 id = 1;
  optional string name = 2 [default = "n/a"];
  repeated int32 nums = 3 [packed = true];
  optional group Extra = 4 { optional int32 x = 5; }
  optional bytes raw = 6 [default = "\\001\\002"];
  optional float ratio = 7 [default = inf];
  extensions 100 to 199;
}
extend Outer { optional int32 ext = 100; }
enum Kind { option allow_alias = true; A = 0; B = 1; ALIAS = 1; reserved 5 to 9; }
service Api { rpc Get(Outer) returns (stream Outer); }
"""
    schema = parse("PROTOBUF", text)
    printed = protobuf.print_file(schema.file)
    again = parse("PROTOBUF", printed)
    assert again.file == _renamed(schema.file, again.file.name)
    assert "optional group Extra = 4 {" in printed and "extend .legacy.Outer {" in printed
    assert 'option java_package = "com.example";' in printed and "reserved 5 to 9;" in printed


@pytest.mark.parametrize("name", ["google/protobuf/descriptor.proto", "google/protobuf/struct.proto",
                                  "google/protobuf/api.proto", "google/type/date.proto", "confluent/meta.proto"])
def test_printed_well_known_files_compile_to_the_same_descriptor(name):
    original = protobuf.builtin_file(name)
    reparsed = parse("PROTOBUF", protobuf.print_file(original)).file
    expected = _renamed(original, reparsed.name)
    for file in (expected, reparsed):  # protoc leaves out json_name when it is the default one
        _clear_json_names(file.message_type)
    assert reparsed == expected


def _clear_json_names(messages):
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _clear_json_names(message.nested_type)


def _renamed(file, name):
    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(file)
    copy.name = name
    return copy


def test_serialized_is_the_base64_descriptor(order, address):
    data = base64.b64decode(order.serialized())
    assert descriptor_pb2.FileDescriptorProto.FromString(data) == order.file
    assert parse("PROTOBUF", order.serialized(), {"address.proto": address}).normalized() == order.normalized()


# -- compatibility -----------------------------------------------------------------------------------------

P3 = "message M {{ {} }}"
CASES = [
    # (name, old body, new body, BACKWARD ok, FORWARD ok)
    ("add field", "int32 a = 1;", "int32 a = 1; string b = 2;", True, True),
    ("remove field", "int32 a = 1; string b = 2;", "int32 a = 1;", True, True),
    ("rename field", "int32 a = 1;", "int32 renamed = 1;", True, True),
    ("int32 to int64", "int32 a = 1;", "int64 a = 1;", True, True),
    ("uint64 to bool", "uint64 a = 1;", "bool a = 1;", True, True),
    ("sint32 to sint64", "sint32 a = 1;", "sint64 a = 1;", True, True),
    ("fixed32 to sfixed32", "fixed32 a = 1;", "sfixed32 a = 1;", True, True),
    ("fixed64 to sfixed64", "fixed64 a = 1;", "sfixed64 a = 1;", True, True),
    ("string to bytes", "string a = 1;", "bytes a = 1;", True, True),
    ("int32 to sint32", "int32 a = 1;", "sint32 a = 1;", False, False),
    ("int32 to string", "int32 a = 1;", "string a = 1;", False, False),
    ("float to double", "float a = 1;", "double a = 1;", False, False),
    ("fixed32 to fixed64", "fixed32 a = 1;", "fixed64 a = 1;", False, False),
    ("enum to int32", "E a = 1; enum E { X = 0; }", "int32 a = 1; enum E { X = 0; }", True, True),
    ("scalar to message", "int32 a = 1; message N { int32 x = 1; }", "N a = 1; message N { int32 x = 1; }",
     False, False),
    ("message renamed", "A a = 1; message A { int32 x = 1; }", "B a = 1; message B { int32 x = 1; }",
     False, False),
    ("nested field type changed", "A a = 1; message A { int32 x = 1; }", "A a = 1; message A { string x = 1; }",
     False, False),
    ("map value type changed", "map<string, int32> m = 1;", "map<string, string> m = 1;", False, False),
    ("map to repeated message", "map<string, int32> m = 1;",
     "repeated E m = 1; message E { string key = 1; int32 value = 2; }", False, False),
    ("enum value added", "E e = 1; enum E { X = 0; }", "E e = 1; enum E { X = 0; Y = 1; }", True, True),
    ("enum value removed", "E e = 1; enum E { X = 0; Y = 1; }", "E e = 1; enum E { X = 0; }", True, True),
    ("nested message removed", "message A { int32 x = 1; }", "", False, True),
    ("field added to oneof", "oneof o { int32 a = 1; }", "oneof o { int32 a = 1; string b = 2; }", True, False),
    ("field removed from oneof", "oneof o { int32 a = 1; string b = 2; }", "oneof o { int32 a = 1; }",
     False, True),
    ("whole oneof removed", "int32 x = 9; oneof o { int32 a = 1; string b = 2; }", "int32 x = 9;", True, True),
    ("one field into new oneof", "int32 a = 1;", "oneof o { int32 a = 1; }", True, True),
    ("two fields into a oneof", "int32 a = 1; int32 b = 2;", "oneof o { int32 a = 1; int32 b = 2; }",
     False, True),
    ("field into existing oneof", "int32 a = 1; oneof o { int32 b = 2; }", "oneof o { int32 a = 1; int32 b = 2; }",
     False, True),
    ("numeric singular to repeated", "int32 a = 1;", "repeated int32 a = 1;", False, False),
    ("string singular to repeated", "string a = 1;", "repeated string a = 1;", True, True),
]


@pytest.mark.parametrize("name, old, new, backward, forward", CASES, ids=[c[0] for c in CASES])
def test_compatibility_table(name, old, new, backward, forward):
    before, after = proto(P3.format(old)), proto(P3.format(new))
    assert (incompatibilities("BACKWARD", after, [before]) == []) is backward
    assert (incompatibilities("FORWARD", after, [before]) == []) is forward
    assert (incompatibilities("FULL", after, [before]) == []) is (backward and forward)
    assert incompatibilities("NONE", after, [before]) == []


PROTO2_CASES = [
    ("add required field", "optional int32 a = 1;", "optional int32 a = 1; required int32 b = 2;", False, False),
    ("remove required field", "required int32 a = 1; optional int32 b = 2;", "optional int32 b = 2;", False, False),
    ("remove optional field", "optional int32 a = 1; optional int32 b = 2;", "optional int32 b = 2;", True, True),
    ("optional becomes required", "optional int32 a = 1;", "required int32 a = 1;", False, True),
]


@pytest.mark.parametrize("name, old, new, backward, forward", PROTO2_CASES, ids=[c[0] for c in PROTO2_CASES])
def test_compatibility_proto2_required(name, old, new, backward, forward):
    before, after = proto(P3.format(old), "proto2"), proto(P3.format(new), "proto2")
    assert (after.compatibility_errors(before) == []) is backward
    assert (before.compatibility_errors(after) == []) is forward


def test_compatibility_file_level_rules():
    base = proto("message A { int32 x = 1; }\nmessage B { int32 y = 1; }")
    removed = proto("message A { int32 x = 1; }")
    moved = proto("message B { int32 y = 1; }\nmessage A { int32 x = 1; }")
    errors = removed.compatibility_errors(base)
    assert len(errors) == 1 and errors[0].startswith("MESSAGE_REMOVED at B")
    assert moved.compatibility_errors(base) == []  # message indexes are per schema id
    assert base.compatibility_errors(removed) == []  # adding a message
    other_package = proto("message A { int32 x = 1; }\nmessage B { int32 y = 1; }", package="u")
    assert [e.split(" ")[0] for e in other_package.compatibility_errors(base)] == ["PACKAGE_CHANGED"]
    proto2 = proto("message A { optional int32 x = 1; }\nmessage B { optional int32 y = 1; }", syntax="proto2")
    assert proto2.compatibility_errors(base) == [] and base.compatibility_errors(proto2) == []


def test_compatibility_messages_name_the_path():
    old = proto("message Order { Line line = 1; message Line { int32 qty = 1; } }")
    new = proto("message Order { Line line = 1; message Line { string qty = 1; } }")
    [error] = new.compatibility_errors(old)
    assert error.startswith("FIELD_SCALAR_KIND_CHANGED at Order.Line.qty (field 1)")
    assert "int32" in error and "string" in error
    assert "reading data written with an earlier schema" in incompatibilities("BACKWARD", new, [old])[0]


def test_compatibility_recursive_and_referenced_messages(address):
    rec = proto("message N { N next = 1; int32 v = 2; }")
    assert rec.compatibility_errors(rec) == []
    changed_address = parse("PROTOBUF", ADDRESS.replace("int32 zip", "string zip"))
    old = parse("PROTOBUF", 'syntax = "proto3";\nimport "address.proto";\nmessage P { geo.Address a = 1; }\n',
                {"address.proto": address})
    new = parse("PROTOBUF", old.text, {"address.proto": changed_address})
    [error] = new.compatibility_errors(old)
    assert error.startswith("FIELD_SCALAR_KIND_CHANGED at Address.zip")


def test_transitive_levels_check_every_version():
    v1 = proto("message M { int32 a = 1; }")
    v2 = proto("message M { }")
    v3 = proto("message M { string a = 1; }")
    assert incompatibilities("BACKWARD", v3, [v1, v2]) == []
    assert incompatibilities("BACKWARD_TRANSITIVE", v3, [v1, v2]) != []
    assert incompatibilities("FULL_TRANSITIVE", v3, [v1, v2]) != []


# -- message indexes and decoding --------------------------------------------------------------------------

@pytest.mark.parametrize("indexes", [[0], [1], [0, 0], [1, 0], [2, 3, 1], [70, 200]])
def test_message_indexes_match_confluent(indexes):
    buf = io.BytesIO()
    ProtobufSerializer._encode_varints(buf, indexes)
    assert protobuf.encode_indexes(indexes) == buf.getvalue()
    data = buf.getvalue() + b"rest"
    assert protobuf.read_indexes(data) == (SchemaId._read_index_array(io.BytesIO(data)), len(buf.getvalue()))
    assert protobuf.encode_indexes([0]) == b"\x00"


def test_read_indexes_rejects_truncated_input():
    with pytest.raises(ValueError):
        protobuf.read_indexes(b"\x04\x02")  # two indexes announced, one present
    with pytest.raises(ValueError):
        protobuf.read_indexes(b"")


def test_message_for_and_indexes_of():
    schema = proto("message A { message B { int32 x = 1; } message C { int32 y = 1; } }\n"
                   "message D { message E { int32 z = 1; } }")
    assert schema.message_for([0]).full_name == "t.A"
    assert schema.message_for([1, 0]).full_name == "t.D.E"
    assert schema.message_for([0, 1]).full_name == "t.A.C"
    assert schema.indexes_of("t.D.E") == [1, 0]
    with pytest.raises(ValueError):
        schema.message_for([2])


def test_decode_round_trip_of_protobuf_payloads(order):
    cls = order.message_class("shop.Order")
    message = cls(id=-5, ship_to={"street": "Main", "zip": 9}, tags=["a", "b"], card="visa", big=2**64 - 1,
                  status=1)
    message.at.FromDatetime(datetime.datetime(2024, 5, 6, 7, 8, 9, 123456))
    message.items["x"].sku = "sku-1"
    message.items["x"].price = 2.5
    framed = frame(42, protobuf.encode_indexes([0]) + message.SerializeToString())
    schema_id, payload = unframe(framed)
    assert schema_id == 42
    value = order.decode(payload, order)
    assert value == {
        "id": -5, "at": datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=datetime.timezone.utc),
        "ship_to": {"street": "Main", "zip": 9}, "items": {"x": {"sku": "sku-1", "price": 2.5}},
        "tags": ["a", "b"], "card": "visa", "token": None, "big": decimal.Decimal(2**64 - 1), "status": "DONE"}
    empty = order.decode(b"\x00", order)
    assert empty["ship_to"] is None and empty["at"] is None and empty["big"] is None
    assert empty["id"] == 0 and empty["status"] == "NEW" and empty["tags"] == [] and empty["items"] == {}


def test_decode_nested_message_by_indexes(order):
    item = order.message_class("shop.Order.Item")(sku="k", price=1.0)
    indexes = order.indexes_of("shop.Order.Item")
    assert indexes == [0, 1]  # the map entry type is nested type 0
    assert order.decode(protobuf.encode_indexes(indexes) + item.SerializeToString(), order) == \
        {"sku": "k", "price": 1.0}
    node = order.message_class("shop.Node")(v=1, next={"v": 2, "next": {"v": 3, "next": {"v": 4}}})
    value = order.decode(protobuf.encode_indexes([1]) + node.SerializeToString(), order)
    assert value == {"v": 1, "next": {"v": 2, "next": {"v": 3}}}  # recursion cut at depth 3


def test_decode_resolves_writer_to_reader():
    writer = proto("message Other { int32 q = 1; }\nmessage M { int32 a = 1; string gone = 2; E e = 3;\n"
                   "  enum E { X = 0; Y = 1; Z = 2; } }")
    reader = proto("message M { int64 renamed = 1; bool added = 4; E e = 3; enum E { X = 0; Y = 1; } }")
    payload = writer.message_class("t.M")(a=7, gone="x", e=2).SerializeToString()
    assert reader.decode(protobuf.encode_indexes([1]) + payload, writer) == \
        {"renamed": 7, "added": False, "e": "2"}
    with pytest.raises(ValueError, match="no message t.Other"):
        reader.decode(b"\x00", writer)
    with pytest.raises(ValueError):
        reader.decode(protobuf.encode_indexes([1]) + b"\x0a\xff", writer)  # truncated length-delimited


# -- Spark -------------------------------------------------------------------------------------------------

def test_spark_type(order):
    from pyspark.sql import types as T
    spark = order.spark_type()
    assert spark == T.StructType([
        T.StructField("id", T.LongType()), T.StructField("at", T.TimestampType()),
        T.StructField("ship_to", T.StructType([T.StructField("street", T.StringType()),
                                               T.StructField("zip", T.IntegerType())])),
        T.StructField("items", T.MapType(T.StringType(), T.StructType([
            T.StructField("sku", T.StringType()), T.StructField("price", T.DoubleType())]))),
        T.StructField("tags", T.ArrayType(T.StringType())), T.StructField("card", T.StringType()),
        T.StructField("token", T.BinaryType()), T.StructField("big", T.DecimalType(20, 0)),
        T.StructField("status", T.StringType())])
    assert order.spark_type_of("shop.Node").simpleString() == "struct<next:struct<next:struct<v:int>,v:int>,v:int>"
    scalars = proto("message S { int32 a = 1; sint32 b = 2; sfixed32 c = 3; int64 d = 4; sint64 e = 5;\n"
                    "  sfixed64 f = 6; uint32 g = 7; fixed32 h = 8; uint64 i = 9; fixed64 j = 10; float k = 11;\n"
                    "  double l = 12; bool m = 13; }")
    assert scalars.spark_type().simpleString() == (
        "struct<a:int,b:int,c:int,d:bigint,e:bigint,f:bigint,g:bigint,h:bigint,i:decimal(20,0),"
        "j:decimal(20,0),k:float,l:double,m:boolean>")


def test_decoded_values_fit_the_spark_type(order):
    from pyspark.sql import types as T
    cls = order.message_class("shop.Order")
    message = cls(id=1, tags=["t"], big=3, status=0, token=b"\x00")
    message.at.seconds, message.at.nanos = 1, 5000
    value = order.decode(b"\x00" + message.SerializeToString(), order)
    spark = order.spark_type()
    assert [f.name for f in spark.fields] == list(value)
    T._make_type_verifier(spark, nullable=False)(value)  # raises when a value does not fit its Spark type
    with pytest.raises((TypeError, ValueError)):
        T._make_type_verifier(spark, nullable=False)({**value, "big": 3})  # the verifier does check
