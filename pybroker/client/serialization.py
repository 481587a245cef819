"""Key and value (de)serializers for the Producer and Consumer, called as confluent-kafka calls them.

A serializer is any callable ``serializer(obj, ctx) -> bytes | None`` and a deserializer
``deserializer(data, ctx) -> object``, where ``ctx`` has ``.topic``, ``.field`` (``MessageField.KEY``
or ``MessageField.VALUE``) and ``.headers``. So confluent-kafka's own serializers
(``confluent_kafka.serialization.StringSerializer``, ``schema_registry.avro.AvroSerializer``, the JSON
Schema and Protobuf ones...) work unchanged, and so does a plain function.

Set them with the settings ``key.serializer``/``value.serializer`` (producer) and
``key.deserializer``/``value.deserializer`` (consumer), or the constructor keywords of the same
names (``value_serializer=...``). When none is set, nothing here runs: records go out and come back
as bytes through the usual paths.
"""
from enum import Enum

from pybroker.client.errors import ConfigError

SERIALIZER_KEYS = ("key.serializer", "value.serializer")
DESERIALIZER_KEYS = ("key.deserializer", "value.deserializer")


class MessageField(str, Enum):
    """Which part of a record is being (de)serialized; equal to confluent-kafka's members ("key", "value")."""
    NONE = "none"
    KEY = "key"
    VALUE = "value"

    def __str__(self) -> str:  # subject name strategies build "<topic>-key" / "<topic>-value" from it
        return self.value


class SerializationContext:
    """What a (de)serializer is told about the record: its topic, the field, the record's headers."""
    __slots__ = ("topic", "field", "headers")

    def __init__(self, topic: str, field: MessageField, headers=None):
        self.topic = topic
        self.field = field
        self.headers = headers

    def __repr__(self) -> str:
        return f"SerializationContext(topic={self.topic!r}, field={self.field!s}, headers={self.headers!r})"


class SerializationError(Exception):
    """A (de)serializer raised: ``exception`` is what it raised (also the ``__cause__``)."""

    def __init__(self, exception: BaseException, record=None):
        super().__init__(f"{type(self).__name__}: {exception}")
        self.exception = exception
        self.record = record  # deserialization: the record as fetched (bytes key and value)


class KeySerializationError(SerializationError):
    pass


class ValueSerializationError(SerializationError):
    pass


class KeyDeserializationError(SerializationError):
    pass


class ValueDeserializationError(SerializationError):
    pass


def check_serde(value):
    """Config converter of the four (de)serializer settings: a callable (or None)."""
    if not callable(value):
        raise ValueError("expected a callable (obj, SerializationContext), such as confluent-kafka's serializers")
    return value


def merge_keywords(conf, keywords: dict) -> dict:
    """``conf`` with the constructor's ``key_serializer=``-style keywords added as settings
    (the same (de)serializer given both ways is ambiguous: refused)."""
    given = {name.replace("_", "."): fn for name, fn in keywords.items() if fn is not None}
    if not given:
        return conf
    conf = dict(conf or {})
    for name, fn in given.items():
        if conf.get(name) is not None:
            raise ConfigError(f"{name} is given both as a setting and as the keyword {name.replace('.', '_')}")
        conf[name] = fn
    return conf


def serialize(key_serializer, value_serializer, topic, key, value, headers) -> tuple:
    """(key bytes, value bytes, headers) for one record; serializers may add headers to ``headers``."""
    ctx = SerializationContext(topic, MessageField.KEY, headers)
    if key_serializer is not None:
        try:
            key = key_serializer(key, ctx)
        except Exception as exc:
            raise KeySerializationError(exc) from exc
    if value_serializer is not None:
        ctx.field = MessageField.VALUE
        try:
            value = value_serializer(value, ctx)
        except Exception as exc:
            raise ValueSerializationError(exc) from exc
    return key, value, ctx.headers


def serialize_many(serializer, topic, field, items, headers) -> list | None:
    """A produce_batch column (list, pyarrow array, pandas Series...) serialized one item at a time."""
    if items is None or serializer is None:
        return items
    if hasattr(items, "to_pylist"):
        items = items.to_pylist()
    ctx = SerializationContext(topic, field, headers)
    error = KeySerializationError if field is MessageField.KEY else ValueSerializationError
    try:
        return [serializer(item, ctx) for item in items]
    except Exception as exc:
        raise error(exc) from exc


class RecordDeserializer:
    """Turns fetched records into records whose key/value are what the deserializers return.

    A record that does not deserialize is raised as Key/ValueDeserializationError at its place in the
    stream: the records before it are returned first, the consumer's position is then set just past it,
    so the next poll goes on with the records after it (as confluent-kafka's consumer, one at a time)."""

    def __init__(self, key_deserializer, value_deserializer, record_type, seek):
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.record_type = record_type
        self.seek = seek  # seek(topic, partition, offset): refetch what was taken but not handed out

    def __call__(self, records: list) -> list:
        kd, vd, make = self.key_deserializer, self.value_deserializer, self.record_type
        out = []
        for i, r in enumerate(records):
            ctx = SerializationContext(r.topic, MessageField.KEY, r.headers or None)
            key, value = r.key, r.value
            try:
                if kd is not None:
                    try:
                        key = kd(key, ctx)
                    except Exception as exc:
                        raise KeyDeserializationError(exc, r) from exc
                if vd is not None:
                    ctx.field = MessageField.VALUE
                    try:
                        value = vd(value, ctx)
                    except Exception as exc:
                        raise ValueDeserializationError(exc, r) from exc
            except SerializationError:
                if out:  # hand out the good ones; the bad record is fetched again and raised next poll
                    self._rewind(records[i:])
                    return out
                self._rewind(records[1:])
                raise
            out.append(make(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, key, value,
                            r.headers, r.leader_epoch))
        return out

    def _rewind(self, left: list) -> None:
        """Fetch ``left`` (taken from the fetcher, not handed out) again: each partition from its first."""
        first = {}
        for r in left:
            first.setdefault((r.topic, r.partition), r.offset)
        for (topic, partition), offset in first.items():
            self.seek(topic, partition, offset)


def bind_serializers(producer, cfg) -> None:
    """Replace ``producer``'s produce/send/produce_batch (instance attributes) by ones that serialize
    first, when ``cfg`` sets a serializer; otherwise leave the producer's own (fast) methods alone."""
    ks, vs = cfg["key.serializer"], cfg["value.serializer"]
    if ks is None and vs is None:
        return
    produce, send, produce_batch = producer.produce, producer.send, producer.produce_batch

    def serializing_produce(topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                            on_delivery=None):
        key, value, headers = serialize(ks, vs, topic, key, value, headers)
        return produce(topic, value, key, partition, timestamp, headers, on_delivery)

    def serializing_send(topic, value=None, key=None, partition=-1, timestamp=None, headers=None):
        key, value, headers = serialize(ks, vs, topic, key, value, headers)
        return send(topic, value, key, partition, timestamp, headers)

    def serializing_produce_batch(topic, values, keys=None, partition=-1, timestamp=None, headers=None):
        values = serialize_many(vs, topic, MessageField.VALUE, values, headers)
        keys = serialize_many(ks, topic, MessageField.KEY, keys, headers)
        return produce_batch(topic, values, keys, partition, timestamp, headers)

    producer.produce, producer.send, producer.produce_batch = (serializing_produce, serializing_send,
                                                               serializing_produce_batch)
