# cython: freethreading_compatible=False
"""The log cleaner's key -> last offset map (native twin of pybroker/_pure/offset_map.py).

pybroker/contracts/offset_map.py gives the table layout, the rules and the errors; both twins fill
the same slots and raise the same errors with the same reasons. Keys are hashed with XXH3-128 from
the xxHash header vendored in native/csrc (xxHash 0.8.1), inlined (XXH_INLINE_ALL), so nothing is linked
at run time and no system package is needed to build.
Batches are walked without the GIL; it is taken back only to decompress a compressed batch.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset
from posix.mman cimport MAP_ANONYMOUS, MAP_FAILED, MAP_PRIVATE, PROT_READ, PROT_WRITE, mmap, munmap
from varint cimport VARINT_OK, VARINT_TRUNCATED, read_zigzag

cdef extern from "idle_worker.h" nogil:
    int pb_idle_start()
    void pb_idle_run(void (*fn)(void *) noexcept nogil, void *arg)
    void pb_idle_stop()

from pybroker.compression import compress, decompress
from pybroker.contracts.offset_map import DEFAULT_LOAD_FACTOR, FillResult, RetainResult
from pybroker.errors import CorruptRecordError

cdef extern from *:
    """
    #define XXH_INLINE_ALL
    #include "xxhash.h"
    /* home slot: the high hash bits scaled onto [0, n) without a division */
    static inline uint64_t pb_om_home(uint64_t h, uint64_t n) { return (uint64_t)(((__uint128_t)h * n) >> 64); }
    #define pb_om_prefetch(p) __builtin_prefetch((p), 1, 0)
    """
    ctypedef struct XXH128_hash_t:
        uint64_t low64
        uint64_t high64
    XXH128_hash_t XXH3_128bits(const void *data, size_t n) nogil
    uint64_t pb_om_home(uint64_t h, uint64_t n) nogil
    void pb_om_prefetch(const void *p) nogil

cdef extern from "bigendian.h" nogil:
    void pb_put64(uint8_t *p, int64_t v)
    void pb_put32(uint8_t *p, uint32_t v)
    void pb_put16(uint8_t *p, uint16_t v)
    int64_t pb_get64(const uint8_t *p)
    int32_t pb_get32(const uint8_t *p)
    int16_t pb_get16(const uint8_t *p)

cdef extern from "crc32c_hw.h" nogil:
    uint32_t pb_crc32c(uint32_t crc, const uint8_t *p, size_t n)

ENTRY_SIZE = 24

cdef enum:
    HEADER_SIZE = 61
    LOG_OVERHEAD = 12
    MIN_BATCH_LENGTH = 49
    ATTR_CONTROL = 0x20
    GROUP = 16  # records hashed and prefetched ahead of their inserts: hides the table's cache misses

cdef int64_t INT64_MAX = 0x7FFFFFFFFFFFFFFF

# outcomes of the walkers
cdef enum:
    W_OK = 0  # section done / buffer done or stop reached
    W_FULL
    W_COMPRESSED  # the batch at pos needs decompressing (with the GIL)
    W_ERROR

# error kinds; the texts (in _reason) match the pure twin's
cdef enum:
    E_TRUNCATED = 1  # a = bytes needed, b = bytes left
    E_SHORT  # a = batch length
    E_MAGIC
    E_CODEC
    E_LOD
    E_COUNT
    E_BASE
    E_VARINT_TRUNCATED  # i = record
    E_VARINT_LONG
    E_REC_LENGTH  # a = length
    E_DELTA  # a = delta, b = last offset delta
    E_KEY  # a = key length
    E_TRAILING  # a = bytes left, b = count
    E_VALUE  # a = value length
    E_HEADERS  # a = header count
    E_HEADER_KEY  # a = header key length
    E_HEADER_VALUE  # a = header value length
    E_REC_REST  # a = bytes left in the record after its headers


cdef struct Entry:
    uint64_t lo
    uint64_t hi
    int64_t offset  # -1: empty


cdef struct Table:
    Entry *slots
    uint64_t capacity
    uint64_t limit
    uint64_t size


cdef struct Pending:
    uint64_t lo
    uint64_t hi
    int64_t offset
    uint64_t home


cdef struct Err:
    int kind
    int64_t i
    int64_t a
    int64_t b


cdef struct Walk:
    Py_ssize_t pos
    int64_t start
    int64_t stop
    int64_t covered
    int64_t stopped  # offset of the record that did not fit
    # the batch at pos
    int64_t base
    int32_t lod
    int32_t count
    int16_t attributes
    int8_t magic
    Py_ssize_t end
    Err err


cdef inline Entry *find(Table *t, uint64_t lo, uint64_t hi, uint64_t i) noexcept nogil:
    """The key's slot, or the empty slot it would take (there is always one: size < capacity)."""
    cdef Entry *e
    while True:
        e = t.slots + i
        if e.offset == -1 or (e.lo == lo and e.hi == hi):
            return e
        i += 1
        if i == t.capacity:
            i = 0


