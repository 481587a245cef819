"""Build Kafka v2 record batches (magic 2) in Python.

Used by tests, benchmarks and tools to make real batches; the broker itself re-encodes records only
for a topic whose compression.type is not ``producer`` (``recompressed``). Format: the record-batch
section of Kafka's implementation docs.
"""
import struct
from dataclasses import dataclass, field

from pybroker import core

HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte batch header
CRC_START = 21  # the CRC covers attributes .. end of batch

COMPRESSION_NONE = 0
TIMESTAMP_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
CONTROL_ABORT, CONTROL_COMMIT = 0, 1  # a control record's type (its key: version int16, type int16)
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch: an end-transaction marker's value


@dataclass
class Record:
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int | None = None  # absolute ms; None = the batch's base timestamp


def zigzag_varint(n: int) -> bytes:
    """Kafka's signed varint (zigzag) encoding of ``n``."""
    z = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _bytes_field(b: bytes | None) -> bytes:
    return zigzag_varint(-1) if b is None else zigzag_varint(len(b)) + b


def _encode_record(rec: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    body = bytearray(b"\x00")  # record attributes (unused)
    body += zigzag_varint(timestamp_delta)
    body += zigzag_varint(offset_delta)
    body += _bytes_field(rec.key)
    body += _bytes_field(rec.value)
    body += zigzag_varint(len(rec.headers))
    for hkey, hval in rec.headers:
        body += _bytes_field(hkey.encode())
        body += _bytes_field(hval)
    return zigzag_varint(len(body)) + body


def build_batch(records, base_offset: int = 0, base_timestamp: int = 0,
                attributes: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, partition_leader_epoch: int = -1) -> bytearray:
    """Encode ``records`` (Record objects, or plain bytes values) as one batch.

    The codec in ``attributes`` (bits 0-2) compresses the records section.
    """
    recs = [r if isinstance(r, Record) else Record(value=r) for r in records]
    if not recs:
        raise ValueError("a record batch needs at least one record")
    stamps = [base_timestamp if r.timestamp is None else r.timestamp for r in recs]
    first_ts = stamps[0]
    body = b"".join(_encode_record(r, i, ts - first_ts) for i, (r, ts) in enumerate(zip(recs, stamps)))
    if 1 <= attributes & 0x07 <= 4:  # other codec ids stay raw: tests build invalid batches on purpose
        from pybroker.compression import compress
        body = compress(attributes & 0x07, body)
    batch = bytearray(HEADER.size + len(body))
    HEADER.pack_into(batch, 0, base_offset, len(batch) - 12, partition_leader_epoch, 2, 0,
                     attributes, len(recs) - 1, first_ts, max(stamps), producer_id,
                     producer_epoch, base_sequence, len(recs))
    batch[HEADER.size:] = body
    struct.pack_into(">I", batch, 17, core.crc.crc32c(memoryview(batch)[CRC_START:]))
    return batch


def recompressed(batch, codec: int, level: int | None = None) -> bytearray:
    """The v2 ``batch`` with its records section in ``codec`` (0: none) at ``level``: the header's
    fields (offsets, producer, sequence, timestamps) kept, its length, codec bits and CRC rewritten."""
    from pybroker.compression import compress, decompress
    view = memoryview(batch).cast("B")
    attributes = struct.unpack_from(">h", view, 21)[0]
    out = bytearray(view[:HEADER.size])
    out += compress(codec, decompress(attributes & 0x07, view[HEADER.size:]), level)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, (attributes & ~0x07) | codec)
    struct.pack_into(">I", out, 17, core.crc.crc32c(memoryview(out)[CRC_START:]))
    return out


def build_control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                        timestamp: int, base_offset: int = 0, partition_leader_epoch: int = -1) -> bytearray:
    """An end-transaction marker: one control record in a transactional control batch, no sequence."""
    record = Record(key=_CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT),
                    value=_CONTROL_VALUE.pack(0, coordinator_epoch))
    return build_batch([record], base_offset=base_offset, base_timestamp=timestamp,
                       attributes=TRANSACTIONAL | CONTROL, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=-1, partition_leader_epoch=partition_leader_epoch)


@dataclass(frozen=True)
class ControlRecord:
    """What a control batch says: its type (0 ABORT, 1 COMMIT, others unknown) and coordinator epoch."""
    type: int
    coordinator_epoch: int

    @property
    def commit(self) -> bool:
        return self.type == CONTROL_COMMIT


def is_control_batch(batch) -> bool:
    return bool(HEADER.unpack_from(memoryview(batch).cast("B"), 0)[5] & CONTROL)


def decode_control_record(batch) -> ControlRecord | None:
    """The marker of a control batch; None for an empty one (the cleaner removed its record)."""
    records = decode_records(batch)
    if not records:
        return None
    key, value = records[0].key or b"", records[0].value or b""
    if len(key) < _CONTROL_KEY.size:
        raise ValueError(f"control record key of {len(key)} bytes")
    kind = _CONTROL_KEY.unpack_from(key)[1]
    epoch = _CONTROL_VALUE.unpack_from(value)[1] if len(value) >= _CONTROL_VALUE.size else -1
    return ControlRecord(kind, epoch)


def _read_varint(buf, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or overlong varint in a record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _read_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise ValueError("truncated record field")
    return bytes(buf[pos:pos + n]), pos + n


@dataclass
class DecodedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    control: bool = False  # a record of a control batch (a transaction marker), not data


def decode_records(batch) -> list[DecodedRecord]:
    """Every record of one batch (decompressed as needed), with absolute offsets and timestamps."""
    from pybroker.compression import decompress
    view = memoryview(batch).cast("B")
    (base_offset, _, _, _, _, attributes, _, base_ts, max_ts, _, _, _, count) = HEADER.unpack_from(view, 0)
    body = decompress(attributes & 0x07, view[HEADER.size:])
    log_append = attributes & TIMESTAMP_LOG_APPEND
    control = bool(attributes & CONTROL)
    out, pos = [], 0
    for _ in range(count):
        length, pos = _read_varint(body, pos)
        end = pos + length
        pos += 1  # record attributes
        ts_delta, pos = _read_varint(body, pos)
        off_delta, pos = _read_varint(body, pos)
        key, pos = _read_bytes(body, pos)
        value, pos = _read_bytes(body, pos)
        n_headers, pos = _read_varint(body, pos)
        headers = []
        for _ in range(n_headers):
            hkey, pos = _read_bytes(body, pos)
            hval, pos = _read_bytes(body, pos)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
        if pos != end:
            raise ValueError(f"record length {length} does not match its fields")
        out.append(DecodedRecord(base_offset + off_delta, max_ts if log_append else base_ts + ts_delta,
                                 key, value, headers, control))
    return out


def value_batch(count: int, value_size: int, base_timestamp: int = 0, **kw) -> bytearray:
    """A batch of ``count`` records with ``value_size``-byte values (for tests and benchmarks)."""
    payload = bytes(range(256)) * (value_size // 256 + 1)
    return build_batch([payload[i % 256:i % 256 + value_size] for i in range(count)],
                       base_timestamp=base_timestamp, **kw)
