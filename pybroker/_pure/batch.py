"""Kafka RecordBatch v2 header view, validation, in-place rewrite and recovery scan (pure twin).

Header (61 bytes, big-endian): baseOffset i64 @0, batchLength i32 @8, partitionLeaderEpoch
i32 @12, magic i8 @16, crc u32 @17, attributes i16 @21, lastOffsetDelta i32 @23,
baseTimestamp i64 @27, maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51,
baseSequence i32 @53, recordCount i32 @57. A batch occupies batchLength + 12 bytes; its CRC-32C
covers bytes 21 .. end. attributes: bits 0-2 codec (0..4), bit 3 LogAppendTime, bit 4
transactional, bit 5 control. The native twin is native/batch.pyx; both give the same results
and raise the same errors with the same reasons.
"""
import operator
import struct
from dataclasses import dataclass
from typing import ClassVar

from pybroker._pure.crc import crc32c
from pybroker.errors import CorruptRecordError, InvalidRecordError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
CRC_START = 21
MAX_CODEC = 4  # zstd
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The decoded header of one batch found at ``position`` of a buffer."""
    _fields: ClassVar[tuple] = (
        "position", "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
        "attributes", "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
        "producer_epoch", "base_sequence", "record_count")

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & 7

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self._fields}


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a recovery scan found: the valid prefix, its offsets/timestamps and index entries.

    ``error`` is None when the scan reached the end of the data cleanly, else the
    CorruptRecordError that stopped it (at ``valid_end``).
    """
    _fields: ClassVar[tuple] = (
        "valid_end", "batch_count", "next_offset", "max_timestamp", "offset_of_max_timestamp",
        "offset_entries", "time_entries", "error")

    valid_end: int
    batch_count: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    offset_entries: list
    time_entries: list
    error: CorruptRecordError | None

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self._fields}


def _bytes(buf) -> memoryview:
    view = memoryview(buf)
    try:
        return view.cast("B")
    except TypeError as exc:
        raise TypeError(f"expected a contiguous buffer: {exc}") from None


def _writable(buf) -> memoryview:
    view = _bytes(buf)
    if view.readonly:
        raise TypeError("cannot rewrite a batch in a read-only buffer")
    return view


def _int(value, lo: int, hi: int, name: str) -> int:
    value = operator.index(value)  # TypeError for floats etc., as the native typed arguments
    if not lo <= value <= hi:
        raise OverflowError(f"{name} {value} does not fit in its field")
    return value


def _check_position(pos: int) -> None:
    if pos < 0:
        raise ValueError(f"position {pos} is negative")


class _Bad(Exception):
    """Internal: a check failed; carries the error class, reason and base offset."""

    def __init__(self, cls, reason: str, offset: int):
        self.cls, self.reason, self.offset = cls, reason, offset


def _header(view: memoryview, pos: int, rem: int) -> BatchInfo:
    """The header checks shared by parse_header, validate and scan."""
    offset = _I64.unpack_from(view, pos)[0] if rem >= 8 else -1
    if rem < LOG_OVERHEAD:
        raise _Bad(CorruptRecordError, f"truncated: {rem} bytes left, fewer than the "
                   f"{LOG_OVERHEAD}-byte offset and length prefix", offset)
    if rem < HEADER_SIZE:
        raise _Bad(CorruptRecordError, f"truncated: {rem} bytes left, fewer than the "
                   f"{HEADER_SIZE}-byte batch header", offset)
    info = BatchInfo(pos, *_HEADER.unpack_from(view, pos))
    if info.batch_length < MIN_BATCH_LENGTH:
        raise _Bad(CorruptRecordError, f"batch length {info.batch_length} out of range: "
                   f"the minimum is {MIN_BATCH_LENGTH}", offset)
    return info


