"""Kafka's message sets of magic 0 and 1 (before record batches), converted to and from magic 2.

Produce v0-2 send message sets: ``upconvert`` turns one into a single v2 batch with base offset 0,
as the log stores it. Fetch v0-1 answer magic 0 and v2-3 magic 1: ``downconvert`` turns the v2
batches read from the log into a message set, as Kafka does: control batches are left out, headers
are lost, an uncompressed batch becomes one message per record (from the fetch offset on), and a
compressed batch one wrapper message holding its records compressed with the same codec.

Layout of a message (after its 8-byte offset and 4-byte size): CRC-32 of the rest, magic,
attributes (codec in bits 0-2; magic 1: bit 3 log-append time), magic 1 only a timestamp, then key
and value as int32-length bytes (-1: null). In a magic 1 wrapper the inner offsets count from 0 and
the wrapper carries the last one's absolute offset; magic 0 inner offsets are absolute.
Pure functions over bytes: no protocol, no log.
"""
import struct
import zlib

from pybroker import compression
from pybroker.errors import CorruptRecordError
from pybroker.records import CONTROL, HEADER, TIMESTAMP_LOG_APPEND, Record, build_batch, decode_records

NONE, GZIP, SNAPPY, LZ4, ZSTD = compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, \
    compression.ZSTD
LEGACY_CODECS = (GZIP, SNAPPY, LZ4)  # what a magic 0/1 wrapper may use
NO_TIMESTAMP = -1
LOG_OVERHEAD = 12  # offset + size
_ENTRY = struct.Struct(">qi")  # offset, message size
_CRC_MAGIC_ATTRS = struct.Struct(">IBb")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MIN_SIZE = {0: 14, 1: 22}  # crc, magic, attributes, (timestamp,) key and value lengths
_SNAPPY_BLOCK = 32 * 1024  # the block size of Java's xerial framing
_XERIAL_HEADER = compression.XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_V2_MIN_BATCH = HEADER.size - LOG_OVERHEAD  # a batch's length field counts from the epoch on
_LZ4_MAGIC = b"\x04\x22\x4d\x18"


class UnsupportedCompressionError(Exception):
    """A batch whose codec has no magic 0/1 form (zstd): Kafka answers UNSUPPORTED_COMPRESSION_TYPE."""


# ---- magic 0/1 -> magic 2 --------------------------------------------------------------------

def upconvert(message_set) -> bytearray:
    """One v2 batch (base offset 0, no producer; writable, as the log assigns offsets in place) holding
    every record of ``message_set``; its codec
    is that of the first compressed wrapper (none when the set has none). A tail too short for its
    declared size is ignored, as Kafka's reader does; anything else malformed is CorruptRecordError."""
    records, codec = [], None
    for _, magic, attributes, timestamp, key, value in _messages(memoryview(message_set).cast("B")):
        wrapper_codec = attributes & 0x07
        if codec is None:
            codec = wrapper_codec
        if wrapper_codec == NONE:
            records.append(Record(value=value, key=key, timestamp=timestamp))
            continue
        log_append = magic == 1 and attributes & TIMESTAMP_LOG_APPEND
        for _, inner_magic, inner_attrs, inner_ts, inner_key, inner_value in _inner(magic, wrapper_codec, value):
            if inner_magic != magic:
                raise CorruptRecordError(f"a magic {magic} wrapper holds a magic {inner_magic} message")
            if inner_attrs & 0x07:
                raise CorruptRecordError("a compressed wrapper holds a compressed message")
            records.append(Record(value=inner_value, key=inner_key, timestamp=timestamp if log_append else inner_ts))
    if not records:
        raise CorruptRecordError("a message set without messages")
    return build_batch(records, attributes=codec or NONE)


def _messages(buf):
    """(offset, magic, attributes, timestamp, key, value) of each whole message in ``buf``."""
    pos, end = 0, len(buf)
    while end - pos >= LOG_OVERHEAD:
        offset, size = _ENTRY.unpack_from(buf, pos)
        if size < _MIN_SIZE[0]:
            raise CorruptRecordError(f"message size {size} is below the minimum of {_MIN_SIZE[0]}")
        start = pos + LOG_OVERHEAD
        if size > end - start:
            return  # a partial message at the end: not part of the set
        yield (offset, *_message(buf[start:start + size]))
        pos = start + size


def _message(buf):
    """(magic, attributes, timestamp, key, value) of one message body, its CRC and sizes checked."""
    crc, magic, attributes = _CRC_MAGIC_ATTRS.unpack_from(buf, 0)
    if magic not in _MIN_SIZE:
        raise CorruptRecordError(f"magic {magic} in a message set (0 or 1 expected)")
    if len(buf) < _MIN_SIZE[magic]:
        raise CorruptRecordError(f"magic {magic} message of {len(buf)} bytes is below the minimum")
    if zlib.crc32(buf[4:]) != crc:
        raise CorruptRecordError("message CRC mismatch")
    pos = 6
    timestamp = NO_TIMESTAMP
    if magic == 1:
        timestamp = _I64.unpack_from(buf, pos)[0]
        pos += 8
    key, pos = _sized(buf, pos)
    value, pos = _sized(buf, pos)
    if pos != len(buf):
        raise CorruptRecordError(f"message of {len(buf)} bytes has {len(buf) - pos} bytes after its value")
    return magic, attributes, timestamp, key, value


def _sized(buf, pos: int):
    if len(buf) - pos < 4:
        raise CorruptRecordError("message truncated before a length")
    n = _I32.unpack_from(buf, pos)[0]
    pos += 4
    if n == -1:
        return None, pos
    if n < 0 or n > len(buf) - pos:
        raise CorruptRecordError(f"message field of {n} bytes where {len(buf) - pos} remain")
    return bytes(buf[pos:pos + n]), pos + n


