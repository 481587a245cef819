# cython: language_level=3
"""Kafka's sparse segment indexes (.index, .timeindex) over mmap(2)'d memory.

A writable index keeps its entries in an anonymous mapping and pwrites the changed ones to the
file at write_back / flush / trim / resize / close: a store into a file-backed page can stall for
milliseconds behind the filesystem journal. A read-only index maps its file read-only.

Contract: pybroker.contracts.index; pure twin: pybroker/_pure/index.py (same results, same
errors and messages). Every read is of a slot below ``entries`` and ``entries * entry_size``
never exceeds the mapped length; arguments are range-checked before memory is touched.
"""
import io
import os

from cpython.long cimport PyLong_CheckExact
from cpython.number cimport PyNumber_Index
from libc.errno cimport EINTR, errno
from libc.stdint cimport int64_t, uint32_t, uintptr_t
from libc.string cimport memcpy
from posix.fcntl cimport O_CLOEXEC, O_RDWR, O_WRONLY, open as c_open
from posix.types cimport off_t
from posix.unistd cimport close as c_close, fdatasync, ftruncate, pread, pwrite
from posix.mman cimport MAP_ANONYMOUS, MAP_FAILED, MAP_PRIVATE, MAP_SHARED, PROT_READ, PROT_WRITE, mmap, munmap

from pybroker.errors import CorruptIndexError, IndexFullError

cdef extern from *:
    """
    static inline uint32_t pyb_idx_get32(const unsigned char *p) {
        return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
    }
    static inline int64_t pyb_idx_get64(const unsigned char *p) {
        return (int64_t)(((uint64_t)pyb_idx_get32(p) << 32) | (uint64_t)pyb_idx_get32(p + 4));
    }
    static inline void pyb_idx_put32(unsigned char *p, uint32_t v) {
        p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
        p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
    }
    static inline void pyb_idx_put64(unsigned char *p, int64_t v) {
        pyb_idx_put32(p, (uint32_t)((uint64_t)v >> 32)); pyb_idx_put32(p + 4, (uint32_t)(uint64_t)v);
    }
    #define PYB_IDX_U32_MAX 4294967295LL
    #define PYB_IDX_MAX_BASE_OFFSET (INT64_MAX - PYB_IDX_U32_MAX)
    """
    # base + relative offset must fit int64, so base offsets stop 2**32-1 short of int64's top.
    int64_t U32_MAX "PYB_IDX_U32_MAX"
    int64_t MAX_BASE_OFFSET "PYB_IDX_MAX_BASE_OFFSET"
    uint32_t get32 "pyb_idx_get32"(const unsigned char *p) noexcept nogil
    int64_t get64 "pyb_idx_get64"(const unsigned char *p) noexcept nogil
    void put32 "pyb_idx_put32"(unsigned char *p, uint32_t v) noexcept nogil
    void put64 "pyb_idx_put64"(unsigned char *p, int64_t v) noexcept nogil

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object v, int *overflow) except? -1

cdef enum:
    WARM_BYTES = 8192


cdef inline int to_i64(object v, int64_t *out) except -2:
    """Store int v in out; return 0 if it fits int64, 1 if above, -1 if below."""
    cdef int overflow = 0
    out[0] = PyLong_AsLongLongAndOverflow(v, &overflow)
    return overflow


cdef inline int64_t arg_i64(object v) except? -1:
    """An int64 argument; TypeError / OverflowError exactly as the pure twin (Cython's own cast takes floats)."""
    cdef int64_t out
    if not PyLong_CheckExact(v):
        v = PyNumber_Index(v)
    if to_i64(v, &out) != 0:
        raise OverflowError(f"{v} does not fit in int64")
    return out


cdef int pwrite_all(int fd, const unsigned char *p, size_t n, off_t pos) noexcept nogil:
    """Write all n bytes at pos (short writes and EINTR retried); 0 or an errno."""
    cdef ssize_t w
    while n:
        w = pwrite(fd, p, n, pos)
        if w < 0:
            if errno == EINTR:
                continue
            return errno
        p += w
        n -= <size_t>w
        pos += w
    return 0


cdef int pread_all(int fd, unsigned char *p, size_t n, off_t pos) noexcept nogil:
    """Read up to n bytes at pos (stops at end of file, EINTR retried); 0 or an errno."""
    cdef ssize_t r
    while n:
        r = pread(fd, p, n, pos)
        if r < 0:
            if errno == EINTR:
                continue
            return errno
        if r == 0:
            return 0
        p += r
        n -= <size_t>r
        pos += r
    return 0


