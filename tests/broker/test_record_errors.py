"""Per-record errors (KIP-467) with a real broker: a batch refused because of some of its records names
them (Produce v8+ ``record_errors`` and Kafka's batch-level ``error_message``, with the partition's log
start offset), nothing of it is written, and clients fail exactly the named records: librdkafka with
INVALID_RECORD and the rest of the batch with its own _INVALID_DIFFERENT_RECORD (a lone bad record:
the whole batch with the partition's error, as against Kafka 3.8), Kafka's Java producer with an
InvalidRecordException and a KafkaException for the others. The rules in-process:
tests/unit/test_record_validation.py."""
import os
import re
import struct
import subprocess
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer

from pybroker import core
from pybroker.protocol import REQUESTS
from pybroker.records import TIMESTAMP_LOG_APPEND, Record, build_batch
from tests.clientutil import DEADLINE
from tests.kafka_wire import WireClient

INVALID_RECORD, INVALID_TIMESTAMP, CORRUPT_MESSAGE = 87, 32, 2
DIFFERENT = (KafkaError._INVALID_DIFFERENT_RECORD, "_INVALID_DIFFERENT_RECORD")
BAD_RECORD = (INVALID_RECORD, "INVALID_RECORD")
BAD_TIMESTAMP = (INVALID_TIMESTAMP, "INVALID_TIMESTAMP")
HOUR = 3_600_000
KAFKA_BIN = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "pybroker-kafka", "kafka_2.13-3.8.0", "bin")


def topic_with(broker, configs: dict) -> str:
    name = f"re-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.port) as w:
        w.create_topic(name, 1, configs)
    return name


def produce_one_batch(broker, topic: str, records) -> dict:
    """(key, timestamp) records sent in one batch by librdkafka; value -> (error code, error name)."""
    got = {}
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000, "enable.idempotence": False,
                  "retries": 0, "batch.num.messages": 100})
    p.list_topics(topic, timeout=DEADLINE)  # the leader known first: the records wait in one batch for the linger
    now = int(time.time() * 1000)
    for i, (key, offset_ms) in enumerate(records):
        p.produce(topic, key=key, value=b"v%d" % i, partition=0, timestamp=now + offset_ms,
                  on_delivery=lambda err, m: got.__setitem__(m.value(), (err.code(), err.name()) if err else (0, None)))
    assert p.flush(DEADLINE) == 0
    return got


def end_offset(broker, topic: str) -> int:
    with WireClient(broker.port) as w:
        return w.list_offset(topic, 0)


def trim(w: WireClient, topic: str, offset: int) -> None:
    """DeleteRecords up to ``offset``: the log start offset the refusals must then tell."""
    req = REQUESTS[21]
    r = w.request(req(timeout_ms=10000, topics=[req.DeleteRecordsTopic(name=topic, partitions=[
        req.DeleteRecordsPartition(partition_index=0, offset=offset)])]), 2)
    assert r.topics[0].partitions[0].error_code == 0


def test_librdkafka_fails_only_the_keyless_records_of_a_batch_to_a_compacted_topic(shared_broker):
    topic = topic_with(shared_broker, {"cleanup.policy": "compact"})
    got = produce_one_batch(shared_broker, topic, [(b"k1", 0), (None, 0), (b"k2", 0), (None, 0)])
    assert got == {b"v0": DIFFERENT, b"v1": BAD_RECORD, b"v2": DIFFERENT, b"v3": BAD_RECORD}
    assert end_offset(shared_broker, topic) == 0  # the batch is refused whole
    # one bad record: librdkafka fails the batch with the partition's error (so it does against Kafka)
    assert produce_one_batch(shared_broker, topic, [(b"k1", 0), (None, 0)]) == {b"v0": BAD_RECORD, b"v1": BAD_RECORD}
    assert produce_one_batch(shared_broker, topic, [(b"k1", 0), (b"k2", 0)]) == {b"v0": (0, None), b"v1": (0, None)}


def test_our_producer_fails_only_the_named_records(shared_broker):
    """pybroker's own producer reads record_errors as librdkafka does: the named records fail INVALID_RECORD,
    their batch-mates a retriable INVALID_DIFFERENT_RECORD the application may send again."""
    from pybroker.client import Producer as OurProducer
    topic = topic_with(shared_broker, {"cleanup.policy": "compact"})
    got = {}
    p = OurProducer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 200, "enable.idempotence": False,
                     "retries": 0})
    try:
        for i, key in enumerate([b"k1", None, b"k2"]):
            p.produce(topic, key=key, value=b"v%d" % i, partition=0,
                      on_delivery=lambda err, m, i=i: got.__setitem__(i, err))
        assert p.flush(DEADLINE) == 0
    finally:
        p.close()
    assert got[1].code == INVALID_RECORD and not got[1].retriable
    assert [(got[i].name, got[i].retriable) for i in (0, 2)] == [("INVALID_DIFFERENT_RECORD", True)] * 2
    assert end_offset(shared_broker, topic) == 0
    p = OurProducer({"bootstrap.servers": shared_broker.bootstrap})
    try:  # the batch-mates sent again alone are taken
        for i in (0, 2):
            assert p.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0).result(DEADLINE).offset >= 0
    finally:
        p.close()
    assert end_offset(shared_broker, topic) == 2


