"""KIP-467 record validation: which records of a batch are refused, with which error and the messages
Kafka 3.8's LogValidator gives (its long arithmetic included)."""
import pytest

from pybroker.errors import InvalidTimestampError, RefusedRecordsError
from pybroker.log.config import LogConfig
from pybroker.records import TIMESTAMP_LOG_APPEND, Record, build_batch
from pybroker.replica.record_validation import check_records

NOW = 1_700_000_000_000
LONG_MAX = 2**63 - 1
KEYLESS = "Compacted topic cannot accept message without key in topic partition t-{}"


def batches(*records, attributes: int = 0, base_timestamp: int = NOW):
    return [(memoryview(build_batch(list(records), base_timestamp=base_timestamp, attributes=attributes)), None)]


def refusal(batch, keys_required=False, bounds=None, create_time=True, partition=0):
    with pytest.raises((RefusedRecordsError, InvalidTimestampError)) as refused:
        check_records(batch, "t", partition, keys_required, bounds, create_time, NOW)
    return refused.value


@pytest.mark.parametrize("attributes", [0, 1, 4], ids=["plain", "gzip", "zstd"])
def test_every_keyless_record_is_named_and_three_are_quoted(attributes):
    recs = [Record(b"v", None if i % 2 else b"k") for i in range(10)]
    exc = refusal(batches(*recs, attributes=attributes), keys_required=True, partition=3)
    assert type(exc) is RefusedRecordsError and exc.code == 87
    assert [i for i, _ in exc.record_errors] == [1, 3, 5, 7, 9]
    assert {m for _, m in exc.record_errors} == {KEYLESS.format(3)}
    assert str(exc) == ("One or more records have been rejected due to 5 record errors in total, and only showing "
                        "the first three errors at most: [" + ", ".join(
                            f"RecordError(batchIndex={i}, message='{KEYLESS.format(3)}')" for i in (1, 3, 5)) + "]")


def test_a_timestamp_error_makes_the_refusal_invalid_timestamp_and_a_keyless_record_keeps_its_own_message():
    recs = [Record(b"a", b"k", timestamp=NOW - 11), Record(b"b", None, timestamp=NOW - 11),
            Record(b"c", b"k", timestamp=NOW), Record(b"d", b"k", timestamp=NOW + 6)]
    exc = refusal(batches(*recs), keys_required=True, bounds=(10, 5))
    assert type(exc) is InvalidTimestampError and exc.code == 32
    assert str(exc) == "One or more records have been rejected due to invalid timestamp"
    window = f"The timestamp should be within [{NOW - 10}, {NOW + 5}]"
    assert exc.record_errors == (  # a keyless record is named for its key first, whatever its timestamp
        (0, f"Timestamp {NOW - 11} of message with offset 0 is out of range. {window}"),
        (1, KEYLESS.format(0)),
        (3, f"Timestamp {NOW + 6} of message with offset 3 is out of range. {window}"))


def test_records_on_the_bounds_pass_and_so_does_a_record_without_a_timestamp():
    check_records(batches(Record(b"a", b"k", timestamp=NOW - 10), Record(b"b", b"k", timestamp=NOW + 5),
                          Record(b"c", b"k", timestamp=-1)), "t", 0, True, (10, 5), True, NOW)


def test_negative_timestamps_are_bounded_and_an_unbounded_side_prints_as_kafka_s_wrapped_long():
    exc = refusal(batches(Record(b"a", b"k", timestamp=-5), base_timestamp=-5), bounds=(10, LONG_MAX))
    wrapped = NOW + LONG_MAX - 2**64  # Java's now + Long.MAX_VALUE
    assert exc.record_errors == ((0, f"Timestamp -5 of message with offset 0 is out of range. The timestamp should "
                                     f"be within [{NOW - 10}, {wrapped}]"),)


def test_a_producer_may_not_stamp_log_append_time():
    # a LogAppendTime topic refuses every record of such a batch, whatever its timestamps
    exc = refusal(batches(Record(b"a", b"k"), Record(b"bc", None), attributes=TIMESTAMP_LOG_APPEND),
                  create_time=False)
    assert type(exc) is InvalidTimestampError
    assert exc.record_errors == tuple(
        (i, f"Invalid timestamp type in message DefaultRecord(offset={i}, timestamp={NOW}, key={k} bytes, "
            f"value={v} bytes). Producer should not set timestamp type to LogAppendTime.")
        for i, k, v in ((0, 1, 1), (1, 0, 2)))
    # a CreateTime topic only when the batch carries no timestamp, and then each of its records
    stamped = batches(Record(b"a", b"k"), attributes=TIMESTAMP_LOG_APPEND, base_timestamp=-1)
    assert [i for i, _ in refusal(stamped).record_errors] == [0]
    check_records(batches(Record(b"a", b"k"), attributes=TIMESTAMP_LOG_APPEND), "t", 0, False, None, True, NOW)


def test_a_clean_batch_passes():
    check_records(batches(*[Record(b"v", b"k%d" % i, timestamp=NOW + i) for i in range(5)]),
                  "t", 0, True, (10, 10), True, NOW)


def test_bounds_follow_kafka_3_8_with_the_deprecated_difference():
    assert LogConfig().timestamp_bounds is None  # the default: no record is decoded on produce
    assert LogConfig.from_properties({"message.timestamp.difference.max.ms": "100"}).timestamp_bounds == (100, 100)
    assert LogConfig.from_properties({"message.timestamp.difference.max.ms": "100",
                                      "message.timestamp.after.max.ms": "7"}).timestamp_bounds == (100, 7)
    assert LogConfig.from_properties({"log.message.timestamp.before.max.ms": "9"}).timestamp_bounds == \
        (9, LONG_MAX)
    assert LogConfig.from_properties({"message.timestamp.before.max.ms": "9",
                                      "message.timestamp.type": "LogAppendTime"}).timestamp_bounds is None
    with pytest.raises(ValueError):
        LogConfig.from_properties({"message.timestamp.after.max.ms": "-1"})
