"""The log cleaner: compaction of the logs whose cleanup.policy includes ``compact`` (Kafka's §4.8).

A log is the clean part (already compacted), the dirty part (written since the last cleaning, from
the ``cleaner-offset-checkpoint``) and the part that may not be cleaned yet: the active segment,
anything at or above the high watermark, and segments younger than ``min.compaction.lag.ms``. A
cleaner thread repeatedly picks the log with the highest dirty ratio (dirty bytes / cleanable
bytes) above ``min.cleanable.dirty.ratio`` (or one whose dirty records passed
``max.compaction.lag.ms``), then:

1. builds the key -> last offset map over the dirty part (``OffsetMap.add_batches``, native, no
   GIL) until the map is full or the dirty part ends;
2. records the new first dirty offset in the checkpoint (before any swap, so that recovery knows
   which segments may have offset gaps; a checkpoint ahead of an unfinished cleaning only leaves
   duplicates for the next one);
3. rewrites the segments below that offset in groups that fit ``segment.bytes``
   (``OffsetMap.retain``: latest record per key, tombstones until their delete horizon), writes
   each group to ``<base>.log.cleaned``, syncs it and swaps it in (``Log.replace_segments``);
   readers keep the old files open until they finish, so reads are always consistent.

Transactions: nothing at or after the first unstable offset (an open transaction) is cleaned; records
of aborted transactions never enter the map (so they never hide a committed value of their key);
control batches (markers) are always kept; each cleaned segment takes over the txn index entries of
the segments it replaces (their markers are all still in it).

Everything runs on the cleaner's own threads with the log lock taken only for the swap.
``log.cleaner.io.max.bytes.per.second`` throttles the bytes read and written.
"""
import logging
import mmap
import os
import struct
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass

from pybroker import core
from pybroker.log import checkpoint
from pybroker.log.log import Log, now_ms
from pybroker.log.segment import LogSegment, MAX_RELATIVE_OFFSET

log = logging.getLogger(__name__)

CHECKPOINT = "cleaner-offset-checkpoint"
CHUNK_BYTES = 8 << 20  # a segment is read and cleaned this many bytes (whole batches) at a time
TRANSACTIONAL, CONTROL = 0x10, 0x20
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_ATTRIBUTES = struct.Struct(">hi")  # attributes @21, last offset delta @23
_PRODUCER_ID = struct.Struct(">q")  # @43


@dataclass(frozen=True)
class CleanerSettings:
    enable: bool = True                         # log.cleaner.enable
    threads: int = 1                            # log.cleaner.threads
    dedupe_buffer_size: int = 128 << 20         # log.cleaner.dedupe.buffer.size (all threads together)
    io_max_bytes_per_second: float = float("inf")  # log.cleaner.io.max.bytes.per.second
    load_factor: float = 0.9                    # log.cleaner.io.buffer.load.factor
    backoff_ms: int = 15000                     # log.cleaner.backoff.ms

    @classmethod
    def from_broker(cls, cfg) -> "CleanerSettings":
        return cls(cfg.log_cleaner_enable, cfg.log_cleaner_threads, cfg.log_cleaner_dedupe_buffer_size,
                   cfg.log_cleaner_io_max_bytes_per_second, cfg.log_cleaner_io_buffer_load_factor,
                   cfg.log_cleaner_backoff_ms)


@dataclass
class CleanStats:
    bytes_read: int = 0  # every byte read: the dirty part for the map, then the segments rewritten
    bytes_cleaned: int = 0  # bytes of the segments rewritten (the log cleaned)
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    keys: int = 0
    segments_in: int = 0
    segments_out: int = 0
    map_seconds: float = 0.0
    seconds: float = 0.0


@dataclass(frozen=True)
class Cleanable:
    """What one log offers the cleaner now."""
    log: Log
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    overdue: bool  # dirty records older than max.compaction.lag.ms

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