def test_timestamps_out_of_bounds_name_their_records_on_the_wire(shared_broker):
    topic = topic_with(shared_broker, {"message.timestamp.before.max.ms": HOUR, "message.timestamp.after.max.ms": HOUR})
    now = int(time.time() * 1000)
    batch = bytes(build_batch([Record(b"a", b"k", timestamp=now), Record(b"b", b"k", timestamp=now - 2 * HOUR),
                               Record(b"c", b"k", timestamp=now + 2 * HOUR)], base_timestamp=now))
    with WireClient(shared_broker.port) as w:
        assert w.produce(topic, 0, bytes(build_batch([b"x", b"y"], base_timestamp=now))).error_code == 0
        trim(w, topic, 1)
        for version in (8, 9, 10, 11):
            r = w.produce(topic, 0, batch, version=version)
            assert (r.error_code, r.base_offset, r.log_append_time_ms, r.log_start_offset) == \
                (INVALID_TIMESTAMP, -1, -1, 1), version
            assert r.error_message == "One or more records have been rejected due to invalid timestamp"
            assert [e.batch_index for e in r.record_errors] == [1, 2]
            assert re.fullmatch(rf"Timestamp {now - 2 * HOUR} of message with offset 1 is out of range\. The "
                                r"timestamp should be within \[(\d+), (\d+)\]",
                                r.record_errors[0].batch_index_error_message)
            assert r.record_errors[1].batch_index_error_message.startswith(f"Timestamp {now + 2 * HOUR} of message "
                                                                           "with offset 2 is out of range.")
        old = w.produce(topic, 0, batch, version=7)  # before v8 the code alone
        assert (old.error_code, old.record_errors, old.error_message, old.log_start_offset) == \
            (INVALID_TIMESTAMP, [], None, 1)
        assert w.produce(topic, 0, bytes(build_batch([Record(b"ok", b"k")], base_timestamp=now))).error_code == 0
    assert end_offset(shared_broker, topic) == 3
    # librdkafka: two bad records are INVALID_RECORD and the other _INVALID_DIFFERENT_RECORD; one bad record
    # fails the whole batch with INVALID_TIMESTAMP (the same against Kafka 3.8)
    assert produce_one_batch(shared_broker, topic, [(b"k", 0), (b"k", -2 * HOUR), (b"k", 2 * HOUR)]) == \
        {b"v0": DIFFERENT, b"v1": BAD_RECORD, b"v2": BAD_RECORD}
    assert produce_one_batch(shared_broker, topic, [(b"k", 0), (b"k", -2 * HOUR)]) == \
        {b"v0": BAD_TIMESTAMP, b"v1": BAD_TIMESTAMP}
    assert end_offset(shared_broker, topic) == 3


def test_the_deprecated_difference_bound_applies_and_log_append_time_ignores_bounds(shared_broker):
    old_style = topic_with(shared_broker, {"message.timestamp.difference.max.ms": HOUR})
    assert set(produce_one_batch(shared_broker, old_style, [(b"k", 2 * HOUR)]).values()) == {BAD_TIMESTAMP}
    stamped = topic_with(shared_broker, {"message.timestamp.difference.max.ms": HOUR,
                                         "message.timestamp.type": "LogAppendTime"})
    assert produce_one_batch(shared_broker, stamped, [(b"k", 2 * HOUR)]) == {b"v0": (0, None)}


