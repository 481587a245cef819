"""confluent-kafka's schema-registry serializers against a broker process serving the registry: Avro,
JSON Schema and Protobuf records go through a topic framed with their schema id and come back equal,
with SerializingProducer/DeserializingConsumer and with our Producer/Consumer given the same callables;
a compatible second schema version is registered in the middle; an incompatible one is refused (409)."""
import json
import time
import uuid

import pytest
from confluent_kafka import DeserializingConsumer, SerializingProducer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import StringDeserializer, StringSerializer

from pybroker.client import Consumer, Producer
from pybroker.schemas.wire import unframe
from tests.registryutil import start_registry_broker

WAIT_S = 30

AVRO_V1 = {"type": "record", "name": "User", "namespace": "interop",
           "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}
AVRO_V2 = {**AVRO_V1, "fields": AVRO_V1["fields"] + [{"name": "email", "type": ["null", "string"], "default": None}]}
AVRO_BAD = {**AVRO_V1, "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "string"}]}

# a closed content model: adding an optional property is then a compatible change
JSON_V1 = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "User", "type": "object",
           "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
           "required": ["name", "age"], "additionalProperties": False}
JSON_V2 = {**JSON_V1, "properties": {**JSON_V1["properties"], "email": {"type": "string"}}}
JSON_BAD = {**JSON_V1, "properties": {"name": {"type": "string"}, "age": {"type": "string"}}}

PROTO_V1 = 'syntax = "proto3";\npackage interop;\n\nmessage User {\n  string name = 1;\n  int32 age = 2;\n}\n'
PROTO_V2 = ('syntax = "proto3";\npackage interop;\n\n'
            'message User {\n  string name = 1;\n  int32 age = 2;\n  string email = 3;\n}\n')
PROTO_BAD = 'syntax = "proto3";\npackage interop;\n\nmessage User {\n  string name = 1;\n  string age = 2;\n}\n'

PEOPLE_V1 = [{"name": "ada", "age": 36}, {"name": "alan", "age": 41}]
PEOPLE_V2 = [{"name": "grace", "age": 85, "email": "grace@example.com"}, {"name": "edsger", "age": 72, "email": "e@x"}]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    broker, url = start_registry_broker(str(tmp_path_factory.mktemp("registry-serde") / "data"))
    yield broker, url
    try:
        broker.stop()
    finally:
        broker.close()


def proto_class(tmp_path, text: str, version: str):
    """The ``interop.User`` message class of a .proto compiled by protoc, in a descriptor pool of its own
    (two versions of one message cannot share the default pool)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc
    src = tmp_path / f"proto-{version}"
    src.mkdir()
    (src / "interop_user.proto").write_text(text)
    out = src / "user.desc"
    assert protoc.main(["protoc", f"-I{src}", f"--descriptor_set_out={out}", "interop_user.proto"]) == 0
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("interop.User"))


class Format:
    """How one format's serializers are made and its values compared."""

    def __init__(self, name, client, tmp_path, url):
        self.name, self.client, self.url = name, client, url
        if name == "PROTOBUF":
            self.classes = {1: proto_class(tmp_path, PROTO_V1, "v1"), 2: proto_class(tmp_path, PROTO_V2, "v2")}

    def serializer(self, version: int):
        if self.name == "AVRO":
            return AvroSerializer(self.client, json.dumps(AVRO_V1 if version == 1 else AVRO_V2))
        if self.name == "JSON":
            return JSONSerializer(json.dumps(JSON_V1 if version == 1 else JSON_V2), self.client)
        return ProtobufSerializer(self.classes[version], self.client)

    def deserializer(self):
        if self.name == "AVRO":
            return AvroDeserializer(self.client)  # each record read with its writer's schema
        if self.name == "JSON":
            return JSONDeserializer(json.dumps(JSON_V2), schema_registry_client=self.client)
        # a client of its own: get_version above cached the stored .proto text under each id, while the
        # deserializer asks for the serialized descriptor (format=serialized), which that cache would hide
        return ProtobufDeserializer(self.classes[2], {}, SchemaRegistryClient({"url": self.url}))

    def value(self, person: dict, version: int):
        return self.classes[version](**person) if self.name == "PROTOBUF" else dict(person)

    def comparable(self, value) -> dict:
        if self.name != "PROTOBUF":
            return value
        return {"name": value.name, "age": value.age, **({"email": value.email} if value.email else {})}

    def incompatible(self) -> Schema:
        if self.name == "AVRO":
            return Schema(json.dumps(AVRO_BAD), "AVRO")
        if self.name == "JSON":
            return Schema(json.dumps(JSON_BAD), "JSON")
        return Schema(PROTO_BAD, "PROTOBUF")


def new_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_confluent(bootstrap: str, topic: str, count: int, value_deserializer) -> list:
    c = DeserializingConsumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                               "enable.auto.commit": False, "key.deserializer": StringDeserializer("utf_8"),
                               "value.deserializer": value_deserializer})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got, deadline = [], time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None:
                got.append((msg.key(), msg.value()))
        return got
    finally:
        c.close()