def _check(view: memoryview, pos: int, rem: int, allow_control: bool, compacted: bool = False) -> BatchInfo:
    """Every check of validate, in order; raises _Bad. ``compacted``: count <= lastOffsetDelta + 1."""
    info = _header(view, pos, rem)
    offset = info.base_offset
    if info.size > rem:
        raise _Bad(CorruptRecordError,
                   f"truncated: batch needs {info.size} bytes, {rem} available", offset)
    if info.magic != 2:
        raise _Bad(CorruptRecordError, f"unsupported magic {info.magic}", offset)
    computed = crc32c(view[pos + CRC_START:pos + info.size])
    if computed != info.crc:
        raise _Bad(CorruptRecordError,
                   f"CRC mismatch: stored 0x{info.crc:08x}, computed 0x{computed:08x}", offset)
    if info.record_count < 0:
        raise _Bad(CorruptRecordError, f"record count {info.record_count} is negative", offset)
    if info.last_offset_delta + 1 != info.record_count and not (
            compacted and info.record_count <= info.last_offset_delta + 1):
        raise _Bad(CorruptRecordError,
                   f"record count {info.record_count} does not match last offset delta "
                   f"{info.last_offset_delta} (expected {info.last_offset_delta + 1} records)",
                   offset)
    if not INT64_MIN <= info.last_offset < INT64_MAX:  # next_offset must fit too
        raise _Bad(CorruptRecordError,
                   f"offset overflow: base offset {offset} + last offset delta "
                   f"{info.last_offset_delta} leaves the 64-bit range", offset)
    if info.compression > MAX_CODEC:
        raise _Bad(CorruptRecordError, f"unknown compression codec {info.compression}", offset)
    if not allow_control and info.is_control:
        raise _Bad(InvalidRecordError, "control batches may not be produced", offset)
    return info


def parse_header(buf, pos=0) -> BatchInfo:
    """Decode the 61-byte header at ``pos`` without checking the rest of the batch.

    Raises CorruptRecordError when fewer than 61 bytes remain or batchLength < 49.
    """
    pos = _int(pos, INT64_MIN, INT64_MAX, "position")
    _check_position(pos)
    view = _bytes(buf)
    try:
        return _header(view, pos, max(0, len(view) - pos))
    except _Bad as bad:
        raise bad.cls(bad.reason, bad.offset, pos) from None


def validate(buf, pos=0, allow_control=True, compacted=False) -> BatchInfo:
    """Fully check the batch at ``pos``: length, magic, CRC, record count, codec, control bit.

    ``compacted`` accepts fewer records than lastOffsetDelta + 1 (batches the log cleaner rewrote).

    Raises CorruptRecordError(reason, offset=baseOffset or -1, position=pos), or
    InvalidRecordError for a control batch when ``allow_control`` is false.
    """
    pos = _int(pos, INT64_MIN, INT64_MAX, "position")
    _check_position(pos)
    view = _bytes(buf)
    try:
        return _check(view, pos, max(0, len(view) - pos), bool(allow_control), bool(compacted))
    except _Bad as bad:
        raise bad.cls(bad.reason, bad.offset, pos) from None


def _writable_header(buf, pos: int) -> memoryview:
    """A writable byte view of ``buf`` with a whole header at ``pos``."""
    _check_position(pos)
    view = _writable(buf)
    _need(view, pos, HEADER_SIZE)
    return view


def _need(view: memoryview, pos: int, size: int) -> None:
    if size > len(view) - pos:
        raise ValueError(f"buffer too short: the batch at {pos} needs {size} bytes, "
                         f"{max(0, len(view) - pos)} available")


def set_base_offset(buf, pos, base_offset) -> None:
    """Store ``base_offset`` in bytes 0-7 of the batch at ``pos`` (outside the CRC)."""
    pos = _int(pos, INT64_MIN, INT64_MAX, "position")
    base_offset = _int(base_offset, INT64_MIN, INT64_MAX, "base offset")
    view = _writable_header(buf, pos)
    _I64.pack_into(view, pos, base_offset)


def set_partition_leader_epoch(buf, pos, epoch) -> None:
    """Store ``epoch`` in bytes 12-15 of the batch at ``pos`` (outside the CRC)."""
    pos = _int(pos, INT64_MIN, INT64_MAX, "position")
    epoch = _int(epoch, -(1 << 31), (1 << 31) - 1, "partition leader epoch")
    view = _writable_header(buf, pos)
    _I32.pack_into(view, pos + 12, epoch)


