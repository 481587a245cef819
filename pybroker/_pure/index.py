"""Pure twin of native/index.pyx: Kafka's sparse offset and time indexes.

A writable index keeps its entries in a bytearray and pwrites the changed ones to the file at
write_back / flush / trim / resize / close; a read-only index mmaps its file read-only.

See pybroker.contracts.index for the shared contract; the class docstrings give the formats.
"""
import io
import mmap
import operator
import os
import struct

from pybroker.errors import CorruptIndexError, IndexFullError

U32_MAX = 2**32 - 1
I64_MIN = -2**63
I64_MAX = 2**63 - 1
WARM_BYTES = 8192
# base + relative offset must fit int64, so base offsets stop 2**32-1 short of int64's top.
MAX_BASE_OFFSET = I64_MAX - U32_MAX

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


def _i64(value) -> int:
    """The int64 value of an integer argument (TypeError / OverflowError like Cython's conversion)."""
    value = operator.index(value)
    if not I64_MIN <= value <= I64_MAX:
        raise OverflowError(f"{value} does not fit in int64")
    return value


class _Index:
    """Shared memory handling: load or map, write back, resize, trim on close."""

    ENTRY_SIZE = 0
    KIND = "index"

    def __init__(self, path, base_offset, max_index_size=10 * 1024 * 1024, writable=True):
        es = self.ENTRY_SIZE
        path = os.fsdecode(os.fspath(path))
        base_offset = operator.index(base_offset)
        max_index_size = operator.index(max_index_size)
        writable = bool(writable)
        if not 0 <= base_offset <= MAX_BASE_OFFSET:
            raise ValueError(f"base_offset {base_offset} is outside [0, {MAX_BASE_OFFSET}]")
        if writable and max_index_size < es:
            raise ValueError(f"max_index_size {max_index_size} is smaller than one entry ({es} bytes)")
        self.path = path
        self.base_offset = base_offset
        self.writable = writable
        self._mm = None  # bytearray while writable, read-only mmap (None when empty) otherwise
        self._length = 0
        self._closed = True
        self._entries = 0
        self._max_entries = 0
        self._dirty = 0  # lowest slot changed since the last write-back; never above _entries
        self._warm = WARM_BYTES // es
        fd = os.open(path, (os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY) | os.O_CLOEXEC, 0o644)
        try:
            size = os.fstat(fd).st_size
            # A torn last entry (size not a whole number of entries) is reported by sanity_check.
            self._torn_size = size if size % es else -1
            entries = size // es
            if writable:
                # Preallocated as Kafka does (sparse: no blocks yet); the entries live in memory.
                length = max(max_index_size // es * es, entries * es)
                if length != size:
                    os.ftruncate(fd, length)
                self._load(fd, length, entries * es)
            else:
                self._map_file(fd, size)
            self._entries = self._dirty = entries
        finally:
            os.close(fd)
        self._closed = False

    # -- memory ------------------------------------------------------------------------------

    def _load(self, fd, length, nbytes):
        """A bytearray of length bytes holding the first nbytes (<= length) of fd."""
        buf = bytearray(length)
        pos = 0
        while pos < nbytes:
            chunk = os.pread(fd, nbytes - pos, pos)
            if not chunk:
                break
            buf[pos:pos + len(chunk)] = chunk
            pos += len(chunk)
        self._install(buf, length)

    def _map_file(self, fd, length):
        self._install(mmap.mmap(fd, length, access=mmap.ACCESS_READ) if length else None, length)

    def _install(self, mm, length):
        self._unmap()
        self._mm = mm
        self._length = length
        self._max_entries = length // self.ENTRY_SIZE

    def _unmap(self):
        if isinstance(self._mm, mmap.mmap):
            self._mm.close()
        self._mm = None

    def _write_back(self, sync):
        """pwrite slots [_dirty, entries) to the file, then fdatasync it if sync."""
        es = self.ENTRY_SIZE
        lo, hi = self._dirty, self._entries
        if lo >= hi and not sync:
            return
        # Marked clean up front: a truncation meanwhile lowers _dirty again and is not lost.
        self._dirty = hi
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                with memoryview(self._mm) as view:
                    pos, end = lo * es, hi * es
                    while pos < end:
                        pos += os.pwrite(fd, view[pos:end], pos)
                if sync:
                    os.fdatasync(fd)
            finally:
                os.close(fd)
        except BaseException:
            self._dirty = min(self._dirty, lo)
            raise

    def _check_open(self):
        if self._closed:
            raise ValueError(f"{self.KIND} {self.path} is closed")

    def _check_writable(self):
        self._check_open()
        if not self.writable:
            raise io.UnsupportedOperation(f"{self.KIND} {self.path} is read-only")

    def _check_resize(self, new_max_size, length):
        if length < self._entries * self.ENTRY_SIZE:
            raise ValueError(f"cannot resize {self.KIND} {self.path} to {new_max_size} bytes: "
                             f"it holds {self._entries} entries of {self.ENTRY_SIZE} bytes")

    # -- common API --------------------------------------------------------------------------

    @property
    def entries(self):
        return self._entries

    @property
    def max_entries(self):
        return self._max_entries

    def __len__(self):
        return self._entries

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"{type(self).__name__}({self.path!r}, base_offset={self.base_offset}, "
                f"entries={self._entries}, max_entries={self._max_entries})")

    def is_full(self):
        return self._entries >= self._max_entries

    def entry(self, n):
        n = operator.index(n)
        self._check_open()
        if not 0 <= n < self._entries:
            raise IndexError(f"entry {n} is outside [0, {self._entries}) of {self.KIND} {self.path}")
        return self._entry(n)

    def truncate_to(self, offset):
        """Drop every entry whose offset is >= offset."""
        offset = _i64(offset)
        self._check_writable()
        # First slot whose offset is >= offset: every slot from there on goes.
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) >> 1
            if self._offset_at(mid) < offset:
                lo = mid + 1
            else:
                hi = mid
        self._entries = lo
        self._dirty = min(self._dirty, lo)

    def truncate(self):
        self._check_writable()
        self._entries = self._dirty = 0
        self._torn_size = -1

    def write_back(self):
        self._check_open()
        if self.writable:
            self._write_back(False)

    def flush(self):
        self._check_open()
        if self.writable:
            self._write_back(True)

    def trim_to_valid_size(self):
        self.resize(self._entries * self.ENTRY_SIZE)

    def resize(self, new_max_size):
        new_max_size = operator.index(new_max_size)
        self._check_writable()
        es = self.ENTRY_SIZE
        length = max(new_max_size, 0) // es * es
        self._check_resize(new_max_size, length)
        self._write_back(False)
        # Checked again: other threads may have appended during the write-back.
        self._check_resize(new_max_size, length)
        if length == self._length:
            return
        buf = bytearray(length)
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, length)
        finally:
            os.close(fd)
        n = self._entries * es
        buf[:n] = self._mm[:n]
        self._install(buf, length)

    def sanity_check(self):
        self._check_open()
        if self._torn_size >= 0:
            raise CorruptIndexError(f"{self.KIND} {self.path} had {self._torn_size} bytes when opened, "
                                    f"not a multiple of {self.ENTRY_SIZE}")
        self._check_order()

    def close(self):
        if self._closed:
            return
        try:
            if self.writable:
                self.trim_to_valid_size()
        finally:
            self._unmap()
            self._closed = True

    def _search(self, key_at, target):
        """Slot of the largest key <= target, -1 if none; the warm tail is searched first."""
        n = self._entries
        if n == 0:
            return -1
        first_hot = max(0, n - 1 - self._warm)
        if key_at(first_hot) < target:
            lo, hi = first_hot, n - 1
        elif key_at(0) > target:
            return -1
        else:
            lo, hi = 0, first_hot
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            key = key_at(mid)
            if key > target:
                hi = mid - 1
            elif key < target:
                lo = mid
            else:
                return mid
        return lo


