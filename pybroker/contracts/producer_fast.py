"""Contract of the producer_fast module (pybroker._native.producer_fast and pybroker._pure.producer_fast).

The producer's per-record path: an ``Appender`` that picks a record's partition and appends it to
that partition's open batch without calling into Python, plus the keyed-row helpers that
``produce_batch`` uses. Both implementations return equal values and raise the same exceptions.

A sealed batch is the tuple ``(builder, entries, created_ms, nbytes, count)``: ``builder`` a
client_codec ``BatchBuilder``; ``entries`` None or a list of ``(offset_delta, timestamp_or_count,
target)`` for records (or bulk runs, whose target is ``(handle, chunk_no)``) that want a delivery
report; ``created_ms`` the monotonic time of its first record; ``nbytes`` the buffer memory it holds.
"""
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

# status codes (try_append, produce's slow path, append_bulk)
ST_OK = 0
ST_UNKNOWN_TOPIC = 1       # topic not (yet) in the appender's metadata
ST_UNKNOWN_PARTITION = 2   # explicit partition >= the known partition count
ST_BUFFER_FULL = 3         # buffer.memory would be exceeded
ST_TOO_LARGE = 4           # record larger than max.request.size or buffer.memory
ST_PARTITION_FAILED = 5    # the partition has a fatal error
ST_NEEDS_PYTHON = 6        # headers dict, a Python partitioner, a bad partition argument
ST_CLOSED = 7              # the producer is closing
ST_BUSY = 8                # another thread is inside an append that released the GIL

# partitioner modes for keyed records
MODE_MURMUR2 = 0     # murmur2(key) % partitions (Kafka's default)
MODE_PYTHON = 1      # keyed records go to the slow path, which asks the Python partitioner
MODE_IGNORE_KEY = 2  # keys do not choose the partition (every record is sticky)

RECORD_OVERHEAD = 16      # buffer bytes charged per record on top of key, value and headers
BATCH_OVERHEAD = 61 + 40  # batch header plus worst-case record framing (size checks)


@runtime_checkable
class PartitionSlotLike(Protocol):
    """One partition's open batch and sealed batches (attributes writable)."""
    partition: int
    builder: Any            # the open BatchBuilder, or None
    entries: list | None    # delivery entries of the open batch
    created_ms: int
    nbytes: int
    count: int
    sealed: Any             # deque of sealed batch tuples, oldest first
    error: Any              # the KafkaError that failed the partition, or None


@runtime_checkable
class TopicSlotsLike(Protocol):
    """A topic as the appender knows it (attributes writable)."""
    name: str
    slots: list             # PartitionSlotLike per partition
    num_partitions: int
    sticky: int             # the current sticky partition, -1 when none
    available: list         # partitions keyless records may go to (leader known, not failed)
    ready: bool             # False while records held for the topic are replayed