def read_ours(bootstrap: str, topic: str, count: int, value_deserializer) -> list:
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"},
                  key_deserializer=StringDeserializer("utf_8"), value_deserializer=value_deserializer) as c:
        c.assign([(topic, 0, 0)])
        got, deadline = [], time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            got.extend((r.key, r.value) for r in c.poll(timeout_ms=500))
        return got


def raw_values(bootstrap: str, topic: str, count: int) -> list:
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([(topic, 0, 0)])
        got, deadline = [], time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            got.extend(r.value for r in c.poll(timeout_ms=500))
        return got


@pytest.mark.parametrize("schema_type", ["AVRO", "JSON", "PROTOBUF"])
def test_serializers_round_trip_through_a_topic(registry, schema_type, tmp_path):
    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    fmt = Format(schema_type, client, tmp_path, url)
    sent = [(f"k{i}", p, 1) for i, p in enumerate(PEOPLE_V1)] + [(f"k{i + 2}", p, 2) for i, p in enumerate(PEOPLE_V2)]
    expected = [(k, p) for k, p, _ in sent]

    # confluent-kafka's producer and consumer; v2 is registered (by its serializer) between the records
    topic = new_topic(f"serde-{schema_type.lower()}")
    subject = f"{topic}-value"
    serializers = {1: fmt.serializer(1), 2: fmt.serializer(2)}
    producers = {v: SerializingProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                                         "key.serializer": StringSerializer("utf_8"), "value.serializer": s})
                 for v, s in serializers.items()}
    for key, person, version in sent:
        producers[version].produce(topic, key=key, value=fmt.value(person, version))
        assert producers[version].flush(WAIT_S) == 0  # in order: each record acknowledged before the next
    assert client.get_versions(subject) == [1, 2]
    ids = [client.get_version(subject, v).schema_id for v in (1, 2)]
    framed = raw_values(broker.bootstrap, topic, len(sent))
    assert [unframe(v)[0] for v in framed] == [ids[0], ids[0], ids[1], ids[1]]
    got = read_confluent(broker.bootstrap, topic, len(sent), fmt.deserializer())
    assert [(k, fmt.comparable(v)) for k, v in got] == expected

    # our producer and consumer, given the same serializer objects
    ours = new_topic(f"serde-ours-{schema_type.lower()}")
    for version in (1, 2):
        with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0},
                      key_serializer=StringSerializer("utf_8"), value_serializer=serializers[version]) as p:
            for key, person, v in sent:
                if v == version:
                    p.produce(ours, key=key, value=fmt.value(person, version))
            assert p.flush(WAIT_S) == 0
    got = read_ours(broker.bootstrap, ours, len(sent), fmt.deserializer())
    assert [(k, fmt.comparable(v)) for k, v in got] == expected
    got = read_confluent(broker.bootstrap, ours, len(sent), fmt.deserializer())  # and across the two clients
    assert [(k, fmt.comparable(v)) for k, v in got] == expected
    assert client.get_versions(f"{ours}-value") == [1, 2]

    # an incompatible third version is refused, and the subject keeps its two
    with pytest.raises(SchemaRegistryError) as info:
        client.register_schema(subject, fmt.incompatible())
    assert info.value.http_status_code == 409
    assert client.get_versions(subject) == [1, 2]