cdef Py_ssize_t search_u32(const unsigned char *b, Py_ssize_t es, Py_ssize_t n, Py_ssize_t warm,
                           int64_t target) noexcept nogil:
    """Slot of the largest big-endian u32 key (at each entry's start) <= target, -1 if none; warm tail first."""
    cdef Py_ssize_t lo, hi, mid, first_hot
    cdef int64_t key
    if n == 0:
        return -1
    first_hot = n - 1 - warm if n - 1 > warm else 0
    if <int64_t>get32(b + first_hot * es) < target:
        lo = first_hot
        hi = n - 1
    elif <int64_t>get32(b) > target:
        return -1
    else:
        lo = 0
        hi = first_hot
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        key = get32(b + mid * es)
        if key > target:
            hi = mid - 1
        elif key < target:
            lo = mid
        else:
            return mid
    return lo


cdef Py_ssize_t search_i64(const unsigned char *b, Py_ssize_t es, Py_ssize_t n, Py_ssize_t warm,
                           int64_t target) noexcept nogil:
    """Slot of the largest big-endian i64 key (at each entry's start) <= target, -1 if none; warm tail first."""
    cdef Py_ssize_t lo, hi, mid, first_hot
    cdef int64_t key
    if n == 0:
        return -1
    first_hot = n - 1 - warm if n - 1 > warm else 0
    if get64(b + first_hot * es) < target:
        lo = first_hot
        hi = n - 1
    elif get64(b) > target:
        return -1
    else:
        lo = 0
        hi = first_hot
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        key = get64(b + mid * es)
        if key > target:
            hi = mid - 1
        elif key < target:
            lo = mid
        else:
            return mid
    return lo


