"""Decompress a record batch's records section (codecs 1-4: gzip, snappy, lz4, zstd).

The broker stores and serves batches as sent and never needs this on the hot path; it is for
the few places that must see individual records (ListOffsets by timestamp, tools, tests) and for
topics whose compression.type asks the broker to recompress what producers send.
"""
import struct

import cramjam

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"  # the framing Java's and librdkafka's snappy producers use


def decompress(codec: int, data) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.decompress(bytes(data)))
    if codec == SNAPPY:
        return _snappy(bytes(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(bytes(data)))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(bytes(data)))
    raise ValueError(f"unknown compression codec {codec}")


def compress(codec: int, data, level: int | None = None) -> bytes:
    """``level``: the codec's compression level (gzip 1-9, lz4 1-17, zstd up to 22); None: its default."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(bytes(data), level=level))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(bytes(data)))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(bytes(data), level=level))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(bytes(data), level=level))
    raise ValueError(f"unknown compression codec {codec}")


def _snappy(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out, pos = bytearray(), 16  # magic, version, compatible version
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise ValueError("truncated snappy (xerial) block")
        out += cramjam.snappy.decompress_raw(data[pos:pos + size])
        pos += size
    return bytes(out)
