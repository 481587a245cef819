"""The records of a produced batch that a partition refuses one by one (KIP-467): a record without a
key on a compacted topic, a CreateTime timestamp outside the topic's bounds, a timestamp type of
LogAppendTime set by the producer. The batch is refused whole; the refusal names each bad record's
index in its batch, so a client fails exactly those records and the others with their own error.
Rules, precedence and messages as Kafka 3.8's LogValidator (its long arithmetic included: a bound of
Long.MAX_VALUE shows as the wrapped sum).

Only called once a batch is known to need it (compacted topic with a keyless record, bounds set, a
producer-stamped LogAppendTime batch): the records are decoded here, off the produce fast path.
"""
from pybroker.errors import InvalidTimestampError, RefusedRecordsError
from pybroker.records import TIMESTAMP_LOG_APPEND, decode_records

SHOWN = 3  # record errors quoted in an INVALID_RECORD refusal's message
NO_TIMESTAMP = -1
ATTRIBUTES_LOW = 22  # the low byte of a batch's int16 attributes
_WRAP, _SIGN = 1 << 64, 1 << 63


def _long(n: int) -> int:
    """``n`` as a Java long (two's complement wrap)."""
    return (n + _SIGN) % _WRAP - _SIGN


def stamped_by_producer(view) -> bool:
    """A batch whose timestamp type says LogAppendTime: only a broker may stamp one."""
    return bool(view[ATTRIBUTES_LOW] & TIMESTAMP_LOG_APPEND)


def check_records(batches, topic: str, partition: int, keys_required: bool, bounds, create_time: bool,
                  now_ms: int) -> None:
    """Raise the refusal naming every bad record of ``batches`` ((view, info) pairs), or return.

    ``bounds``: (before, after) ms around ``now_ms`` for CreateTime timestamps, or None (unbounded);
    ``create_time``: the topic's message.timestamp.type is CreateTime.
    """
    errors, bad_timestamp = [], False
    where = f"{topic}-{partition}"
    for view, _ in batches:
        stamped = stamped_by_producer(view)
        for index, rec in enumerate(decode_records(view)):
            if keys_required and rec.key is None:
                errors.append((index, f"Compacted topic cannot accept message without key in topic partition "
                                      f"{where}"))
            elif create_time and rec.timestamp != NO_TIMESTAMP:
                if bounds is not None and _out_of_bounds(rec.timestamp, now_ms, bounds):
                    bad_timestamp = True
                    errors.append((index, f"Timestamp {rec.timestamp} of message with offset {rec.offset} is out "
                                          f"of range. The timestamp should be within "
                                          f"[{_long(now_ms - bounds[0])}, {_long(now_ms + bounds[1])}]"))
            elif stamped:
                bad_timestamp = True
                errors.append((index, f"Invalid timestamp type in message {_describe(rec)}. Producer should not "
                                      f"set timestamp type to LogAppendTime."))
    if bad_timestamp:
        raise InvalidTimestampError("One or more records have been rejected due to invalid timestamp", errors)
    if errors:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:SHOWN])
        raise RefusedRecordsError(f"One or more records have been rejected due to {len(errors)} record errors in "
                                  f"total, and only showing the first three errors at most: [{shown}]", errors)


def _out_of_bounds(timestamp: int, now_ms: int, bounds) -> bool:
    diff = _long(now_ms - timestamp)
    return diff > bounds[0] or _long(-diff) > bounds[1]


def _describe(rec) -> str:
    """A record as Kafka's DefaultRecord prints itself (a null key or value counts 0 bytes)."""
    return (f"DefaultRecord(offset={rec.offset}, timestamp={rec.timestamp}, key={len(rec.key or b'')} bytes, "
            f"value={len(rec.value or b'')} bytes)")