cdef Py_ssize_t lower_bound_u32(const unsigned char *b, Py_ssize_t es, Py_ssize_t field, Py_ssize_t n,
                                int64_t target) noexcept nogil:
    """First slot whose u32 at byte `field` of the entry is >= target (n if none)."""
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if <int64_t>get32(b + mid * es + field) < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef class _Index:
    """Shared memory handling: load or map, write back, resize, trim on close."""

    cdef unsigned char *_base
    cdef size_t _length
    cdef readonly str path
    cdef bytes _bpath
    cdef readonly int64_t base_offset
    cdef readonly bint writable
    cdef readonly Py_ssize_t entries
    cdef readonly Py_ssize_t max_entries
    cdef Py_ssize_t _es
    cdef Py_ssize_t _warm
    cdef Py_ssize_t _offset_field
    cdef Py_ssize_t _dirty  # lowest slot changed since the last write-back; never above entries
    cdef int _pins  # write-backs reading _base without the GIL
    cdef list _retired  # (address, length) of mappings dropped while pinned, unmapped at unpin
    cdef int64_t _torn_size
    cdef bint _closed
    cdef str _kind

    def __cinit__(self):
        self._base = NULL
        self._length = 0
        self._closed = True
        self._torn_size = -1
        self._dirty = 0
        self._pins = 0
        self._retired = []

    def __dealloc__(self):
        # No write-back can be running: it holds a reference to self.
        if self._base != NULL:
            munmap(self._base, self._length)
            self._base = NULL
        if self._retired:
            self._release_retired()

    cdef int _open(self, path, base_offset, max_index_size, writable, Py_ssize_t es, Py_ssize_t offset_field,
                   str kind) except -1:
        cdef Py_ssize_t entries
        path = os.fsdecode(os.fspath(path))
        base_offset = PyNumber_Index(base_offset)
        max_index_size = PyNumber_Index(max_index_size)
        writable = bool(writable)
        if not 0 <= base_offset <= MAX_BASE_OFFSET:
            raise ValueError(f"base_offset {base_offset} is outside [0, {MAX_BASE_OFFSET}]")
        if writable and max_index_size < es:
            raise ValueError(f"max_index_size {max_index_size} is smaller than one entry ({es} bytes)")
        self._unmap()
        self._closed = True
        self.path = path
        self._bpath = os.fsencode(path)
        self.base_offset = base_offset
        self.writable = writable
        self._es = es
        self._offset_field = offset_field
        self._kind = kind
        self._warm = WARM_BYTES // es
        self.entries = 0
        self.max_entries = 0
        self._dirty = 0
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
                self._load(fd, length, <size_t>entries * <size_t>es)
            else:
                self._map_file(fd, size)
            self.entries = entries
            self._dirty = entries
        finally:
            os.close(fd)
        self._closed = False
        return 0

    cdef unsigned char *_alloc(self, size_t length) except? NULL:
        """Zeroed anonymous memory of length bytes; NULL for 0."""
        cdef void *p
        if length == 0:
            return NULL
        p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if p == MAP_FAILED:
            err = errno
            raise OSError(err, os.strerror(err), self.path)
        return <unsigned char *>p

    cdef int _load(self, int fd, size_t length, size_t nbytes) except -1:
        """Anonymous memory of length bytes holding the first nbytes (<= length) of fd."""
        cdef unsigned char *p = self._alloc(length)
        cdef int err = 0
        if nbytes:
            # p is not shared yet, so the read may run without the GIL.
            with nogil:
                err = pread_all(fd, p, nbytes, 0)
            if err:
                munmap(p, length)
                raise OSError(err, os.strerror(err), self.path)
        self._install(p, length)
        return 0

    cdef int _map_file(self, int fd, size_t length) except -1:
        """Map length bytes of fd read-only."""
        cdef void *p = NULL
        if length:
            p = mmap(NULL, length, PROT_READ, MAP_SHARED, fd, 0)
            if p == MAP_FAILED:
                err = errno
                raise OSError(err, os.strerror(err), self.path)
        self._install(<unsigned char *>p, length)
        return 0

    cdef void _install(self, unsigned char *p, size_t length) noexcept:
        """Swap in new memory; with the GIL held the swap looks atomic to other threads."""
        self._unmap()
        self._base = p
        self._length = length
        self.max_entries = <Py_ssize_t>(length // <size_t>self._es)

    cdef void _unmap(self) noexcept:
        if self._base != NULL:
            if self._pins:
                # A write-back is still reading it without the GIL: the last one unmaps it.
                self._retired.append((<uintptr_t>self._base, self._length))
            else:
                munmap(self._base, self._length)
            self._base = NULL
            self._length = 0

    cdef void _release_retired(self) noexcept:
        for addr, length in self._retired:
            munmap(<void *><uintptr_t>addr, <size_t>length)
        self._retired = []

    cdef int _write_back(self, bint sync) except -1:
        """pwrite slots [_dirty, entries) to the file, then fdatasync it if sync; both without the GIL."""
        cdef Py_ssize_t lo = self._dirty, hi = self.entries
        cdef const unsigned char *src = NULL
        cdef size_t nbytes = 0
        cdef off_t pos = 0
        cdef const char *cpath = self._bpath
        cdef int fd, err = 0
        if lo >= hi and not sync:
            return 0
        if lo < hi:
            src = self._base + lo * self._es
            nbytes = <size_t>(hi - lo) * <size_t>self._es
            pos = <off_t>lo * self._es
        # Marked clean up front: a truncation meanwhile lowers _dirty again and is not lost.
        self._dirty = hi
        self._pins += 1
        with nogil:
            fd = c_open(cpath, O_WRONLY | O_CLOEXEC)
            if fd < 0:
                err = errno
            else:
                if nbytes:
                    err = pwrite_all(fd, src, nbytes, pos)
                if err == 0 and sync and fdatasync(fd) != 0:
                    err = errno
                c_close(fd)
        self._pins -= 1
        if self._pins == 0 and self._retired:
            self._release_retired()
        if err:
            if self._dirty > lo:
                self._dirty = lo
            raise OSError(err, os.strerror(err), self.path)
        return 0

    cdef inline int _check_open(self) except -1:
        if self._closed:
            raise ValueError(f"{self._kind} {self.path} is closed")
        return 0

    cdef inline int _check_writable(self) except -1:
        self._check_open()
        if not self.writable:
            raise io.UnsupportedOperation(f"{self._kind} {self.path} is read-only")
        return 0

    cdef int _check_order(self) except -1:
        return 0

    cdef int _check_resize(self, new_max_size, Py_ssize_t rounded) except -1:
        if rounded < self.entries * self._es:
            raise ValueError(f"cannot resize {self._kind} {self.path} to {new_max_size} bytes: "
                             f"it holds {self.entries} entries of {self._es} bytes")
        return 0

    def __len__(self):
        return self.entries

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"{type(self).__name__}({self.path!r}, base_offset={self.base_offset}, "
                f"entries={self.entries}, max_entries={self.max_entries})")

    def is_full(self):
        return self.entries >= self.max_entries

    def truncate_to(self, offset):
        """Drop every entry whose offset is >= offset."""
        cdef int64_t rel, target = arg_i64(offset)
        self._check_writable()
        # Compare relative offsets: below base drops all, beyond base + 2**32-1 drops none.
        if target <= self.base_offset:
            rel = 0
        else:
            rel = target - self.base_offset
            if rel > U32_MAX:
                rel = <int64_t>U32_MAX + 1
        self.entries = lower_bound_u32(self._base, self._es, self._offset_field, self.entries, rel)
        if self._dirty > self.entries:
            self._dirty = self.entries

    def truncate(self):
        """Drop all entries."""
        self._check_writable()
        self.entries = 0
        self._dirty = 0
        self._torn_size = -1

    def write_back(self):
        """pwrite the entries changed since the last write-back to the file (no fsync)."""
        self._check_open()
        if self.writable:
            self._write_back(False)

    def flush(self):
        """Write back, then fdatasync the file (no-op when read-only)."""
        self._check_open()
        if self.writable:
            self._write_back(True)

    def trim_to_valid_size(self):
        """Write back, shrink the file and memory to entries * entry_size."""
        self.resize(self.entries * self._es)

    def resize(self, new_max_size):
        """Write back, then re-preallocate file and memory to new_max_size rounded down to whole entries."""
        cdef int fd, rc
        cdef off_t flen
        cdef size_t length
        cdef unsigned char *p
        new_max_size = PyNumber_Index(new_max_size)
        self._check_writable()
        rounded = max(new_max_size, 0) // self._es * self._es
        flen = rounded
        self._check_resize(new_max_size, flen)
        self._write_back(False)
        # Checked again: appends from other threads may have run while the write-back had no GIL.
        self._check_resize(new_max_size, flen)
        length = <size_t>flen
        if length == self._length:
            return
        p = self._alloc(length)
        # From here on the GIL is held: no append can land between the copy and the swap.
        fd = c_open(self._bpath, O_RDWR | O_CLOEXEC)
        if fd < 0:
            err = errno
            if p != NULL:
                munmap(p, length)
            raise OSError(err, os.strerror(err), self.path)
        rc = ftruncate(fd, flen)
        err = errno
        c_close(fd)
        if rc != 0:
            if p != NULL:
                munmap(p, length)
            raise OSError(err, os.strerror(err), self.path)
        if self.entries:
            memcpy(p, self._base, <size_t>self.entries * <size_t>self._es)
        self._install(p, length)

    def sanity_check(self):
        """CorruptIndexError if the file was torn (size not whole entries) or entries are out of order."""
        self._check_open()
        if self._torn_size >= 0:
            raise CorruptIndexError(f"{self._kind} {self.path} had {self._torn_size} bytes when opened, "
                                    f"not a multiple of {self._es}")
        self._check_order()

    def close(self):
        """Write back and trim a writable index, unmap it; idempotent."""
        if self._closed:
            return
        try:
            if self.writable:
                self.trim_to_valid_size()
        finally:
            self._unmap()
            self._closed = True


