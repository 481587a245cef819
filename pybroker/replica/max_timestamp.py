"""ListOffsets' MAX_TIMESTAMP (-3, KIP-734): the first record holding the partition's largest timestamp.

The segment with the largest timestamp is found from each segment's running maximum; its batches
are scanned for the one whose max timestamp is that value, and within it the first record with it
(a LogAppendTime batch stamps every record alike: its base offset). Beyond ``upper`` (the high
watermark or last stable offset) nothing is answered, as for any timestamp search.
"""
import os

from pybroker.records import decode_records

LOG_APPEND_TIME = 0x08  # batch attribute bit: timestamps are the broker's append time
NOT_FOUND = (-1, -1, -1)


def max_timestamp_offset(lg, upper: int) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch of its batch) of the record with the largest timestamp, or -1s."""
    with lg.lock:
        segments = [s for s in lg.segments if s.max_timestamp >= 0]
        if not segments:
            return NOT_FOUND
        segment = max(segments, key=lambda s: s.max_timestamp)  # the first of equals, as Kafka picks
        target = segment.max_timestamp
        position = 0
        while position < segment.size:
            header = segment.read_header(position)
            if header.max_timestamp == target and header.base_offset + header.last_offset_delta >= lg.log_start_offset:
                offset = _offset_in_batch(segment, position, header, target)
                if offset < 0 or offset >= upper:
                    return NOT_FOUND
                return offset, target, header.partition_leader_epoch
            position += header.batch_length + 12
    return NOT_FOUND


def _offset_in_batch(segment, position: int, header, target: int) -> int:
    if header.attributes & LOG_APPEND_TIME:
        return header.base_offset
    batch = os.pread(segment.fd, header.batch_length + 12, position)
    for rec in decode_records(batch):
        if rec.timestamp == target:
            return rec.offset
    return -1
