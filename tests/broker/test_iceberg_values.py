"""Iceberg tables of typed values: the broker's schema registry, confluent-kafka's Avro serializer, schema
evolution, and the DLQ table for records that do not decode or whose schema the table cannot take."""
import io
import json
import urllib.request

import pytest

from tests.clientutil import wait_until
from tests.icebergutil import catalog, topic_rows
from tests.registryutil import start_registry_broker

pytest.importorskip("pyiceberg")
fastavro = pytest.importorskip("fastavro")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

V1 = {"type": "record", "name": "Person", "fields": [{"name": "name", "type": "string"},
                                                       {"name": "age", "type": "int"}]}
V2 = {"type": "record", "name": "Person", "fields": [  # adds a field, widens int to long
    {"name": "name", "type": "string"}, {"name": "age", "type": "long"},
    {"name": "email", "type": ["null", "string"], "default": None}]}
V3 = {"type": "record", "name": "Person", "fields": [{"name": "name", "type": "int"}]}  # string -> int


@pytest.fixture
def registry_broker(tmp_path):
    broker, url = start_registry_broker(str(tmp_path / "data"), {"iceberg.catalog.retry.ms": 200})
    yield broker, url
    broker.stop()
    broker.close()


def create(bootstrap, topic, mode, **configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cfg = {"iceberg.mode": mode, "iceberg.target.lag.ms": "1000", **configs}
    admin.create_topics([NewTopic(topic, 2, 1, config=cfg)])[topic].result(30)


def rows_of(cat, name):
    from pyiceberg.exceptions import NoSuchTableError
    try:
        return cat.load_table(("kafka", name)).scan().to_arrow().to_pylist()
    except NoSuchTableError:
        return []


def test_typed_values_evolution_and_dlq(registry_broker):
    broker, url = registry_broker
    topic = "people"
    create(broker.bootstrap, topic, "value_schema_id_prefix")
    sr = SchemaRegistryClient({"url": url})
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})

    def send(schema, values, partition=0):
        ser = AvroSerializer(sr, json.dumps(schema), conf={"auto.register.schemas": True})
        for v in values:
            producer.produce(topic, value=ser(v, SerializationContext(topic, MessageField.VALUE)), partition=partition)
        assert producer.flush(30) == 0

    send(V1, [{"name": f"p{i}", "age": i} for i in range(10)])
    producer.produce(topic, value=b"not framed", partition=1)  # no magic byte: DLQ
    producer.produce(topic, value=b"\x00\x00\x00\x27\x0f" + b"x", partition=1)  # schema id 9999: DLQ
    send(V2, [{"name": f"q{i}", "age": 2**40 + i, "email": f"q{i}@x"} for i in range(10)], partition=1)
    _set_compatibility(url, f"{topic}-value", "NONE")
    send(V3, [{"name": i} for i in range(5)])  # incompatible with the table: DLQ with the reason

    cat = catalog(broker.data_dir)
    assert wait_until(lambda: len(rows_of(cat, topic)) == 20 and len(rows_of(cat, topic + "~dlq")) == 7,
                      timeout=90), (len(rows_of(cat, topic)), len(rows_of(cat, topic + "~dlq")))
    table = cat.load_table(("kafka", topic))
    fields = {f.name: str(f.field_type) for f in table.schema().fields}
    assert fields["age"] == "long" and fields["email"] == "string" and fields["name"] == "string"
    rows = sorted(rows_of(cat, topic), key=lambda r: (r["kafka"]["partition"], r["kafka"]["offset"]))
    assert [(r["name"], r["age"], r["email"]) for r in rows[:10]] == [(f"p{i}", i, None) for i in range(10)]
    assert [(r["name"], r["age"], r["email"]) for r in rows[10:]] == \
        [(f"q{i}", 2**40 + i, f"q{i}@x") for i in range(10)]
    dlq = rows_of(cat, topic + "~dlq")
    reasons = sorted(r["reason"] for r in dlq)
    assert sum("cannot be written" in r for r in reasons) == 5, reasons
    assert any("magic" in r.lower() for r in reasons), reasons
    assert any("9999" in r for r in reasons), reasons
    assert sorted(r["value"] for r in dlq if r["kafka"]["partition"] == 1)[:1] == [b"\x00\x00\x00'\x0fx"]
    # every offset of the topic is in exactly one of the two tables
    offsets = sorted((r["kafka"]["partition"], r["kafka"]["offset"]) for r in rows + dlq)
    assert offsets == sorted((r[0], r[1]) for r in topic_rows(broker.bootstrap, topic, 2))


