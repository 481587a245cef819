"""Kafka RecordBatch v2 header view, validation, in-place rewrite and recovery scan (native).

Header (61 bytes, big-endian): baseOffset i64 @0, batchLength i32 @8, partitionLeaderEpoch
i32 @12, magic i8 @16, crc u32 @17, attributes i16 @21, lastOffsetDelta i32 @23,
baseTimestamp i64 @27, maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51,
baseSequence i32 @53, recordCount i32 @57. A batch occupies batchLength + 12 bytes; its CRC-32C
covers bytes 21 .. end. attributes: bits 0-2 codec (0..4), bit 3 LogAppendTime, bit 4
transactional, bit 5 control. The pure twin is pybroker/_pure/batch.py; both give the same
results and raise the same errors with the same reasons. All checks run on a {pointer, length}
pair with the length tested before every read; long CRC work runs without the GIL.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.number cimport PyNumber_Index
from libc.stdint cimport (INT64_MAX, INT64_MIN, int8_t, int16_t, int32_t, int64_t, uint8_t,
                          uint16_t, uint32_t, uint64_t)
from libc.stdlib cimport free, realloc

from pybroker.errors import CorruptRecordError, InvalidRecordError

cdef extern from "crc32c_hw.h" nogil:
    uint32_t pb_crc32c(uint32_t crc, const uint8_t *p, size_t n)

HEADER_SIZE = 61

cdef enum:
    HEADER = 61
    LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
    MIN_BATCH_LENGTH = 49
    CRC_START = 21
    MAX_CODEC = 4  # zstd
    ATTR_LOG_APPEND_TIME = 0x08
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20
    NOGIL_MIN = 65536  # below this, dropping and retaking the GIL costs more than it frees

cdef enum Err:
    E_OK
    E_SHORT_PREFIX
    E_SHORT_HEADER
    E_LENGTH_SMALL
    E_TRUNCATED
    E_MAGIC
    E_CRC
    E_COUNT_NEGATIVE
    E_COUNT_MISMATCH
    E_OFFSET_OVERFLOW
    E_CODEC
    E_CONTROL
    E_GAP
    E_GAP_BACK
    E_BEYOND
    E_NO_MEMORY

cdef struct Header:
    int64_t base_offset
    int32_t batch_length
    int32_t partition_leader_epoch
    int8_t magic
    uint32_t crc
    int16_t attributes
    int32_t last_offset_delta
    int64_t base_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    int32_t record_count

cdef struct Fault:
    int code
    int64_t offset  # baseOffset when at least 8 bytes were there, else -1
    int64_t a       # the numbers the reason names
    int64_t b


cdef inline uint64_t _be64(const uint8_t *p) noexcept nogil:
    return (<uint64_t>p[0] << 56 | <uint64_t>p[1] << 48 | <uint64_t>p[2] << 40 |
            <uint64_t>p[3] << 32 | <uint64_t>p[4] << 24 | <uint64_t>p[5] << 16 |
            <uint64_t>p[6] << 8 | <uint64_t>p[7])

cdef inline uint32_t _be32(const uint8_t *p) noexcept nogil:
    return <uint32_t>p[0] << 24 | <uint32_t>p[1] << 16 | <uint32_t>p[2] << 8 | <uint32_t>p[3]

cdef inline uint16_t _be16(const uint8_t *p) noexcept nogil:
    return <uint16_t>(<uint16_t>p[0] << 8 | p[1])

cdef inline void _put64(uint8_t *p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <uint8_t>(v >> (56 - 8 * i))

cdef inline void _put32(uint8_t *p, uint32_t v) noexcept nogil:
    cdef int i
    for i in range(4):
        p[i] = <uint8_t>(v >> (24 - 8 * i))


cdef int _check_header(const uint8_t *p, int64_t rem, Header *h, Fault *f) noexcept nogil:
    """Length checks, then decode; the part of validation parse_header also does."""
    f.offset = <int64_t>_be64(p) if rem >= 8 else -1
    f.a = rem
    if rem < LOG_OVERHEAD:
        f.code = E_SHORT_PREFIX
        return f.code
    if rem < HEADER:
        f.code = E_SHORT_HEADER
        return f.code
    h.base_offset = <int64_t>_be64(p)
    h.batch_length = <int32_t>_be32(p + 8)
    h.partition_leader_epoch = <int32_t>_be32(p + 12)
    h.magic = <int8_t>p[16]
    h.crc = _be32(p + 17)
    h.attributes = <int16_t>_be16(p + 21)
    h.last_offset_delta = <int32_t>_be32(p + 23)
    h.base_timestamp = <int64_t>_be64(p + 27)
    h.max_timestamp = <int64_t>_be64(p + 35)
    h.producer_id = <int64_t>_be64(p + 43)
    h.producer_epoch = <int16_t>_be16(p + 51)
    h.base_sequence = <int32_t>_be32(p + 53)
    h.record_count = <int32_t>_be32(p + 57)
    if h.batch_length < MIN_BATCH_LENGTH:
        f.code = E_LENGTH_SMALL
        f.a = h.batch_length
        return f.code
    f.code = E_OK
    return f.code


cdef int _check_body(const uint8_t *p, int64_t rem, bint allow_control, bint compacted, const Header *h,
                     Fault *f) noexcept nogil:
    """The rest of validate, in order, for a header that passed _check_header.

    ``compacted``: the log cleaner may have removed records, so count <= lastOffsetDelta + 1."""
    cdef int64_t size = <int64_t>h.batch_length + LOG_OVERHEAD
    cdef int64_t delta = h.last_offset_delta
    cdef uint32_t computed
    if size > rem:
        f.code, f.a, f.b = E_TRUNCATED, size, rem
        return f.code
    if h.magic != 2:
        f.code, f.a = E_MAGIC, h.magic
        return f.code
    computed = pb_crc32c(0, p + CRC_START, <size_t>(size - CRC_START))
    if computed != h.crc:
        f.code, f.a, f.b = E_CRC, h.crc, computed
        return f.code
    if h.record_count < 0:
        f.code, f.a = E_COUNT_NEGATIVE, h.record_count
        return f.code
    if delta + 1 != h.record_count and not (compacted and h.record_count <= delta + 1):
        f.code, f.a, f.b = E_COUNT_MISMATCH, h.record_count, delta
        return f.code
    # last_offset and next_offset = last_offset + 1 must both fit in an int64
    if (delta >= 0 and h.base_offset > INT64_MAX - 1 - delta) or (delta < 0 and h.base_offset < INT64_MIN - delta):
        f.code, f.a, f.b = E_OFFSET_OVERFLOW, h.base_offset, delta
        return f.code
    if (h.attributes & 7) > MAX_CODEC:
        f.code, f.a = E_CODEC, h.attributes & 7
        return f.code
    if not allow_control and (h.attributes & ATTR_CONTROL):
        f.code = E_CONTROL
        return f.code
    f.code = E_OK
    return f.code


cdef object _error(const Fault *f, int64_t position):
    """The exception for a failed check (same reasons as the pure twin)."""
    cdef int code = f.code
    cls = CorruptRecordError
    if code == E_SHORT_PREFIX:
        reason = (f"truncated: {f.a} bytes left, fewer than the {LOG_OVERHEAD}-byte "
                  f"offset and length prefix")
    elif code == E_SHORT_HEADER:
        reason = f"truncated: {f.a} bytes left, fewer than the {HEADER}-byte batch header"
    elif code == E_LENGTH_SMALL:
        reason = f"batch length {f.a} out of range: the minimum is {MIN_BATCH_LENGTH}"
    elif code == E_TRUNCATED:
        reason = f"truncated: batch needs {f.a} bytes, {f.b} available"
    elif code == E_MAGIC:
        reason = f"unsupported magic {f.a}"
    elif code == E_CRC:
        reason = f"CRC mismatch: stored 0x{f.a:08x}, computed 0x{f.b:08x}"
    elif code == E_COUNT_NEGATIVE:
        reason = f"record count {f.a} is negative"
    elif code == E_COUNT_MISMATCH:
        reason = (f"record count {f.a} does not match last offset delta {f.b} "
                  f"(expected {f.b + 1} records)")
    elif code == E_OFFSET_OVERFLOW:
        reason = (f"offset overflow: base offset {f.a} + last offset delta {f.b} "
                  f"leaves the 64-bit range")
    elif code == E_CODEC:
        reason = f"unknown compression codec {f.a}"
    elif code == E_CONTROL:
        cls, reason = InvalidRecordError, "control batches may not be produced"
    elif code == E_GAP:
        reason = f"offset gap: expected {f.a}, found {f.b}"
    elif code == E_GAP_BACK:
        reason = f"offset goes back: expected at least {f.a}, found {f.b}"
    elif code == E_BEYOND:
        reason = f"offset {f.b} is beyond the 32-bit range of relative offsets from {f.a}"
    elif code == E_NO_MEMORY:
        return MemoryError("no memory for scan index entries")
    else:
        raise AssertionError(f"unknown batch check code {code}")
    return cls(reason, f.offset, position)


cdef class BatchInfo:
    """The decoded header of one batch found at ``position`` of a buffer."""
    _fields = (
        "position", "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
        "attributes", "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
        "producer_epoch", "base_sequence", "record_count")

    cdef readonly int64_t position
    cdef readonly int64_t base_offset
    cdef readonly int32_t batch_length
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int8_t magic
    cdef readonly uint32_t crc
    cdef readonly int16_t attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int16_t producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t record_count

    def __init__(self, int64_t position, int64_t base_offset, int32_t batch_length,
                 int32_t partition_leader_epoch, int8_t magic, uint32_t crc, int16_t attributes,
                 int32_t last_offset_delta, int64_t base_timestamp, int64_t max_timestamp,
                 int64_t producer_id, int16_t producer_epoch, int32_t base_sequence,
                 int32_t record_count):
        self.position = position
        self.base_offset = base_offset
        self.batch_length = batch_length
        self.partition_leader_epoch = partition_leader_epoch
        self.magic = magic
        self.crc = crc
        self.attributes = attributes
        self.last_offset_delta = last_offset_delta
        self.base_timestamp = base_timestamp
        self.max_timestamp = max_timestamp
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.record_count = record_count

    @property
    def size(self):
        return <int64_t>self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self):
        cdef object base = self.base_offset  # Python ints: a header from parse_header may overflow
        return base + self.last_offset_delta

    @property
    def next_offset(self):
        cdef object base = self.base_offset
        return base + self.last_offset_delta + 1

    @property
    def compression(self):
        return self.attributes & 7

    @property
    def is_log_append_time(self):
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def is_transactional(self):
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self):
        return bool(self.attributes & ATTR_CONTROL)

    def _tuple(self):
        return (self.position, self.base_offset, self.batch_length, self.partition_leader_epoch,
                self.magic, self.crc, self.attributes, self.last_offset_delta,
                self.base_timestamp, self.max_timestamp, self.producer_id, self.producer_epoch,
                self.base_sequence, self.record_count)

    def as_dict(self):
        return dict(zip(self._fields, self._tuple()))

    def __eq__(self, other):
        if type(other) is not BatchInfo:
            return NotImplemented
        return self._tuple() == (<BatchInfo>other)._tuple()

    def __hash__(self):
        return hash(self._tuple())

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self._tuple()))
        return f"BatchInfo({fields})"


cdef BatchInfo _info(const Header *h, int64_t position):
    cdef BatchInfo info = BatchInfo.__new__(BatchInfo)
    info.position = position
    info.base_offset = h.base_offset
    info.batch_length = h.batch_length
    info.partition_leader_epoch = h.partition_leader_epoch
    info.magic = h.magic
    info.crc = h.crc
    info.attributes = h.attributes
    info.last_offset_delta = h.last_offset_delta
    info.base_timestamp = h.base_timestamp
    info.max_timestamp = h.max_timestamp
    info.producer_id = h.producer_id
    info.producer_epoch = h.producer_epoch
    info.base_sequence = h.base_sequence
    info.record_count = h.record_count
    return info


cdef class ScanResult:
    """What a recovery scan found: the valid prefix, its offsets/timestamps and index entries.

    ``error`` is None when the scan reached the end of the data cleanly, else the
    CorruptRecordError that stopped it (at ``valid_end``).
    """
    _fields = ("valid_end", "batch_count", "next_offset", "max_timestamp",
               "offset_of_max_timestamp", "offset_entries", "time_entries", "error")

    cdef readonly int64_t valid_end
    cdef readonly int64_t batch_count
    cdef readonly int64_t next_offset
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t offset_of_max_timestamp
    cdef readonly list offset_entries
    cdef readonly list time_entries
    cdef readonly object error

    def __init__(self, int64_t valid_end, int64_t batch_count, int64_t next_offset,
                 int64_t max_timestamp, int64_t offset_of_max_timestamp, list offset_entries,
                 list time_entries, error):
        self.valid_end = valid_end
        self.batch_count = batch_count
        self.next_offset = next_offset
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max_timestamp
        self.offset_entries = offset_entries
        self.time_entries = time_entries
        self.error = error

    def _tuple(self):
        return (self.valid_end, self.batch_count, self.next_offset, self.max_timestamp,
                self.offset_of_max_timestamp, self.offset_entries, self.time_entries, self.error)

    def as_dict(self):
        return dict(zip(self._fields, self._tuple()))

    def __eq__(self, other):
        if type(other) is not ScanResult:
            return NotImplemented
        return self._tuple() == (<ScanResult>other)._tuple()

    __hash__ = None  # holds lists, like the pure twin

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self._tuple()))
        return f"ScanResult({fields})"


# Integer arguments go through __index__: a plain C argument would silently truncate floats.
cdef inline int64_t _i64(object value) except? -1:
    return PyNumber_Index(value)

cdef inline int32_t _i32(object value) except? -1:
    return PyNumber_Index(value)


cdef int _acquire(object buf, Py_buffer *view, bint writable) except -1:
    try:
        PyObject_GetBuffer(buf, view, PyBUF_SIMPLE)
    except BufferError as exc:  # same type as the pure twin's memoryview.cast failure
        raise TypeError(f"expected a contiguous buffer: {exc}") from None
    if writable and view.readonly:
        PyBuffer_Release(view)
        raise TypeError("cannot rewrite a batch in a read-only buffer")
    return 0


cdef int _check_position(Py_ssize_t pos) except -1:
    if pos < 0:
        raise ValueError(f"position {pos} is negative")
    return 0


cdef inline int64_t _remaining(const Py_buffer *view, Py_ssize_t pos) noexcept:
    return view.len - pos if pos < view.len else 0


cdef inline const uint8_t *_at(const Py_buffer *view, Py_ssize_t pos) noexcept:
    """Pointer to ``pos``, clamped to the end so no out-of-range pointer is ever formed."""
    return <const uint8_t *>view.buf + (pos if pos < view.len else view.len)


def parse_header(buf, pos=0):
    """Decode the 61-byte header at ``pos`` without checking the rest of the batch.

    Raises CorruptRecordError when fewer than 61 bytes remain or batchLength < 49.
    """
    cdef Py_buffer view
    cdef Header h
    cdef Fault f
    cdef Py_ssize_t c_pos = _i64(pos)
    _check_position(c_pos)
    _acquire(buf, &view, False)
    try:
        if _check_header(_at(&view, c_pos), _remaining(&view, c_pos), &h, &f):
            raise _error(&f, c_pos)
        return _info(&h, c_pos)
    finally:
        PyBuffer_Release(&view)


def validate(buf, pos=0, bint allow_control=True, bint compacted=False):
    """Fully check the batch at ``pos``: length, magic, CRC, record count, codec, control bit.

    ``compacted`` accepts fewer records than lastOffsetDelta + 1 (batches the log cleaner rewrote).

    Raises CorruptRecordError(reason, offset=baseOffset or -1, position=pos), or
    InvalidRecordError for a control batch when ``allow_control`` is false.
    """
    cdef Py_buffer view
    cdef Header h
    cdef Fault f
    cdef const uint8_t *p
    cdef int64_t rem
    cdef int code
    cdef Py_ssize_t c_pos = _i64(pos)
    _check_position(c_pos)
    _acquire(buf, &view, False)
    try:
        p = _at(&view, c_pos)
        rem = _remaining(&view, c_pos)
        code = _check_header(p, rem, &h, &f)
        if code == E_OK:
            if NOGIL_MIN <= <int64_t>h.batch_length <= rem:
                with nogil:
                    code = _check_body(p, rem, allow_control, compacted, &h, &f)
            else:
                code = _check_body(p, rem, allow_control, compacted, &h, &f)
        if code != E_OK:
            raise _error(&f, c_pos)
        return _info(&h, c_pos)
    finally:
        PyBuffer_Release(&view)


cdef uint8_t *_writable_header(Py_buffer *view, object buf, Py_ssize_t pos) except NULL:
    """Acquire ``buf`` writable and check that a whole header fits at ``pos``."""
    _check_position(pos)
    _acquire(buf, view, True)
    if _remaining(view, pos) < HEADER:
        PyBuffer_Release(view)
        raise ValueError(f"buffer too short: the batch at {pos} needs {HEADER} bytes, "
                         f"{_remaining(view, pos)} available")
    return <uint8_t *>view.buf + pos


def set_base_offset(buf, pos, base_offset):
    """Store ``base_offset`` in bytes 0-7 of the batch at ``pos`` (outside the CRC)."""
    cdef Py_buffer view
    cdef Py_ssize_t c_pos = _i64(pos)
    cdef int64_t c_base_offset = _i64(base_offset)
    cdef uint8_t *p = _writable_header(&view, buf, c_pos)
    _put64(p, <uint64_t>c_base_offset)
    PyBuffer_Release(&view)


def set_partition_leader_epoch(buf, pos, epoch):
    """Store ``epoch`` in bytes 12-15 of the batch at ``pos`` (outside the CRC)."""
    cdef Py_buffer view
    cdef Py_ssize_t c_pos = _i64(pos)
    cdef int32_t c_epoch = _i32(epoch)
    cdef uint8_t *p = _writable_header(&view, buf, c_pos)
    _put32(p + 12, <uint32_t>c_epoch)
    PyBuffer_Release(&view)


def set_log_append_time(buf, pos, timestamp_ms):
    """Mark the batch at ``pos`` LogAppendTime with maxTimestamp ``timestamp_ms``; rewrites the CRC."""
    cdef Py_buffer view
    cdef Py_ssize_t c_pos = _i64(pos)
    cdef int64_t c_timestamp_ms = _i64(timestamp_ms)
    cdef uint8_t *p = _writable_header(&view, buf, c_pos)
    cdef int32_t batch_length = <int32_t>_be32(p + 8)
    cdef int64_t size = <int64_t>batch_length + LOG_OVERHEAD
    cdef int64_t rem = _remaining(&view, c_pos)
    cdef uint16_t attributes
    try:
        if batch_length < MIN_BATCH_LENGTH:
            raise ValueError(f"batch length {batch_length} out of range: the minimum is "
                             f"{MIN_BATCH_LENGTH}")
        if size > rem:
            raise ValueError(f"buffer too short: the batch at {c_pos} needs {size} bytes, "
                             f"{rem} available")
        attributes = _be16(p + CRC_START) | ATTR_LOG_APPEND_TIME
        p[CRC_START] = <uint8_t>(attributes >> 8)
        p[CRC_START + 1] = <uint8_t>attributes
        _put64(p + 35, <uint64_t>c_timestamp_ms)
        if size >= NOGIL_MIN:
            with nogil:
                _put32(p + 17, pb_crc32c(0, p + CRC_START, <size_t>(size - CRC_START)))
        else:
            _put32(p + 17, pb_crc32c(0, p + CRC_START, <size_t>(size - CRC_START)))
    finally:
        PyBuffer_Release(&view)


cdef struct Entry:
    int64_t offset      # offset index entry: (offset, position)
    int64_t position
    int64_t timestamp   # time index entry: (timestamp, offset)
    int64_t ts_offset

cdef struct Scan:
    const uint8_t *buf
    int64_t pos
    int64_t end
    int64_t base_position
    int64_t index_interval
    int64_t expected      # next offset to require, or -1 when not checking
    bint gaps             # expected is a lower bound (a cleaned segment); offsets stay within int32 of the first
    int64_t first_expected
    int64_t count
    int64_t next_offset
    int64_t max_ts
    int64_t max_ts_offset
    int64_t since_entry
    Entry *entries
    Py_ssize_t n_entries
    Py_ssize_t cap
    Fault fault


cdef void _scan(Scan *s) noexcept nogil:
    """Walk batches from s.pos to s.end; stop at the first fault (left in s.fault)."""
    cdef Header h
    cdef int64_t last, size
    cdef Entry *grown
    cdef Entry *e
    s.fault.code = E_OK
    while s.pos < s.end:
        if _check_header(s.buf + s.pos, s.end - s.pos, &h, &s.fault) != E_OK:
            return
        if _check_body(s.buf + s.pos, s.end - s.pos, True, True, &h, &s.fault) != E_OK:
            return
        if s.expected >= 0 and (h.base_offset < s.expected if s.gaps else h.base_offset != s.expected):
            s.fault.code, s.fault.a, s.fault.b = E_GAP_BACK if s.gaps else E_GAP, s.expected, h.base_offset
            return
        if s.gaps and h.base_offset + <int64_t>h.last_offset_delta - s.first_expected > 2147483647:
            s.fault.code, s.fault.a, s.fault.b = E_BEYOND, s.first_expected, h.base_offset
            return
        last = h.base_offset + h.last_offset_delta  # _check_body ruled out overflow
        size = <int64_t>h.batch_length + LOG_OVERHEAD
        if h.max_timestamp > s.max_ts:
            s.max_ts, s.max_ts_offset = h.max_timestamp, last
        if s.since_entry > s.index_interval:
            if s.n_entries == s.cap:
                grown = <Entry *>realloc(s.entries, <size_t>(2 * s.cap + 64) * sizeof(Entry))
                if grown == NULL:
                    s.fault.code = E_NO_MEMORY
                    return
                s.entries, s.cap = grown, 2 * s.cap + 64
            e = &s.entries[s.n_entries]
            e.offset, e.position = last, s.base_position + s.pos
            e.timestamp, e.ts_offset = s.max_ts, s.max_ts_offset
            s.n_entries += 1
            s.since_entry = 0
        s.since_entry += size
        s.count += 1
        s.next_offset = last + 1
        if s.expected >= 0:
            s.expected = last + 1
        s.pos += size


def scan(buf, start=0, end=None, base_position=0, index_interval=4096,
         expected_offset=-1, bint gaps=False):
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
    cdef Py_buffer view
    cdef Scan s
    cdef Py_ssize_t c_end, i
    cdef Py_ssize_t c_start = _i64(start)
    cdef int64_t c_base_position = _i64(base_position)
    cdef int64_t c_index_interval = _i64(index_interval)
    cdef int64_t c_expected_offset = _i64(expected_offset)
    _acquire(buf, &view, False)
    s.entries = NULL
    try:
        c_end = view.len if end is None else _i64(end)
        if not 0 <= c_start <= c_end <= view.len:
            raise ValueError(f"scan range [{c_start}, {c_end}) is not within the buffer of "
                             f"{view.len} bytes")
        if c_base_position < 0 or c_base_position > INT64_MAX - c_end:
            raise ValueError(f"base position {c_base_position} out of range")
        s.buf = <const uint8_t *>view.buf
        s.pos, s.end = c_start, c_end
        s.base_position, s.index_interval = c_base_position, c_index_interval
        s.expected = c_expected_offset
        s.gaps, s.first_expected = gaps and c_expected_offset >= 0, c_expected_offset
        s.count, s.next_offset = 0, c_expected_offset
        s.max_ts, s.max_ts_offset = -1, -1
        s.since_entry = 0
        s.n_entries, s.cap = 0, 0
        if c_end - c_start >= NOGIL_MIN:
            with nogil:
                _scan(&s)
        else:
            _scan(&s)
        if s.fault.code == E_NO_MEMORY:
            raise MemoryError("no memory for scan index entries")
        offsets = [(s.entries[i].offset, s.entries[i].position) for i in range(s.n_entries)]
        times = [(s.entries[i].timestamp, s.entries[i].ts_offset) for i in range(s.n_entries)]
        error = None if s.fault.code == E_OK else _error(&s.fault, c_base_position + s.pos)
        return ScanResult(c_base_position + s.pos, s.count, s.next_offset, s.max_ts,
                          s.max_ts_offset, offsets, times, error)
    finally:
        free(s.entries)
        PyBuffer_Release(&view)