class Throttler:
    """Sleeps so that the bytes reported stay under ``rate`` per second (Kafka's cleaner throttler)."""

    def __init__(self, rate: float, stopping: threading.Event):
        self.rate = rate
        self._stopping = stopping
        self._start = time.monotonic()
        self._bytes = 0

    def add(self, nbytes: int) -> None:
        if self.rate == float("inf"):
            return
        self._bytes += nbytes
        elapsed = time.monotonic() - self._start
        wait = self._bytes / self.rate - elapsed
        if wait > 0:
            self._stopping.wait(min(wait, 5.0))
        if elapsed > 1.0:  # measure over a sliding second so an idle spell does not bank credit
            self._start, self._bytes = time.monotonic(), 0


class CleaningAborted(Exception):
    """The log changed under the cleaner (truncated, deleted, closed); it tries again later."""


def cleanable(lg: Log, first_dirty: int, high_watermark: int, now: int) -> Cleanable:
    """The clean and dirty sections of ``lg`` (see the module's docstring)."""
    config = lg.config
    with lg.lock:
        segments = list(lg.segments)
        start = lg.log_start_offset
    first_dirty = max(first_dirty, start, segments[0].base_offset)
    if first_dirty > segments[-1].next_offset:  # the log was truncated below the checkpoint
        first_dirty = max(start, segments[0].base_offset)
    uncleanable = min(segments[-1].base_offset, high_watermark)
    unstable = lg.first_unstable_offset() if lg.first_unstable_offset is not None else None
    if unstable is not None:  # as Kafka: an open transaction's records may still be aborted
        uncleanable = min(uncleanable, unstable)
    lag = config.min_compaction_lag_ms
    for seg in segments[:-1]:
        if seg.next_offset <= first_dirty:
            continue
        if lag > 0 and seg.max_timestamp > now - lag:
            uncleanable = min(uncleanable, seg.base_offset)
            break
    clean = sum(s.size for s in segments if s.next_offset <= first_dirty)
    dirty_segments = [s for s in segments[:-1] if s.next_offset > first_dirty and s.base_offset < uncleanable]
    dirty = sum(s.size for s in dirty_segments)
    overdue = False
    if dirty_segments and config.max_compaction_lag_ms < 2**62:
        first_ts = dirty_segments[0].first_timestamp
        overdue = 0 <= first_ts < now - config.max_compaction_lag_ms
    return Cleanable(lg, first_dirty, max(first_dirty, uncleanable), clean, dirty, overdue)


def _mapped(segment: LogSegment):
    """A read-only mapping of a segment's bytes (an empty bytes object for an empty segment)."""
    size = segment.size
    if not size:
        return nullcontext(b"")
    return mmap.mmap(segment.fd, size, prot=mmap.PROT_READ)


