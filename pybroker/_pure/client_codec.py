"""Client-side record codec in pure Python: the twin of pybroker._native.client_codec.

Producers fill a ``BatchBuilder`` and ``build()`` one Kafka v2 record batch (magic 2, CRC-32C,
records section optionally compressed). Consumers turn a fetch response's records into
``ConsumerRecord`` objects (``decode_records``) or into Arrow-ready column buffers
(``decode_columns``). Batch header (61 bytes, big-endian): baseOffset i64, batchLength i32,
partitionLeaderEpoch i32, magic i8, crc u32, attributes i16, lastOffsetDelta i32,
baseTimestamp i64, maxTimestamp i64, producerId i64, producerEpoch i16, baseSequence i32,
recordCount i32. Record: length varint, attributes i8, timestampDelta varlong, offsetDelta
varint, key (varint length, -1 = null), value (same), header count varint, headers (key
string, value bytes or null). Varints are zigzag, at most 10 bytes, and wrap at 64 bits.

Errors: a damaged complete batch raises ``CorruptRecordError(reason, offset=its baseOffset,
position=its start in the buffer)``; the reasons are the same text in both implementations.
A trailing partial batch is ignored.
"""
import operator
import struct
from array import array

from pybroker.compression import compress, decompress
from pybroker.errors import CorruptRecordError
from pybroker import core

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
LOG_OVERHEAD = 12
MIN_BATCH_LENGTH = 49
CRC_START = 21
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
CONTROL_ABORT = 0
MAX_ARROW_BYTES = 0x7FFFFFFF  # int32 Arrow offsets

_M64 = (1 << 64) - 1
_EMPTY = b""

# Record-level failures: (code, text); the text is prefixed with "record {index}: ".
E_TRUNCATED = "truncated"
E_VARINT_TRUNCATED = "truncated varint"
E_VARINT_LONG = "varint longer than 10 bytes"
E_LENGTH = "length out of range"
E_KEY = "key length out of range"
E_VALUE = "value length out of range"
E_HEADER_COUNT = "header count out of range"
E_HEADER_KEY = "header key length out of range"
E_HEADER_VALUE = "header value length out of range"
E_FIELDS = "length does not match its fields"


class _RecordFault(Exception):
    def __init__(self, what):
        self.what = what


def _wrap64(n: int) -> int:
    n &= _M64
    return n - (1 << 64) if n >> 63 else n


def _check_i64(n, what):
    n = int(n) if isinstance(n, float) else operator.index(n)  # floats truncate, as a C conversion does
    if not -(1 << 63) <= n < (1 << 63):
        raise OverflowError(f"{what} out of range for a 64-bit integer")
    return n


# ---------------------------------------------------------------- murmur2

