"""spark.read.format("pybroker") with value.format/key.format against a broker process serving the schema
registry: records framed by confluent-kafka's Avro, JSON Schema and Protobuf serializers (two compatible
schema versions each) come back as typed columns equal to what confluent-kafka's deserializers return;
a record with an unknown schema id is kept in ``_corrupt`` (PERMISSIVE), dropped (DROPMALFORMED) or fails
the read naming its position (FAILFAST)."""
import json
import struct
import time

import pytest
from confluent_kafka import DeserializingConsumer, Producer, SerializingProducer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import StringSerializer

from tests.registryutil import start_registry_broker
from tests.spark_fixtures import *  # noqa: F401,F403 - fixtures and helpers

AVRO_V1 = {"type": "record", "name": "Reading", "namespace": "spark.interop",
           "fields": [{"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"},
                      {"name": "tags", "type": {"type": "array", "items": "string"}}]}
AVRO_V2 = {**AVRO_V1, "fields": AVRO_V1["fields"] + [
    {"name": "site", "type": ["null", "string"], "default": None},
    {"name": "count", "type": "long", "default": 0}]}

JSON_V1 = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Reading", "type": "object",
           "properties": {"sensor": {"type": "string"}, "celsius": {"type": "number"}},
           "required": ["sensor", "celsius"], "additionalProperties": False}
JSON_V2 = {**JSON_V1, "properties": {**JSON_V1["properties"], "site": {"type": "string"}}}

PROTO_V1 = ('syntax = "proto3";\npackage spark.interop;\n\n'
            'message Reading {\n  string sensor = 1;\n  double celsius = 2;\n  repeated string tags = 3;\n}\n')
PROTO_V2 = ('syntax = "proto3";\npackage spark.interop;\n\n'
            'message Reading {\n  string sensor = 1;\n  double celsius = 2;\n  repeated string tags = 3;\n'
            '  string site = 4;\n  int64 count = 5;\n}\n')

V1_RECORDS = [{"sensor": "s1", "celsius": 21.5, "tags": ["a"]}, {"sensor": "s2", "celsius": -3.25, "tags": []}]
V2_RECORDS = [{"sensor": "s3", "celsius": 0.5, "tags": ["b", "c"], "site": "lab", "count": 7},
              {"sensor": "s4", "celsius": 99.0, "tags": [], "site": None, "count": 1}]
UNKNOWN_ID = 987_654
WAIT_S = 30


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    broker, url = start_registry_broker(str(tmp_path_factory.mktemp("spark-registry") / "data"))
    yield broker, url
    try:
        broker.stop()
    finally:
        broker.close()


def proto_class(tmp_path, text: str, tag: str):
    """``spark.interop.Reading`` compiled by protoc into a descriptor pool of its own (one per version)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    src = tmp_path / f"proto-{tag}"
    src.mkdir()
    (src / "reading.proto").write_text(text)
    out = src / "reading.desc"
    assert protoc.main(["protoc", f"-I{src}", f"--descriptor_set_out={out}", "reading.proto"]) == 0
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("spark.interop.Reading"))


class Format:
    """One format's serializers (v1, v2), its deserializer and how its values compare to Spark rows."""

    def __init__(self, name: str, client, tmp_path):
        self.name, self.client = name, client
        if name == "protobuf":
            self.classes = {1: proto_class(tmp_path, PROTO_V1, "v1"), 2: proto_class(tmp_path, PROTO_V2, "v2")}

    def records(self, version: int) -> list:
        records = V1_RECORDS if version == 1 else V2_RECORDS
        if self.name == "json":  # JSON_V* have no tags/count; absent optional properties are left out
            return [{k: v for k, v in r.items() if k in ("sensor", "celsius", "site") and v is not None}
                    for r in records]
        if self.name == "protobuf":
            return [self.classes[version](**{k: v for k, v in r.items() if v is not None}) for r in records]
        return records

    def serializer(self, version: int):
        if self.name == "avro":
            return AvroSerializer(self.client, json.dumps(AVRO_V1 if version == 1 else AVRO_V2))
        if self.name == "json":
            return JSONSerializer(json.dumps(JSON_V1 if version == 1 else JSON_V2), self.client)
        return ProtobufSerializer(self.classes[version], self.client)

    def deserializer(self, reader_version: int = 2):
        if self.name == "avro":
            return AvroDeserializer(self.client, json.dumps(AVRO_V1 if reader_version == 1 else AVRO_V2))
        if self.name == "json":
            return JSONDeserializer(json.dumps(JSON_V2), schema_registry_client=self.client)
        return ProtobufDeserializer(self.classes[2], {})

    def expected_row(self, value) -> dict:
        """A deserialized value as the Spark row of the reader schema (v2) should show it."""
        if self.name == "protobuf":
            return {f.name: (list(getattr(value, f.name)) if f.is_repeated else getattr(value, f.name))
                    for f in value.DESCRIPTOR.fields}
        if self.name == "json":
            return {name: value.get(name) for name in JSON_V2["properties"]}
        return value


