"""Contract of the client_codec module (pybroker._native.client_codec and pybroker._pure.client_codec).

Both implementations return equal values and raise the same exceptions. A damaged complete batch
raises ``pybroker.errors.CorruptRecordError(reason, offset=baseOffset, position=batch start)`` with
the same reason text; a trailing partial batch in a fetch response is ignored.
"""
from typing import Any, Protocol, Sequence, runtime_checkable


@runtime_checkable
class ConsumerRecordLike(Protocol):
    """Read-only attributes; ``headers`` is a list of (str, bytes|None), or the shared empty tuple
    ``()`` when the record has none (compare with ``not r.headers``, not ``== []``);
    ``timestamp_type`` 0 = CreateTime, 1 = LogAppendTime; ``leader_epoch`` -1 when unknown.
    Records compare equal field by field; ``repr`` shows every field."""
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list | tuple
    leader_epoch: int


@runtime_checkable
class BatchBuilderLike(Protocol):
    """One open v2 record batch (constructed as ``BatchBuilder(max_bytes)``)."""
    count: int          # records appended
    size_bytes: int     # size of the batch built uncompressed (61-byte header included)
    first_timestamp: int  # -1 while empty
    max_timestamp: int    # -1 while empty

    def append(self, timestamp: int, key, value, headers=None) -> int:
        """Append a record (key/value bytes-like or None; headers None or a sequence of
        (str|bytes, bytes-like|None)); returns its offset delta, or -1 when the batch would exceed
        ``max_bytes`` (an empty builder accepts any one record). Non-buffers raise TypeError."""

    def append_many(self, keys: Sequence | None, values: Sequence, timestamp: int, start: int = 0) -> int:
        """Append values[start:] (keys[i] alongside) until full; returns the index after the last appended."""

    def append_arrow(self, key_validity, key_offsets, key_data, value_validity, value_offsets, value_data,
                     offsets_64bit: bool, array_offset: int, start: int, stop: int, timestamp: int) -> int:
        """Append rows [start, stop) of Arrow binary (or large_binary) arrays from their raw buffers
        (``key_offsets`` None = no keys; validity None = no nulls); returns the index after the last
        appended. Buffers too short or offsets out of range raise ValueError."""

    def build(self, codec: int, producer_id: int = -1, producer_epoch: int = -1,
              base_sequence: int = -1) -> bytes:
        """The complete batch (baseOffset 0, partitionLeaderEpoch -1, CRC-32C), records compressed
        with codec 0-4; ValueError for another codec or an empty builder. The builder stays usable."""


@runtime_checkable
class ColumnsLike(Protocol):
    """Arrow-ready buffers (buffer-protocol objects) of ``count`` decoded records.

    key/value/header key/header value: int32 offsets (entries+1), data, validity bitmap or None
    when no entry is null; offsets/timestamps int64, timestamp_types int32, header_offsets int32
    (count+1) into the ``header_count`` flattened headers. Header keys are valid UTF-8."""
    count: int
    next_offset: int


@runtime_checkable
class ClientCodecModule(Protocol):
    BatchBuilder: type
    ConsumerRecord: type
    Columns: type

    def murmur2(self, data) -> int:
        """Java ``Utils.murmur2`` (seed 0x9747b28c) as a signed 32-bit int."""

    def frame_buffer(self, size: int) -> bytearray:
        """A bytearray of ``size`` bytes for a read to fill; contents unspecified (ValueError if size < 0)."""

    def partition_for_key(self, key, num_partitions: int) -> int:
        """``(murmur2(key) & 0x7fffffff) % num_partitions``; ValueError when num_partitions <= 0."""

    def decode_records(self, buf, topic: str, partition: int, start_offset: int, read_committed: bool = False,
                       aborted: Sequence | None = None, check_crcs: bool = True,
                       max_records: int = -1) -> tuple[list, int]:
        """Records with offset >= start_offset of every complete batch, decompressed, control batches
        skipped, aborted transactions skipped when read_committed (``aborted`` = (producer_id,
        first_offset) pairs or objects with those attributes; Kafka's consumer algorithm). Returns
        (records, next_offset): one past the last complete batch, at least start_offset; when
        max_records >= 0 stops the list early, the offset of the first record left out."""

    def decode_columns(self, buf, start_offset: int, read_committed: bool = False,
                       aborted: Sequence | None = None, check_crcs: bool = True,
                       max_records: int = -1) -> Any:
        """decode_records into a Columns object (see ColumnsLike); ValueError if a column passes 2 GiB."""
