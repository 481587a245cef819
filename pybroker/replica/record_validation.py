"""The records of a produced batch that a partition refuses one by one (KIP-467): a record without a
key on a compacted topic, a CreateTime timestamp outside the topic's bounds. The batch is refused
whole; the refusal names each bad record's index in its batch, so a client fails exactly those
records and retries or fails the others with their own error. Messages as Kafka 3.8's LogValidator.
"""
from pybroker.errors import InvalidTimestampError, RefusedRecordsError
from pybroker.records import decode_records

SHOWN = 3  # record errors quoted in an INVALID_RECORD refusal's message


def check_records(batches, topic: str, partition: int, keys_required: bool, bounds, now_ms: int) -> None:
    """Raise the refusal naming every bad record; ``bounds`` is (before, after) ms around ``now_ms``, or None."""
    errors, bad_timestamp = [], False
    for view, _ in batches:
        for index, rec in enumerate(decode_records(view)):
            if keys_required and rec.key is None:
                errors.append((index, f"Compacted topic cannot accept message without key in topic partition "
                                      f"{topic}-{partition}."))
            elif bounds is not None and rec.timestamp >= 0 and \
                    not now_ms - bounds[0] <= rec.timestamp <= now_ms + bounds[1]:
                bad_timestamp = True
                errors.append((index, f"Timestamp {rec.timestamp} of message with offset {rec.offset} is out of "
                                      f"range. The timestamp should be within [{now_ms - bounds[0]}, "
                                      f"{now_ms + bounds[1]}]"))
    if bad_timestamp:
        raise InvalidTimestampError("One or more records have been rejected due to invalid timestamp", errors)
    if errors:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:SHOWN])
        raise RefusedRecordsError(f"One or more records have been rejected due to {len(errors)} record errors in "
                                  f"total, and only showing the first three errors at most: [{shown}]", errors)
