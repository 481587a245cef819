"""The log cleaner's key -> last offset map (pure twin of native/offset_map.pyx).

pybroker/contracts/offset_map.py gives the table layout, the rules and the errors. This twin keeps
the same 24-byte slots in a bytearray, so it honours the same memory bound and fills the same
slots; it is the reference the native module is tested against, not a fast path.
"""
import operator
import struct

from xxhash import xxh3_128_intdigest

from pybroker.compression import decompress
from pybroker.contracts.offset_map import DEFAULT_LOAD_FACTOR, ENTRY_SIZE, FillResult
from pybroker.errors import CorruptRecordError
from pybroker.records import zigzag_varint

HEADER_SIZE = 61
LOG_OVERHEAD = 12
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
ATTR_CONTROL = 0x20
INT64_MAX = (1 << 63) - 1
M64 = (1 << 64) - 1

_SLOT = struct.Struct("=QQq")
_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_I64 = struct.Struct(">q")
_FIELDS = struct.Struct(">bIhi")  # magic @16, crc @17, attributes @21, lastOffsetDelta @23
_COUNT = struct.Struct(">i")  # recordCount @57
_EMPTY = b"\xff" * ENTRY_SIZE


class _RecordError(Exception):
    """A record-level failure; add_batches turns it into CorruptRecordError."""


def _varint(p, pos: int, end: int, i: int) -> tuple[int, int]:
    z = shift = 0
    for _ in range(10):
        if pos >= end:
            raise _RecordError(f"record {i}: truncated varint")
        b = p[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            z &= M64
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
    raise _RecordError(f"record {i}: varint longer than 10 bytes")


def _offset(value) -> int:
    value = operator.index(value)
    if not -(1 << 63) <= value <= INT64_MAX:
        raise OverflowError("offset out of int64 range")
    return value


def _batch_header(view, pos: int, n: int) -> tuple:
    """(base, length, magic, attributes, lod, count) of the batch at ``pos``, checked as the native walker does."""
    base = _I64.unpack_from(view, pos)[0] if n - pos >= 8 else -1
    if n - pos < LOG_OVERHEAD:
        raise CorruptRecordError(f"truncated batch: {LOG_OVERHEAD} bytes needed, {n - pos} left", base, pos)
    length = _HEAD.unpack_from(view, pos)[1]
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch length {length} is smaller than {MIN_BATCH_LENGTH}", base, pos)
    if n - pos - LOG_OVERHEAD < length:
        raise CorruptRecordError(f"truncated batch: {length + LOG_OVERHEAD} bytes needed, {n - pos} left", base, pos)
    magic, _, attributes, lod = _FIELDS.unpack_from(view, pos + 16)
    count = _COUNT.unpack_from(view, pos + 57)[0]
    if magic != 2:
        raise CorruptRecordError(f"unsupported magic {magic}", base, pos)
    if attributes & 7 > 4:
        raise CorruptRecordError(f"unknown compression codec {attributes & 7}", base, pos)
    if lod < 0:
        raise CorruptRecordError(f"negative last offset delta {lod}", base, pos)
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}", base, pos)
    if base < 0 or base > INT64_MAX - lod:
        raise CorruptRecordError(f"base offset {base} out of range", base, pos)
    return base, length, magic, attributes, lod, count


def start_idle_helper() -> None:
    """Nothing here: these walks hold the GIL, so they stay on the calling thread at its priority (a
    thread at a lowered priority holding the GIL would stall every other thread of the process)."""


def stop_idle_helper() -> None:
    """Nothing to stop."""