def test_a_batch_stamped_log_append_time_by_its_producer_is_refused_record_by_record(shared_broker):
    now = int(time.time() * 1000)
    stamped = bytes(build_batch([Record(b"a", b"k"), Record(b"bc", None)], base_timestamp=now,
                                attributes=TIMESTAMP_LOG_APPEND))
    log_append_topic = topic_with(shared_broker, {"message.timestamp.type": "LogAppendTime"})
    create_topic = topic_with(shared_broker, {})
    with WireClient(shared_broker.port) as w:
        r = w.produce(log_append_topic, 0, stamped, version=9)
        assert (r.error_code, r.log_start_offset) == (INVALID_TIMESTAMP, 0)
        assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [
            (0, f"Invalid timestamp type in message DefaultRecord(offset=0, timestamp={now}, key=1 bytes, value=1 "
                "bytes). Producer should not set timestamp type to LogAppendTime."),
            (1, f"Invalid timestamp type in message DefaultRecord(offset=1, timestamp={now}, key=0 bytes, value=2 "
                "bytes). Producer should not set timestamp type to LogAppendTime.")]
        # a CreateTime topic takes it while it carries a timestamp (as Kafka), not without one
        assert w.produce(create_topic, 0, stamped).error_code == 0
        unstamped = bytes(build_batch([Record(b"a", b"k")], base_timestamp=-1, attributes=TIMESTAMP_LOG_APPEND))
        r = w.produce(create_topic, 0, unstamped)
        assert (r.error_code, [e.batch_index for e in r.record_errors]) == (INVALID_TIMESTAMP, [0])
    assert (end_offset(shared_broker, log_append_topic), end_offset(shared_broker, create_topic)) == (0, 2)


def test_refusals_that_name_no_record_carry_no_message_as_kafka(shared_broker):
    topic = topic_with(shared_broker, {})
    good = bytes(build_batch([b"a"]))
    with WireClient(shared_broker.port) as w:
        corrupt = w.produce(topic, 0, good[:17] + b"\0\0\0\0" + good[21:])  # a bad CRC: Kafka's known error
        assert (corrupt.error_code, corrupt.error_message, corrupt.log_start_offset, corrupt.record_errors) == \
            (CORRUPT_MESSAGE, None, -1, [])
        moved = w.produce(topic, 0, b"\0" * 7 + b"\x05" + good[8:])  # base offset 5: the log's refusal
        assert (moved.error_code, moved.error_message, moved.log_start_offset) == (INVALID_RECORD, None, 0)
        # a compacted topic reads every record: one declared but missing is an invalid record, as in Kafka
        compacted = topic_with(shared_broker, {"cleanup.policy": "compact"})
        short = bytearray(build_batch([Record(b"a", b"k")]))
        struct.pack_into(">i", short, 23, 1)  # the last offset delta and the record count: two records
        struct.pack_into(">i", short, 57, 2)
        struct.pack_into(">I", short, 17, core.crc.crc32c(memoryview(short)[21:]))
        r = w.produce(compacted, 0, bytes(short))
        assert (r.error_code, r.error_message, r.log_start_offset, r.record_errors) == (INVALID_RECORD, None, 0, [])
        # any topic: a record whose body does not parse (here a negative header count) under a valid CRC
        bad = bytearray(build_batch([Record(b"a", b"k")]))
        assert bad[-1] == 0  # the record's header count, zigzag 0
        bad[-1] = 1  # -1
        struct.pack_into(">I", bad, 17, core.crc.crc32c(memoryview(bad)[21:]))
        r = w.produce(topic, 0, bytes(bad))
        assert (r.error_code, r.error_message, r.log_start_offset) == (INVALID_RECORD, None, 0)
        assert w.produce(topic, 0, good).error_code == 0  # nothing of the refused batch was written
    assert end_offset(shared_broker, topic) == 1


@pytest.mark.skipif(not os.path.isfile(os.path.join(KAFKA_BIN, "kafka-console-producer.sh")),
                    reason="Apache Kafka's console tools are not built (~/.cache/pybroker-kafka)")
def test_kafka_console_producer_fails_only_the_keyless_records(shared_broker):
    topic = topic_with(shared_broker, {"cleanup.policy": "compact"})
    out = subprocess.run(
        [os.path.join(KAFKA_BIN, "kafka-console-producer.sh"), "--bootstrap-server", shared_broker.bootstrap,
         "--topic", topic, "--property", "parse.key=true", "--property", "key.separator=:",
         "--property", "null.marker=NULL", "--producer-property", "linger.ms=500"],
        input="k1:a\nNULL:b\nk2:c\nNULL:d\n", text=True, capture_output=True, timeout=120,
        env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"})
    assert out.returncode == 0, out.stderr[-2000:]
    failed = re.findall(r"Error when sending message to topic \S+ with key: (null|\d+ bytes), value: 1 bytes with "
                        r"error:.*\n(\S+?): (.*)", out.stderr)
    keyless = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    different = "Failed to append record because it was part of a batch which had one more more invalid records"
    assert sorted(failed) == sorted([("2 bytes", "org.apache.kafka.common.KafkaException", different)] * 2 +
                                    [("null", "org.apache.kafka.common.InvalidRecordException", keyless)] * 2)
    assert end_offset(shared_broker, topic) == 0