cdef class OffsetIndex(_Index):
    """Sparse map from offset to .log file position: Kafka's ``.index`` file.

    Format: big-endian 8-byte entries, ``relative offset u32`` (offset - base_offset) then
    ``file position u32``; offsets strictly increase, positions never decrease. A writable index
    is preallocated to max_index_size (rounded down to whole entries) and trimmed to
    ``entries * 8`` bytes on close; reopening counts ``file size // 8`` entries. Writable: appends
    go to anonymous memory and reach the file at write_back / flush / trim / resize / close (a
    store into a file-backed page can stall for milliseconds behind the filesystem journal).
    Read-only: a file mapping. Crash policy: never checksummed; after an unclean shutdown the
    file (stale or zero padding counted as entries) is rebuilt from the log.
    """

    def __init__(self, path, base_offset, max_index_size=10 * 1024 * 1024, writable=True):
        self._open(path, base_offset, max_index_size, writable, 8, 0, "index")

    @property
    def last_offset(self):
        self._check_open()
        if self.entries == 0:
            return self.base_offset
        return self.base_offset + get32(self._base + (self.entries - 1) * 8)

    def append(self, offset, position):
        """Add (offset, position); offsets strictly increase, both fit u32 (relative / absolute)."""
        cdef int64_t off, pos, last
        cdef int off_ov, pos_ov
        offset = PyNumber_Index(offset)
        position = PyNumber_Index(position)
        self._check_writable()
        off_ov = to_i64(offset, &off)
        pos_ov = to_i64(position, &pos)
        if self.entries >= self.max_entries:
            raise IndexFullError(f"attempt to append to a full {self._kind} {self.path} ({self.entries} entries)")
        if self.entries:
            last = self.base_offset + get32(self._base + (self.entries - 1) * 8)
            if off_ov < 0 or (off_ov == 0 and off <= last):
                raise CorruptIndexError(f"attempt to append offset {offset} to {self._kind} {self.path} "
                                        f"at or below its last offset {last}")
        if off_ov != 0 or off < self.base_offset or off - self.base_offset > U32_MAX:
            raise CorruptIndexError(f"offset {offset} is outside the range [{self.base_offset}, "
                                    f"{self.base_offset + U32_MAX}] of {self._kind} {self.path}")
        if pos_ov != 0 or pos < 0 or pos > U32_MAX:
            raise CorruptIndexError(f"position {position} of offset {offset} is outside "
                                    f"[0, {U32_MAX}] in {self._kind} {self.path}")
        cdef unsigned char *p = self._base + self.entries * 8
        put32(p, <uint32_t>(off - self.base_offset))
        put32(p + 4, <uint32_t>pos)
        self.entries += 1

    def lookup(self, target_offset):
        """(offset, position) of the largest entry with offset <= target; (base_offset, 0) if none."""
        cdef Py_ssize_t slot
        cdef int64_t rel, target = arg_i64(target_offset)
        cdef const unsigned char *p
        if self._closed:
            self._check_open()
        # Every key is >= base_offset; past base + 2**32-1 every key is below the target.
        if target < self.base_offset:
            return (self.base_offset, 0)
        rel = target - self.base_offset
        if rel > U32_MAX:
            rel = <int64_t>U32_MAX + 1
        slot = search_u32(self._base, 8, self.entries, self._warm, rel)
        if slot < 0:
            return (self.base_offset, 0)
        p = self._base + slot * 8
        return (self.base_offset + get32(p), get32(p + 4))

    def entry(self, n):
        """(offset, position) of entry n; IndexError outside [0, entries)."""
        n = PyNumber_Index(n)
        self._check_open()
        if not 0 <= n < self.entries:
            raise IndexError(f"entry {n} is outside [0, {self.entries}) of {self._kind} {self.path}")
        cdef const unsigned char *p = self._base + <Py_ssize_t>n * 8
        return (self.base_offset + get32(p), get32(p + 4))

    cdef int _check_order(self) except -1:
        # Holds the GIL: a concurrent resize could otherwise unmap the entries mid-scan.
        cdef Py_ssize_t i
        cdef const unsigned char *b = self._base
        cdef uint32_t o0, o1, p0, p1
        for i in range(1, self.entries):
            o0 = get32(b + (i - 1) * 8)
            o1 = get32(b + i * 8)
            p0 = get32(b + (i - 1) * 8 + 4)
            p1 = get32(b + i * 8 + 4)
            if o1 <= o0:
                raise CorruptIndexError(f"{self._kind} {self.path}: offset {self.base_offset + o1} at slot {i} "
                                        f"is not above offset {self.base_offset + o0} at slot {i - 1}")
            if p1 < p0:
                raise CorruptIndexError(f"{self._kind} {self.path}: position {p1} at slot {i} "
                                        f"is below position {p0} at slot {i - 1}")
        return 0


