"""Build Kafka v2 record batches (magic 2) in Python.

Used by tests, benchmarks and tools to make real batches; the broker itself never
re-encodes records. Format: the record-batch section of Kafka's implementation docs.
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


@dataclass
class Record:
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int | None = None  # absolute ms; None = the batch's base timestamp


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _bytes_field(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def _encode_record(rec: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    body = bytearray(b"\x00")  # record attributes (unused)
    body += _varint(timestamp_delta)
    body += _varint(offset_delta)
    body += _bytes_field(rec.key)
    body += _bytes_field(rec.value)
    body += _varint(len(rec.headers))
    for hkey, hval in rec.headers:
        body += _bytes_field(hkey.encode())
        body += _bytes_field(hval)
    return _varint(len(body)) + body


def build_batch(records, base_offset: int = 0, base_timestamp: int = 0,
                attributes: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, partition_leader_epoch: int = -1) -> bytearray:
    """Encode ``records`` (Record objects, or plain bytes values) as one uncompressed batch."""
    recs = [r if isinstance(r, Record) else Record(value=r) for r in records]
    if not recs:
        raise ValueError("a record batch needs at least one record")
    stamps = [base_timestamp if r.timestamp is None else r.timestamp for r in recs]
    first_ts = stamps[0]
    body = b"".join(_encode_record(r, i, ts - first_ts) for i, (r, ts) in enumerate(zip(recs, stamps)))
    batch = bytearray(HEADER.size + len(body))
    HEADER.pack_into(batch, 0, base_offset, len(batch) - 12, partition_leader_epoch, 2, 0,
                     attributes, len(recs) - 1, first_ts, max(stamps), producer_id,
                     producer_epoch, base_sequence, len(recs))
    batch[HEADER.size:] = body
    struct.pack_into(">I", batch, 17, core.crc.crc32c(memoryview(batch)[CRC_START:]))
    return batch


def value_batch(count: int, value_size: int, base_timestamp: int = 0, **kw) -> bytearray:
    """A batch of ``count`` records with ``value_size``-byte values (for tests and benchmarks)."""
    payload = bytes(range(256)) * (value_size // 256 + 1)
    return build_batch([payload[i % 256:i % 256 + value_size] for i in range(count)],
                       base_timestamp=base_timestamp, **kw)
