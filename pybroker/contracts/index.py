"""Contract of the sparse segment indexes (native/index.pyx, pybroker/_pure/index.py).

Both are Kafka's on-disk formats, big-endian, one fixed-width entry per indexed batch:
``.index`` 8 bytes (relative offset u32 = offset - base_offset, file position u32) and
``.timeindex`` 12 bytes (timestamp i64, relative offset u32). Files are preallocated while
writable and trimmed to ``entries * entry_size`` on close. They are never checksummed: after an
unclean shutdown a reopened file counts ``size // entry_size`` entries (zero padding included) and
the log rebuilds it from the segment.

Memory: a writable index loads its entries at open and then works on process memory (native: an
anonymous mapping, pure: a bytearray); appends and truncations reach the file only at a
write-back (``write_back``, ``flush``, ``trim_to_valid_size``, ``resize``, ``close``), which
pwrites the slots from the lowest one changed since the previous write-back up to ``entries``.
Storing into a file-backed mapping instead could stall for milliseconds behind the filesystem
journal on every freshly written-back page. A read-only index maps its file read-only.

Errors shared by both: ``ValueError`` on a closed index (and bad constructor / resize
arguments), ``io.UnsupportedOperation`` when mutating a read-only index, ``IndexFullError`` when
no slot is left, ``CorruptIndexError`` for an entry that would break the ordering or does not fit
the format and from ``sanity_check``, ``IndexError`` from ``entry``, ``TypeError`` /
``OverflowError`` for lookup / truncate targets that are not int64 integers.
"""
from typing import Protocol, Tuple

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
# Lookups search the last 8192 bytes of entries first (Kafka's warm section).
WARM_BYTES = 8192
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024


class _Index(Protocol):
    path: str
    base_offset: int
    writable: bool

    @property
    def entries(self) -> int: ...

    @property
    def max_entries(self) -> int: ...

    def __len__(self) -> int: ...

    def is_full(self) -> bool: ...

    def entry(self, n: int) -> Tuple[int, int]:
        """Entry n as a pair; IndexError outside [0, entries)."""

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= offset."""

    def truncate(self) -> None:
        """Drop all entries."""

    def trim_to_valid_size(self) -> None:
        """Write back, shrink file and memory to entries * entry_size; lookups still work, appends are full."""

    def resize(self, new_max_size: int) -> None:
        """Write back, re-preallocate to new_max_size rounded down to whole entries (ValueError if below entries)."""

    def write_back(self) -> None:
        """pwrite the entries changed since the last write-back to the file, no fsync (no-op when read-only)."""

    def flush(self) -> None:
        """Write back, then fdatasync the file (no-op when read-only)."""

    def sanity_check(self) -> None:
        """CorruptIndexError if the file was not a whole number of entries or the entries are out of order."""

    def close(self) -> None:
        """Write back and trim a writable index, release its memory; idempotent."""

    def __enter__(self): ...

    def __exit__(self, *exc) -> None: ...


class OffsetIndex(_Index, Protocol):
    """OffsetIndex(path, base_offset, max_index_size=10 MiB, writable=True)."""

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, base_offset when empty."""

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offsets strictly increase, both fit u32 (relative / absolute)."""

    def lookup(self, target_offset: int) -> Tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target; (base_offset, 0) if none."""


class TimeIndex(_Index, Protocol):
    """TimeIndex(path, base_offset, max_index_size=10 MiB, writable=True).

    is_full() keeps the last slot free (entries >= max_entries - 1) for the entry a roll adds with
    skip_full_check=True, as Kafka does.
    """

    @property
    def last_entry(self) -> Tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base_offset) when empty."""

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append when timestamp > last timestamp (True), else False; offset may not go backwards."""

    def lookup(self, target_timestamp: int) -> Tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target; (-1, base_offset) if none."""
