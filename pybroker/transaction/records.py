"""Keys and values of the records Kafka keeps in the internal topic ``__transaction_state``.

Every key and value starts with an INT16 schema version.
Key v0:    transactional_id STRING
Value v0:  producer_id INT64, producer_epoch INT16, transaction_timeout_ms INT32, status INT8,
           partitions ARRAY (nullable, INT32 count, -1 = null) of [topic STRING, [partition INT32]],
           last_update_timestamp_ms INT64, start_timestamp_ms INT64
Value v1:  the same fields in the flexible encoding (COMPACT lengths as unsigned varints + 1,
           a tagged-field section after each struct; tags 0 previous producer id, 1 next producer id,
           2 client transaction version are skipped here).
Kafka 3.x writes value v0, and so does this module; both versions are read. The partitions of an
Empty transaction are written as null, as Kafka does. A null value (tombstone) removes the id.
"""
import struct
from typing import NamedTuple

KEY_VERSION = 0
VALUE_VERSION = 0
MAX_VALUE_VERSION = 1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">qhib")  # producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")


class TxnLogValue(NamedTuple):
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int                      # a TxnState id (metadata.py)
    partitions: tuple                # ((topic, partition), ...) in a stable order
    last_update_ms: int
    start_ms: int


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 0x7fff:
        raise ValueError(f"string of {len(data)} UTF-8 bytes is too long for an INT16-length STRING")
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(data) -> str | None:
    """The transactional id of a key; None for a key version this module does not know."""
    buf = bytes(data)
    if len(buf) < 2:
        raise ValueError("transaction log key shorter than its version")
    if _I16.unpack_from(buf, 0)[0] != KEY_VERSION:
        return None
    text, end = _read_string(buf, 2)
    return text


def encode_value(v: TxnLogValue, empty: bool) -> bytes:
    """Value v0; ``empty`` writes the partitions as null (the Empty state, as Kafka writes it)."""
    out = [_I16.pack(VALUE_VERSION), _VALUE_HEAD.pack(v.producer_id, v.producer_epoch, v.timeout_ms, v.status)]
    if empty:
        out.append(_I32.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in v.partitions:
            by_topic.setdefault(topic, []).append(partition)
        out.append(_I32.pack(len(by_topic)))
        for topic, parts in by_topic.items():
            out.append(_string(topic) + _I32.pack(len(parts)) + b"".join(_I32.pack(p) for p in parts))
    out.append(_TIMES.pack(v.last_update_ms, v.start_ms))
    return b"".join(out)


def decode_value(data) -> TxnLogValue:
    buf = bytes(data)
    if len(buf) < 2:
        raise ValueError("transaction log value shorter than its version")
    version = _I16.unpack_from(buf, 0)[0]
    if version == 0:
        return _decode_v0(buf, 2)
    if version == 1:
        return _decode_v1(buf, 2)
    raise ValueError(f"unknown transaction log value version {version}")


def _decode_v0(buf: bytes, pos: int) -> TxnLogValue:
    pid, epoch, timeout, status = _VALUE_HEAD.unpack_from(buf, pos)
    pos += _VALUE_HEAD.size
    count = _I32.unpack_from(buf, pos)[0]
    pos += 4
    partitions = []
    for _ in range(max(count, 0)):
        topic, pos = _read_string(buf, pos)
        n = _I32.unpack_from(buf, pos)[0]
        pos += 4
        _check(buf, pos + 4 * max(n, 0))
        partitions.extend((topic, p) for (p,) in struct.iter_unpack(">i", buf[pos:pos + 4 * max(n, 0)]))
        pos += 4 * max(n, 0)
    last_update, start = _TIMES.unpack_from(buf, pos)
    return TxnLogValue(pid, epoch, timeout, status, tuple(partitions), last_update, start)


def _decode_v1(buf: bytes, pos: int) -> TxnLogValue:
    pid, epoch, timeout, status = _VALUE_HEAD.unpack_from(buf, pos)
    pos += _VALUE_HEAD.size
    count, pos = _uvarint(buf, pos)
    partitions = []
    for _ in range(max(count - 1, 0)):
        n, pos = _uvarint(buf, pos)
        _check(buf, pos + n - 1)
        topic = buf[pos:pos + n - 1].decode("utf-8")
        pos += n - 1
        n, pos = _uvarint(buf, pos)
        _check(buf, pos + 4 * max(n - 1, 0))
        partitions.extend((topic, p) for (p,) in struct.iter_unpack(">i", buf[pos:pos + 4 * max(n - 1, 0)]))
        pos = _skip_tags(buf, pos + 4 * max(n - 1, 0))
    last_update, start = _TIMES.unpack_from(buf, pos)
    return TxnLogValue(pid, epoch, timeout, status, tuple(partitions), last_update, start)


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    n = _I16.unpack_from(buf, pos)[0]
    if n < 0:
        raise ValueError("null string where a transactional id or topic was expected")
    _check(buf, pos + 2 + n)
    return buf[pos + 2:pos + 2 + n].decode("utf-8"), pos + 2 + n


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(5):
        _check(buf, pos + 1)
        b = buf[pos]
        pos += 1
        value |= (b & 0x7f) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise ValueError("unsigned varint longer than 5 bytes")


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    _check(buf, pos)
    return pos


def _check(buf: bytes, end: int) -> None:
    if end > len(buf):
        raise ValueError("transaction log value truncated")