class OffsetMap:
    def __init__(self, memory_bytes: int, load_factor: float = DEFAULT_LOAD_FACTOR):
        memory_bytes = operator.index(memory_bytes)
        load_factor = float(load_factor)
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor must be in (0, 1], not {load_factor}")
        capacity = max(memory_bytes, 0) // ENTRY_SIZE
        limit = min(int(capacity * load_factor), capacity - 1)
        if limit < 1:
            raise ValueError(f"{memory_bytes} bytes cannot hold a key at load factor {load_factor}")
        self._capacity = capacity
        self._limit = limit
        self._slots = bytearray(_EMPTY) * capacity
        self._size = 0
        self._latest = -1

    capacity = property(lambda self: self._capacity)
    limit = property(lambda self: self._limit)
    size = property(lambda self: self._size)
    full = property(lambda self: self._size >= self._limit)
    latest_offset = property(lambda self: self._latest)
    memory_bytes = property(lambda self: self._capacity * ENTRY_SIZE)

    def _find(self, key) -> tuple[int, int, int, int]:
        """(slot position, stored offset or -1, lo, hi) of key's slot or of the empty slot it would take."""
        h = xxh3_128_intdigest(key)
        lo, hi = h & M64, h >> 64
        cap, slots = self._capacity, self._slots
        i = (hi * cap) >> 64
        while True:
            pos = i * ENTRY_SIZE
            s_lo, s_hi, off = _SLOT.unpack_from(slots, pos)
            if off == -1 or (s_lo == lo and s_hi == hi):
                return pos, off, lo, hi
            i = i + 1 if i + 1 < cap else 0

    def _put(self, key, offset: int) -> bool:
        pos, old, lo, hi = self._find(key)
        if old == -1:
            if self._size >= self._limit:
                return False
            self._size += 1
        if offset > old:
            _SLOT.pack_into(self._slots, pos, lo, hi, offset)
        return True

    def put(self, key, offset) -> bool:
        offset = _offset(offset)
        if offset < 0:
            raise ValueError(f"negative offset {offset}")
        key = memoryview(key)  # TypeError for what is not bytes-like, as in the native twin
        if not self._put(key, offset):
            return False
        if offset > self._latest:
            self._latest = offset
        return True

    def get(self, key) -> int:
        return self._find(memoryview(key))[1]

    def clear(self) -> None:
        self._slots[:] = _EMPTY * self._capacity
        self._size = 0
        self._latest = -1

    def retain(self, buf, now_ms: int, new_horizon_ms: int, keep_empty=(), end_offset: int = INT64_MAX):
        return _retain(self, buf, now_ms, new_horizon_ms, keep_empty, end_offset)

    def add_batches(self, buf, start_offset, stop_offset) -> FillResult:
        start, stop = _offset(start_offset), _offset(stop_offset)
        if start < 0 or start > stop:
            raise ValueError(f"bad offset range [{start}, {stop})")
        view = memoryview(buf).cast("B")
        n, pos, covered = len(view), 0, start
        result = None
        try:
            while pos < n:
                base, length, _, attributes, lod, count = _batch_header(view, pos, n)
                codec = attributes & 7
                if base >= stop:
                    break
                end = pos + LOG_OVERHEAD + length
                last = base + lod
                if last >= start and not attributes & ATTR_CONTROL:
                    section = view[pos + HEADER_SIZE:end]
                    if codec:
                        try:
                            section = decompress(codec, section)
                        except Exception as exc:
                            raise CorruptRecordError(f"decompression failed: {exc}", base, pos) from None
                    try:
                        stopped = self._add_records(section, base, lod, count, start, stop)
                    except _RecordError as exc:
                        raise CorruptRecordError(str(exc), base, pos) from None
                    if stopped >= 0:
                        result = FillResult(stopped, True)
                        break
                if last + 1 > covered:
                    covered = last + 1
                pos = end
        finally:
            view.release()
        if result is None:
            result = FillResult(min(stop, covered), False)
        if result.next_offset - 1 > self._latest:
            self._latest = result.next_offset - 1
        return result

    def _add_records(self, p, base: int, lod: int, count: int, start: int, stop: int) -> int:
        """Put one batch's keyed records in range; the offset of the record that did not fit, else -1."""
        n, pos = len(p), 0
        for i in range(count):
            _, rec_end, _, _, delta, klen, key_pos = _record_head(p, pos, n, lod, i)
            offset = base + delta
            if klen >= 0 and start <= offset < stop:
                if not self._put(p[key_pos:key_pos + klen], offset):
                    return offset
            pos = rec_end
        if pos != n:
            raise _RecordError(f"{n - pos} bytes after the last of {count} records")
        return -1