def _inner(magic: int, codec: int, value):
    """The messages inside a wrapper's value."""
    if codec not in LEGACY_CODECS:
        raise CorruptRecordError(f"compression codec {codec} in a magic {magic} message")
    if value is None:
        raise CorruptRecordError("a compressed wrapper message without a value")
    if codec == LZ4 and magic == 0:
        value = _lz4_header_checksum(value, broken=False)  # Kafka's magic 0 writers got it wrong
    try:
        data = compression.decompress(codec, value)
    except Exception as exc:  # each codec library raises its own errors
        raise CorruptRecordError(f"wrapper message does not decompress: {exc}") from None
    return list(_messages(memoryview(data)))


# ---- magic 2 -> magic 0/1 --------------------------------------------------------------------

def downconvert(batches, magic: int, fetch_offset: int) -> bytes:
    """The message set (magic 0 or 1) of the v2 ``batches`` read from a log for a fetch at
    ``fetch_offset``; a batch cut short at the end is left out. Raises UnsupportedCompressionError
    for a zstd batch and CorruptRecordError for bytes that are not batches."""
    if magic not in _MIN_SIZE:
        raise ValueError(f"message sets have magic 0 or 1, not {magic}")
    view = memoryview(batches).cast("B")
    out = bytearray()
    pos, end = 0, len(view)
    while end - pos >= HEADER.size:
        length = _I32.unpack_from(view, pos + 8)[0]
        if length < _V2_MIN_BATCH:
            raise CorruptRecordError(f"record batch length {length} is below the minimum")
        if length > end - pos - LOG_OVERHEAD:
            break  # the last batch, cut by the fetch size
        batch = view[pos:pos + LOG_OVERHEAD + length]
        pos += LOG_OVERHEAD + length
        if batch[16] != 2:
            raise CorruptRecordError(f"magic {batch[16]} where a record batch is expected")
        attributes = HEADER.unpack_from(batch, 0)[5]
        if attributes & CONTROL:
            continue  # transaction markers have no magic 0/1 form
        codec = attributes & 0x07
        if codec == ZSTD:
            raise UnsupportedCompressionError("zstd batches have no magic 0/1 form")
        try:
            records = decode_records(batch)
        except (ValueError, struct.error) as exc:
            raise CorruptRecordError(f"record batch does not decode: {exc}") from None
        log_append = magic == 1 and bool(attributes & TIMESTAMP_LOG_APPEND)
        if codec == NONE:
            for r in records:
                if r.offset >= fetch_offset:  # old clients expect nothing before the offset they asked for
                    out += _encode(r.offset, magic, _type_bit(log_append), r.timestamp, r.key, r.value)
        elif records:
            out += _wrapper(records, magic, codec, log_append)
    return bytes(out)


def _type_bit(log_append: bool) -> int:
    return TIMESTAMP_LOG_APPEND if log_append else 0


def _wrapper(records, magic: int, codec: int, log_append: bool) -> bytes:
    """One compressed message holding ``records``; offsets inside are relative for magic 1."""
    first = records[0].offset
    inner = b"".join(_encode(r.offset - first if magic == 1 else r.offset, magic, _type_bit(log_append),
                             r.timestamp, r.key, r.value) for r in records)
    if codec == SNAPPY:
        value = _xerial(inner)
    else:
        value = compression.compress(codec, inner)
        if codec == LZ4 and magic == 0:
            value = _lz4_header_checksum(value, broken=True)
    timestamp = max(r.timestamp for r in records)
    return _encode(records[-1].offset, magic, codec | _type_bit(log_append), timestamp, None, value)


def _encode(offset: int, magic: int, attributes: int, timestamp: int, key, value) -> bytes:
    body = bytearray((magic, attributes))
    if magic == 1:
        body += _I64.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _I32.pack(-1)
        else:
            body += _I32.pack(len(field)) + field
    return _ENTRY.pack(offset, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + body


def _xerial(data: bytes) -> bytes:
    """Snappy in the block framing Java's magic 0/1 producers write (and old consumers expect)."""
    out = bytearray(_XERIAL_HEADER)
    for i in range(0, len(data), _SNAPPY_BLOCK):
        block = compression.compress(SNAPPY, data[i:i + _SNAPPY_BLOCK])
        out += _I32.pack(len(block)) + block
    return bytes(out)


# ---- LZ4 frames of magic 0 -------------------------------------------------------------------

def _lz4_header_checksum(frame, broken: bool) -> bytes:
    """``frame`` with its descriptor checksum as the LZ4 format has it, or (``broken``) as Kafka's
    magic 0 writers computed it: over the magic number too (KAFKA-3160)."""
    frame = bytes(frame)
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return frame  # not a frame: the decompressor says so
    flags = frame[4]
    hc = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)  # content size, dictionary id
    if hc >= len(frame):
        return frame
    checksum = (xxh32(frame[0 if broken else 4:hc]) >> 8) & 0xFF
    return frame[:hc] + bytes((checksum,)) + frame[hc + 1:]


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data`` (for an LZ4 frame descriptor: a few bytes)."""
    n, i = len(data), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while i + 16 <= n:
            for k in range(4):
                lane = int.from_bytes(data[i:i + 4], "little")
                v[k] = (_rotl((v[k] + lane * _P2) & _M32, 13) * _P1) & _M32
                i += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        h = (_rotl((h + int.from_bytes(data[i:i + 4], "little") * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)
