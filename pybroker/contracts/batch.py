"""Contract of the batch module: Kafka RecordBatch v2 header view, checks, rewrites, scan.

Errors: checks raise pybroker.errors.CorruptRecordError(reason, offset, position) (offset is
the batch's baseOffset when at least 8 bytes are there, else -1), or InvalidRecordError for a
control batch that may not be produced. Rewrites raise TypeError on a read-only buffer and
ValueError when the buffer is too short. Integer arguments outside their field's range raise
OverflowError; negative positions raise ValueError.
"""
from typing import Protocol, runtime_checkable

from pybroker.errors import CorruptRecordError


@runtime_checkable
class BatchInfo(Protocol):
    """A decoded 61-byte header; ``_fields`` names the stored fields, ``as_dict`` gives them."""
    _fields: tuple
    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int: ...  # batch_length + 12
    @property
    def last_offset(self) -> int: ...  # base_offset + last_offset_delta
    @property
    def next_offset(self) -> int: ...  # last_offset + 1
    @property
    def compression(self) -> int: ...  # attributes & 7
    @property
    def is_log_append_time(self) -> bool: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    def as_dict(self) -> dict: ...


@runtime_checkable
class ScanResult(Protocol):
    _fields: tuple
    valid_end: int  # base_position-relative end of the last valid batch
    batch_count: int
    next_offset: int  # last valid batch's last offset + 1, else the expected_offset argument
    max_timestamp: int  # -1 when no batch had a timestamp above -1
    offset_of_max_timestamp: int
    offset_entries: list  # [(offset, position)] as LogSegment would append them
    time_entries: list  # [(timestamp, offset)], unfiltered
    error: CorruptRecordError | None  # None at a clean end of the data

    def as_dict(self) -> dict: ...


@runtime_checkable
class BatchModule(Protocol):
    HEADER_SIZE: int  # 61
    BatchInfo: type
    ScanResult: type

    def parse_header(self, buf, pos: int = 0) -> BatchInfo: ...

    def validate(self, buf, pos: int = 0, allow_control: bool = True, compacted: bool = False) -> BatchInfo: ...

    def set_base_offset(self, buf, pos: int, base_offset: int) -> None: ...

    def set_partition_leader_epoch(self, buf, pos: int, epoch: int) -> None: ...

    def set_log_append_time(self, buf, pos: int, timestamp_ms: int) -> None: ...

    def scan(self, buf, start: int = 0, end: int | None = None, base_position: int = 0,
             index_interval: int = 4096, expected_offset: int = -1, gaps: bool = False) -> ScanResult: ...
