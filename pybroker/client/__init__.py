"""Kafka clients for pybroker (and any Kafka-protocol broker): producer, consumer, share consumer, admin.

Each client comes in two forms with the same methods: an asyncio one (``AsyncProducer``,
``AsyncConsumer``, ``AsyncShareConsumer``, ``AsyncAdminClient``) and a blocking one (``Producer``,
``Consumer``, ``ShareConsumer``, ``AdminClient``) that runs its async twin on a background event-loop
thread. The share consumer (KIP-932) consumes a topic as a queue with the other members of its share
group (see ``share_consumer``). Settings use
Kafka's property names (``bootstrap.servers``, ``linger.ms``, ``group.id``...); an unknown name
or a bad value raises ``ConfigError``. Broker errors raise ``KafkaError`` with Kafka's error
``name``/``code`` and ``retriable``.

Synchronous::

    from pybroker.client import AdminClient, NewTopic, Producer, Consumer

    with AdminClient({"bootstrap.servers": "127.0.0.1:9092"}) as admin:
        admin.create_topics([NewTopic("events", num_partitions=3)])

    producer = Producer({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 5})
    producer.produce("events", value=b"hello", key=b"k1")
    producer.flush()
    producer.close()

    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "g1",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["events"])
    for _ in range(10):  # the first polls may come back empty while the group forms
        for record in consumer.poll(timeout_ms=1000):
            print(record.partition, record.offset, record.value)
    consumer.close()

Asynchronous::

    import asyncio
    from pybroker.client import AsyncAdminClient, AsyncProducer, LATEST, TopicPartition

    async def main():
        async with AsyncAdminClient({"bootstrap.servers": "127.0.0.1:9092"}) as admin:
            producer = AsyncProducer({"bootstrap.servers": "127.0.0.1:9092"})
            await producer.start()
            meta = await producer.send("events", value=b"hello")  # a RecordMetadata
            await producer.close()
            ends = await admin.list_offsets({TopicPartition("events", meta.partition): LATEST})
            print(ends)

    asyncio.run(main())
"""
import importlib

# public name -> module (relative to this package unless absolute) that defines it
_EXPORTS = {
    "AdminClient": ".admin", "AsyncAdminClient": ".admin",
    "Producer": ".producer", "AsyncProducer": ".producer",
    "Consumer": ".consumer", "AsyncConsumer": ".consumer",
    "ShareConsumer": ".share_consumer", "AsyncShareConsumer": ".share_consumer",
    "ShareConsumerRecord": ".share_session", "AcknowledgeType": ".share_session", "IllegalStateError": ".share_session",
    "TopicPartition": ".types", "OffsetAndMetadata": ".types", "RecordMetadata": ".types",
    "ConsumerGroupMetadata": ".types", "TransactionError": ".errors",
    "NewTopic": ".types", "ConfigResource": ".types", "OffsetSpec": ".types",
    "ListOffsetsResult": ".types", "ClusterMetadata": ".types", "TopicMetadata": ".types",
    "PartitionMetadata": ".types", "BrokerMetadata": ".types", "GroupDescription": ".types",
    "GroupListing": ".types", "MemberDescription": ".types", "ShareGroupDescription": ".types",
    "ShareMemberDescription": ".types", "SharePartitionOffsetInfo": ".types",
    "EARLIEST": ".types", "LATEST": ".types", "MAX_TIMESTAMP": ".types",
    "KafkaError": ".errors", "KafkaErrors": ".errors", "KafkaConnectionError": ".errors",
    "KafkaTimeoutError": ".errors", "ConfigError": ".errors", "BufferFullError": ".errors",
    "UnknownTopicError": ".errors", "AuthenticationError": ".errors",
    "LoopThread": ".runner",
}

__all__ = sorted(_EXPORTS) + ["ConsumerRecord"]


def __getattr__(name: str):
    if name == "ConsumerRecord":
        from pybroker import core
        value = core.client_codec.ConsumerRecord
    else:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