def test_latest_schema_mode_and_drop(registry_broker):
    broker, url = registry_broker
    topic = "plain-avro"
    create(broker.bootstrap, topic, "value_schema_latest", **{"iceberg.invalid.record.action": "drop"})
    sr = SchemaRegistryClient({"url": url})
    from confluent_kafka.schema_registry import Schema
    sr.register_schema(f"{topic}-value", Schema(json.dumps(V1), "AVRO"))
    parsed = fastavro.parse_schema(V1)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(8):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {"name": f"n{i}", "age": i})
        producer.produce(topic, value=buf.getvalue(), partition=i % 2)
    producer.produce(topic, value=b"\xff", partition=0)  # not a Person: dropped, not in any table
    assert producer.flush(30) == 0
    cat = catalog(broker.data_dir)
    assert wait_until(lambda: len(rows_of(cat, topic)) == 8, timeout=90)
    assert sorted((r["name"], r["age"]) for r in rows_of(cat, topic)) == [(f"n{i}", i) for i in range(8)]
    assert rows_of(cat, topic + "~dlq") == []


def _set_compatibility(url: str, subject: str, level: str) -> None:
    req = urllib.request.Request(f"{url}/config/{subject}", method="PUT",
                                 data=json.dumps({"compatibility": level}).encode(),
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


@pytest.mark.parametrize("mode", ["value_schema_id_prefix", "value_schema_latest"])
def test_each_value_mode_from_plain_idempotent_and_transactional_producers(registry_broker, mode):
    """The typed table equals a read_committed consume of the topic, decoded: plain, idempotent and
    transactional producers, aborted transactions absent."""
    broker, url = registry_broker
    topic = f"typed-{mode.replace('_', '-')}"
    create(broker.bootstrap, topic, mode)
    sr = SchemaRegistryClient({"url": url})
    from confluent_kafka.schema_registry import Schema
    schema_id = sr.register_schema(f"{topic}-value", Schema(json.dumps(V1), "AVRO"))
    parsed = fastavro.parse_schema(V1)

    def encode(name, age):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {"name": name, "age": age})
        prefix = b"\x00" + schema_id.to_bytes(4, "big") if mode == "value_schema_id_prefix" else b""
        return prefix + buf.getvalue()

    plain = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    idem = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(10):
        plain.produce(topic, value=encode(f"plain{i}", i), partition=i % 2)
        idem.produce(topic, value=encode(f"idem{i}", i), partition=i % 2)
    assert plain.flush(30) == 0 and idem.flush(30) == 0
    tx = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{mode}", "linger.ms": 5})
    tx.init_transactions(30)
    for round_, commit in enumerate((True, False, True)):
        tx.begin_transaction()
        for i in range(6):
            tx.produce(topic, value=encode(f"{'tx' if commit else 'aborted'}{round_}-{i}", i), partition=i % 2)
        tx.commit_transaction(30) if commit else tx.abort_transaction(30)
    consumed = topic_rows(broker.bootstrap, topic, 2)
    want = sorted((p, o, dict(fastavro.schemaless_reader(
        io.BytesIO(v[5:] if mode == "value_schema_id_prefix" else v), parsed)))
        for p, o, _, _, v, _ in consumed)
    assert len(want) == 32 and not any(r[2]["name"].startswith("aborted") for r in want)
    cat = catalog(broker.data_dir)

    def table():
        return sorted((r["kafka"]["partition"], r["kafka"]["offset"], {"name": r["name"], "age": r["age"]})
                      for r in rows_of(cat, topic))
    assert wait_until(lambda: table() == want, timeout=90), (len(table()), len(want))
    assert rows_of(cat, topic + "~dlq") == []
