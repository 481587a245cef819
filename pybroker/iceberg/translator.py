"""One topic's translation: fetched record batches buffered until the target lag or file size, then
committed to the topic's table (and its DLQ table) exactly once.

Where each partition stands: ``expected`` is the progress the table holds for it (what our next
commit must find there), ``dlq_expected`` the same for the DLQ table, ``position`` the next offset to
read. The DLQ table is committed before the main table and rows below its own progress are skipped,
so a crash between the two commits writes no DLQ row twice.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from pybroker.iceberg import catalog as cat
from pybroker.iceberg import rows as rowlib
from pybroker.iceberg.settings import IcebergSettings, TopicTable

log = logging.getLogger(__name__)


@dataclass
class Counters:
    records: int = 0
    bytes: int = 0
    commits: int = 0
    failures: int = 0
    dlq_records: int = 0
    dropped_records: int = 0
    deleted_untranslated: int = 0  # records retention deleted before the table took them


@dataclass
class PartitionState:
    expected: int | None  # the table's progress for this partition (None: the table has none yet)
    dlq_expected: int | None
    position: int | None  # next offset to read; None: the log start
    pending_since: float = 0.0  # wall time of the oldest buffered record's fetch (0: none buffered)


@dataclass
class Pending:
    batches: list = field(default_factory=list)
    bytes: int = 0
    since: float = 0.0  # monotonic time of the first buffered batch
    ends: dict = field(default_factory=dict)  # partition -> next offset after its buffered rows


class TopicWriter:
    def __init__(self, topic: str, table: TopicTable, settings: IcebergSettings, catalog, registry=None):
        self.topic = topic
        self.table_settings = table
        self.settings = settings
        self.catalog = catalog
        self.registry = registry  # values.RegistryClient for the value_schema_* modes
        self.partitions: dict[int, PartitionState] = {}
        self.pending = Pending()
        self.counters = Counters()
        self.table = None  # loaded on first use (value modes: created with the first value schema)
        self.dlq_table = None
        self.failed_until = 0.0  # monotonic: a failed flush waits until then (catalog or registry down)
        self.failing = False  # the last flush failed: fetching stops until one succeeds
        self._backoff_s = 0.0
        self._decoders: dict = {}  # schema id -> (decode, struct, error) (decode.py)
        self._fitted: dict = {}  # schema id -> (table schema id, error) of its last check against the table

    # ---- partitions ----------------------------------------------------------------------------

    def acquire(self, partition: int) -> int | None:
        """Start translating ``partition``: the offset to read from (None: the log start)."""
        main = self._progress(dlq=False)
        dlq = self._progress(dlq=True)
        start = main.get(partition)
        self.partitions[partition] = PartitionState(start, dlq.get(partition), start)
        return start

    def release(self, partition: int) -> None:
        self.partitions.pop(partition, None)
        self._drop_pending({partition})

    def resync(self, partitions) -> dict[int, int | None]:
        """Partitions another writer moved on: forget what is buffered, read again from the table."""
        self._drop_pending(set(partitions))
        return {p: self.acquire(p) for p in partitions if p in self.partitions}

    def _progress(self, dlq: bool) -> dict[int, int]:
        from pyiceberg.exceptions import NoSuchTableError
        try:
            table = self.catalog.load_table(cat.identifier(self.settings, self.topic, dlq))
        except NoSuchTableError:
            return {}
        table = cat.align_spec(table, self.table_settings.partition_spec)
        if dlq:
            self.dlq_table = table
        else:
            self.table = table
        return cat.read_progress(table)

    # ---- buffering -----------------------------------------------------------------------------

    def add(self, batch: pa.RecordBatch, log_start=None) -> None:
        """Buffer fetched rows of this topic; ``log_start(partition)`` tells whether a jump in offsets
        was retention deleting what the table had not taken yet."""
        now = time.monotonic()
        keep = []
        ranges = rowlib.offsets_by_partition(batch)
        for p, (first, last) in ranges.items():
            state = self.partitions.get(p)
            if state is None:
                continue
            if state.position is not None and first > state.position and log_start is not None:
                start = log_start(p)
                if start is not None and start > state.position:
                    lost = start - state.position
                    self.counters.deleted_untranslated += lost
                    log.warning("topic %s partition %d: retention deleted %d records (offsets %d-%d) before the "
                                "Iceberg table took them", self.topic, p, lost, state.position, start - 1)
            state.position = self.pending.ends[p] = last + 1
            if not state.pending_since:
                state.pending_since = time.time()
            keep.append(p)
        if not keep:
            return
        if len(keep) < len(ranges):  # rows of partitions released meanwhile
            batch = batch.filter(pc.is_in(batch.column("partition"), value_set=pa.array(keep, pa.int32())))
        if not self.pending.batches:
            self.pending.since = now
        self.pending.batches.append(batch)
        self.pending.bytes += batch.nbytes

    def due(self, now: float) -> bool:
        if not self.pending.batches or now < self.failed_until:
            return False
        # half the target lag for reading and committing; the rest is the flush's own time
        return (now - self.pending.since) * 1000 >= self.table_settings.target_lag_ms / 2 or \
            self.pending.bytes >= self.settings.target_file_size_bytes

    @property
    def paused(self) -> bool:
        return self.failing or self.pending.bytes >= 2 * self.settings.target_file_size_bytes

    def _drop_pending(self, partitions: set) -> None:
        if not self.pending.batches or not partitions:
            return
        keep = pa.array(sorted(set(self.partitions) - partitions), pa.int32())
        kept = [b.filter(pc.is_in(b.column("partition"), value_set=keep)) for b in self.pending.batches]
        self.pending.batches = [b for b in kept if b.num_rows]
        self.pending.bytes = sum(b.nbytes for b in self.pending.batches)
        for p in partitions:
            self.pending.ends.pop(p, None)

    # ---- committing ----------------------------------------------------------------------------

    def flush(self) -> set[int]:
        """Commit what is buffered. Returns the partitions to read again from the table's progress
        (another writer took them). A failing catalog or registry raises; the buffer is kept."""
        try:
            stale = self._flush()
        except Exception:
            self.counters.failures += 1
            self._backoff_s = min(30.0, max(self.settings.catalog_retry_ms / 1000, self._backoff_s * 2))
            self.failed_until = time.monotonic() + self._backoff_s
            self.failing = True
            raise
        self._backoff_s = 0.0
        self.failed_until = 0.0
        self.failing = False
        return stale

    def _flush(self) -> set[int]:
        ends = {p: e for p, e in self.pending.ends.items() if p in self.partitions}
        main_parts, dlq_parts = [], []
        for batch in self.pending.batches:  # batch by batch: the rows are chunks of one table, not copies
            main, dlq = self._rows(batch)
            if main is not None and main.num_rows:
                main_parts.append(main)
            if dlq is not None and dlq.num_rows:
                dlq_parts.append(dlq)
        main_rows = pa.concat_tables(main_parts) if main_parts else None
        dlq_rows = pa.concat_tables(dlq_parts) if dlq_parts else None
        stale: set[int] = set()
        if dlq_rows is not None and dlq_rows.num_rows:
            stale |= self._commit_dlq(dlq_rows, ends)
        live = {p: e for p, e in ends.items() if p not in stale}
        if live and self.table is None and self.table_settings.mode == "key_value":
            self.table = cat.load_or_create(self.catalog, self.settings, self.topic, cat.table_schema("key_value"),
                                            self.table_settings.partition_spec)
        # value modes before any decodable record have no table yet: progress waits for the first one
        if live and self.table is not None:
            rows = main_rows if main_rows is not None else _empty(self.table)
            if stale:
                rows = _only(rows, live)
            expected = {p: self.partitions[p].expected for p in live}
            self.table, lost = cat.commit(self.table, rows, expected, live)
            stale |= lost
            for p in live:
                if p not in lost:
                    self.partitions[p].expected = live[p]
            self.counters.commits += 1
            self.counters.records += rows.num_rows
            self.counters.bytes += rows.nbytes
        self.pending = Pending()
        for state in self.partitions.values():
            state.pending_since = 0.0
        return stale

    def _commit_dlq(self, rows, ends) -> set[int]:
        kafka = rows.column("kafka").combine_chunks()
        parts, offsets = kafka.field("partition"), kafka.field("offset")
        floors = pa.array([self.partitions[p].dlq_expected or 0 for p in parts.to_pylist()], pa.int64())
        rows = rows.filter(pc.greater_equal(offsets, floors))  # already in the DLQ table: a commit that landed
        if not rows.num_rows:
            return set()
        covered = {p: ends[p] for p in set(parts.to_pylist())}
        if self.dlq_table is None:
            self.dlq_table = cat.load_or_create(self.catalog, self.settings, self.topic, cat.dlq_schema(),
                                                self.table_settings.partition_spec, dlq=True)
        expected = {p: self.partitions[p].dlq_expected for p in covered}
        self.dlq_table, lost = cat.commit(self.dlq_table, rows, expected, covered)
        for p in covered:
            if p not in lost:
                self.partitions[p].dlq_expected = covered[p]
        self.counters.dlq_records += rows.num_rows
        return lost

    def _rows(self, batch):
        """(main rows, DLQ rows) of a buffered batch, by the topic's mode."""
        mode = self.table_settings.mode
        if mode == "key_value":
            return rowlib.key_value_rows(batch), None
        from pybroker.iceberg import decode
        return decode.value_rows(self, batch)


def _only(rows: pa.Table, partitions) -> pa.Table:
    mask = pc.is_in(pc.struct_field(rows.column("kafka"), "partition"),
                    value_set=pa.array(list(partitions), pa.int32()))
    return rows.filter(mask)


def _empty(table) -> pa.Table:
    return table.schema().as_arrow().empty_table()