# ---- the cleaner's second pass: keep the latest record of every key --------------------------

ATTR_DELETE_HORIZON = 0x40
_HDR = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 batch header


def _record_head(p, pos: int, n: int, lod: int, i: int) -> tuple:
    """(start, end, ts_delta, ts_end, offset delta, key length, key position) of the record at ``pos``,
    checked; ``start`` is its attributes byte (after the length varint). Shared by every record walker here."""
    length, pos = _varint(p, pos, n, i)
    if length < 1 or length > n - pos:
        raise _RecordError(f"record {i}: length {length} out of range")
    start, end = pos, pos + length
    ts_delta, q = _varint(p, pos + 1, end, i)
    ts_end = q
    delta, q = _varint(p, q, end, i)
    if delta < 0 or delta > lod:
        raise _RecordError(f"record {i}: offset delta {delta} outside the batch (last offset delta {lod})")
    klen, q = _varint(p, q, end, i)
    if klen < -1 or klen > end - q:
        raise _RecordError(f"record {i}: key length {klen} out of range")
    return start, end, ts_delta, ts_end, delta, klen, q


def _records(p, n: int, base: int, lod: int, count: int):
    """(start, end, ts_delta, ts_end, offset, key or None, is_tombstone) per record."""
    pos = 0
    for i in range(count):
        start, end, ts_delta, ts_end, delta, klen, q = _record_head(p, pos, n, lod, i)
        key = bytes(p[q:q + klen]) if klen >= 0 else None
        q += max(klen, 0)
        vlen, q = _varint(p, q, end, i)
        yield start, end, ts_delta, ts_end, base + delta, key, vlen < 0
        pos = end
    if pos != n:
        raise _RecordError(f"{n - pos} bytes after the last of {count} records")


def _encode_record(p, start: int, end: int, ts_delta: int, ts_end: int) -> bytes:
    """The record at p[start:end] with its timestamp delta replaced (a new base timestamp)."""
    body = bytes(p[start:start + 1]) + zigzag_varint(ts_delta) + bytes(p[ts_end:end])
    return zigzag_varint(len(body)) + body


def _retain(self, buf, now_ms, new_horizon_ms, keep_empty, end_offset):
    """See pybroker/contracts/offset_map.py: the batches of ``buf`` with only the records to keep."""
    from pybroker._pure.crc import crc32c
    from pybroker.compression import compress
    from pybroker.contracts.offset_map import RetainResult
    keep_empty = set(keep_empty)
    view = memoryview(buf).cast("B")
    n = len(view)
    out = bytearray()
    pos = read = kept_records = batches = kept_batches = 0
    while pos < n:
        base, length, _, attrs, lod, count = _batch_header(view, pos, n)
        (_, _, ple, _, _, _, _, base_ts, max_ts, pid, epoch, seq, _) = _HDR.unpack_from(view, pos)
        end = pos + LOG_OVERHEAD + length
        batches += 1
        read += count
        if attrs & ATTR_CONTROL:
            out += view[pos:end]
            kept_batches += 1
            pos = end
            continue
        codec = attrs & 7
        section = view[pos + HEADER_SIZE:end]
        if codec:
            try:
                section = memoryview(decompress(codec, section))
            except Exception as exc:
                raise CorruptRecordError(f"decompression failed: {exc}", base, pos) from None
        has_horizon = bool(attrs & ATTR_DELETE_HORIZON)
        kept, tombstone = [], False
        try:
            for rec in _records(section, len(section), base, lod, count):
                start, rec_end, ts_delta, ts_end, offset, key, is_tombstone = rec
                if offset >= end_offset:  # from the map's end on: not cleaned yet, kept as it is
                    kept.append(rec)
                    continue
                if key is None or offset < self.get(key):
                    continue
                if is_tombstone:
                    if has_horizon and now_ms > base_ts:
                        continue
                    tombstone = True
                kept.append(rec)
        except _RecordError as exc:
            raise CorruptRecordError(str(exc), base, pos) from None
        stamp = tombstone and not has_horizon
        if len(kept) == count and not stamp:
            out += view[pos:end]
        elif kept or base in keep_empty:
            new_base_ts = new_horizon_ms if stamp else base_ts
            records = bytearray()
            for start, rec_end, ts_delta, ts_end, _, _, _ in kept:
                # the varint length prefix sits before start; re-encode when the base timestamp moved
                if stamp:
                    records += _encode_record(section, start, rec_end, base_ts + ts_delta - new_base_ts, ts_end)
                else:
                    records += zigzag_varint(rec_end - start) + bytes(section[start:rec_end])
            if not attrs & 0x08 and kept:  # CreateTime: the max of what is left
                max_ts = max(base_ts + r[2] for r in kept)
            body = compress(codec, records) if codec else bytes(records)
            new_attrs = attrs | (ATTR_DELETE_HORIZON if stamp else 0)
            header = bytearray(_HDR.pack(base, HEADER_SIZE - LOG_OVERHEAD + len(body), ple, 2, 0, new_attrs,
                                         lod, new_base_ts, max_ts, pid, epoch, seq, len(kept)))
            batch = header + body
            struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
            out += batch
        else:
            pos = end  # nothing left and nothing to remember: the batch goes
            continue
        kept_records += len(kept)
        kept_batches += 1
        pos = end
    return RetainResult(bytes(out), read, kept_records, batches, kept_batches)