@runtime_checkable
class AppenderLike(Protocol):
    """Constructed as ``Appender(builder_cls, batch_size, buffer_memory, max_record_bytes, mode=0,
    slow=None, wake=None)``. User threads append while the event-loop thread seals and drains;
    every method is atomic with respect to the others. ``lock`` (an RLock) also guards the
    Python-side state kept next to the appender."""
    topics: dict            # name -> TopicSlotsLike (read-only attribute)
    builder_cls: type
    batch_size: int
    buffer_memory: int
    max_record_bytes: int
    buffered: int           # buffer bytes held by unfinished records
    pending: int            # records accepted and not yet completed
    mode: int               # MODE_*
    slow: Callable | None   # slow(status, topic, value, key, partition, timestamp, headers, target)
    wake: Callable | None   # wake(): a batch was created or sealed (once until wake_pending is cleared)
    wake_pending: bool
    closed: bool
    busy: int               # appends half-way through changing an open batch (another thread may run meanwhile)
    lock: Any

    def produce(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                on_delivery=None) -> Any:
        """Queue one record; on any status but ST_OK returns what ``slow(...)`` returns."""

    def try_append(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                   target=None, force: bool = False) -> int:
        """Append one record; a status code (ST_OK = done). ``force`` skips the buffer-full and
        topic-ready checks (replaying held records), not ST_BUSY. str key/value are UTF-8 encoded;
        a value that is not bytes-like raises TypeError."""

    def append_bulk(self, topic, partition: int, keys, values, headers, timestamp: int, start: int,
                    stop: int, handle, chunk_no: int, arrow: Sequence | None = None) -> tuple[int, int, int]:
        """Append rows [start, stop) to ``partition`` (-1: sticky) until done or the buffer is full.
        ``keys``/``values`` are lists, or ``arrow`` = (key_validity, key_offsets, key_data,
        value_validity, value_offsets, value_data, offsets_64bit, array_offset). Each stretch of
        rows landing in one batch gets the entry ``(delta, count, (handle, chunk_no))``.
        Returns (next row, next chunk_no, status)."""

    def set_topic(self, name: str, num_partitions: int, available: Sequence | None = None,
                  ready: bool = True) -> TopicSlotsLike:
        """Install or update a topic (partitions only grow); ``available`` = sticky candidates."""

    def topic(self, name) -> TopicSlotsLike | None:
        """The topic's slots, or None when unknown."""

    def fail_partition(self, topic: str, partition: int, error) -> list:
        """Mark a partition failed; every sealed batch it held (the open one sealed first)."""

    def scan(self, now_ms: int, linger_ms: int) -> tuple[list, int]:
        """([(topic, partition) with a batch to send], earliest monotonic ms an open batch gets
        ready, or -1). An open batch is ready once ``linger_ms`` passed since its first record."""

    def pop_batch(self, topic: str, partition: int, sealed_before_ms: int) -> tuple | None:
        """The oldest sealed batch; failing that, the open batch (sealed now) if its first record
        is at or before ``sealed_before_ms``. None if neither, or while an append is busy."""

    def pop_expired(self, topic: str, partition: int, created_before_ms: int) -> tuple | None:
        """The oldest batch if its first record is at or before ``created_before_ms`` (the open
        batch is sealed for it), else None."""

    def has_batch(self, topic: str, partition: int) -> bool:
        """True if the partition has a sealed or non-empty open batch."""

    def take_all(self, topic: str, partition: int) -> list:
        """Every batch of a partition, the open one sealed (unless an append is busy with it)."""

    def release(self, nbytes: int, nrecords: int) -> None:
        """Give back the buffer memory and pending count of finished records."""

    def reserve(self, nbytes: int, nrecords: int) -> None:
        """Charge memory and pending records held outside the batches (records awaiting metadata)."""


@runtime_checkable
class ProducerFastModule(Protocol):
    Appender: type
    PartitionSlot: type
    TopicSlots: type
    ST_OK: int
    ST_UNKNOWN_TOPIC: int
    ST_UNKNOWN_PARTITION: int
    ST_BUFFER_FULL: int
    ST_TOO_LARGE: int
    ST_PARTITION_FAILED: int
    ST_NEEDS_PYTHON: int
    ST_CLOSED: int
    ST_BUSY: int
    MODE_MURMUR2: int
    MODE_PYTHON: int
    MODE_IGNORE_KEY: int
    RECORD_OVERHEAD: int
    BATCH_OVERHEAD: int

    def monotonic_ms(self) -> int:
        """CLOCK_MONOTONIC in ms (the clock of ``created_ms``, as time.monotonic)."""

    def wall_ms(self) -> int:
        """Milliseconds since the epoch: the default record timestamp."""

    def partition_for_key(self, key, num_partitions: int) -> int:
        """``(murmur2(key) & 0x7fffffff) % num_partitions`` (str keys UTF-8 encoded); ValueError
        when num_partitions <= 0."""

    def partitions_for_keys(self, keys: Sequence, num_partitions: int) -> bytearray:
        """The partition of each key (-1 for None) as native-order int32s."""

    def partitions_for_arrow_keys(self, validity, offsets, data, wide: bool, array_offset: int, length: int,
                                  num_partitions: int) -> bytearray:
        """The partition of each row of an Arrow binary/string key column (-1 for a null) as
        int32s; ValueError for buffers too short or offsets out of range."""

    def split_by_partition(self, parts, keys: Sequence, values: Sequence) -> dict:
        """{partition: (keys, values)} from int32 ``parts`` (one per row), rows kept in order."""
