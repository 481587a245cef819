"""Keys and values of the records Kafka keeps in the internal topic ``__consumer_offsets``.

Every key and value starts with an INT16 schema version; the fields follow big-endian in
Kafka's classic (non-flexible) encoding: INT16-length UTF-8 strings, fixed-width integers.

Keys:   version 0 or 1 -> offset commit: group STRING, topic STRING, partition INT32
        version 2      -> group metadata: group STRING
        (3 and higher belong to the newer consumer/share group records: decode_key returns None)
Offset commit values:
        v0: offset INT64, metadata STRING, commit_timestamp INT64
        v1: offset INT64, metadata STRING, commit_timestamp INT64, expire_timestamp INT64
        v2: offset INT64, metadata STRING, commit_timestamp INT64
        v3: offset INT64, leader_epoch INT32, metadata STRING, commit_timestamp INT64
        v4: as v3 in the flexible encoding (COMPACT_STRING, then a tagged-field section)
Kafka writes value v3, or v1 when the commit carries an explicit expire timestamp.

A null value (tombstone) deletes the key; that is the record's business, not this codec's.
"""
import struct
from typing import NamedTuple

OFFSET_COMMIT_KEY_VERSION = 1   # Kafka writes 1 (0 has the same layout)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_EXPIRE_VERSION = 1  # the only version with expire_timestamp
MAX_OFFSET_COMMIT_VALUE_VERSION = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class OffsetKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupKey(NamedTuple):
    group: str


class OffsetValue(NamedTuple):
    offset: int
    leader_epoch: int          # -1 when the version has none (v0-v2)
    metadata: str
    commit_timestamp: int
    expire_timestamp: int      # -1 unless version 1


# ---------------------------------------------------------------- encoding

def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 0x7fff:  # INT16 length
        raise ValueError(f"string of {len(data)} UTF-8 bytes is too long for an INT16-length STRING")
    return _I16.pack(len(data)) + data


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    """The key of an offset commit record (key version 1)."""
    return (_I16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(group) + _string(topic)
            + _I32.pack(partition))


def encode_group_metadata_key(group: str) -> bytes:
    """The key of a group metadata record (key version 2)."""
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(group)


def encode_offset_commit_value(offset: int, leader_epoch: int, metadata: str | None,
                               commit_timestamp: int, expire_timestamp: int = -1) -> bytes:
    """An offset commit value as Kafka writes it: v3, or v1 when an expire timestamp is given.

    v1 has no leader epoch, so it is dropped there, as Kafka drops it. A None metadata is
    stored as "" (the field is not nullable).
    """
    meta = _string(metadata or "")
    if expire_timestamp != -1:
        return (_I16.pack(OFFSET_COMMIT_VALUE_EXPIRE_VERSION) + _I64.pack(offset) + meta
                + _I64.pack(commit_timestamp) + _I64.pack(expire_timestamp))
    return (_I16.pack(OFFSET_COMMIT_VALUE_VERSION) + _I64.pack(offset) + _I32.pack(leader_epoch)
            + meta + _I64.pack(commit_timestamp))


# ---------------------------------------------------------------- decoding

class _Reader:
    """Bounds-checked sequential reads; every failure is a ValueError naming what was read."""

    def __init__(self, buf, what: str):
        if buf is None:
            raise ValueError(f"{what}: no bytes (a null key or value)")
        try:
            self.buf = buf if isinstance(buf, bytes) else memoryview(buf).cast("B").tobytes()
        except TypeError:
            raise ValueError(f"{what}: expected bytes, got {type(buf).__name__}") from None
        self.pos = 0
        self.what = what

    def _take(self, n: int, field: str):
        end = self.pos + n
        if end > len(self.buf):
            raise ValueError(f"{self.what}: truncated reading {field} at byte {self.pos} "
                             f"(needs {n}, {len(self.buf) - self.pos} left)")
        start, self.pos = self.pos, end
        return start

    def int16(self, field: str) -> int:
        return _I16.unpack_from(self.buf, self._take(2, field))[0]

    def int32(self, field: str) -> int:
        return _I32.unpack_from(self.buf, self._take(4, field))[0]

    def int64(self, field: str) -> int:
        return _I64.unpack_from(self.buf, self._take(8, field))[0]

    def _utf8(self, n: int, field: str) -> str:
        start = self._take(n, field)
        try:
            return self.buf[start:start + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.what}: {field} is not valid UTF-8: {exc.reason}") from None

    def string(self, field: str) -> str:
        n = self.int16(f"{field} length")
        if n < 0:
            raise ValueError(f"{self.what}: {field} has length {n} but is not nullable")
        return self._utf8(n, field)

    def uvarint(self, field: str) -> int:
        value = shift = 0
        for _ in range(5):  # an unsigned varint32 has at most 5 bytes
            b = self.buf[self._take(1, field)]
            value |= (b & 0x7f) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise ValueError(f"{self.what}: {field} is a varint longer than 5 bytes")

    def compact_string(self, field: str) -> str:
        n = self.uvarint(f"{field} length") - 1
        if n < 0:
            raise ValueError(f"{self.what}: {field} is null but is not nullable")
        return self._utf8(n, field)

    def tagged_fields(self) -> None:
        """Skip a tagged-field section: no tags are defined for these records yet."""
        for i in range(self.uvarint("tagged field count")):
            self.uvarint(f"tag #{i}")
            size = self.uvarint(f"tag #{i} size")
            self._take(size, f"tag #{i} data")

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise ValueError(f"{self.what}: {len(self.buf) - self.pos} unexpected trailing bytes")


def decode_key(buf) -> OffsetKey | GroupKey | None:
    """The key of a ``__consumer_offsets`` record, or None for a key version this codec does not know
    (the newer consumer and share group records, which the caller skips)."""
    r = _Reader(buf, "__consumer_offsets key")
    version = r.int16("key version")
    if version in (0, 1):
        key = OffsetKey(r.string("group"), r.string("topic"), r.int32("partition"))
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupKey(r.string("group"))
    else:
        return None
    r.done()
    return key


def decode_offset_commit_value(buf) -> OffsetValue:
    """An offset commit value of version 0 to 4 (4 = the flexible form of 3)."""
    r = _Reader(buf, "offset commit value")
    version = r.int16("value version")
    if version < 0 or version > MAX_OFFSET_COMMIT_VALUE_VERSION:
        raise ValueError(f"offset commit value: unknown version {version} "
                         f"(this codec reads 0-{MAX_OFFSET_COMMIT_VALUE_VERSION})")
    offset = r.int64("offset")
    leader_epoch = r.int32("leader epoch") if version >= 3 else -1
    metadata = r.compact_string("metadata") if version >= 4 else r.string("metadata")
    commit_timestamp = r.int64("commit timestamp")
    expire_timestamp = r.int64("expire timestamp") if version == 1 else -1
    if version >= 4:
        r.tagged_fields()
    r.done()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


# ---------------------------------------------------------------- partitioning

def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, int32."""
    data = text.encode("utf-16-be", "surrogatepass")  # code units, surrogate pairs for non-BMP
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xffffffff
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: Math.abs, except Integer.MIN_VALUE maps to 0 (not to itself)."""
    return 0 if n == -(1 << 31) else abs(n)


def offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition that holds ``group``, as Kafka chooses it."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    return java_abs(java_string_hash(group)) % partitions
