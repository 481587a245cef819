"""compression.type on a topic (Kafka's broker-side recompression): batches are stored in the topic's
codec whatever the producer used, their records, producer fields and offsets unchanged; ``producer``
(the default) keeps each batch as sent."""
import struct
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from pybroker.records import decode_records
from tests.clientutil import DEADLINE
from tests.kafka_wire import WireClient

CODEC = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def stored_codecs(broker, topic: str) -> list[int]:
    """The codec of every batch the partition holds, as a Fetch returns them."""
    with WireClient(broker.port) as w:
        data = bytes(w.fetch(topic, 0, 0).records or b"")
    codecs, pos = [], 0
    while pos + 61 <= len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        codecs.append(struct.unpack_from(">h", data, pos + 21)[0] & 0x07)
        assert [r.value for r in decode_records(data[pos:pos + 12 + length])]  # readable as stored
        pos += 12 + length
    return codecs


@pytest.mark.parametrize("topic_codec,producer_codec", [("zstd", "gzip"), ("uncompressed", "lz4"),
                                                        ("gzip", "none"), ("producer", "snappy")])
def test_batches_are_stored_in_the_topic_codec(shared_broker, topic_codec, producer_codec):
    topic = f"tc-{uuid.uuid4().hex[:8]}"
    with WireClient(shared_broker.port) as w:
        w.create_topic(topic, 1, {"compression.type": topic_codec, "compression.zstd.level": "9"})
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "compression.type": producer_codec,
                  "linger.ms": 20, "enable.idempotence": True})
    values = [b"value-%d " % i * 20 for i in range(300)]
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(DEADLINE) == 0
    want = CODEC[producer_codec if topic_codec == "producer" else topic_codec]
    codecs = stored_codecs(shared_broker, topic)
    assert codecs and set(codecs) == {want}
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    try:
        for _ in range(200):
            got += [m.value() for m in c.consume(300, 0.2) if not m.error()]
            if len(got) >= len(values):
                break
    finally:
        c.close()
    assert got == values