def murmur2(data) -> int:
    """Java's ``Utils.murmur2`` (seed 0x9747b28c) of ``data``, as a signed 32-bit int."""
    view = memoryview(data).cast("B")
    n = len(view)
    m = 0x5BD1E995
    h = (0x9747B28C ^ n) & 0xFFFFFFFF
    words = n >> 2
    for (k,) in struct.iter_unpack("<I", view[:words * 4]):
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = n & 3
    base = words * 4
    if tail:
        if tail == 3:
            h ^= view[base + 2] << 16
        if tail >= 2:
            h ^= view[base + 1] << 8
        h ^= view[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def frame_buffer(size: int) -> bytearray:
    """A bytearray of ``size`` bytes for a network read to fill (the native one skips zero-filling)."""
    if size < 0:
        raise ValueError("size must not be negative")
    return bytearray(size)


def partition_for_key(key, num_partitions: int) -> int:
    """Kafka's default partition for a non-null key: positive murmur2 modulo the partition count."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# ---------------------------------------------------------------- encoding

def _zigzag(n: int) -> int:
    return ((n << 1) ^ (n >> 63)) & _M64


def _varint_size(n: int) -> int:
    z = _zigzag(n)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def _put_varint(out: bytearray, n: int) -> None:
    z = _zigzag(n)
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _as_view(data, what):
    if data is None:
        return None
    try:
        return memoryview(data).cast("B")
    except TypeError:
        raise TypeError(f"{what} must be a bytes-like object or None, not {type(data).__name__}") from None


def _header_key(key):
    if isinstance(key, str):
        return memoryview(key.encode("utf-8"))
    if key is None:
        raise TypeError("header key must be str or bytes, not None")
    return _as_view(key, "header key")


class BatchBuilder:
    """One open v2 record batch being filled (records section kept uncompressed until ``build``)."""

    def __init__(self, max_bytes: int):
        self._max_bytes = int(max_bytes)
        self._records = bytearray()
        self._count = 0
        self._first_ts = -1
        self._max_ts = -1

    count = property(lambda self: self._count, doc="records appended so far")
    size_bytes = property(lambda self: HEADER_SIZE + len(self._records),
                          doc="size of the batch built without compression")
    first_timestamp = property(lambda self: self._first_ts, doc="base timestamp (-1 when empty)")
    max_timestamp = property(lambda self: self._max_ts, doc="largest timestamp (-1 when empty)")

    def _add(self, timestamp, key, value, headers) -> int:
        """Append one record from views (key/value None = null); -1 when it does not fit."""
        delta_ts = _wrap64(timestamp - self._first_ts) if self._count else 0
        delta_off = self._count
        body = 1 + _varint_size(delta_ts) + _varint_size(delta_off)
        body += 1 if key is None else _varint_size(len(key)) + len(key)
        body += 1 if value is None else _varint_size(len(value)) + len(value)
        body += _varint_size(len(headers))
        for hk, hv in headers:
            body += _varint_size(len(hk)) + len(hk)
            body += 1 if hv is None else _varint_size(len(hv)) + len(hv)
        size = _varint_size(body) + body
        if self._count and HEADER_SIZE + len(self._records) + size > self._max_bytes:
            return -1
        out = self._records
        _put_varint(out, body)
        out.append(0)
        _put_varint(out, delta_ts)
        _put_varint(out, delta_off)
        for field in (key, value):
            if field is None:
                out.append(1)  # zigzag(-1)
            else:
                _put_varint(out, len(field))
                out += field
        _put_varint(out, len(headers))
        for hk, hv in headers:
            _put_varint(out, len(hk))
            out += hk
            if hv is None:
                out.append(1)
            else:
                _put_varint(out, len(hv))
                out += hv
        if not self._count:
            self._first_ts = self._max_ts = timestamp
        elif timestamp > self._max_ts:
            self._max_ts = timestamp
        self._count += 1
        return delta_off

    def append(self, timestamp: int, key, value, headers=None) -> int:
        """Append one record; returns its offset delta, or -1 when it does not fit in ``max_bytes``."""
        timestamp = _check_i64(timestamp, "timestamp")
        k = _as_view(key, "key")
        v = _as_view(value, "value")
        hs = []
        if headers is not None:
            for hkey, hval in headers:
                hs.append((_header_key(hkey), _as_view(hval, "header value")))
        return self._add(timestamp, k, v, hs)

    def append_many(self, keys, values, timestamp: int, start: int = 0) -> int:
        """Append ``values[start:]`` (with ``keys[i]`` when keys is not None) until full; returns the next index."""
        timestamp = _check_i64(timestamp, "timestamp")
        n = len(values)
        if keys is not None and len(keys) < n:
            raise ValueError("keys is shorter than values")
        if start < 0:
            raise ValueError("start must not be negative")
        i = start
        while i < n:
            k = None if keys is None else _as_view(keys[i], "key")
            if self._add(timestamp, k, _as_view(values[i], "value"), ()) < 0:
                break
            i += 1
        return i

    def append_arrow(self, key_validity, key_offsets, key_data, value_validity, value_offsets,
                     value_data, offsets_64bit: bool, array_offset: int, start: int, stop: int,
                     timestamp: int) -> int:
        """Append rows [start, stop) of Arrow binary arrays given as raw buffers; returns the next index."""
        timestamp = _check_i64(timestamp, "timestamp")
        if start < 0 or stop < start or array_offset < 0:
            raise ValueError("bad row range")
        has_keys = key_offsets is not None
        values = _ArrowColumn(value_validity, value_offsets, value_data, offsets_64bit, array_offset, stop)
        keys = _ArrowColumn(key_validity, key_offsets, key_data, offsets_64bit,
                            array_offset, stop) if has_keys else None
        i = start
        while i < stop:
            k = keys.get(i) if has_keys else None
            if self._add(timestamp, k, values.get(i), ()) < 0:
                break
            i += 1
        return i

    def build(self, codec: int, producer_id: int = -1, producer_epoch: int = -1,
              base_sequence: int = -1, transactional: bool = False) -> bytes:
        """The complete batch: baseOffset 0, header, CRC-32C; records compressed with ``codec`` (0-4);
        ``transactional`` sets the transactional attribute bit (0x10)."""
        if not -(1 << 63) <= producer_id < (1 << 63) or not -(1 << 15) <= producer_epoch < (1 << 15) \
                or not -(1 << 31) <= base_sequence < (1 << 31):
            raise OverflowError("producer state out of range")
        if not 0 <= codec <= 4:
            raise ValueError(f"unknown compression codec {codec}")
        if not self._count:
            raise ValueError("a record batch needs at least one record")
        body = self._records if codec == 0 else compress(codec, self._records)
        out = bytearray(HEADER_SIZE + len(body))
        attributes = codec | (ATTR_TRANSACTIONAL if transactional else 0)
        HEADER.pack_into(out, 0, 0, len(out) - LOG_OVERHEAD, -1, 2, 0, attributes, self._count - 1,
                         self._first_ts, self._max_ts, producer_id, producer_epoch, base_sequence,
                         self._count)
        out[HEADER_SIZE:] = body
        struct.pack_into(">I", out, 17, core.crc.crc32c(memoryview(out)[CRC_START:]))
        return bytes(out)


class _ArrowColumn:
    """Bounds-checked reader of one Arrow binary/large_binary array's buffers."""

    def __init__(self, validity, offsets, data, wide, array_offset, stop):
        self.validity = None if validity is None else memoryview(validity).cast("B")
        raw = memoryview(offsets).cast("B")
        width = 8 if wide else 4
        if len(raw) < (array_offset + stop + 1) * width:
            raise ValueError("arrow offsets buffer is too short")
        self.offsets = raw[:(len(raw) // width) * width].cast("q" if wide else "i")
        self.data = memoryview(b"" if data is None else data).cast("B")
        if self.validity is not None and len(self.validity) * 8 < array_offset + stop:
            raise ValueError("arrow validity bitmap is too short")
        self.base = array_offset

    def get(self, i):
        j = self.base + i
        if self.validity is not None and not (self.validity[j >> 3] >> (j & 7)) & 1:
            return None
        lo, hi = self.offsets[j], self.offsets[j + 1]
        if lo < 0 or hi < lo or hi > len(self.data):
            raise ValueError("arrow offsets out of range")
        return self.data[lo:hi]


# ---------------------------------------------------------------- decoding

class ConsumerRecord:
    """One fetched record; attributes are read-only. ``headers`` is a list of (str, bytes|None), or
    the empty tuple when the record has none (no allocation per record on the hot path);
    ``timestamp_type`` is 0 (CreateTime) or 1 (LogAppendTime); ``leader_epoch`` is -1 when unknown."""

    __slots__ = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value",
                 "headers", "leader_epoch")

    def __init__(self, topic, partition, offset, timestamp, timestamp_type, key, value, headers,
                 leader_epoch=-1):
        _set = object.__setattr__
        _set(self, "topic", topic)
        _set(self, "partition", int(partition))
        _set(self, "offset", int(offset))
        _set(self, "timestamp", int(timestamp))
        _set(self, "timestamp_type", int(timestamp_type))
        _set(self, "key", key)
        _set(self, "value", value)
        _set(self, "headers", headers)
        _set(self, "leader_epoch", int(leader_epoch))

    def __setattr__(self, name, value):
        raise AttributeError(f"ConsumerRecord attribute {name!r} is read-only")

    def __delattr__(self, name):
        raise AttributeError(f"ConsumerRecord attribute {name!r} is read-only")

    def _fields(self):
        return (self.topic, self.partition, self.offset, self.timestamp, self.timestamp_type,
                self.key, self.value, self.headers, self.leader_epoch)

    def __eq__(self, other):
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None

    def __reduce__(self):
        return (ConsumerRecord, self._fields())

    def __repr__(self):
        return (f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
                f"timestamp={self.timestamp}, timestamp_type={self.timestamp_type}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r}, leader_epoch={self.leader_epoch})")


def _varint(buf, pos, end):
    """Zigzag varint at pos (not reading at or past end) -> (value, new pos)."""
    z = shift = 0
    for _ in range(10):
        if pos >= end:
            raise _RecordFault(E_VARINT_TRUNCATED)
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            z &= _M64
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
    raise _RecordFault(E_VARINT_LONG)


def _parse_record(buf, pos, end):
    """One record at pos -> (ts_delta, off_delta, key_span, value_span, headers_span, n_headers, new pos).

    Spans are (start, stop) or None for null."""
    length, pos = _varint(buf, pos, end)
    if length < 0 or length > end - pos:
        raise _RecordFault(E_LENGTH)
    rec_end = pos + length
    if pos >= rec_end:
        raise _RecordFault(E_TRUNCATED)
    pos += 1  # record attributes: unused
    ts_delta, pos = _varint(buf, pos, rec_end)
    off_delta, pos = _varint(buf, pos, rec_end)
    n, pos = _varint(buf, pos, rec_end)
    if n < -1 or n > rec_end - pos:
        raise _RecordFault(E_KEY)
    key = None if n < 0 else (pos, pos + n)
    pos += max(n, 0)
    n, pos = _varint(buf, pos, rec_end)
    if n < -1 or n > rec_end - pos:
        raise _RecordFault(E_VALUE)
    value = None if n < 0 else (pos, pos + n)
    pos += max(n, 0)
    n_headers, pos = _varint(buf, pos, rec_end)
    if n_headers < 0 or n_headers > (rec_end - pos) // 2:  # every header takes at least 2 bytes
        raise _RecordFault(E_HEADER_COUNT)
    h_start = pos
    for _ in range(n_headers):
        n, pos = _varint(buf, pos, rec_end)
        if n < 0 or n > rec_end - pos:
            raise _RecordFault(E_HEADER_KEY)
        pos += n
        n, pos = _varint(buf, pos, rec_end)
        if n < -1 or n > rec_end - pos:
            raise _RecordFault(E_HEADER_VALUE)
        pos += max(n, 0)
    if pos != rec_end:
        raise _RecordFault(E_FIELDS)
    return ts_delta, off_delta, key, value, (h_start, rec_end), n_headers, rec_end


def _iter_headers(buf, span, n):
    """(key bytes, value bytes|None) of an already validated headers section."""
    pos = span[0]
    for _ in range(n):
        k, pos = _varint(buf, pos, span[1])
        key = bytes(buf[pos:pos + k])
        pos += k
        v, pos = _varint(buf, pos, span[1])
        if v < 0:
            yield key, None
        else:
            yield key, bytes(buf[pos:pos + v])
            pos += v


def _aborted_by_first_offset(aborted):
    """[(first_offset, producer_id)] sorted by first offset, from (producer_id, first_offset) pairs
    or from objects with ``producer_id``/``first_offset`` attributes (a fetch response's entries)."""
    out = []
    for entry in aborted or ():
        if hasattr(entry, "producer_id"):
            out.append((int(entry.first_offset), int(entry.producer_id)))
        else:
            pid, first = entry
            out.append((int(first), int(pid)))
    out.sort(key=lambda a: a[0])
    return out


class _Batch:
    __slots__ = ("position", "base_offset", "end", "attributes", "last_offset_delta", "base_ts",
                 "max_ts", "producer_id", "count", "leader_epoch")


class _Walker:
    """Walks the complete batches of a fetch response, applying Kafka's read_committed filter."""

    def __init__(self, buf, start_offset, read_committed, aborted, check_crcs):
        self.buf = memoryview(buf).cast("B")
        self.start_offset = start_offset
        self.read_committed = read_committed
        self.aborted = _aborted_by_first_offset(aborted)
        self.aborted_next = 0
        self.ongoing = set()  # producers whose aborted transaction has begun but whose marker is not seen
        self.check_crcs = check_crcs
        self.next_offset = start_offset

    def fail(self, batch, reason):
        raise CorruptRecordError(reason, batch.base_offset, batch.position)

    def batches(self):
        buf, pos, n = self.buf, 0, len(self.buf)
        while n - pos >= LOG_OVERHEAD:
            b = _Batch()
            b.position = pos
            b.base_offset, length = struct.unpack_from(">qi", buf, pos)
            if length < MIN_BATCH_LENGTH:
                self.fail(b, f"batch length {length} is smaller than {MIN_BATCH_LENGTH}")
            if n - pos - LOG_OVERHEAD < length:
                return  # a trailing partial batch
            (_, _, b.leader_epoch, magic, stored, b.attributes, b.last_offset_delta, b.base_ts, b.max_ts,
             b.producer_id, _, _, b.count) = HEADER.unpack_from(buf, pos)
            b.end = pos + LOG_OVERHEAD + length
            if magic != 2:
                self.fail(b, f"unsupported magic {magic}")
            if self.check_crcs:
                computed = core.crc.crc32c(buf[pos + CRC_START:b.end])
                if computed != stored:
                    self.fail(b, f"crc mismatch (stored {stored:#010x}, computed {computed:#010x})")
            if b.attributes & 0x07 > 4:
                self.fail(b, f"unknown compression codec {b.attributes & 0x07}")
            if b.count < 0:
                self.fail(b, f"negative record count {b.count}")
            last = _wrap64(b.base_offset + b.last_offset_delta)
            if last + 1 > self.next_offset:
                self.next_offset = last + 1
            pos = b.end
            if self.read_committed and b.producer_id >= 0:
                self._consume_aborted_upto(last)
                if b.attributes & ATTR_CONTROL:
                    if self._is_abort_marker(b):
                        self.ongoing.discard(b.producer_id)
                    continue
                if b.attributes & ATTR_TRANSACTIONAL and b.producer_id in self.ongoing:
                    continue
            if b.attributes & ATTR_CONTROL or last < self.start_offset:
                continue
            yield b

    def _consume_aborted_upto(self, offset):
        aborted = self.aborted
        while self.aborted_next < len(aborted) and aborted[self.aborted_next][0] <= offset:
            self.ongoing.add(aborted[self.aborted_next][1])
            self.aborted_next += 1

    def section(self, b):
        raw = self.buf[b.position + HEADER_SIZE:b.end]
        codec = b.attributes & 0x07
        if codec == 0:
            return raw
        try:
            return memoryview(decompress(codec, raw))
        except Exception as exc:
            self.fail(b, f"decompression failed: {exc}")

    def _is_abort_marker(self, b):
        if b.count < 1:
            return False
        body = self.section(b)
        try:
            rec = _parse_record(body, 0, len(body))
        except _RecordFault as fault:
            self.fail(b, f"record 0: {fault.what}")
        key = rec[2]
        if key is None or key[1] - key[0] < 4:
            self.fail(b, "control record key shorter than 4 bytes")
        return struct.unpack_from(">h", body, key[0] + 2)[0] == CONTROL_ABORT

    def records(self, b, body):
        """(index, parsed record) of one batch's records section, checking the record count."""
        pos, end = 0, len(body)
        i = 0
        try:
            for i in range(b.count):
                if pos >= end:
                    self.fail(b, f"record count {b.count} exceeds the records in the batch")
                rec = _parse_record(body, pos, end)
                pos = rec[6]
                yield rec
        except _RecordFault as fault:
            self.fail(b, f"record {i}: {fault.what}")
        if pos != end:
            self.fail(b, f"{end - pos} bytes left after {b.count} records")


def decode_records(buf, topic: str, partition: int, start_offset: int, read_committed: bool = False,
                   aborted=None, check_crcs: bool = True, max_records: int = -1):
    """Records (offset >= start_offset) of every complete batch in ``buf`` -> (list, next_offset).

    Control batches and (with read_committed) aborted transactions are skipped. next_offset is
    one past the last complete batch (never below start_offset); when ``max_records`` (>= 0)
    cuts the list short, it is the offset of the first record left out.
    """
    walker = _Walker(buf, start_offset, read_committed, aborted, check_crcs)
    out = []
    for b in walker.batches():
        body = walker.section(b)
        log_append = b.attributes & ATTR_LOG_APPEND_TIME
        for ts_delta, off_delta, key, value, hspan, n_headers, _ in walker.records(b, body):
            offset = _wrap64(b.base_offset + off_delta)
            if offset < start_offset:
                continue
            if 0 <= max_records <= len(out):
                return out, offset
            headers = [(k.decode("utf-8", "replace"), v)
                       for k, v in _iter_headers(body, hspan, n_headers)] if n_headers else ()
            out.append(ConsumerRecord(
                topic, partition, offset, b.max_ts if log_append else _wrap64(b.base_ts + ts_delta),
                1 if log_append else 0,
                None if key is None else bytes(body[key[0]:key[1]]),
                None if value is None else bytes(body[value[0]:value[1]]),
                headers, b.leader_epoch))
    return out, walker.next_offset


class Columns:
    """Arrow-ready buffers of decoded records (see pybroker.client.arrow.to_record_batch).

    Offsets buffers are int32 (count+1 entries); validity bitmaps are None when no entry is null.
    ``header_offsets`` index the flattened headers (``header_count`` of them)."""

    __slots__ = ("count", "next_offset", "key_validity", "key_offsets", "key_data", "value_validity",
                 "value_offsets", "value_data", "offsets", "timestamps", "timestamp_types",
                 "header_offsets", "header_count", "header_key_offsets", "header_key_data",
                 "header_value_validity", "header_value_offsets", "header_value_data")


class _BinaryColumn:
    def __init__(self):
        self.offsets = array("i", [0])
        self.data = bytearray()
        self.valid = []
        self.has_null = False

    def add(self, piece):
        if piece is None:
            self.has_null = True
            self.valid.append(0)
        else:
            self.data += piece
            if len(self.data) > MAX_ARROW_BYTES:
                raise ValueError("decoded column exceeds 2 GiB")
            self.valid.append(1)
        self.offsets.append(len(self.data))

    def validity(self):
        if not self.has_null:
            return None
        bits = bytearray((len(self.valid) + 7) // 8)
        for i, v in enumerate(self.valid):
            if v:
                bits[i >> 3] |= 1 << (i & 7)
        return bits


def _header_key_bytes(k: bytes) -> bytes:
    """Arrow strings must be valid UTF-8: bad bytes become U+FFFD, as in decode_records."""
    return k if k.isascii() else k.decode("utf-8", "replace").encode("utf-8")


def decode_columns(buf, start_offset: int, read_committed: bool = False, aborted=None,
                   check_crcs: bool = True, max_records: int = -1) -> Columns:
    """Like decode_records, but into column buffers; at most ``max_records`` rows when >= 0."""
    walker = _Walker(buf, start_offset, read_committed, aborted, check_crcs)
    keys, values, hkeys, hvalues = _BinaryColumn(), _BinaryColumn(), _BinaryColumn(), _BinaryColumn()
    offsets, stamps, types, hoffsets = array("q"), array("q"), array("i"), array("i", [0])
    next_offset = None
    for b in walker.batches():
        body = walker.section(b)
        log_append = b.attributes & ATTR_LOG_APPEND_TIME
        for ts_delta, off_delta, key, value, hspan, n_headers, _ in walker.records(b, body):
            offset = _wrap64(b.base_offset + off_delta)
            if offset < start_offset:
                continue
            if 0 <= max_records <= len(offsets):
                next_offset = offset
                break
            offsets.append(offset)
            stamps.append(b.max_ts if log_append else _wrap64(b.base_ts + ts_delta))
            types.append(1 if log_append else 0)
            keys.add(None if key is None else body[key[0]:key[1]])
            values.add(None if value is None else body[value[0]:value[1]])
            for k, v in _iter_headers(body, hspan, n_headers):
                hkeys.add(_header_key_bytes(k))
                hvalues.add(v)
            hoffsets.append(len(hkeys.valid))
        if next_offset is not None:
            break
    c = Columns()
    c.count = len(offsets)
    c.next_offset = walker.next_offset if next_offset is None else next_offset
    c.key_validity, c.key_offsets, c.key_data = keys.validity(), bytearray(keys.offsets), keys.data
    c.value_validity, c.value_offsets, c.value_data = values.validity(), bytearray(values.offsets), values.data
    c.offsets, c.timestamps, c.timestamp_types = bytearray(offsets), bytearray(stamps), bytearray(types)
    c.header_offsets, c.header_count = bytearray(hoffsets), len(hkeys.valid)
    c.header_key_offsets, c.header_key_data = bytearray(hkeys.offsets), hkeys.data
    c.header_value_validity = hvalues.validity()
    c.header_value_offsets, c.header_value_data = bytearray(hvalues.offsets), hvalues.data
    return c