def _check_rest(p, q: int, end: int, klen: int, i: int) -> None:
    """The record's value and headers, from its key at ``q``, fill it to ``end`` exactly."""
    q += max(klen, 0)
    vlen, q = _varint(p, q, end, i)
    if vlen < -1 or vlen > end - q:
        raise _RecordError(f"record {i}: value length {vlen} out of range")
    q += max(vlen, 0)
    count, q = _varint(p, q, end, i)
    if count < 0 or count > end - q:  # a header takes at least two bytes
        raise _RecordError(f"record {i}: header count {count} out of range")
    for _ in range(count):
        hk, q = _varint(p, q, end, i)
        if hk < 0 or hk > end - q:
            raise _RecordError(f"record {i}: header key length {hk} out of range")
        q += hk
        hv, q = _varint(p, q, end, i)
        if hv < -1 or hv > end - q:
            raise _RecordError(f"record {i}: header value length {hv} out of range")
        q += max(hv, 0)
    if q != end:
        raise _RecordError(f"record {i}: {end - q} bytes after its last header")


def _sections(buf, open_compressed: bool):
    """(base offset, position, records section, last offset delta, count) of each v2 batch of ``buf``;
    compressed sections decompressed when ``open_compressed``, else passed by."""
    view = memoryview(buf).cast("B")
    pos = 0
    while pos < len(view):
        base, length, _, attrs, lod, count = _batch_header(view, pos, len(view))
        end = pos + LOG_OVERHEAD + length
        section = view[pos + HEADER_SIZE:end]
        if attrs & 7 and open_compressed:
            section = memoryview(decompress(attrs & 7, section))
        if open_compressed or not attrs & 7:
            yield base, pos, section, lod, count
        pos = end


def check_records(buf) -> None:
    """See pybroker/contracts/offset_map.py: every record of the uncompressed batches parses whole."""
    for base, pos, section, lod, count in _sections(buf, False):
        n, q = len(section), 0
        try:
            for i in range(count):
                _, rec_end, _, _, _, klen, key_pos = _record_head(section, q, n, lod, i)
                _check_rest(section, key_pos, rec_end, klen, i)
                q = rec_end
            if q != n:
                raise _RecordError(f"{n - q} bytes after the last of {count} records")
        except _RecordError as exc:
            raise CorruptRecordError(str(exc), base, pos) from None


def keyless_offset(buf) -> int:
    """The offset of the first record without a key in the v2 batches of ``buf``, or -1."""
    for base, pos, section, lod, count in _sections(buf, True):
        try:
            for rec in _records(section, len(section), base, lod, count):
                if rec[5] is None:
                    return rec[4]
        except _RecordError as exc:
            raise CorruptRecordError(str(exc), base, pos) from None
    return -1