cdef inline int put_hash(Table *t, uint64_t lo, uint64_t hi, uint64_t home, int64_t offset) noexcept nogil:
    """1 when stored, 0 when the key is new and the map is full."""
    cdef Entry *e = find(t, lo, hi, home)
    if e.offset == -1:
        if t.size >= t.limit:
            return 0
        t.size += 1
        e.lo = lo
        e.hi = hi
    if offset > e.offset:
        e.offset = offset
    return 1


cdef inline int flush(Table *t, Pending *pend, int np, int64_t *stopped) noexcept nogil:
    cdef int k
    for k in range(np):
        if not put_hash(t, pend[k].lo, pend[k].hi, pend[k].home, pend[k].offset):
            stopped[0] = pend[k].offset
            return W_FULL
    return W_OK


cdef inline int read_varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) noexcept nogil:
    """0 or this module's varint error (native/varint.pxd reads it)."""
    cdef int e = read_zigzag(p, pos, end, out)
    if e == VARINT_OK:
        return 0
    return E_VARINT_TRUNCATED if e == VARINT_TRUNCATED else E_VARINT_LONG


cdef struct Head:
    Py_ssize_t start  # the record's attributes byte (just after its length varint)
    Py_ssize_t end
    Py_ssize_t ts_end  # just after its timestamp delta
    Py_ssize_t key_pos
    int64_t ts_delta
    int64_t delta
    int64_t klen


cdef inline int read_head(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t n, Walk *w, Head *r) noexcept nogil:
    """The checked fields of the record at pos[0] up to its key (pos[0] moves to the key): 0 or an
    error kind (with w.err.a/b), shared by every record walker here."""
    cdef int64_t length
    cdef int e = read_varint(p, pos, n, &length)
    if e:
        return e
    if length < 1 or length > n - pos[0]:
        w.err.a = length
        return E_REC_LENGTH
    r.start, r.end = pos[0], pos[0] + length
    pos[0] += 1  # record attributes
    e = read_varint(p, pos, r.end, &r.ts_delta)
    if e:
        return e
    r.ts_end = pos[0]
    e = read_varint(p, pos, r.end, &r.delta)
    if e:
        return e
    if r.delta < 0 or r.delta > w.lod:
        w.err.a = r.delta
        w.err.b = w.lod
        return E_DELTA
    e = read_varint(p, pos, r.end, &r.klen)
    if e:
        return e
    if r.klen < -1 or r.klen > r.end - pos[0]:
        w.err.a = r.klen
        return E_KEY
    r.key_pos = pos[0]
    return 0


