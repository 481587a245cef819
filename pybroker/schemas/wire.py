"""Confluent's wire framing of a serialized key or value: magic byte 0, a 4-byte big-endian schema id,
then the payload (for Protobuf the payload starts with the message indexes; protobuf.py reads them)."""
import struct

MAGIC = 0
_HEAD = struct.Struct(">bI")


def frame(schema_id: int, payload: bytes) -> bytes:
    return _HEAD.pack(MAGIC, schema_id) + payload


def unframe(data: bytes) -> tuple[int, memoryview]:
    """(schema id, payload); ValueError when ``data`` is not framed."""
    if data is None or len(data) < _HEAD.size or data[0] != MAGIC:
        raise ValueError("not a schema-registry framed payload (magic byte 0 and a 4-byte schema id)")
    return _HEAD.unpack_from(data)[1], memoryview(data)[_HEAD.size:]