class Cleaner:
    """One cleaner thread's work on one log at a time, with its own offset map."""

    def __init__(self, map_bytes: int, load_factor: float, throttler: Throttler):
        self.map_bytes, self.load_factor = map_bytes, load_factor
        self.offset_map = None  # held only while cleaning: an idle broker keeps no dedupe buffer
        self.map_limit = 0  # the keys the last cleaning's map could hold
        self.throttler = throttler

    def clean(self, c: Cleanable, now: int, on_checkpoint) -> tuple[int, CleanStats]:
        """Compact ``c.log``; returns the new first dirty offset and what it did."""
        self.offset_map = core.offset_map.OffsetMap(self.map_bytes, self.load_factor)
        self.map_limit = self.offset_map.limit
        try:
            return self._clean(c, now, on_checkpoint)
        finally:
            self.offset_map = None  # frees the buffer (an mmap'd block: its pages go back to the system)

    def _clean(self, c: Cleanable, now: int, on_checkpoint) -> tuple[int, CleanStats]:
        lg, stats, started = c.log, CleanStats(), time.monotonic()
        with lg.lock:
            segments = list(lg.segments)
        om = self.offset_map
        end, full = c.first_dirty, False
        for seg in segments[:-1]:
            if seg.next_offset <= c.first_dirty or seg.base_offset >= c.first_uncleanable:
                continue
            self._check_open(lg)
            aborted = lg.collect_aborted_transactions(seg.base_offset, seg.next_offset)
            with _mapped(seg) as view:
                for start, stop in self._chunks(seg):  # chunks, so the I/O throttle acts often
                    for run_start, run_stop in _without_aborted(view, start, stop, aborted):
                        filled = om.add_batches(memoryview(view)[run_start:run_stop], c.first_dirty,
                                                c.first_uncleanable)
                        end, full = max(end, filled.next_offset), filled.full
                        if full:
                            break
                    stats.bytes_read += stop - start
                    self.throttler.add(stop - start)
                    if full:
                        break
            if full:
                break
        stats.keys = om.size
        stats.map_seconds = time.monotonic() - started
        if end <= c.first_dirty:
            return c.first_dirty, stats
        on_checkpoint(end)  # before any swap: segments below it may have offset gaps from now on
        keep_empty = lg.last_batches_of_producers() if lg.last_batches_of_producers else ()
        horizon = now + lg.config.delete_retention_ms
        for group in self._groups([s for s in segments[:-1] if s.base_offset < end], lg):
            self._clean_group(lg, group, now, horizon, keep_empty, end, stats)
        stats.seconds = time.monotonic() - started
        return end, stats

    @staticmethod
    def _groups(segments: list, lg: Log) -> list:
        """Consecutive segments whose cleaned copy fits one segment (size and 32-bit relative offsets)."""
        groups, current, size = [], [], 0
        for seg in segments:
            fits = (current and size + seg.size <= lg.config.segment_bytes
                    and seg.next_offset - 1 - current[0].base_offset <= MAX_RELATIVE_OFFSET)
            if current and not fits:
                groups.append(current)
                current, size = [], 0
            current.append(seg)
            size += seg.size
        if current:
            groups.append(current)
        return groups

    @staticmethod
    def _check_open(lg: Log) -> None:
        if lg.closed:
            raise CleaningAborted(f"{lg} was closed")

    def _clean_group(self, lg: Log, group: list, now: int, horizon: int, keep_empty, end: int,
                     stats: CleanStats) -> None:
        cleaned = LogSegment(lg.directory, group[0].base_offset, lg.config, active=True, suffix=".cleaned")
        try:
            position = 0
            for seg in group:
                self._check_open(lg)
                with _mapped(seg) as view:
                    for start, stop in self._chunks(seg):
                        kept = self.offset_map.retain(memoryview(view)[start:stop], now, horizon, keep_empty, end)
                        if kept.data:
                            position += core.fileio.pwritev_all(cleaned.fd, [kept.data], position)
                        stats.records_read += kept.records_read
                        stats.records_kept += kept.records_kept
                        stats.bytes_written += len(kept.data)
                        stats.bytes_read += stop - start
                        stats.bytes_cleaned += stop - start
                        self.throttler.add(stop - start + len(kept.data))
            cleaned.recover()  # indexes for the new file (and a last check of every batch)
            # every marker was kept: the aborted transactions indexed in the old segments stay true
            cleaned.txn_index.replace([t for seg in group for t in seg.txn_index.entries])  # (any_aborted_txn holds)
            cleaned.txn_index_stale = False
            cleaned.flush()
            cleaned.seal()
            if not lg.replace_segments(cleaned, group):
                raise CleaningAborted(f"{lg} changed while it was cleaned")
        except BaseException:
            cleaned.close()
            cleaned.delete()
            raise
        stats.segments_in += len(group)
        stats.segments_out += 1

    @staticmethod
    def _chunks(seg: LogSegment):
        """(start, stop) byte ranges of whole batches, about CHUNK_BYTES each, from the offset index."""
        index = seg.offset_index
        start, n, i = 0, index.entries, 0
        while start < seg.size:
            stop = seg.size
            while i < n:  # the first index entry (a batch start) at least CHUNK_BYTES further on
                position = index.entry(i)[1]
                i += 1
                if position >= start + CHUNK_BYTES:
                    stop = position
                    break
            yield start, stop
            start = stop


def _without_aborted(view, start: int, stop: int, aborted: list):
    """Byte ranges of [start, stop) (whole batches) without the batches of aborted transactions."""
    if not aborted:
        yield start, stop
        return
    run = pos = start
    while pos < stop:
        base, length = _BATCH_HEAD.unpack_from(view, pos)
        size = length + 12
        attributes, last_delta = _ATTRIBUTES.unpack_from(view, pos + 21)
        if attributes & TRANSACTIONAL and not attributes & CONTROL:
            pid = _PRODUCER_ID.unpack_from(view, pos + 43)[0]
            last = base + last_delta
            if any(t.producer_id == pid and t.first_offset <= base and last <= t.last_offset for t in aborted):
                if pos > run:
                    yield run, pos
                run = pos + size
        pos += size
    if stop > run:
        yield run, stop