class OffsetIndex(_Index):
    """Sparse map from offset to .log file position: Kafka's ``.index`` file.

    Format: big-endian 8-byte entries, ``relative offset u32`` (offset - base_offset) then
    ``file position u32``; offsets strictly increase, positions never decrease. A writable index
    is preallocated to max_index_size (rounded down to whole entries) and trimmed to
    ``entries * 8`` bytes on close; reopening counts ``file size // 8`` entries. Writable: appends
    go to memory and reach the file at write_back / flush / trim / resize / close (a store into a
    file-backed page can stall for milliseconds behind the filesystem journal). Read-only: a file
    mapping. Crash policy: never checksummed; after an unclean shutdown the file (stale or zero
    padding counted as entries) is rebuilt from the log.
    """

    ENTRY_SIZE = 8
    KIND = "index"

    def _entry(self, n):
        rel, position = _OFFSET_ENTRY.unpack_from(self._mm, n * 8)
        return self.base_offset + rel, position

    def _offset_at(self, n):
        return self.base_offset + _U32.unpack_from(self._mm, n * 8)[0]

    @property
    def last_offset(self):
        self._check_open()
        return self._offset_at(self._entries - 1) if self._entries else self.base_offset

    def append(self, offset, position):
        offset = operator.index(offset)
        position = operator.index(position)
        self._check_writable()
        if self._entries >= self._max_entries:
            raise IndexFullError(f"attempt to append to a full {self.KIND} {self.path} ({self._entries} entries)")
        if self._entries and offset <= self.last_offset:
            raise CorruptIndexError(f"attempt to append offset {offset} to {self.KIND} {self.path} "
                                    f"at or below its last offset {self.last_offset}")
        if not 0 <= offset - self.base_offset <= U32_MAX:
            raise CorruptIndexError(f"offset {offset} is outside the range [{self.base_offset}, "
                                    f"{self.base_offset + U32_MAX}] of {self.KIND} {self.path}")
        if not 0 <= position <= U32_MAX:
            raise CorruptIndexError(f"position {position} of offset {offset} is outside "
                                    f"[0, {U32_MAX}] in {self.KIND} {self.path}")
        _OFFSET_ENTRY.pack_into(self._mm, self._entries * 8, offset - self.base_offset, position)
        self._entries += 1

    def lookup(self, target_offset):
        target_offset = _i64(target_offset)
        self._check_open()
        slot = self._search(self._offset_at, target_offset)
        return (self.base_offset, 0) if slot < 0 else self._entry(slot)

    def _check_order(self):
        for i in range(1, self._entries):
            (o0, p0), (o1, p1) = self._entry(i - 1), self._entry(i)
            if o1 <= o0:
                raise CorruptIndexError(f"{self.KIND} {self.path}: offset {o1} at slot {i} "
                                        f"is not above offset {o0} at slot {i - 1}")
            if p1 < p0:
                raise CorruptIndexError(f"{self.KIND} {self.path}: position {p1} at slot {i} "
                                        f"is below position {p0} at slot {i - 1}")