@pytest.fixture(scope="module")
def topics(registry, tmp_path_factory):
    """Per format: a topic with two v1 records, two v2 records, then a record framed with an unknown id;
    and what confluent-kafka's deserializers return for the first four."""
    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    tmp = tmp_path_factory.mktemp("spark-registry-proto")
    out = {}
    for name in ("avro", "json", "protobuf"):
        fmt = Format(name, client, tmp)
        topic = create_topic(broker.bootstrap, unique_topic(f"typed-{name}"))
        for version in (1, 2):
            producer = SerializingProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                                            "key.serializer": StringSerializer("utf_8"),
                                            "value.serializer": fmt.serializer(version)})
            for i, value in enumerate(fmt.records(version)):
                producer.produce(topic, key=f"{version}-{i}", value=value)
                assert producer.flush(WAIT_S) == 0  # in order
        corrupt = struct.pack(">bI", 0, UNKNOWN_ID) + b"\x02\x04no"
        raw = Producer({"bootstrap.servers": broker.bootstrap})
        raw.produce(topic, key=b"bad", value=corrupt)
        assert raw.flush(WAIT_S) == 0
        out[name] = (topic, fmt, corrupt, read_confluent(broker.bootstrap, topic, 4, fmt.deserializer()))
    return out


def read_confluent(bootstrap: str, topic: str, count: int, value_deserializer) -> list:
    consumer = DeserializingConsumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                                      "enable.auto.commit": False, "value.deserializer": value_deserializer})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got, deadline = [], time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert len(got) == count
        return got
    finally:
        consumer.close()


def typed(spark, broker, url, topic, **options):
    opts = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, "schema.registry.url": url, **options}
    return spark.read.format("pybroker").options(**opts).load()


def as_dict(row) -> dict:
    return row.asDict(recursive=True) if row is not None else None


@pytest.mark.parametrize("name,value_format", [("avro", "avro"), ("json", "confluent"), ("protobuf", "protobuf")])
def test_typed_values_equal_the_deserializers(spark, registry, topics, name, value_format):
    broker, url = registry
    topic, fmt, corrupt, expected = topics[name]
    df = typed(spark, broker, url, topic, **{"value.format": value_format})
    assert df.schema["value"].dataType.typeName() == "struct"
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "_corrupt"]
    rows = sorted(df.collect(), key=lambda r: r["offset"])
    assert len(rows) == 5
    assert [as_dict(r["value"]) for r in rows[:4]] == [fmt.expected_row(v) for v in expected]
    assert [r["key"] for r in rows[:4]] == [b"1-0", b"1-1", b"2-0", b"2-1"]  # the key stays bytes
    assert all(r["_corrupt"] is None for r in rows[:4])
    bad = rows[4]
    assert bad["value"] is None and bad["key"] == b"bad"
    assert bad["_corrupt"]["value"] == corrupt and bad["_corrupt"]["key"] is None
    assert f"unknown schema id {UNKNOWN_ID}" in bad["_corrupt"]["error"]


def test_older_reader_version_and_a_typed_column_in_sql(spark, registry, topics):
    broker, url = registry
    topic, fmt, _, _ = topics["avro"]
    expected = read_confluent(broker.bootstrap, topic, 4, fmt.deserializer(reader_version=1))
    df = typed(spark, broker, url, topic, **{"value.format": "avro", "value.schema.version": "1",
                                             "mode": "DROPMALFORMED"})
    assert "_corrupt" not in df.columns
    rows = df.selectExpr("offset", "value", "value.celsius * 2 AS twice").orderBy("offset").collect()
    assert [as_dict(r["value"]) for r in rows] == expected  # v2 records resolved to v1; the bad one dropped
    assert [r["twice"] for r in rows] == [v["celsius"] * 2 for v in expected]


def test_failfast_names_the_record(spark, registry, topics):
    broker, url = registry
    topic, _, _, _ = topics["avro"]
    df = typed(spark, broker, url, topic, **{"value.format": "avro", "mode": "FAILFAST"})
    with pytest.raises(Exception) as info:
        df.collect()
    message = str(info.value)
    assert f"{topic}-0 at offset 4" in message and f"unknown schema id {UNKNOWN_ID}" in message
    good = typed(spark, broker, url, topic, **{"value.format": "avro", "mode": "FAILFAST",
                                               "endingOffsets": json.dumps({topic: {"0": 4}})})
    assert good.count() == 4  # the records before the bad one read fine


def test_missing_subject_fails_at_load(spark, registry, topics):
    broker, url = registry
    topic, _, _, _ = topics["avro"]
    with pytest.raises(Exception) as info:
        typed(spark, broker, url, topic, **{"value.format": "avro", "value.subject": "no-such-subject"})
    assert "no-such-subject" in str(info.value)
    with pytest.raises(Exception) as info:  # the subject holds Avro, not Protobuf
        typed(spark, broker, url, topic, **{"value.format": "protobuf"})
    assert "AVRO schema" in str(info.value)


def test_streaming_read_is_typed(spark, registry, topics, tmp_path):
    broker, url = registry
    topic, fmt, _, expected = topics["avro"]
    stream = (spark.readStream.format("pybroker")
              .options(**{"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, "schema.registry.url": url,
                          "value.format": "avro", "startingOffsets": "earliest", "mode": "DROPMALFORMED"})
              .load())
    table = f"typed_{topic.replace('-', '_')}"
    query = (stream.select("offset", "value").writeStream.format("memory").queryName(table)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(60)
        rows = spark.sql(f"SELECT * FROM {table} ORDER BY offset").collect()
    finally:
        query.stop()
    assert [as_dict(r["value"]) for r in rows] == expected
