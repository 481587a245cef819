"""KIP-467 record validation: which records of a batch are refused, and the messages Kafka gives."""
import pytest

from pybroker.errors import InvalidTimestampError, RefusedRecordsError
from pybroker.log.config import LogConfig
from pybroker.records import Record, build_batch
from pybroker.replica.record_validation import check_records

NOW = 1_700_000_000_000


def batches(*records, attributes: int = 0):
    return [(memoryview(build_batch(list(records), base_timestamp=NOW, attributes=attributes)), None)]


@pytest.mark.parametrize("attributes", [0, 1, 4], ids=["plain", "gzip", "zstd"])
def test_every_keyless_record_is_named_and_three_are_quoted(attributes):
    recs = [Record(b"v", None if i % 2 else b"k") for i in range(10)]
    with pytest.raises(RefusedRecordsError) as refused:
        check_records(batches(*recs, attributes=attributes), "t", 3, True, None, NOW)
    exc = refused.value
    assert exc.code == 87 and [i for i, _ in exc.record_errors] == [1, 3, 5, 7, 9]
    keyless = "Compacted topic cannot accept message without key in topic partition t-3."
    assert str(exc) == ("One or more records have been rejected due to 5 record errors in total, and only showing "
                        "the first three errors at most: [" + ", ".join(
                            f"RecordError(batchIndex={i}, message='{keyless}')" for i in (1, 3, 5)) + "]")


def test_timestamps_outside_the_bounds_make_an_invalid_timestamp_refusal_that_names_them():
    recs = [Record(b"a", b"k", timestamp=NOW - 11), Record(b"b", None, timestamp=NOW),
            Record(b"c", b"k", timestamp=NOW), Record(b"d", b"k", timestamp=NOW + 6)]
    with pytest.raises(InvalidTimestampError) as refused:
        check_records(batches(*recs), "t", 0, True, (10, 5), NOW)
    exc = refused.value
    assert exc.code == 32 and str(exc) == "One or more records have been rejected due to invalid timestamp"
    assert exc.record_errors == (
        (0, f"Timestamp {NOW - 11} of message with offset 0 is out of range. The timestamp should be within "
            f"[{NOW - 10}, {NOW + 5}]"),
        (1, "Compacted topic cannot accept message without key in topic partition t-0."),
        (3, f"Timestamp {NOW + 6} of message with offset 3 is out of range. The timestamp should be within "
            f"[{NOW - 10}, {NOW + 5}]"))


def test_records_on_the_bounds_pass():
    check_records(batches(Record(b"a", b"k", timestamp=NOW - 10), Record(b"b", b"k", timestamp=NOW + 5)),
                  "t", 0, True, (10, 5), NOW)


def test_bounds_follow_kafka_3_8_with_the_deprecated_difference():
    assert LogConfig().timestamp_bounds is None  # the default: no record is decoded on produce
    assert LogConfig.from_properties({"message.timestamp.difference.max.ms": "100"}).timestamp_bounds == (100, 100)
    assert LogConfig.from_properties({"message.timestamp.difference.max.ms": "100",
                                      "message.timestamp.after.max.ms": "7"}).timestamp_bounds == (100, 7)
    assert LogConfig.from_properties({"log.message.timestamp.before.max.ms": "9"}).timestamp_bounds == \
        (9, 2**63 - 1)
    assert LogConfig.from_properties({"message.timestamp.before.max.ms": "9",
                                      "message.timestamp.type": "LogAppendTime"}).timestamp_bounds is None
    with pytest.raises(ValueError):
        LogConfig.from_properties({"message.timestamp.after.max.ms": "-1"})