cdef class TimeIndex(_Index):
    """Sparse map from timestamp to offset: Kafka's ``.timeindex`` file.

    Format: big-endian 12-byte entries, ``timestamp i64`` then ``relative offset u32``
    (offset - base_offset); timestamps strictly increase, offsets never decrease. An entry
    (T, O) says T is the largest timestamp seen up to offset O, so a record stamped above T
    lies at or after O.
    ``is_full`` keeps the last slot free for the entry a roll appends with skip_full_check (Kafka).
    Preallocated while writable, trimmed to ``entries * 12`` bytes on close; reopening counts
    ``file size // 12`` entries. Writable: appends go to anonymous memory and reach the file at
    write_back / flush / trim / resize / close (a store into a file-backed page can stall for
    milliseconds behind the filesystem journal). Read-only: a file mapping. Crash policy: never
    checksummed; rebuilt from the log after an unclean shutdown.
    """

    def __init__(self, path, base_offset, max_index_size=10 * 1024 * 1024, writable=True):
        self._open(path, base_offset, max_index_size, writable, 12, 8, "time index")

    def is_full(self):
        return self.entries >= self.max_entries - 1

    @property
    def last_entry(self):
        self._check_open()
        if self.entries == 0:
            return (-1, self.base_offset)
        cdef const unsigned char *p = self._base + (self.entries - 1) * 12
        return (get64(p), self.base_offset + get32(p + 8))

    def maybe_append(self, timestamp, offset, bint skip_full_check=False):
        """Append when timestamp > last timestamp (True), else False; offset may not go backwards."""
        cdef int64_t ts, off, last_ts = -1, last_off = self.base_offset
        cdef int ts_ov, off_ov
        cdef unsigned char *p
        timestamp = PyNumber_Index(timestamp)
        offset = PyNumber_Index(offset)
        self._check_writable()
        ts_ov = to_i64(timestamp, &ts)
        off_ov = to_i64(offset, &off)
        if not skip_full_check and self.entries >= self.max_entries - 1:
            raise IndexFullError(f"attempt to append to a full {self._kind} {self.path} ({self.entries} entries)")
        if self.entries:
            p = self._base + (self.entries - 1) * 12
            last_ts = get64(p)
            last_off = self.base_offset + get32(p + 8)
            if off_ov < 0 or (off_ov == 0 and off < last_off):
                raise CorruptIndexError(f"attempt to append offset {offset} to {self._kind} {self.path} "
                                        f"below its last offset {last_off}")
        if ts_ov < 0 or (ts_ov == 0 and ts <= last_ts):
            return False
        if ts_ov > 0:
            raise CorruptIndexError(f"timestamp {timestamp} of offset {offset} does not fit "
                                    f"in int64 in {self._kind} {self.path}")
        if off_ov != 0 or off < self.base_offset or off - self.base_offset > U32_MAX:
            raise CorruptIndexError(f"offset {offset} is outside the range [{self.base_offset}, "
                                    f"{self.base_offset + U32_MAX}] of {self._kind} {self.path}")
        if self.entries >= self.max_entries:
            raise IndexFullError(f"attempt to append to a full {self._kind} {self.path} ({self.entries} entries)")
        p = self._base + self.entries * 12
        put64(p, ts)
        put32(p + 8, <uint32_t>(off - self.base_offset))
        self.entries += 1
        return True

    def lookup(self, target_timestamp):
        """(timestamp, offset) of the largest entry with timestamp <= target; (-1, base_offset) if none."""
        cdef Py_ssize_t slot
        cdef int64_t target = arg_i64(target_timestamp)
        cdef const unsigned char *p
        if self._closed:
            self._check_open()
        slot = search_i64(self._base, 12, self.entries, self._warm, target)
        if slot < 0:
            return (-1, self.base_offset)
        p = self._base + slot * 12
        return (get64(p), self.base_offset + get32(p + 8))

    def entry(self, n):
        """(timestamp, offset) of entry n; IndexError outside [0, entries)."""
        n = PyNumber_Index(n)
        self._check_open()
        if not 0 <= n < self.entries:
            raise IndexError(f"entry {n} is outside [0, {self.entries}) of {self._kind} {self.path}")
        cdef const unsigned char *p = self._base + <Py_ssize_t>n * 12
        return (get64(p), self.base_offset + get32(p + 8))

    cdef int _check_order(self) except -1:
        # Holds the GIL: a concurrent resize could otherwise unmap the entries mid-scan.
        cdef Py_ssize_t i
        cdef const unsigned char *b = self._base
        cdef int64_t t0, t1
        cdef uint32_t o0, o1
        for i in range(1, self.entries):
            t0 = get64(b + (i - 1) * 12)
            t1 = get64(b + i * 12)
            o0 = get32(b + (i - 1) * 12 + 8)
            o1 = get32(b + i * 12 + 8)
            if t1 <= t0:
                raise CorruptIndexError(f"{self._kind} {self.path}: timestamp {t1} at slot {i} "
                                        f"is not above timestamp {t0} at slot {i - 1}")
            if o1 < o0:
                raise CorruptIndexError(f"{self._kind} {self.path}: offset {self.base_offset + o1} at slot {i} "
                                        f"is below offset {self.base_offset + o0} at slot {i - 1}")
        return 0
