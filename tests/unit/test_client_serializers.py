"""Serializers and deserializers on our Producer and Consumer, called as confluent-kafka calls them:
plain callables, confluent-kafka's own string and Avro serializers (the Avro ones against a registry
served in this process), errors raised in their turn. One broker on a thread of this process."""
import asyncio
import json
import time
import uuid

import pytest
from confluent_kafka.serialization import MessageField as ConfluentField
from confluent_kafka.serialization import StringDeserializer, StringSerializer

from pybroker.client import AsyncConsumer, AsyncProducer, ConfigError, Consumer, Producer
from pybroker.client.serialization import (KeySerializationError, MessageField, SerializationContext,
                                           ValueDeserializationError, ValueSerializationError)
from pybroker.embedded import EmbeddedBroker

WAIT_S = 20


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(mode="inprocess") as b:
        yield b


def topic_of(broker, partitions: int = 1) -> str:
    name = f"serde-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name, partitions=partitions)
    return name


def consumer_conf(broker) -> dict:
    return {"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest",
            "fetch.max.wait.ms": 50}


def read(consumer, count: int) -> list:
    """``count`` records (or raised errors, in order) from an assigned consumer; bounded."""
    got, deadline = [], time.monotonic() + WAIT_S
    while len(got) < count and time.monotonic() < deadline:
        try:
            got.extend(consumer.poll(timeout_ms=200))
        except ValueDeserializationError as exc:
            got.append(exc)
    assert len(got) == count, got
    return got


def json_serializer(seen):
    def serialize(obj, ctx):
        seen.append((ctx.topic, ctx.field, ctx.headers))
        return None if obj is None else json.dumps(obj).encode()
    return serialize


def json_deserializer(seen):
    def deserialize(data, ctx):
        seen.append((ctx.topic, ctx.field, ctx.headers))
        return None if data is None else json.loads(data)
    return deserialize


def test_message_field_and_context_are_what_confluent_serializers_expect():
    assert MessageField.KEY == ConfluentField.KEY and MessageField.VALUE == ConfluentField.VALUE
    assert str(MessageField.VALUE) == "value" and "t-" + MessageField.KEY == "t-key"
    ctx = SerializationContext("t", MessageField.VALUE, [("h", b"1")])
    assert (ctx.topic, ctx.field, ctx.headers) == ("t", "value", [("h", b"1")])
    assert StringSerializer()("é", ctx) == "é".encode()


def test_round_trip_with_callables_given_as_keywords(broker):
    topic = topic_of(broker)
    ser_seen, des_seen = [], []
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0},
                  key_serializer=json_serializer(ser_seen), value_serializer=json_serializer(ser_seen)) as p:
        p.produce(topic, value={"n": 1, "s": "a"}, key=["k", 1], headers=[("h", b"x")])
        md = p.send(topic, value={"n": 2}, key=None).result(WAIT_S)
        assert md.offset == 1
        assert p.flush(WAIT_S) == 0
    assert ser_seen[:2] == [(topic, "key", [("h", b"x")]), (topic, "value", [("h", b"x")])]
    with Consumer(consumer_conf(broker), key_deserializer=json_deserializer(des_seen),
                  value_deserializer=json_deserializer(des_seen)) as c:
        c.assign([(topic, 0, 0)])
        first, second = read(c, 2)
    assert (first.key, first.value, first.offset, first.headers) == (["k", 1], {"n": 1, "s": "a"}, 0, [("h", b"x")])
    assert (second.key, second.value) == (None, {"n": 2})
    assert des_seen[0] == (topic, "key", [("h", b"x")]) and des_seen[3] == (topic, "value", None)


def test_settings_by_name_and_confluent_string_serde(broker):
    topic = topic_of(broker)
    conf = {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0,
            "key.serializer": StringSerializer("utf_8"), "value.serializer": StringSerializer("utf_8")}
    with Producer(conf) as p:
        p.produce(topic, value="héllo", key="clé")
        futures = p.produce_batch(topic, ["a", "b", None])
        assert p.flush(WAIT_S) == 0
        assert futures.result(WAIT_S) == [(0, 1, 3)]
    with Consumer({**consumer_conf(broker), "value.deserializer": StringDeserializer("utf_8")}) as c:
        c.assign([(topic, 0, 0)])
        records = read(c, 4)
    assert [(r.key, r.value) for r in records] == [("clé".encode(), "héllo"), (None, "a"), (None, "b"), (None, None)]


def test_without_serializers_produce_is_the_native_method(broker):
    with Producer({"bootstrap.servers": broker.bootstrap_servers}) as p:
        assert p.produce == p._engine.appender.produce  # nothing stands between the caller and the fast path
        assert "send" not in vars(p)
    with Consumer(consumer_conf(broker)) as c:
        assert c._async._deserialize is None


def test_bad_settings_are_refused(broker):
    base = {"bootstrap.servers": broker.bootstrap_servers}
    with pytest.raises(ConfigError, match="value.serializer"):
        Producer({**base, "value.serializer": "org.apache.kafka.common.serialization.StringSerializer"})
    with pytest.raises(ConfigError, match="both"):
        Producer({**base, "value.serializer": StringSerializer()}, value_serializer=StringSerializer())
    with pytest.raises(ConfigError, match="key.deserializer"):
        Consumer({**base, "key.deserializer": 3})


def test_serializer_errors_are_raised_before_the_record_is_accepted(broker):
    topic = topic_of(broker)

    def refuse(obj, ctx):
        raise TypeError(f"cannot serialize {obj!r}")

    with Producer({"bootstrap.servers": broker.bootstrap_servers}, value_serializer=refuse) as p:
        with pytest.raises(ValueSerializationError, match="cannot serialize 1") as info:
            p.produce(topic, value=1)
        assert isinstance(info.value.exception, TypeError)
        assert len(p) == 0
    with Producer({"bootstrap.servers": broker.bootstrap_servers}, key_serializer=refuse) as p:
        with pytest.raises(KeySerializationError):
            p.send(topic, value=b"v", key="k")


def test_a_record_that_does_not_deserialize_is_raised_in_its_turn(broker):
    topic = topic_of(broker)
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 50}) as p:
        for v in (b'{"a": 1}', b"not json", b'{"a": 3}', b'{"a": 4}'):
            p.produce(topic, value=v)
        assert p.flush(WAIT_S) == 0
    with Consumer(consumer_conf(broker), value_deserializer=json_deserializer([])) as c:
        c.assign([(topic, 0, 0)])
        good, bad, *rest = read(c, 4)
        assert good.value == {"a": 1}
        assert isinstance(bad, ValueDeserializationError) and bad.record.value == b"not json"
        assert bad.record.offset == 1 and isinstance(bad.exception, json.JSONDecodeError)
        assert [r.value for r in rest] == [{"a": 3}, {"a": 4}]
        assert c.position((topic, 0)) == 4


def test_async_clients_take_the_same_callables(broker):
    topic = topic_of(broker)

    async def main():
        async with AsyncProducer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0},
                                 value_serializer=json_serializer([])) as p:
            md = await p.send(topic, value=[1, 2])
            await p.produce(topic, value={"x": None})
            assert await p.flush(WAIT_S) == 0
        assert md.offset == 0
        async with AsyncConsumer(consumer_conf(broker), value_deserializer=json_deserializer([])) as c:
            c.assign([(topic, 0, 0)])
            got, deadline = [], time.monotonic() + WAIT_S
            while len(got) < 2 and time.monotonic() < deadline:
                got.extend(await c.poll(200))
        return [r.value for r in got]

    assert asyncio.run(main()) == [[1, 2], {"x": None}]