class TimeIndex(_Index):
    """Sparse map from timestamp to offset: Kafka's ``.timeindex`` file.

    Format: big-endian 12-byte entries, ``timestamp i64`` then ``relative offset u32``
    (offset - base_offset); timestamps strictly increase, offsets never decrease. An entry
    (T, O) says T is the largest timestamp seen up to offset O, so a record stamped above T
    lies at or after O.
    ``is_full`` keeps the last slot free for the entry a roll appends with skip_full_check (Kafka).
    Preallocated while writable, trimmed to ``entries * 12`` bytes on close; reopening counts
    ``file size // 12`` entries. Writable: appends go to memory and reach the file at write_back /
    flush / trim / resize / close (a store into a file-backed page can stall for milliseconds
    behind the filesystem journal). Read-only: a file mapping. Crash policy: never checksummed;
    rebuilt from the log after an unclean shutdown.
    """

    ENTRY_SIZE = 12
    KIND = "time index"

    def _entry(self, n):
        timestamp, rel = _TIME_ENTRY.unpack_from(self._mm, n * 12)
        return timestamp, self.base_offset + rel

    def _offset_at(self, n):
        return self.base_offset + _U32.unpack_from(self._mm, n * 12 + 8)[0]

    def _timestamp_at(self, n):
        return _I64.unpack_from(self._mm, n * 12)[0]

    def is_full(self):
        return self._entries >= self._max_entries - 1

    @property
    def last_entry(self):
        self._check_open()
        return self._entry(self._entries - 1) if self._entries else (-1, self.base_offset)

    def maybe_append(self, timestamp, offset, skip_full_check=False):
        timestamp = operator.index(timestamp)
        offset = operator.index(offset)
        self._check_writable()
        if not skip_full_check and self.is_full():
            raise IndexFullError(f"attempt to append to a full {self.KIND} {self.path} ({self._entries} entries)")
        last_timestamp, last_offset = self.last_entry
        if self._entries and offset < last_offset:
            raise CorruptIndexError(f"attempt to append offset {offset} to {self.KIND} {self.path} "
                                    f"below its last offset {last_offset}")
        if timestamp <= last_timestamp:
            return False
        if timestamp > I64_MAX:
            raise CorruptIndexError(f"timestamp {timestamp} of offset {offset} does not fit "
                                    f"in int64 in {self.KIND} {self.path}")
        if not 0 <= offset - self.base_offset <= U32_MAX:
            raise CorruptIndexError(f"offset {offset} is outside the range [{self.base_offset}, "
                                    f"{self.base_offset + U32_MAX}] of {self.KIND} {self.path}")
        if self._entries >= self._max_entries:
            raise IndexFullError(f"attempt to append to a full {self.KIND} {self.path} ({self._entries} entries)")
        _TIME_ENTRY.pack_into(self._mm, self._entries * 12, timestamp, offset - self.base_offset)
        self._entries += 1
        return True

    def lookup(self, target_timestamp):
        target_timestamp = _i64(target_timestamp)
        self._check_open()
        slot = self._search(self._timestamp_at, target_timestamp)
        return (-1, self.base_offset) if slot < 0 else self._entry(slot)

    def _check_order(self):
        for i in range(1, self._entries):
            (t0, o0), (t1, o1) = self._entry(i - 1), self._entry(i)
            if t1 <= t0:
                raise CorruptIndexError(f"{self.KIND} {self.path}: timestamp {t1} at slot {i} "
                                        f"is not above timestamp {t0} at slot {i - 1}")
            if o1 < o0:
                raise CorruptIndexError(f"{self.KIND} {self.path}: offset {o1} at slot {i} "
                                        f"is below offset {o0} at slot {i - 1}")