def set_log_append_time(buf, pos, timestamp_ms) -> None:
    """Mark the batch at ``pos`` LogAppendTime with maxTimestamp ``timestamp_ms``; rewrites the CRC."""
    pos = _int(pos, INT64_MIN, INT64_MAX, "position")
    timestamp_ms = _int(timestamp_ms, INT64_MIN, INT64_MAX, "timestamp")
    view = _writable_header(buf, pos)
    batch_length = _I32.unpack_from(view, pos + 8)[0]
    if batch_length < MIN_BATCH_LENGTH:
        raise ValueError(f"batch length {batch_length} out of range: the minimum is "
                         f"{MIN_BATCH_LENGTH}")
    size = batch_length + LOG_OVERHEAD
    _need(view, pos, size)
    attributes = _I16.unpack_from(view, pos + CRC_START)[0] | ATTR_LOG_APPEND_TIME
    _I16.pack_into(view, pos + CRC_START, attributes)
    _I64.pack_into(view, pos + 35, timestamp_ms)
    _U32.pack_into(view, pos + 17, crc32c(view[pos + CRC_START:pos + size]))


def scan(buf, start=0, end=None, base_position=0, index_interval=4096,
         expected_offset=-1, gaps=False) -> ScanResult:
    """Walk and fully validate consecutive batches in ``buf[start:end]``, as log recovery does.

    Stops at the first invalid or truncated batch, or (when ``expected_offset`` >= 0) at the
    first batch whose baseOffset is not the expected next offset; with ``gaps`` (a segment the
    log cleaner rewrote) at one below it or ending more than 2**31 - 1 past ``expected_offset``.
    Compacted batches (fewer records than lastOffsetDelta + 1) pass. Positions are reported as
    ``base_position`` + index in ``buf``. Index entries follow Kafka's LogSegment: before a
    batch is counted, if more than ``index_interval`` bytes were added since the last entry,
    emit (batch last offset, batch position) and (max timestamp so far, its offset). Time
    entries are emitted unfiltered; the time index drops those that do not advance.
    """
    start = _int(start, INT64_MIN, INT64_MAX, "start")
    base_position = _int(base_position, INT64_MIN, INT64_MAX, "base position")
    index_interval = _int(index_interval, INT64_MIN, INT64_MAX, "index interval")
    expected_offset = _int(expected_offset, INT64_MIN, INT64_MAX, "expected offset")
    gaps = bool(gaps)
    view = _bytes(buf)
    size = len(view)
    end = size if end is None else _int(end, INT64_MIN, INT64_MAX, "end")
    if not 0 <= start <= end <= size:
        raise ValueError(f"scan range [{start}, {end}) is not within the buffer of {size} bytes")
    if base_position < 0 or base_position > INT64_MAX - end:
        raise ValueError(f"base position {base_position} out of range")

    pos = start
    count = 0
    expected = expected_offset
    next_offset = expected_offset
    max_ts = offset_of_max_ts = -1
    since_entry = 0
    offsets, times = [], []
    error = None
    while pos < end:
        try:
            info = _check(view, pos, end - pos, True, True)
            if expected >= 0 and gaps and info.base_offset < expected:
                raise _Bad(CorruptRecordError,
                           f"offset goes back: expected at least {expected}, found {info.base_offset}",
                           info.base_offset)
            if expected >= 0 and not gaps and info.base_offset != expected:
                raise _Bad(CorruptRecordError, f"offset gap: expected {expected}, found {info.base_offset}",
                           info.base_offset)
            if expected >= 0 and gaps and info.last_offset - expected_offset > 2**31 - 1:
                raise _Bad(CorruptRecordError, f"offset {info.base_offset} is beyond the 32-bit range of "
                           f"relative offsets from {expected_offset}", info.base_offset)
        except _Bad as bad:
            error = bad.cls(bad.reason, bad.offset, base_position + pos)
            break
        last = info.last_offset
        if info.max_timestamp > max_ts:
            max_ts, offset_of_max_ts = info.max_timestamp, last
        if since_entry > index_interval:
            offsets.append((last, base_position + pos))
            times.append((max_ts, offset_of_max_ts))
            since_entry = 0
        since_entry += info.size
        count += 1
        next_offset = last + 1
        if expected >= 0:
            expected = next_offset
        pos += info.size
    return ScanResult(base_position + pos, count, next_offset, max_ts, offset_of_max_ts,
                      offsets, times, error)
