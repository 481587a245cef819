"""One segment of a log: ``<base>.log`` plus its sparse ``.index`` and ``.timeindex`` (and a
``.txnindex`` of aborted transactions once one ended in it: pybroker/log/txn_index.py).

File names and formats are Kafka's: the ``.log`` holds record batches exactly as appended;
the offset index maps a batch's last offset to its file position, one entry per
``index.interval.bytes`` of log; the time index maps the largest timestamp so far to the
offset it belongs to. Indexes are never checksummed: after an unclean shutdown they are
rebuilt from the ``.log``, which is validated batch by batch.
"""
import io
import logging
import mmap
import os
import time

from pybroker import core
from pybroker.errors import CorruptIndexError
from pybroker.log.config import LogConfig
from pybroker.log.txn_index import TxnIndex

log = logging.getLogger(__name__)

HEADER_SIZE = 61
MAX_RELATIVE_OFFSET = 2**31 - 1  # relative offsets must fit Kafka's int32


def file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


class LogSegment:
    """A ``.log`` file and its two indexes. Not thread-safe: the owning Log serialises access."""

    def __init__(self, directory: str, base_offset: int, config: LogConfig, active: bool, suffix: str = ""):
        """``suffix``: the log cleaner writes a new segment as ``<base>.log.cleaned`` (and its indexes)."""
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.suffix = suffix
        self._set_paths(suffix)
        self.gaps = bool(suffix)  # rewritten by the log cleaner: offsets may skip (recovery must allow it)
        fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        # Fetch slices keep this object (and so the fd) alive after a segment is deleted.
        self.file = io.FileIO(fd, "r+", closefd=True)
        self.size = os.fstat(fd).st_size
        self.writeback_from = self.size  # data below was there before: the OS writes it back
        self.active = active
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.bytes_since_index_entry = 0
        self.created_ms = int(time.time() * 1000)
        self.first_timestamp = -1  # the first batch's max timestamp: what segment.ms counts from
        self.segment_bytes = config.segment_bytes
        self.segment_ms = config.segment_ms
        self.indexes_full = False
        self.offset_index = None
        self.time_index = None
        self.index_problem = None  # why the indexes must be rebuilt, if they must
        self.txn_index = TxnIndex(self.txnindex_path)
        self.txn_index_stale = False  # recovered: the producer state replay rebuilds the txn index
        if not (os.path.exists(self.index_path) and os.path.exists(self.timeindex_path)):
            self.index_problem = "index file missing"
        try:
            self._open_indexes(writable=active or self.index_problem is not None)
        except (CorruptIndexError, ValueError, OSError) as exc:
            self.index_problem = f"index unreadable: {exc}"
            self._close_indexes()
            for path in (self.index_path, self.timeindex_path):
                if os.path.exists(path):
                    os.remove(path)
            self._open_indexes(writable=True)

    def _set_paths(self, suffix: str) -> None:
        stem = os.path.join(self.directory, file_stem(self.base_offset))
        self.log_path = stem + ".log" + suffix
        self.index_path = stem + ".index" + suffix
        self.timeindex_path = stem + ".timeindex" + suffix
        self.txnindex_path = stem + ".txnindex" + suffix
        self.suffix = suffix

    def rename_suffix(self, suffix: str) -> None:
        """Rename the files (``.cleaned`` -> ``.swap`` -> none, the cleaner's swap); open files stay valid."""
        old = (self.log_path, self.index_path, self.timeindex_path)
        self._set_paths(suffix)
        for src, dst in zip(old, (self.log_path, self.index_path, self.timeindex_path)):
            os.replace(src, dst)
        self.txn_index.rename(self.txnindex_path)

    @property
    def fd(self) -> int:
        return self.file.fileno()

    # ---- opening, loading, recovery -------------------------------------------------------

    def _open_indexes(self, writable: bool) -> None:
        idx = core.index
        size = self.config.segment_index_bytes
        self.offset_index = idx.OffsetIndex(self.index_path, self.base_offset, size, writable)
        self.time_index = idx.TimeIndex(self.timeindex_path, self.base_offset, size, writable)
        self._check_full()

    def _close_indexes(self) -> None:
        for index in (self.offset_index, self.time_index):
            if index is not None:
                index.close()
        self.offset_index = self.time_index = None

    def load(self) -> None:
        """Open after a clean shutdown: trust the indexes unless they fail their sanity check."""
        try:
            if self.index_problem:
                raise CorruptIndexError(self.index_problem)
            self.offset_index.sanity_check()
            self.time_index.sanity_check()
            last_offset, last_position = self._last_offset_entry()
            if last_position >= self.size and self.offset_index.entries:
                raise CorruptIndexError(f"index points at {last_position}, log has {self.size} bytes")
        except CorruptIndexError as exc:
            log.warning("rebuilding indexes of %s: %s", self.log_path, exc)
            self.recover()
            return
        if not self._load_tail():
            log.warning("segment %s has an invalid tail after a clean shutdown; recovering", self.log_path)
            self.recover()

    def _last_offset_entry(self) -> tuple[int, int]:
        n = self.offset_index.entries
        return self.offset_index.entry(n - 1) if n else (self.base_offset, 0)

    def _load_tail(self) -> bool:
        """Learn next offset and max timestamp by scanning from the last index entry; False if it is invalid."""
        _, start = self._last_offset_entry()
        ts, ts_offset = self.time_index.last_entry
        self.max_timestamp, self.offset_of_max_timestamp = (ts, ts_offset) if self.time_index.entries else (-1, -1)
        if self.size == 0:
            self.next_offset = self.base_offset
            self.bytes_since_index_entry = 0
            self.first_timestamp = -1
            return True
        self.first_timestamp = self.read_header(0).max_timestamp
        with mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) as view:
            result = core.batch.scan(view, start=start, index_interval=self.config.index_interval_bytes)
        if result.error is not None or result.valid_end != self.size:
            return False
        self.next_offset = result.next_offset if result.batch_count else self.base_offset
        if result.max_timestamp > self.max_timestamp:
            self.max_timestamp = result.max_timestamp
            self.offset_of_max_timestamp = result.offset_of_max_timestamp
        self.bytes_since_index_entry = self.size - start
        return True

    def recover(self) -> int:
        """Re-validate every batch, cut the log at the first bad one and rebuild both indexes.

        Offsets may skip where ``gaps`` (the log cleaner rewrote the segment). Returns the number
        of bytes truncated (0 when the whole segment was valid).
        """
        self._close_indexes()
        for path in (self.index_path, self.timeindex_path):
            if os.path.exists(path):
                os.remove(path)
        self._open_indexes(writable=True)
        self.index_problem = None
        self.txn_index.reset()
        self.txn_index_stale = True
        self.size = os.fstat(self.fd).st_size
        if self.size:
            with mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) as view:
                result = core.batch.scan(view, index_interval=self.config.index_interval_bytes,
                                         expected_offset=self.base_offset, gaps=self.gaps)
        else:
            result = None
        truncated = 0
        if result is None or result.batch_count == 0:
            valid_end, self.next_offset = 0, self.base_offset
            self.max_timestamp = self.offset_of_max_timestamp = self.first_timestamp = -1
        else:
            valid_end, self.next_offset = result.valid_end, result.next_offset
            self.first_timestamp = self.read_header(0).max_timestamp
            self.max_timestamp = result.max_timestamp
            self.offset_of_max_timestamp = result.offset_of_max_timestamp
            for offset, position in result.offset_entries:
                self.offset_index.append(offset, position)
            for timestamp, offset in result.time_entries:
                self.time_index.maybe_append(timestamp, offset)
        if result is not None and result.error is not None:
            log.warning("truncating %s at byte %d of %d: %s", self.log_path, valid_end, self.size, result.error)
        if valid_end < self.size:
            truncated = self.size - valid_end
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        _, last_position = self._last_offset_entry()
        self.bytes_since_index_entry = self.size - last_position if self.offset_index.entries else self.size
        self._check_full()
        if not self.active:
            self.seal()
        return truncated

    # ---- append ---------------------------------------------------------------------------

    def can_take(self, nbytes: int, last_offset: int, timestamp: int) -> bool:
        """False when appending ``nbytes`` ending at ``last_offset`` requires a roll first."""
        if self.size == 0:
            return last_offset - self.base_offset <= MAX_RELATIVE_OFFSET
        # As Kafka: time since the first batch's timestamp, else wall time since creation.
        first = self.first_timestamp
        waited = timestamp - first if first >= 0 else int(time.time() * 1000) - self.created_ms
        return (self.size + nbytes <= self.segment_bytes and waited < self.segment_ms
                and not self.indexes_full and last_offset - self.base_offset <= MAX_RELATIVE_OFFSET)

    def _check_full(self) -> None:
        self.indexes_full = self.offset_index.is_full() or self.time_index.is_full()

    def append(self, views, first_offset: int, leader_epoch: int, log_append_time: int) -> tuple:
        """Stamp and write validated batches at the end, then index them; returns the writer's result.

        Data goes first so an index entry never points past the end of the ``.log``.
        """
        result = core.writer.write_batches(
            self.fd, self.size, views, first_offset, leader_epoch, log_append_time,
            self.config.index_interval_bytes, self.bytes_since_index_entry,
            self.max_timestamp, self.offset_of_max_timestamp)
        next_offset, _, nbytes, first_ts, max_ts, offset_of_max, since, entries = result
        if self.size == 0:
            self.first_timestamp = first_ts
        if entries:
            for offset, position, ts, ts_offset in entries:
                self.offset_index.append(offset, position)
                self.time_index.maybe_append(ts, ts_offset)
            self._check_full()
        self.size += nbytes
        self.next_offset = next_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, offset_of_max
        self.bytes_since_index_entry = since
        return result

    # ---- read -----------------------------------------------------------------------------

    def read_header(self, position: int):
        data = os.pread(self.fd, HEADER_SIZE, position)
        return core.batch.parse_header(data, 0)

    def translate_offset(self, offset: int):
        """(position, header) of the first batch whose last offset is >= ``offset``, or None."""
        _, position = self.offset_index.lookup(offset)
        while position < self.size:
            header = self.read_header(position)
            if header.base_offset + header.last_offset_delta >= offset:
                return position, header
            position += header.batch_length + 12
        return None

    # ---- truncation, flush, lifecycle -----------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        removed = self.size - position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(header.base_offset)
        self._check_full()
        os.ftruncate(self.fd, position)
        self.size = position
        self.writeback_from = min(self.writeback_from, position)
        if not self._load_tail():
            raise CorruptIndexError(f"{self.log_path}: invalid data after truncation to {offset}")
        return removed

    def flush(self) -> None:
        # The .log and the txn index must be durable: offset and time indexes are re-checked or rebuilt at start.
        core.fileio.fdatasync(self.fd)
        self.txn_index.flush()

    def seal(self) -> None:
        """Called when the segment stops being the active one: final time entry, trimmed indexes."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.active = False

    def reactivate(self) -> None:
        """Make a sealed segment the active one again (after a truncation removed later segments)."""
        self._close_indexes()
        self._open_indexes(writable=True)
        self.active = True

    def last_modified_ms(self) -> int:
        return int(os.fstat(self.fd).st_mtime * 1000)

    def close(self) -> None:
        self._close_indexes()
        self.txn_index.close()
        self.file.close()

    def delete(self) -> None:
        """Remove the files; the descriptor closes once no fetch slice refers to this segment."""
        self._close_indexes()
        self.txn_index.delete()
        for path in (self.log_path, self.index_path, self.timeindex_path):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size}, next_offset={self.next_offset})"