cdef inline int end_section(Walk *w, int e, int64_t i, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    """How a records section walk ended: W_OK, or W_ERROR for record ``i``'s error ``e`` or trailing bytes."""
    if e:
        w.err.kind = e
        w.err.i = i
        return W_ERROR
    if pos != n:
        w.err.kind = E_TRAILING
        w.err.a = n - pos
        w.err.b = w.count
        return W_ERROR
    return W_OK


cdef int add_section(Table *t, const uint8_t *p, Py_ssize_t n, Walk *w) noexcept nogil:
    """Put the keyed records in range of one (uncompressed) records section: W_OK, W_FULL or W_ERROR.

    Records are hashed GROUP at a time and their home slots prefetched before the inserts, which
    still happen in record order, so the map stops at exactly the record the pure twin stops at.
    """
    cdef Pending pend[GROUP]
    cdef int np = 0, e = 0
    cdef Py_ssize_t pos = 0
    cdef int64_t i, offset
    cdef Head r
    cdef XXH128_hash_t h
    for i in range(w.count):
        e = read_head(p, &pos, n, w, &r)
        if e:
            break
        offset = w.base + r.delta
        if r.klen >= 0 and w.start <= offset < w.stop:
            h = XXH3_128bits(p + r.key_pos, <size_t>r.klen)
            pend[np].lo = h.low64
            pend[np].hi = h.high64
            pend[np].offset = offset
            pend[np].home = pb_om_home(h.high64, t.capacity)
            pb_om_prefetch(t.slots + pend[np].home)
            np += 1
            if np == GROUP:
                if flush(t, pend, np, &w.stopped) == W_FULL:
                    return W_FULL
                np = 0
        pos = r.end
    if flush(t, pend, np, &w.stopped) == W_FULL:  # records before a bad one count, as in the twin
        return W_FULL
    return end_section(w, e, i, pos, n)


cdef inline int batch_error(Walk *w, int kind, int64_t a, int64_t b) noexcept nogil:
    w.err.kind = kind
    w.err.a = a
    w.err.b = b
    return W_ERROR


cdef int read_header(const uint8_t *p, Py_ssize_t n, Walk *w) noexcept nogil:
    """Check the batch header at w.pos and fill w (base, magic, attributes, lod, count, end): W_OK or W_ERROR."""
    cdef const uint8_t *q = p + w.pos
    cdef int32_t length
    w.base = pb_get64(q) if n - w.pos >= 8 else -1
    if n - w.pos < LOG_OVERHEAD:
        return batch_error(w, E_TRUNCATED, LOG_OVERHEAD, n - w.pos)
    length = pb_get32(q + 8)
    if length < MIN_BATCH_LENGTH:
        return batch_error(w, E_SHORT, length, 0)
    if n - w.pos - LOG_OVERHEAD < length:
        return batch_error(w, E_TRUNCATED, <int64_t>length + LOG_OVERHEAD, n - w.pos)
    w.magic = <int8_t>q[16]
    w.attributes = pb_get16(q + 21)
    w.lod = pb_get32(q + 23)
    w.count = pb_get32(q + 57)
    if w.magic != 2:
        return batch_error(w, E_MAGIC, w.magic, 0)
    if w.attributes & 7 > 4:
        return batch_error(w, E_CODEC, w.attributes & 7, 0)
    if w.lod < 0:
        return batch_error(w, E_LOD, w.lod, 0)
    if w.count < 0:
        return batch_error(w, E_COUNT, w.count, 0)
    if w.base < 0 or w.base > INT64_MAX - w.lod:
        return batch_error(w, E_BASE, w.base, 0)
    w.end = w.pos + LOG_OVERHEAD + length
    return W_OK


cdef int walk(Table *t, const uint8_t *p, Py_ssize_t n, Walk *w) noexcept nogil:
    """Walk batches from w.pos: W_OK at the end or at stop, W_FULL, W_COMPRESSED or W_ERROR."""
    cdef const uint8_t *q
    cdef int r
    while w.pos < n:
        q = p + w.pos
        if read_header(p, n, w) != W_OK:
            return W_ERROR
        if w.base >= w.stop:
            return W_OK
        if w.base + w.lod >= w.start and not w.attributes & ATTR_CONTROL:
            if w.attributes & 7:
                return W_COMPRESSED
            r = add_section(t, q + HEADER_SIZE, w.end - w.pos - HEADER_SIZE, w)
            if r != W_OK:
                return r
        end_batch(w)
    return W_OK


cdef inline void end_batch(Walk *w) noexcept nogil:
    if w.base + w.lod + 1 > w.covered:
        w.covered = w.base + w.lod + 1
    w.pos = w.end


cdef str _reason(Walk *w):
    cdef Err *e = &w.err
    k = e.kind
    if k == E_TRUNCATED:
        return f"truncated batch: {e.a} bytes needed, {e.b} left"
    if k == E_SHORT:
        return f"batch length {e.a} is smaller than {MIN_BATCH_LENGTH}"
    if k == E_MAGIC:
        return f"unsupported magic {e.a}"
    if k == E_CODEC:
        return f"unknown compression codec {e.a}"
    if k == E_LOD:
        return f"negative last offset delta {e.a}"
    if k == E_COUNT:
        return f"negative record count {e.a}"
    if k == E_BASE:
        return f"base offset {e.a} out of range"
    if k == E_VARINT_TRUNCATED:
        return f"record {e.i}: truncated varint"
    if k == E_VARINT_LONG:
        return f"record {e.i}: varint longer than 10 bytes"
    if k == E_REC_LENGTH:
        return f"record {e.i}: length {e.a} out of range"
    if k == E_DELTA:
        return f"record {e.i}: offset delta {e.a} outside the batch (last offset delta {e.b})"
    if k == E_KEY:
        return f"record {e.i}: key length {e.a} out of range"
    if k == E_TRAILING:
        return f"{e.a} bytes after the last of {e.b} records"
    if k == E_VALUE:
        return f"record {e.i}: value length {e.a} out of range"
    if k == E_HEADERS:
        return f"record {e.i}: header count {e.a} out of range"
    if k == E_HEADER_KEY:
        return f"record {e.i}: header key length {e.a} out of range"
    if k == E_HEADER_VALUE:
        return f"record {e.i}: header value length {e.a} out of range"
    if k == E_REC_REST:
        return f"record {e.i}: {e.a} bytes after its last header"
    return f"error {k}"


ctypedef struct WalkJob:
    Table *t
    const uint8_t *p
    Py_ssize_t n
    Walk *w
    Retain *r
    Pick *k
    Out *o
    int code


cdef void walk_job(void *arg) noexcept nogil:
    cdef WalkJob *j = <WalkJob *>arg
    j.code = walk(j.t, j.p, j.n, j.w)


cdef void retain_job(void *arg) noexcept nogil:
    cdef WalkJob *j = <WalkJob *>arg
    j.code = retain_walk(j.t, j.p, j.n, j.w, j.r, j.k, j.o)


def start_idle_helper():
    """From now on this thread's batch walks run at the lowest CPU priority (SCHED_IDLE), on a helper
    thread of its own that never holds the GIL; the caller keeps its priority (see idle_worker.h)."""
    cdef int err
    with nogil:  # the helper lowers its priority before this returns: wait without the GIL
        err = pb_idle_start()
    if err:
        raise OSError(err, "cannot start the idle-priority helper thread")


def stop_idle_helper():
    """Ends this thread's helper; later walks run on the calling thread."""
    with nogil:
        pb_idle_stop()


cdef class OffsetMap:
    """Key hash -> last offset; see pybroker/contracts/offset_map.py."""
    cdef Table t
    cdef int64_t latest

    def __cinit__(self, memory_bytes, double load_factor=DEFAULT_LOAD_FACTOR):
        cdef Py_ssize_t mem = memory_bytes
        cdef uint64_t capacity, limit
        cdef void *p
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor must be in (0, 1], not {load_factor}")
        capacity = <uint64_t>(mem // 24) if mem > 0 else 0
        limit = <uint64_t>(capacity * load_factor)
        if capacity == 0 or limit > capacity - 1:
            limit = capacity - 1 if capacity else 0
        if limit < 1:
            raise ValueError(f"{memory_bytes} bytes cannot hold a key at load factor {load_factor}")
        # mapped, not malloc'd: whatever the allocator, munmap gives every page back when the map goes
        p = mmap(NULL, capacity * sizeof(Entry), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if p == MAP_FAILED:
            raise MemoryError(f"cannot allocate an offset map of {capacity * sizeof(Entry)} bytes")
        self.t.slots = <Entry *>p
        self.t.capacity = capacity
        self.t.limit = limit
        self.clear()

    def __dealloc__(self):
        if self.t.slots != NULL:
            munmap(self.t.slots, self.t.capacity * sizeof(Entry))

    @property
    def capacity(self):
        return self.t.capacity

    @property
    def limit(self):
        return self.t.limit

    @property
    def size(self):
        return self.t.size

    @property
    def full(self):
        return self.t.size >= self.t.limit

    @property
    def latest_offset(self):
        return self.latest

    @property
    def memory_bytes(self):
        return self.t.capacity * sizeof(Entry)

    def clear(self):
        with nogil:
            memset(self.t.slots, 0xFF, self.t.capacity * sizeof(Entry))
        self.t.size = 0
        self.latest = -1

    def put(self, key, int64_t offset):
        cdef Py_buffer view
        cdef XXH128_hash_t h
        cdef int stored
        if offset < 0:
            raise ValueError(f"negative offset {offset}")
        PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
        h = XXH3_128bits(view.buf, <size_t>view.len)
        PyBuffer_Release(&view)
        stored = put_hash(&self.t, h.low64, h.high64, pb_om_home(h.high64, self.t.capacity), offset)
        if stored and offset > self.latest:
            self.latest = offset
        return bool(stored)

    def get(self, key):
        cdef Py_buffer view
        cdef XXH128_hash_t h
        PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
        h = XXH3_128bits(view.buf, <size_t>view.len)
        PyBuffer_Release(&view)
        return find(&self.t, h.low64, h.high64, pb_om_home(h.high64, self.t.capacity)).offset

    def retain(self, buf, int64_t now_ms, int64_t new_horizon_ms, keep_empty=(), int64_t end_offset=INT64_MAX):
        """The batches of ``buf`` with only the records to keep; see pybroker/contracts/offset_map.py."""
        cdef Py_buffer view
        cdef Walk w
        cdef Retain r
        cdef Pick k
        cdef Out o, sec
        cdef int code
        cdef int64_t base_ts
        cdef bint horizon, restamp
        cdef Py_ssize_t start, i
        cdef const uint8_t *q
        cdef const uint8_t *sp
        cdef Py_ssize_t sn
        cdef bytes section, packed
        cdef int64_t *keep = NULL
        cdef WalkJob job
        keep_list = sorted(set(keep_empty))
        memset(&w, 0, sizeof(Walk))
        memset(&r, 0, sizeof(Retain))
        memset(&k, 0, sizeof(Pick))
        memset(&o, 0, sizeof(Out))
        memset(&sec, 0, sizeof(Out))
        r.now_ms, r.new_horizon_ms = now_ms, new_horizon_ms
        w.stop = end_offset
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            if keep_list:
                keep = <int64_t *>malloc(len(keep_list) * sizeof(int64_t))
                if keep == NULL:
                    raise MemoryError()
                for i in range(len(keep_list)):
                    keep[i] = keep_list[i]
            r.keep_empty, r.n_keep_empty = keep, len(keep_list)
            job.t, job.p, job.n, job.w, job.r, job.k, job.o = &self.t, <const uint8_t *>view.buf, view.len, &w, &r, &k, &o
            while True:
                with nogil:
                    pb_idle_run(retain_job, &job)
                code = job.code
                if code != W_COMPRESSED:
                    break
                # a compressed batch: decompress, choose, recompress with its codec (the GIL is needed)
                q = <const uint8_t *>view.buf + w.pos
                raw = (<const char *>view.buf)[w.pos + HEADER_SIZE:w.end]
                try:
                    section = bytes(decompress(w.attributes & 7, raw))
                except Exception as exc:
                    raise CorruptRecordError(f"decompression failed: {exc}", w.base, w.pos) from None
                base_ts = pb_get64(q + 27)
                horizon = (w.attributes & ATTR_DELETE_HORIZON) != 0
                sp = <const uint8_t *>PyBytes_AS_STRING(section)
                sn = PyBytes_GET_SIZE(section)
                with nogil:
                    code = pick_records(&self.t, sp, sn, &w, horizon and now_ms > base_ts, &k)
                if code != W_OK:
                    break
                restamp = k.tombstone and not horizon
                if k.n_kept == w.count and not restamp:
                    if copy_batch(&o, q, w.end - w.pos) < 0:
                        raise MemoryError()
                    r.kept_records += k.n_kept
                    r.kept_batches += 1
                elif k.n_kept or in_sorted(keep, r.n_keep_empty, w.base):
                    sec.n = 0
                    if write_records(&sec, sp, &k, restamp, base_ts - new_horizon_ms) < 0:
                        raise MemoryError()
                    packed = bytes(compress(w.attributes & 7, (<const char *>sec.p)[:sec.n])) if sec.n else b""
                    if reserve(&o, HEADER_SIZE + len(packed)) < 0:
                        raise MemoryError()
                    start = o.n
                    memcpy(o.p + start, q, HEADER_SIZE)
                    memcpy(o.p + start + HEADER_SIZE, PyBytes_AS_STRING(packed), len(packed))
                    o.n += HEADER_SIZE + len(packed)
                    end_rewrite(&o, start, q, &w, &r, &k, restamp, base_ts)
                    r.kept_records += k.n_kept
                    r.kept_batches += 1
                else:
                    pass  # nothing left and nothing to remember: the batch goes
                w.pos = w.end
            if code == W_ERROR:
                raise CorruptRecordError(_reason(&w), w.base, w.pos)
            if code == W_FULL:
                raise MemoryError("no memory for the cleaned batches")
            data = (<const char *>o.p)[:o.n] if o.n else b""
            return RetainResult(data, r.read, r.kept_records, r.batches, r.kept_batches)
        finally:
            PyBuffer_Release(&view)
            free(keep)
            free(k.kept)
            free(o.p)
            free(sec.p)

    def add_batches(self, buf, int64_t start_offset, int64_t stop_offset):
        cdef Py_buffer view, sview
        cdef Walk w
        cdef int r
        cdef bytes section
        cdef const uint8_t *sp
        cdef Py_ssize_t sn
        cdef WalkJob job
        if start_offset < 0 or start_offset > stop_offset:
            raise ValueError(f"bad offset range [{start_offset}, {stop_offset})")
        memset(&w, 0, sizeof(Walk))
        w.start = w.covered = start_offset
        w.stop = stop_offset
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        memset(&job, 0, sizeof(WalkJob))
        job.t, job.p, job.n, job.w = &self.t, <const uint8_t *>view.buf, view.len, &w
        try:
            while True:
                with nogil:
                    pb_idle_run(walk_job, &job)
                r = job.code
                if r != W_COMPRESSED:
                    break
                raw = (<const char *>view.buf)[w.pos + HEADER_SIZE:w.end]
                try:
                    section = bytes(decompress(w.attributes & 7, raw))
                except Exception as exc:
                    raise CorruptRecordError(f"decompression failed: {exc}", w.base, w.pos) from None
                sp = <const uint8_t *>PyBytes_AS_STRING(section)
                sn = PyBytes_GET_SIZE(section)
                with nogil:
                    r = add_section(&self.t, sp, sn, &w)
                if r != W_OK:
                    break
                end_batch(&w)
        finally:
            PyBuffer_Release(&view)
        if r == W_ERROR:
            raise CorruptRecordError(_reason(&w), w.base, w.pos)
        if r == W_FULL:
            result = FillResult(w.stopped, True)
        else:
            result = FillResult(min(w.stop, w.covered), False)
        if result.next_offset - 1 > self.latest:
            self.latest = result.next_offset - 1
        return result


# ---- the cleaner's second pass: keep the latest record of every key --------------------------

cdef enum:
    ATTR_LOG_APPEND_TIME = 0x08
    ATTR_DELETE_HORIZON = 0x40  # KIP-534: the base timestamp holds the tombstones' delete horizon


cdef struct Out:
    uint8_t *p
    Py_ssize_t n
    Py_ssize_t cap


cdef struct Kept:
    Py_ssize_t start  # the record's attributes byte (just after its length varint)
    Py_ssize_t end
    Py_ssize_t ts_end  # just after its timestamp delta
    int64_t ts_delta


cdef struct Pick:
    Kept *kept
    Py_ssize_t n_kept
    Py_ssize_t cap
    bint tombstone  # a tombstone is among the kept records
    int64_t max_ts_delta


cdef inline int reserve(Out *o, Py_ssize_t extra) noexcept nogil:
    """0, or -1 when memory ran out."""
    cdef Py_ssize_t cap
    cdef uint8_t *grown
    if o.n + extra <= o.cap:
        return 0
    cap = o.cap * 2
    if cap < o.n + extra:
        cap = o.n + extra
    if cap < 65536:
        cap = 65536
    grown = <uint8_t *>realloc(o.p, <size_t>cap)
    if grown == NULL:
        return -1
    o.p, o.cap = grown, cap
    return 0


cdef inline Py_ssize_t put_zigzag(uint8_t *p, int64_t v) noexcept nogil:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    cdef Py_ssize_t i = 0
    while z >= 0x80:
        p[i] = <uint8_t>((z & 0x7F) | 0x80)
        z >>= 7
        i += 1
    p[i] = <uint8_t>z
    return i + 1


cdef int pick_records(Table *t, const uint8_t *p, Py_ssize_t n, Walk *w, bint horizon_passed,
                      Pick *k) noexcept nogil:
    """Choose the records of one (uncompressed) section to keep: W_OK, W_FULL (no memory) or W_ERROR."""
    cdef Py_ssize_t pos = 0, rec_start, rec_end, ts_end, key_pos
    cdef int64_t i, ts_delta, klen, vlen, offset
    cdef int e = 0
    cdef Head r
    cdef XXH128_hash_t h
    cdef Kept *grown
    k.n_kept = 0
    k.tombstone = False
    k.max_ts_delta = -INT64_MAX
    for i in range(w.count):
        e = read_head(p, &pos, n, w, &r)
        if e:
            break
        rec_start, rec_end, ts_end, key_pos = r.start, r.end, r.ts_end, r.key_pos
        ts_delta, klen = r.ts_delta, r.klen
        pos += klen if klen > 0 else 0
        e = read_varint(p, &pos, rec_end, &vlen)
        if e:
            break
        pos = rec_end
        offset = w.base + r.delta
        if offset < w.stop:  # records from the map's end on are kept as they are: not cleaned yet
            if klen < 0:
                continue  # records without a key do not survive cleaning
            h = XXH3_128bits(p + key_pos, <size_t>klen)
            if offset < find(t, h.low64, h.high64, pb_om_home(h.high64, t.capacity)).offset:
                continue  # a later record of this key exists
            if vlen < 0:
                if horizon_passed:
                    continue
                k.tombstone = True
        if k.n_kept == k.cap:
            grown = <Kept *>realloc(k.kept, <size_t>(2 * k.cap + 64) * sizeof(Kept))
            if grown == NULL:
                return W_FULL
            k.kept, k.cap = grown, 2 * k.cap + 64
        k.kept[k.n_kept].start = rec_start
        k.kept[k.n_kept].end = rec_end
        k.kept[k.n_kept].ts_end = ts_end
        k.kept[k.n_kept].ts_delta = ts_delta
        if ts_delta > k.max_ts_delta:
            k.max_ts_delta = ts_delta
        k.n_kept += 1
    return end_section(w, e, i, pos, n)


cdef int write_records(Out *o, const uint8_t *p, const Pick *k, bint restamp, int64_t shift) noexcept nogil:
    """Append the kept records of section ``p``; ``restamp``: their timestamp deltas grow by ``shift``."""
    cdef Py_ssize_t j, body
    cdef uint8_t tmp[10]
    cdef Py_ssize_t zn
    cdef const Kept *r
    for j in range(k.n_kept):
        r = &k.kept[j]
        if reserve(o, (r.end - r.start) + 30) < 0:
            return -1
        if restamp:
            zn = put_zigzag(tmp, r.ts_delta + shift)
            body = 1 + zn + (r.end - r.ts_end)
            o.n += put_zigzag(o.p + o.n, body)
            o.p[o.n] = p[r.start]
            memcpy(o.p + o.n + 1, tmp, <size_t>zn)
            memcpy(o.p + o.n + 1 + zn, p + r.ts_end, <size_t>(r.end - r.ts_end))
            o.n += body
        else:
            o.n += put_zigzag(o.p + o.n, r.end - r.start)
            memcpy(o.p + o.n, p + r.start, <size_t>(r.end - r.start))
            o.n += r.end - r.start
    return 0


cdef void finish_header(uint8_t *b, Py_ssize_t size, int16_t attributes, int64_t base_ts, int64_t max_ts,
                        int32_t count) noexcept nogil:
    """Fix the copied header of a rewritten batch of ``size`` bytes and seal it with its CRC."""
    pb_put32(b + 8, <uint32_t>(size - LOG_OVERHEAD))
    pb_put16(b + 21, <uint16_t>attributes)
    pb_put64(b + 27, base_ts)
    pb_put64(b + 35, max_ts)
    pb_put32(b + 57, <uint32_t>count)
    pb_put32(b + 17, pb_crc32c(0, b + 21, <size_t>(size - 21)))


cdef inline bint in_sorted(const int64_t *a, Py_ssize_t n, int64_t v) noexcept nogil:
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo < n and a[lo] == v


cdef struct Retain:
    int64_t now_ms
    int64_t new_horizon_ms
    const int64_t *keep_empty
    Py_ssize_t n_keep_empty
    int64_t read
    int64_t kept_records
    int64_t batches
    int64_t kept_batches
    # the batch at w.pos when the caller must (re)compress
    Py_ssize_t batch_out  # where its header went in the output
    bint restamp


cdef int retain_walk(Table *t, const uint8_t *p, Py_ssize_t n, Walk *w, Retain *r, Pick *k,
                     Out *o) noexcept nogil:
    """Copy or rewrite batches from w.pos: W_OK at the end, W_COMPRESSED, W_FULL (no memory), W_ERROR."""
    cdef const uint8_t *q
    cdef int code
    cdef int64_t base_ts
    cdef bint horizon, restamp
    cdef Py_ssize_t start
    while w.pos < n:
        q = p + w.pos
        if read_header(p, n, w) != W_OK:
            return W_ERROR
        r.batches += 1
        r.read += w.count
        if w.attributes & ATTR_CONTROL:
            if copy_batch(o, q, w.end - w.pos) < 0:
                return W_FULL
            r.kept_batches += 1
            w.pos = w.end
            continue
        if w.attributes & 7:
            return W_COMPRESSED
        base_ts = pb_get64(q + 27)
        horizon = (w.attributes & ATTR_DELETE_HORIZON) != 0
        code = pick_records(t, q + HEADER_SIZE, w.end - w.pos - HEADER_SIZE, w, horizon and r.now_ms > base_ts, k)
        if code != W_OK:
            return code
        restamp = k.tombstone and not horizon
        if k.n_kept == w.count and not restamp:
            if copy_batch(o, q, w.end - w.pos) < 0:
                return W_FULL
        elif k.n_kept or in_sorted(r.keep_empty, r.n_keep_empty, w.base):
            if reserve(o, HEADER_SIZE) < 0:
                return W_FULL
            start = o.n
            memcpy(o.p + start, q, HEADER_SIZE)
            o.n += HEADER_SIZE
            if write_records(o, q + HEADER_SIZE, k, restamp, base_ts - r.new_horizon_ms) < 0:
                return W_FULL
            end_rewrite(o, start, q, w, r, k, restamp, base_ts)
        else:
            w.pos = w.end  # nothing left and nothing to remember: the batch goes
            continue
        r.kept_records += k.n_kept
        r.kept_batches += 1
        w.pos = w.end
    return W_OK


cdef inline int copy_batch(Out *o, const uint8_t *q, Py_ssize_t size) noexcept nogil:
    if reserve(o, size) < 0:
        return -1
    memcpy(o.p + o.n, q, <size_t>size)
    o.n += size
    return 0


cdef void end_rewrite(Out *o, Py_ssize_t start, const uint8_t *q, Walk *w, Retain *r, Pick *k, bint restamp,
                      int64_t base_ts) noexcept nogil:
    """Seal the rewritten batch that starts at ``o.p + start`` (its header copied from ``q``)."""
    cdef int64_t max_ts = pb_get64(q + 35)
    cdef int16_t attributes = w.attributes
    if k.n_kept and not (attributes & ATTR_LOG_APPEND_TIME):
        max_ts = base_ts + k.max_ts_delta  # CreateTime: the max of what is left
    if restamp:
        attributes |= ATTR_DELETE_HORIZON
        base_ts = r.new_horizon_ms
    finish_header(o.p + start, o.n - start, attributes, base_ts, max_ts, <int32_t>k.n_kept)


cdef int find_keyless(const uint8_t *p, Py_ssize_t n, Walk *w) noexcept nogil:
    """W_OK with w.stopped = the offset of the first record without a key (-1: none), or W_ERROR."""
    cdef Py_ssize_t pos = 0
    cdef int64_t i
    cdef int e = 0
    cdef Head r
    for i in range(w.count):
        e = read_head(p, &pos, n, w, &r)
        if e:
            break
        if r.klen < 0:
            w.stopped = w.base + r.delta
            return W_OK
        pos = r.end
    if e:
        w.err.kind = e
        w.err.i = i
        return W_ERROR
    return W_OK


cdef int skip_field(const uint8_t *p, Py_ssize_t *q, Py_ssize_t end, int64_t lowest, int kind,
                    Walk *w) noexcept nogil:
    """A varint length (``lowest`` -1: nullable) and that many bytes, within ``end``: 0 or ``kind``."""
    cdef int64_t n
    cdef int e = read_varint(p, q, end, &n)
    if e:
        return e
    if n < lowest or n > end - q[0]:
        w.err.a = n
        return kind
    q[0] += n if n > 0 else 0
    return 0


cdef int check_rest(const uint8_t *p, Head *r, Walk *w) noexcept nogil:
    """The record's value and headers, after its key, fill it exactly: 0 or an error kind (w.err.a)."""
    cdef Py_ssize_t q = r.key_pos + (r.klen if r.klen > 0 else 0)
    cdef int64_t count, j
    cdef int e = skip_field(p, &q, r.end, -1, E_VALUE, w)
    if e:
        return e
    e = read_varint(p, &q, r.end, &count)
    if e:
        return e
    if count < 0 or count > r.end - q:  # a header takes at least two bytes
        w.err.a = count
        return E_HEADERS
    for j in range(count):
        e = skip_field(p, &q, r.end, 0, E_HEADER_KEY, w)
        if e:
            return e
        e = skip_field(p, &q, r.end, -1, E_HEADER_VALUE, w)
        if e:
            return e
    if q != r.end:
        w.err.a = r.end - q
        return E_REC_REST
    return 0


cdef int check_section(const uint8_t *p, Py_ssize_t n, Walk *w) noexcept nogil:
    """Every record of one uncompressed records section parses whole: W_OK or W_ERROR."""
    cdef Py_ssize_t pos = 0
    cdef int64_t i = 0
    cdef int e = 0
    cdef Head r
    for i in range(w.count):
        e = read_head(p, &pos, n, w, &r)
        if not e:
            e = check_rest(p, &r, w)
        if e:
            break
        pos = r.end
    return end_section(w, e, i, pos, n)


ctypedef int (*SectionWalker)(const uint8_t *p, Py_ssize_t n, Walk *w) noexcept nogil


cdef int64_t walk_sections(buf, SectionWalker walker, bint open_compressed) except? -2:
    """``walker`` over the records section of each v2 batch of ``buf`` (compressed ones decompressed when
    ``open_compressed``, else passed by): the first offset a walker stops at, or -1; CorruptRecordError."""
    cdef Py_buffer view
    cdef Walk w
    cdef const uint8_t *sp
    cdef Py_ssize_t sn
    cdef int r
    cdef bytes section
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        memset(&w, 0, sizeof(Walk))
        while w.pos < view.len:
            if read_header(<const uint8_t *>view.buf, view.len, &w) != W_OK:
                raise CorruptRecordError(_reason(&w), w.base, w.pos)
            w.stopped = -1
            sp, sn = <const uint8_t *>view.buf + w.pos + HEADER_SIZE, w.end - w.pos - HEADER_SIZE
            if w.attributes & 7 and open_compressed:
                section = bytes(decompress(w.attributes & 7, (<const char *>view.buf)[w.pos + HEADER_SIZE:w.end]))
                sp, sn = <const uint8_t *>PyBytes_AS_STRING(section), PyBytes_GET_SIZE(section)
            if open_compressed or not w.attributes & 7:
                with nogil:
                    r = walker(sp, sn, &w)
                if r == W_ERROR:
                    raise CorruptRecordError(_reason(&w), w.base, w.pos)
                if w.stopped >= 0:
                    return w.stopped
            w.pos = w.end
        return -1
    finally:
        PyBuffer_Release(&view)


def check_records(buf):
    """Raise CorruptRecordError unless every record of the uncompressed v2 batches of ``buf`` parses whole
    (lengths, key, value, headers, nothing left over), as Kafka's record reader requires; compressed
    batches are not opened. Batches must have passed validation."""
    walk_sections(buf, check_section, False)


def keyless_offset(buf):
    """The offset of the first record without a key in the v2 batches of ``buf``, or -1 (compacted
    topics refuse such records). Batches must have passed validation; compressed ones are decompressed."""
    return walk_sections(buf, find_keyless, True)
