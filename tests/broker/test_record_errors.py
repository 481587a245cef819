"""Per-record errors (KIP-467) with a real broker: a batch refused because of some of its records names
them (Produce v8+ ``record_errors`` and Kafka's batch-level ``error_message``), nothing of it is written,
and librdkafka fails exactly the named records with INVALID_RECORD and the rest of the batch with its
own _INVALID_DIFFERENT_RECORD. The rules in-process: tests/unit/test_record_validation.py."""
import time
import uuid

from confluent_kafka import KafkaError, Producer

from pybroker.records import Record, build_batch
from tests.clientutil import DEADLINE
from tests.kafka_wire import WireClient

INVALID_RECORD, INVALID_TIMESTAMP = 87, 32
HOUR = 3_600_000


def topic_with(broker, configs: dict) -> str:
    name = f"re-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.port) as w:
        w.create_topic(name, 1, configs)
    return name


def produce_one_batch(broker, topic: str, records) -> dict:
    """(key, timestamp) records sent in one batch by librdkafka; value -> (error code, error name)."""
    got = {}
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 200, "enable.idempotence": False,
                  "retries": 0, "batch.num.messages": 100})
    now = int(time.time() * 1000)
    for i, (key, offset_ms) in enumerate(records):
        p.produce(topic, key=key, value=b"v%d" % i, partition=0, timestamp=now + offset_ms,
                  on_delivery=lambda err, m: got.__setitem__(m.value(), (err.code(), err.name()) if err else (0, None)))
    assert p.flush(DEADLINE) == 0
    return got


def end_offset(broker, topic: str) -> int:
    with WireClient(broker.port) as w:
        return w.list_offset(topic, 0)


def test_librdkafka_fails_only_the_keyless_records_of_a_batch_to_a_compacted_topic(shared_broker):
    topic = topic_with(shared_broker, {"cleanup.policy": "compact"})
    got = produce_one_batch(shared_broker, topic, [(b"k1", 0), (None, 0), (b"k2", 0), (None, 0)])
    assert got == {b"v0": (KafkaError._INVALID_DIFFERENT_RECORD, "_INVALID_DIFFERENT_RECORD"),
                   b"v1": (INVALID_RECORD, "INVALID_RECORD"),
                   b"v2": (KafkaError._INVALID_DIFFERENT_RECORD, "_INVALID_DIFFERENT_RECORD"),
                   b"v3": (INVALID_RECORD, "INVALID_RECORD")}
    assert end_offset(shared_broker, topic) == 0  # the batch is refused whole
    assert produce_one_batch(shared_broker, topic, [(b"k1", 0), (b"k2", 0)]) == {b"v0": (0, None), b"v1": (0, None)}


def test_timestamps_out_of_bounds_name_their_records_on_the_wire(shared_broker):
    topic = topic_with(shared_broker, {"message.timestamp.before.max.ms": HOUR, "message.timestamp.after.max.ms": HOUR})
    now = int(time.time() * 1000)
    batch = bytes(build_batch([Record(b"a", b"k", timestamp=now), Record(b"b", b"k", timestamp=now - 2 * HOUR),
                               Record(b"c", b"k", timestamp=now + 2 * HOUR)], base_timestamp=now))
    with WireClient(shared_broker.port) as w:
        r = w.produce(topic, 0, batch, version=8)
        assert (r.error_code, r.base_offset) == (INVALID_TIMESTAMP, -1)
        assert r.error_message == "One or more records have been rejected due to invalid timestamp"
        assert [e.batch_index for e in r.record_errors] == [1, 2]
        assert r.record_errors[0].batch_index_error_message.startswith(
            f"Timestamp {now - 2 * HOUR} of message with offset 1 is out of range. The timestamp should be within [")
        old = w.produce(topic, 0, batch, version=7)  # before v8 the code alone
        assert (old.error_code, old.record_errors) == (INVALID_TIMESTAMP, [])
        assert w.produce(topic, 0, bytes(build_batch([Record(b"ok", b"k")], base_timestamp=now))).error_code == 0
    # librdkafka names per-record failures only for INVALID_RECORD: a timestamp refusal fails the batch
    got = produce_one_batch(shared_broker, topic, [(b"k", 0), (b"k", -2 * HOUR)])
    assert set(got.values()) == {(INVALID_TIMESTAMP, "INVALID_TIMESTAMP")}
    assert end_offset(shared_broker, topic) == 1


def test_the_deprecated_difference_bound_applies_and_log_append_time_ignores_bounds(shared_broker):
    old_style = topic_with(shared_broker, {"message.timestamp.difference.max.ms": HOUR})
    assert set(produce_one_batch(shared_broker, old_style, [(b"k", 2 * HOUR)]).values()) == \
        {(INVALID_TIMESTAMP, "INVALID_TIMESTAMP")}
    stamped = topic_with(shared_broker, {"message.timestamp.difference.max.ms": HOUR,
                                         "message.timestamp.type": "LogAppendTime"})
    assert produce_one_batch(shared_broker, stamped, [(b"k", 2 * HOUR)]) == {b"v0": (0, None)}