def read_checkpoint(log_dir: str) -> dict:
    """The first dirty offset of each log of ``log_dir`` (empty when there is no readable checkpoint)."""
    try:
        return checkpoint.read_offsets(os.path.join(log_dir, CHECKPOINT))
    except FileNotFoundError:
        return {}
    except checkpoint.CheckpointError as exc:
        log.warning("ignoring %s in %s: %s", CHECKPOINT, log_dir, exc)
        return {}


class LogCleaner:
    """The cleaner threads of one broker and the ``cleaner-offset-checkpoint`` of each log dir."""

    def __init__(self, manager, settings: CleanerSettings):
        self.manager = manager
        self.settings = settings
        self.high_watermark = None  # set by the replica layer: (topic, partition) -> int or None
        self._stopping = threading.Event()
        self._wake = threading.Condition()
        self._lock = threading.Lock()
        self._in_progress: set = set()
        self._threads: list[threading.Thread] = []
        self._throttlers: list[Throttler] = []
        self._restarting = threading.Lock()
        self.first_dirty: dict[tuple[str, int], int] = {}
        for d in manager.log_dirs:
            self.first_dirty.update(read_checkpoint(d))
        # what /metrics shows (Kafka's LogCleaner and LogCleanerManager gauges)
        self.runs = 0
        self.bytes_read = self.bytes_written = 0
        self.last_stats: CleanStats | None = None
        self.last_run_monotonic = time.monotonic()
        self.max_dirty_percent = 0.0
        self.buffer_utilization_percent = 0.0

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> "LogCleaner":
        if not self.settings.enable or self.settings.threads < 1:
            return self
        per_thread = max(self.settings.dedupe_buffer_size // self.settings.threads, 1 << 20)
        self._stopping = threading.Event()
        for i in range(self.settings.threads):
            throttler = Throttler(self.settings.io_max_bytes_per_second, self._stopping)
            self._throttlers.append(throttler)
            cleaner = Cleaner(per_thread, self.settings.load_factor, throttler)
            t = threading.Thread(target=self._run, args=(cleaner,), name=f"pybroker-cleaner-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.wake()
        for t in self._threads:
            t.join(timeout=30)
        self._threads.clear()
        self._throttlers.clear()

    def reconfigure(self, settings: CleanerSettings) -> None:
        """Dynamic broker configs: the I/O rate and backoff apply at once; new thread counts or
        buffer sizes restart the threads (off the caller's thread, after their current cleaning)."""
        old, self.settings = self.settings, settings
        for throttler in self._throttlers:
            throttler.rate = settings.io_max_bytes_per_second
        if (old.enable, old.threads, old.dedupe_buffer_size, old.load_factor) != \
                (settings.enable, settings.threads, settings.dedupe_buffer_size, settings.load_factor):
            threading.Thread(target=self._restart, name="pybroker-cleaner-restart", daemon=True).start()
        self.wake()

    def _restart(self) -> None:
        with self._restarting:
            self.stop()
            log.info("log cleaner restarting with %d threads and a %d-byte dedupe buffer",
                     self.settings.threads, self.settings.dedupe_buffer_size)
            self.start()

    def wake(self) -> None:
        """Look for work now (a config change, a test) instead of after the backoff."""
        with self._wake:
            self._wake.notify_all()

    def forget(self, topic: str, partition: int) -> None:
        """A deleted log: drop its checkpoint entry."""
        with self._lock:
            self.first_dirty.pop((topic, partition), None)
        self._write_checkpoints()

    # ---- work -------------------------------------------------------------------------------

    def _run(self, cleaner: Cleaner) -> None:
        # the batch walks run on CPU time nobody else wants; this thread keeps its priority, as it takes the GIL
        try:
            core.offset_map.start_idle_helper()
        except OSError as exc:
            log.warning("log cleaner runs at normal priority: %s", exc)
        try:
            while not self._stopping.is_set():
                try:
                    worked = self.clean_once(cleaner)
                except Exception:
                    log.exception("log cleaner failed; it goes on after its backoff")
                    worked = False
                if not worked:
                    with self._wake:
                        if not self._stopping.is_set():
                            self._wake.wait(self.settings.backoff_ms / 1000)
        finally:
            core.offset_map.stop_idle_helper()

    def grab_dirtiest(self, now: int) -> Cleanable | None:
        """The log to clean next, marked in progress; None when no log needs cleaning."""
        best = None
        with self._lock:
            for tp, lg in list(self.manager.logs.items()):
                if tp in self._in_progress or lg.closed or not lg.config.compact or lg.txn_index_stale:
                    continue  # (a recovered segment's txn index waits for the producer state replay)
                self._maybe_roll(lg, now)
                hw = self.high_watermark(*tp) if self.high_watermark else None
                c = cleanable(lg, self.first_dirty.get(tp, 0), lg.log_end_offset if hw is None else hw, now)
                if not c.dirty_bytes or not (c.overdue or c.ratio > lg.config.min_cleanable_dirty_ratio):
                    continue
                if best is None or (c.overdue, c.ratio) > (best.overdue, best.ratio):
                    best = c
            if best is not None:
                self._in_progress.add((best.log.topic, best.log.partition))
                self.max_dirty_percent = 100.0 * best.ratio
        return best

    @staticmethod
    def _maybe_roll(lg: Log, now: int) -> None:
        """As Kafka: an active segment older than max.compaction.lag.ms rolls so that it can be cleaned."""
        lag = lg.config.max_compaction_lag_ms
        active = lg.active_segment
        if lag < 2**62 and active.size and 0 <= active.first_timestamp < now - lag:
            lg.roll()

    def clean_once(self, cleaner: Cleaner, now: int | None = None) -> bool:
        """Clean the dirtiest log, if any; True when one was cleaned."""
        now = now_ms() if now is None else now
        c = self.grab_dirtiest(now)
        if c is None:
            return False
        tp = (c.log.topic, c.log.partition)
        try:
            end, stats = cleaner.clean(c, now, lambda offset: self._checkpoint(tp, offset))
        except CleaningAborted as exc:
            log.info("cleaning of %s-%d stopped: %s", tp[0], tp[1], exc)
            return False
        except (OSError, ValueError):
            if c.log.closed or not os.path.isdir(c.log.directory):
                return False  # deleted or closed while it was cleaned
            raise
        finally:
            with self._lock:
                self._in_progress.discard(tp)
        self.runs += 1
        self.bytes_read += stats.bytes_read
        self.bytes_written += stats.bytes_written
        self.last_stats, self.last_run_monotonic = stats, time.monotonic()
        self.buffer_utilization_percent = 100.0 * stats.keys / max(cleaner.map_limit, 1)
        secs = max(stats.seconds, 1e-9)
        log.info("cleaned log topic=%s partition=%d dirty_ratio=%.3f first_dirty=%d next_dirty=%d "
                 "segments_in=%d segments_out=%d bytes_read=%d bytes_cleaned=%d bytes_written=%d records_read=%d "
                 "records_kept=%d keys=%d map_seconds=%.3f seconds=%.3f mb_per_s=%.1f",
                 tp[0], tp[1], c.ratio, c.first_dirty, end, stats.segments_in, stats.segments_out,
                 stats.bytes_read, stats.bytes_cleaned, stats.bytes_written, stats.records_read, stats.records_kept,
                 stats.keys, stats.map_seconds, stats.seconds, stats.bytes_cleaned / secs / 1e6)
        return True

    def _checkpoint(self, tp: tuple[str, int], offset: int) -> None:
        with self._lock:
            self.first_dirty[tp] = offset
            lg = self.manager.logs.get(tp)
            if lg is not None:
                lg.first_dirty_offset = offset
        self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        with self._lock:
            by_dir = {d: {} for d in self.manager.log_dirs}
            for tp, offset in self.first_dirty.items():
                lg = self.manager.logs.get(tp)
                if lg is not None:
                    by_dir.setdefault(os.path.dirname(lg.directory), {})[tp] = offset
            for d, offsets in by_dir.items():
                checkpoint.write_offsets(os.path.join(d, CHECKPOINT), offsets)
