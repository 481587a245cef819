"""confluent-kafka's own SchemaRegistryClient and Avro serializers, unmodified, against the registry."""
import importlib.util
import json

import pytest

from tests.unit.registry_harness import loop, node  # noqa: F401 (fixtures)

sr = pytest.importorskip("confluent_kafka.schema_registry")
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

USER_V1 = json.dumps({"type": "record", "name": "User", "namespace": "example",
                      "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]})
USER_V2 = json.dumps({"type": "record", "name": "User", "namespace": "example",
                      "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"},
                                 {"name": "email", "type": ["null", "string"], "default": None}]})
USER_BAD = json.dumps({"type": "record", "name": "User", "namespace": "example",
                       "fields": [{"name": "name", "type": "int"}]})


def client(node, **extra):
    return SchemaRegistryClient({"url": node.url, **extra})


def test_client_calls(node):
    c = client(node)
    schema_id = c.register_schema("users-value", Schema(USER_V1, "AVRO"))
    assert schema_id == 1
    assert json.loads(c.get_schema(schema_id).schema_str) == json.loads(USER_V1)
    latest = c.get_latest_version("users-value")
    assert (latest.schema_id, latest.version, latest.subject) == (1, 1, "users-value")
    assert c.get_subjects() == ["users-value"]
    assert c.test_compatibility("users-value", Schema(USER_V2, "AVRO")) is True
    assert c.test_compatibility("users-value", Schema(USER_BAD, "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as exc:
        c.register_schema("users-value", Schema(USER_BAD, "AVRO"))
    assert exc.value.http_status_code == 409 and exc.value.error_code == 409
    assert c.register_schema("users-value", Schema(USER_V2, "AVRO")) == 2
    found = client(node).lookup_schema("users-value", Schema(USER_V1, "AVRO"))
    assert (found.schema_id, found.version) == (1, 1)
    assert client(node).get_version("users-value", 2).schema_id == 2
    assert client(node).get_versions("users-value") == [1, 2]
    assert c.set_compatibility("users-value", "FULL") == {"compatibility": "FULL"}
    assert c.get_compatibility("users-value") == "FULL"
    assert c.set_compatibility(level="NONE") == {"compatibility": "NONE"}
    assert c.get_compatibility() == "NONE"
    assert sorted(c.get_schema_types()) == ["AVRO", "JSON", "PROTOBUF"]
    assert c.update_mode("users-value", "READONLY") == "READONLY"
    assert c.get_mode("users-value") == "READONLY"
    with pytest.raises(SchemaRegistryError) as exc:
        client(node).register_schema("users-value", Schema(USER_BAD, "AVRO"))
    assert exc.value.error_code == 42205
    c.delete_mode("users-value")
    assert c.delete_version("users-value", 2) == 2
    assert c.delete_subject("users-value") == [1]
    assert c.get_subjects() == []
    assert c.delete_subject("users-value", permanent=True) == [1, 2]
    with pytest.raises(SchemaRegistryError) as exc:
        client(node).get_latest_version("users-value")
    assert (exc.value.http_status_code, exc.value.error_code) == (404, 40401)
    with pytest.raises(SchemaRegistryError) as exc:
        client(node).get_schema(99)
    assert exc.value.error_code == 40403
    with pytest.raises(SchemaRegistryError) as exc:
        client(node).register_schema("x", Schema("{nope", "AVRO"))
    assert exc.value.error_code == 42201


def test_avro_serializer_round_trip(node):
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    c = client(node)
    serializer = AvroSerializer(c, USER_V1)
    ctx = SerializationContext("users", MessageField.VALUE)
    data = serializer({"name": "ann", "age": 41}, ctx)
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == 1
    assert AvroDeserializer(client(node))(data, ctx) == {"name": "ann", "age": 41}
    # a newer schema registered by another producer; its records read with the new reader schema
    data2 = AvroSerializer(client(node), USER_V2)({"name": "bo", "age": 7, "email": "b@x"}, ctx)
    assert int.from_bytes(data2[1:5], "big") == 2
    reader = AvroDeserializer(client(node), USER_V2)
    assert reader(data, ctx) == {"name": "ann", "age": 41, "email": None}
    assert reader(data2, ctx) == {"name": "bo", "age": 7, "email": "b@x"}
    assert client(node).get_subjects() == ["users-value"]


@pytest.mark.skipif(importlib.util.find_spec("pybroker.schemas.protobuf") is None, reason="no Protobuf support")
def test_protobuf_schema_through_the_client(node):
    proto = 'syntax = "proto3";\npackage t;\nmessage M { string a = 1; int32 b = 2; }\n'
    c = client(node)
    schema_id = c.register_schema("p-value", Schema(proto, "PROTOBUF"))
    got = client(node).get_schema(schema_id)
    assert got.schema_type == "PROTOBUF" and "message M" in got.schema_str
    assert client(node).get_latest_version("p-value").schema.schema_type == "PROTOBUF"
    serialized = node.request("GET", f"/schemas/ids/{schema_id}?format=serialized")[1]
    assert serialized["schemaType"] == "PROTOBUF" and serialized["schema"]


def test_json_schema_through_the_client(node):
    text = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    c = client(node)
    schema_id = c.register_schema("j-value", Schema(text, "JSON"))
    got = client(node).get_schema(schema_id)
    assert got.schema_type == "JSON" and json.loads(got.schema_str) == json.loads(text)
