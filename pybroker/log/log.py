"""A partition's log: ordered segments, append at the end, reads as file slices.

Append-vs-flush contract: ``append`` returns once the batches are in the page cache (they
survive a crash of this process, not a power loss). They become durable when a flush passes
them: ``flush()`` inline, or the LogManager's flusher thread once ``flush.messages`` records
or ``flush.ms`` have gone by. ``recovery_point`` is the offset below which everything is
durable; after an unclean shutdown only the segments from it onwards are re-validated.
"""
import bisect
import logging
import mmap
import os
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import NamedTuple

from pybroker import core
from pybroker.errors import (CorruptRecordError, OffsetOutOfRangeError, RecordListTooLargeError,
                             RecordTooLargeError)
from pybroker.log import checkpoint
from pybroker.log.config import LogConfig
from pybroker.log.epochs import LeaderEpochCache
from pybroker.log.segment import LogSegment

log = logging.getLogger(__name__)


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the log stamps LogAppendTime
    record_count: int
    size: int
    log_start_offset: int
    flushed: object = None  # a Future when this append asked for a flush (flush.messages reached)


@dataclass(frozen=True)
class FetchSlice:
    """Bytes of one segment to send as they are: ``length`` bytes of ``file`` at ``position``.

    Holds the segment's file object, so the descriptor stays valid even if the segment is
    deleted meanwhile. The last batch may be cut short by ``max_bytes``: clients drop it.
    """
    file: object
    position: int
    length: int
    offset: int
    log_start_offset: int
    log_end_offset: int

    @property
    def fd(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        """Copy the slice into memory (tools and tests; the broker sends it with sendfile)."""
        return os.pread(self.fd, self.length, self.position) if self.length else b""


def now_ms() -> int:
    return int(time.time() * 1000)


class Log:
    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 *, recovery_point: int = 0, log_start_offset: int = 0, clean: bool = True,
                 flusher=None, first_dirty_offset: int = 0):
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.recovery_point = recovery_point
        self.flusher = flusher
        self.log_start_offset = log_start_offset
        self.log_append_time = config.message_timestamp_type == "LogAppendTime"
        self.lock = threading.RLock()
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms()
        # the log cleaner's checkpoint: segments below it may have been compacted (offset gaps)
        self.first_dirty_offset = first_dirty_offset
        self.last_batches_of_producers = None  # set by the replica layer: base offsets the cleaner keeps
        self.first_unstable_offset = None  # set by the replica layer: the cleaner stops before open transactions
        self.any_aborted_txn = None  # some txn index has an entry (None: not looked yet); spares read_committed a walk
        self.closed = False
        os.makedirs(directory, exist_ok=True)
        self.epochs = LeaderEpochCache(directory)
        self.segments: list[LogSegment] = []
        self._load(clean)
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self.log_start_offset = self.log_end_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.epochs.truncate_from_end(self.log_end_offset)

    # ---- loading and recovery -------------------------------------------------------------

    def _load(self, clean: bool) -> None:
        self._complete_swaps()
        names = sorted(os.listdir(self.directory))
        for name in names:
            if name.endswith((".tmp", ".deleted", ".cleaned", ".swap")):
                os.remove(os.path.join(self.directory, name))
        bases = sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())
        for name in names:  # an index without its .log is left over from a deletion
            stem, ext = os.path.splitext(name)
            if ext in (".index", ".timeindex", ".txnindex") and stem.isdigit() and int(stem) not in bases:
                os.remove(os.path.join(self.directory, name))
        if not bases:
            self.segments.append(LogSegment(self.directory, self.log_start_offset, self.config, active=True))
            return
        for i, base in enumerate(bases):
            segment = LogSegment(self.directory, base, self.config, active=i == len(bases) - 1)
            segment.gaps = base < self.first_dirty_offset
            self.segments.append(segment)
        first_to_recover = len(self.segments)
        if not clean:
            starts = [s.base_offset for s in self.segments]
            first_to_recover = max(0, bisect.bisect_right(starts, self.recovery_point) - 1)
        for i, segment in enumerate(self.segments):
            if i < first_to_recover:
                segment.load()
            else:
                truncated = segment.recover()
                if truncated:
                    log.warning("%s-%d: recovery removed %d bytes from %s", self.topic,
                                self.partition, truncated, segment.log_path)
                    if i + 1 < len(self.segments):  # as Kafka: what followed a torn segment goes with it
                        self._drop_segments_from(i + 1, f"they follow {segment.log_path}, which was truncated")
                    break
        self._drop_discontinuous_segments()

    def _drop_discontinuous_segments(self) -> None:
        """Offsets only grow: a segment that starts before its predecessor ends goes, with all later ones.

        Gaps are fine (the log cleaner removes records); truncation deletes from the end, so a
        crash during it never leaves one.
        """
        for i in range(1, len(self.segments)):
            prev, seg = self.segments[i - 1], self.segments[i]
            if seg.base_offset < prev.next_offset:
                self._drop_segments_from(i, f"{seg.log_path} overlaps offset {prev.next_offset}")
                break
        last = self.segments[-1]
        if not last.active:
            last.reactivate()

    def _complete_swaps(self) -> None:
        """Finish a cleaner swap cut short by a crash (Kafka's protocol).

        A ``<base>.log.swap`` is a complete cleaned segment whose swap was decided: the segments it
        replaces (every ``.log`` with a base offset within its offsets) go, then it becomes ``<base>.log``.
        A ``.cleaned`` file was never decided and is simply removed by ``_load``.
        """
        for name in sorted(os.listdir(self.directory)):
            if not name.endswith(".log.swap"):
                continue
            base = int(name.split(".")[0])
            path = os.path.join(self.directory, name)
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                with (mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) if size else nullcontext(b"")) as data:
                    result = core.batch.scan(data, expected_offset=base, gaps=True)
            end = max(result.next_offset, base + 1)
            for other in os.listdir(self.directory):
                stem, ext = os.path.splitext(other)
                if ext == ".log" and stem.isdigit() and base <= int(stem) < end:
                    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                        try:
                            os.remove(os.path.join(self.directory, stem + suffix))
                        except FileNotFoundError:
                            pass
            stem = os.path.join(self.directory, name[:-len(".log.swap")])
            os.replace(path, stem + ".log")
            for suffix in (".index", ".timeindex", ".txnindex"):  # rebuilt at load
                try:
                    os.remove(stem + suffix + ".swap")
                except FileNotFoundError:
                    pass
            log.warning("%s-%d: completed the cleaner's swap of %s", self.topic, self.partition, name)
        checkpoint.fsync_dir(self.directory)

    def replace_segments(self, new: LogSegment, old: list) -> bool:
        """Swap a cleaned segment in for ``old`` (consecutive segments); False if the log changed meanwhile.

        Crash-safe: ``.cleaned`` -> ``.swap`` decides the swap, the old files go, ``.swap`` -> ``.log``.
        """
        with self.lock:
            if self.closed:
                return False
            try:
                i = next(k for k, s in enumerate(self.segments) if s is old[0])
            except StopIteration:
                return False
            if self.segments[i:i + len(old)] != old or i + len(old) >= len(self.segments):
                return False  # truncated, deleted by retention, or would replace the active segment
            new.rename_suffix(".swap")
            checkpoint.fsync_dir(self.directory)
            for gone in old:
                gone.delete()
            new.rename_suffix("")
            checkpoint.fsync_dir(self.directory)
            self.segments[i:i + len(old)] = [new]
            return True

    def _drop_segments_from(self, i: int, why: str) -> None:
        log.warning("%s-%d: removing %d segments from %s: %s", self.topic, self.partition,
                    len(self.segments) - i, self.segments[i].log_path, why)
        for gone in reversed(self.segments[i:]):
            gone.delete()
        del self.segments[i:]

    # ---- state ----------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def txn_index_stale(self) -> bool:
        """Some segment was recovered from its batches: its txn index waits for the producer state replay."""
        return any(s.txn_index_stale for s in self.segments)

    # ---- aborted transactions -------------------------------------------------------------

    def append_aborted_txn(self, txn) -> None:
        """Index an aborted transaction in the segment that holds its ABORT marker (``txn.last_offset``)."""
        with self.lock:
            self.segments[self._segment_for(txn.last_offset)].txn_index.append(txn)
            self.any_aborted_txn = True

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list:
        """Aborted transactions overlapping [fetch_offset, upper_bound), from the segment holding
        ``fetch_offset`` on (Kafka's collectAbortedTransactions)."""
        found = []
        with self.lock:
            if self.any_aborted_txn is None:
                self.any_aborted_txn = any(s.txn_index.entries for s in self.segments)
            if not self.any_aborted_txn:
                return found
            for segment in self.segments[self._segment_for(fetch_offset):]:
                if not segment.txn_index.entries:
                    continue
                txns, complete = segment.txn_index.collect(fetch_offset, upper_bound)
                found += txns
                if complete:
                    break
        return found

    def _segment_for(self, offset: int) -> int:
        """Index of the segment that would hold ``offset``."""
        starts = [s.base_offset for s in self.segments]
        return max(0, bisect.bisect_right(starts, offset) - 1)

    # ---- append ---------------------------------------------------------------------------

    def append(self, buffers, *, leader_epoch: int = -1, assign_offsets: bool = True,
               allow_control: bool = False, timestamp_ms: int | None = None) -> AppendInfo:
        """Validate, then append, one or more writable buffers each holding one or more batches."""
        return self.append_validated(self.validate(buffers, allow_control), leader_epoch=leader_epoch,
                                     assign_offsets=assign_offsets, timestamp_ms=timestamp_ms)

    def validate(self, buffers, allow_control: bool = False, compacted: bool = False,
                 ignore_record_size: bool = False) -> list:
        """Check every batch (CRC, lengths, counts, size limits); returns (view, BatchInfo) pairs.

        All or nothing: one bad batch anywhere raises a typed error naming it. ``compacted``
        accepts batches the log cleaner rewrote (a follower copying a compacted leader log);
        ``ignore_record_size`` skips max.message.bytes (a follower copies what its leader took, as Kafka's).
        """
        if isinstance(buffers, (bytes, bytearray, memoryview)):
            buffers = [buffers]
        batches = []
        validate, max_bytes = core.batch.validate, self.config.max_message_bytes
        for buf in buffers:
            view = memoryview(buf).cast("B")
            pos = 0
            while pos < len(view):
                try:
                    info = validate(view, pos, allow_control, compacted)
                except CorruptRecordError:
                    self._check_declared_size(view, pos, max_bytes)  # as Kafka: size is checked before the CRC
                    raise
                size = info.batch_length + 12
                if size > max_bytes and not ignore_record_size:
                    raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={max_bytes}")
                if size > self.config.segment_bytes:
                    raise RecordListTooLargeError(
                        f"batch of {size} bytes exceeds segment.bytes={self.config.segment_bytes}")
                batches.append((view[pos:pos + size] if pos or size != len(view) else view, info))
                pos += size
        if not batches:
            raise CorruptRecordError("no record batch in the request")
        return batches

    @staticmethod
    def _check_declared_size(view, pos: int, max_bytes: int) -> None:
        if len(view) - pos >= 12:
            size = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True) + 12
            if size > max_bytes:
                raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={max_bytes}")

    def append_validated(self, batches, *, leader_epoch: int = -1, assign_offsets: bool = True,
                         timestamp_ms: int | None = None) -> AppendInfo:
        """Append batches that ``validate`` accepted, stamping offsets, epoch and LogAppendTime in place.

        ``assign_offsets=False`` (a follower copying its leader) keeps the offsets, which must
        continue the log.
        """
        log_append_time = -1  # the clock is read only when the log stamps LogAppendTime
        if self.log_append_time and assign_offsets:  # a follower keeps its leader's stamps
            log_append_time = timestamp_ms if timestamp_ms is not None else now_ms()
        with self.lock:
            segment = self.segments[-1]
            first = segment.next_offset
            if not assign_offsets:
                self._check_continues(batches, first)
                first = batches[0][1].base_offset  # a follower keeps the leader's offsets, gaps included
            if len(batches) == 1:  # the common case, without per-batch Python work
                view, info = batches[0]
                batch_ts = info.max_timestamp if log_append_time < 0 else log_append_time
                if not segment.can_take(info.batch_length + 12, first + info.last_offset_delta, batch_ts):
                    self._roll_for_append()
                    segment = self.segments[-1]
                next_offset, records, nbytes, _, _, _, _, _ = segment.append(
                    [view], first, leader_epoch, log_append_time)
                max_ts, offset_of_max = batch_ts, next_offset - 1
            else:
                next_offset, records, nbytes, max_ts, offset_of_max = self._append_runs(
                    batches, first, leader_epoch, log_append_time, assign_offsets)
            if leader_epoch > self.epochs.latest_epoch:
                self.epochs.assign(leader_epoch, first)
            elif leader_epoch < 0:  # a follower's copy: the epochs come with the batches
                for _, info in batches:
                    if info.partition_leader_epoch > self.epochs.latest_epoch:
                        self.epochs.assign(info.partition_leader_epoch, info.base_offset)
            self.unflushed_messages += records
            flushed = None
            if self.unflushed_messages >= self.config.flush_messages:
                flushed = self._request_flush()
            # tuple.__new__ skips the NamedTuple's Python-level constructor: this runs per produce
            return tuple.__new__(AppendInfo, (first, next_offset - 1, max_ts, offset_of_max, log_append_time,
                                              records, nbytes, self.log_start_offset, flushed))

    @staticmethod
    def _check_continues(batches, first: int) -> None:
        """Copied batches must start at or after the log end; gaps are records the leader's cleaner removed."""
        expect = first
        for _, info in batches:
            if info.base_offset < expect:
                raise CorruptRecordError(
                    f"batch starts at offset {info.base_offset}, log ends at {expect}", info.base_offset)
            expect = info.base_offset + info.last_offset_delta + 1

    def _append_runs(self, batches, first, leader_epoch, log_append_time, assign_offsets=True):
        """Several batches: runs that fit the active segment (and, for copies, have no offset gap),
        one pwritev each, rolling in between."""
        next_offset, records, nbytes, max_ts, offset_of_max = first, 0, 0, -1, -1
        start = 0
        while start < len(batches):
            segment = self.segments[-1]
            if not assign_offsets:
                next_offset = batches[start][1].base_offset
            end, run_bytes, offset = start, 0, next_offset
            while end < len(batches):
                info = batches[end][1]
                if not assign_offsets and info.base_offset != offset:
                    break
                size = info.batch_length + 12
                ts = info.max_timestamp if log_append_time < 0 else log_append_time
                if not segment.can_take(run_bytes + size, offset + info.last_offset_delta, ts):
                    break
                run_bytes += size
                offset += info.last_offset_delta + 1
                end += 1
            if end == start:
                self._roll_for_append()
                continue
            views = [v for v, _ in batches[start:end]]
            result = segment.append(views, next_offset, leader_epoch, log_append_time)
            for _, info in batches[start:end]:
                ts = info.max_timestamp if log_append_time < 0 else log_append_time
                if ts > max_ts:
                    max_ts, offset_of_max = ts, next_offset + info.last_offset_delta
                next_offset += info.last_offset_delta + 1
            assert next_offset == result[0]
            records += result[1]
            nbytes += result[2]
            start = end
        return next_offset, records, nbytes, max_ts, offset_of_max

    def _roll_for_append(self) -> None:
        # an empty active segment takes any one batch, so it never needs a roll
        if self.segments[-1].size:
            self._roll()

    def _roll(self) -> None:
        old = self.active_segment
        old.seal()
        self.segments.append(LogSegment(self.directory, self.log_end_offset, self.config, active=True))
        log.info("%s-%d: rolled to segment %d", self.topic, self.partition, self.log_end_offset)
        if self.flusher is not None:  # the sealed segment goes to disk soon, as Kafka does on roll
            self.flusher.request(self)

    def roll(self) -> None:
        with self.lock:
            if self.active_segment.size:
                self._roll()

    # ---- read -----------------------------------------------------------------------------

    def update_config(self, config: LogConfig) -> None:
        """Switch to a new topic config (an altered override). Retention, max.message.bytes, flush
        and timestamp type apply at once; segment.bytes/segment.ms from the active segment's next
        roll check; index sizes with the next new segment."""
        with self.lock:
            self.config = config
            self.log_append_time = config.message_timestamp_type == "LogAppendTime"
            if self.segments:
                self.segments[-1].segment_bytes = config.segment_bytes
                self.segments[-1].segment_ms = config.segment_ms

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchSlice:
        """A slice starting at the batch that holds ``offset``.

        At most ``max_bytes`` long, except that it always holds one whole batch when
        ``min_one_batch``; never reaches ``max_offset`` (the high watermark), nor past a segment.
        """
        with self.lock:
            start, end = self.log_start_offset, self.log_end_offset
            if offset < start or offset > end:
                raise OffsetOutOfRangeError(offset, start, end)
            upper = end if max_offset is None else min(max_offset, end)
            i = self._segment_for(offset)
            while i < len(self.segments) and offset < upper:
                segment = self.segments[i]
                found = segment.translate_offset(offset)
                if found is None:
                    i += 1
                    continue
                position, header = found
                limit = segment.size
                if upper < segment.next_offset:
                    bound = segment.translate_offset(upper)
                    limit = bound[0] if bound else segment.size
                length = min(max_bytes, limit - position)
                if min_one_batch and length < header.batch_length + 12:
                    length = min(header.batch_length + 12, limit - position)
                return FetchSlice(segment.file, position, max(length, 0), offset, start, end)
            return FetchSlice(self.active_segment.file, self.active_segment.size, 0, offset, start, end)

    # ---- truncation -----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch that ends at or after ``offset``; returns the new log end offset.

        Cuts at a batch boundary, so the new end can be below ``offset`` when it falls inside a batch.
        """
        with self.lock:
            if offset >= self.log_end_offset:
                return self.log_end_offset
            if offset <= self.segments[0].base_offset:
                return self._truncate_fully_and_start_at(offset)
            keep = self._segment_for(offset)
            for gone in reversed(self.segments[keep + 1:]):  # from the end: a crash leaves no gap
                gone.delete()
            del self.segments[keep + 1:]
            last = self.segments[-1]
            if not last.active:
                last.reactivate()
            last.truncate_to(offset)
            self._after_truncation()
            return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> int:
        """Drop every segment and start empty at ``offset`` (a follower behind its leader's log start)."""
        with self.lock:
            return self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> int:
        for gone in self.segments:
            gone.delete()
        self.segments = [LogSegment(self.directory, offset, self.config, active=True)]
        self.log_start_offset = offset
        self._after_truncation()
        return offset

    def _after_truncation(self) -> None:
        end = self.log_end_offset
        self.recovery_point = min(self.recovery_point, end)
        self.log_start_offset = min(self.log_start_offset, end)
        self.epochs.truncate_from_end(end)

    # ---- retention ------------------------------------------------------------------------

    def delete_old_segments(self, now: int | None = None) -> int:
        """Apply retention.ms, retention.bytes and the log start offset; returns segments deleted."""
        now = now_ms() if now is None else now
        with self.lock:
            deleted = 0
            retention_ms = self.config.retention_ms if self.config.delete else -1  # compact only: kept
            if retention_ms >= 0:
                while self._oldest_timestamp() < now - retention_ms:
                    if len(self.segments) == 1:
                        if self.active_segment.size == 0:
                            break
                        self._roll()  # as Kafka: an expired active segment rolls, then goes
                    deleted += self._delete_oldest()
            if self.config.retention_bytes >= 0 and self.config.delete:
                excess = self.size - self.config.retention_bytes
                while len(self.segments) > 1 and excess >= self.segments[0].size:
                    excess -= self.segments[0].size
                    deleted += self._delete_oldest()
            while len(self.segments) > 1 and self.segments[0].next_offset <= self.log_start_offset:
                deleted += self._delete_oldest()
            return deleted

    def _oldest_timestamp(self) -> int:
        oldest = self.segments[0]
        if oldest.size == 0:
            return 2**63 - 1
        return oldest.max_timestamp if oldest.max_timestamp >= 0 else oldest.last_modified_ms()

    def _delete_oldest(self) -> int:
        gone = self.segments.pop(0)
        gone.delete()
        first = self.segments[0].base_offset
        if self.log_start_offset < first:
            self.log_start_offset = first
            self.epochs.truncate_from_start(first)
        return 1

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords: move the log start forward to ``offset`` (<= log end offset)."""
        with self.lock:
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(offset, self.log_start_offset, self.log_end_offset)
            if offset <= self.log_start_offset:
                return False
            self.log_start_offset = offset
            self.epochs.truncate_from_start(offset)
            self.delete_old_segments()
            return True

    # ---- flush and close ------------------------------------------------------------------

    def _request_flush(self):
        """A Future of the background flush, or None when flushed here and now (no flusher)."""
        if self.flusher is not None:
            return self.flusher.request(self)
        self.flush()
        return None

    def flush(self) -> int:
        """fdatasync every segment holding data past the recovery point; returns the new point.

        Runs without the log lock during the syncs, so appends go on meanwhile.
        """
        with self.lock:
            target = self.log_end_offset
            pending = [s for s in self.segments if s.next_offset > self.recovery_point]
            self.unflushed_messages = 0
        for segment in pending:
            try:
                segment.flush()
            except (OSError, ValueError):
                if segment in self.segments:  # a deleted segment needs no flush
                    raise
        with self.lock:
            self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))
            self.last_flush_ms = now_ms()
            return self.recovery_point

    def start_writeback(self, min_bytes: int) -> None:
        """Start writing the active segment's newest bytes to disk once ``min_bytes`` have piled up,
        so the OS never has a large backlog of dirty pages to write at once (which stalls writers)."""
        with self.lock:
            segment = self.segments[-1]
            start, end = segment.writeback_from, segment.size
            if end - start < min_bytes:
                return
            segment.writeback_from = end
        try:
            core.fileio.start_writeback(segment.fd, start, end - start)
        except (OSError, ValueError):
            pass  # a segment closed or deleted meanwhile; a failing disk is reported by the next flush

    def close(self) -> None:
        with self.lock:
            self.closed = True
            for segment in self.segments:
                segment.close()

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")
