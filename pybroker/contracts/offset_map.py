"""Contract of the log cleaner's key -> last offset map (native/offset_map.pyx, pybroker/_pure/offset_map.py).

An open-addressing hash table of fixed capacity, like Kafka's ``SkimpyOffsetMap`` but keyed by
XXH3-128 instead of MD5. Entry (24 bytes, native byte order, in process memory, never on disk):
key hash low 64 bits u64, key hash high 64 bits u64, offset i64 (-1 marks an empty slot).
``capacity = memory_bytes // ENTRY_SIZE``; a key's home slot is ``(high64 * capacity) >> 64``,
collisions probe linearly. Two keys with the same 128-bit hash count as one key (as in Kafka,
where an MD5 collision would too): at 2^-128 per pair that never happens in practice, which a
64-bit hash could not promise for the billions of keys a large cleaner sees over its life.

The map stops taking new keys at ``limit = min(int(capacity * load_factor), capacity - 1)``
entries (Kafka's ``log.cleaner.io.buffer.load.factor``, 0.9), so probing always meets an empty
slot; ``full`` is ``size >= limit``. Updating a key already present is always allowed and keeps
the larger of the two offsets (log offsets only grow, so this is "the later one wins").
``latest_offset`` is the highest offset the map accounts for (Kafka's ``latestOffset``): raised by
``put`` and, by ``add_batches``, to ``next_offset - 1``; -1 when empty.

``add_batches(buf, start_offset, stop_offset)`` walks the whole v2 record batches of ``buf`` (a
segment's bytes, in offset order) and puts the (key, offset) of every keyed record with
``start_offset <= offset < stop_offset``. Batches ending before ``start_offset`` are skipped
unread, control batches and records without a key are skipped, compressed batches are
decompressed, the walk ends at the first batch starting at or after ``stop_offset``. CRCs are not
checked (the log checked them on append and recovery). It returns ``FillResult(next_offset,
full)``: ``full`` is True when it stopped at a keyed record whose new key did not fit, and
``next_offset`` is then that record's offset (every record before it is accounted for);
otherwise ``next_offset = min(stop_offset, max(start_offset, end of the last batch walked))``.
Aborted transactional batches are not recognised yet (the caller's job once the cleaner exists).

``retain(buf, now_ms, new_horizon_ms, keep_empty=(), end_offset=2**63-1)`` is the cleaner's second
pass over whole v2 batches (a segment's bytes): it returns ``RetainResult(data, ...)`` where
``data`` holds the batches with only the records to keep. Records at or after ``end_offset`` (the
map's end: not cleaned yet) are kept as they are. Below it, a keyed record is kept when its offset is
at least the map's offset for its key (or the key is not in the map); records without a key go (as in
Kafka's cleaner). A kept tombstone (null value) goes too once its batch carries a delete horizon (attribute bit 0x40,
KIP-534: the base timestamp then holds the horizon) that ``now_ms`` has passed; a batch that keeps a
tombstone and has no horizon yet gets ``new_horizon_ms`` stamped (records' timestamp deltas are
re-encoded against it, so every record keeps its timestamp). Control batches are copied. A batch
keeps its base offset, last offset delta, producer id/epoch/base sequence, leader epoch and codec
(recompressed when records went); its record count shrinks (compacted batches) and, for CreateTime,
its max timestamp becomes the max of the records left. A batch with no record left goes, unless its
base offset is in ``keep_empty`` (the last batch of a producer, kept empty for idempotence). A batch
copied whole is copied byte for byte.

Errors shared by both: ``ValueError`` for ``memory_bytes`` too small to hold one key, a load
factor outside (0, 1], a negative offset, or ``start_offset`` > ``stop_offset`` or negative;
``OverflowError`` for an offset beyond int64; ``TypeError`` for a key or buffer that is not
bytes-like. A malformed buffer raises ``pybroker.errors.CorruptRecordError(reason, offset,
position)`` (``offset`` the batch's base offset, -1 when fewer than 8 bytes are left; ``position``
the batch's position in ``buf``) with the same reason from both; puts made before the error stay
(``latest_offset`` does not move), so clear the map before using it again.
"""
from typing import NamedTuple, Protocol, runtime_checkable

ENTRY_SIZE = 24  # 16-byte XXH3-128 key hash + 8-byte offset, the same size as Kafka's MD5 entries
DEFAULT_LOAD_FACTOR = 0.9


class FillResult(NamedTuple):
    next_offset: int  # the first offset the map does not account for
    full: bool  # stopped early: the record at next_offset has a key that no longer fits


class RetainResult(NamedTuple):
    data: bytes  # the batches left, in order
    records_read: int
    records_kept: int
    batches_read: int
    batches_kept: int


@runtime_checkable
class OffsetMap(Protocol):
    def __init__(self, memory_bytes: int, load_factor: float = DEFAULT_LOAD_FACTOR) -> None: ...

    @property
    def capacity(self) -> int: ...  # slots
    @property
    def limit(self) -> int: ...  # keys it takes before it is full
    @property
    def size(self) -> int: ...  # distinct keys held
    @property
    def full(self) -> bool: ...
    @property
    def latest_offset(self) -> int: ...
    @property
    def memory_bytes(self) -> int: ...  # capacity * ENTRY_SIZE, allocated up front

    def put(self, key, offset: int) -> bool: ...  # False (nothing stored) for a new key when full
    def get(self, key) -> int: ...  # the key's offset, or -1
    def clear(self) -> None: ...
    def add_batches(self, buf, start_offset: int, stop_offset: int) -> FillResult: ...
    def retain(self, buf, now_ms: int, new_horizon_ms: int, keep_empty=(),
               end_offset: int = 2**63 - 1) -> RetainResult: ...


@runtime_checkable
class OffsetMapModule(Protocol):
    ENTRY_SIZE: int
    OffsetMap: type

    # the offset of the first record without a key in validated v2 batches, or -1 (compacted topics refuse them)
    def keyless_offset(self, buf) -> int: ...

    # raise CorruptRecordError unless every record of the uncompressed v2 batches parses whole (key, value,
    # headers, nothing left over), as Kafka's record reader requires; compressed batches are not opened
    def check_records(self, buf) -> None: ...

    # from now on the calling thread's batch walks run at the lowest CPU priority where they hold no GIL
    # (native: on a SCHED_IDLE helper thread of its own; pure: nothing, its walks hold the GIL)
    def start_idle_helper(self) -> None: ...

    # ends the calling thread's helper: its walks run on it again
    def stop_idle_helper(self) -> None: ...
