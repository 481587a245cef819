# cython: freethreading_compatible=False
"""The log cleaner's key -> last offset map (native twin of pybroker/_pure/offset_map.py).

pybroker/contracts/offset_map.py gives the table layout, the rules and the errors; both twins fill
the same slots and raise the same errors with the same reasons. Keys are hashed with XXH3-128 from
the system's xxhash.h, inlined (XXH_INLINE_ALL), so nothing is linked at run time; setup.py builds
this module only where that header exists and pybroker.core falls back to the pure twin elsewhere.
Batches are walked without the GIL; it is taken back only to decompress a compressed batch.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset
from varint cimport VARINT_OK, VARINT_TRUNCATED, read_zigzag

from pybroker.compression import decompress
from pybroker.contracts.offset_map import DEFAULT_LOAD_FACTOR, FillResult
from pybroker.errors import CorruptRecordError

cdef extern from *:
    """
    #define XXH_INLINE_ALL
    #include <xxhash.h>
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
    int64_t pb_get64(const uint8_t *p)
    int32_t pb_get32(const uint8_t *p)
    int16_t pb_get16(const uint8_t *p)

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


cdef int add_section(Table *t, const uint8_t *p, Py_ssize_t n, Walk *w) noexcept nogil:
    """Put the keyed records in range of one (uncompressed) records section: W_OK, W_FULL or W_ERROR.

    Records are hashed GROUP at a time and their home slots prefetched before the inserts, which
    still happen in record order, so the map stops at exactly the record the pure twin stops at.
    """
    cdef Pending pend[GROUP]
    cdef int np = 0, e = 0
    cdef Py_ssize_t pos = 0, rec_end
    cdef int64_t i, length, ignored, delta, klen, offset
    cdef XXH128_hash_t h
    for i in range(w.count):
        e = read_varint(p, &pos, n, &length)
        if e:
            break
        if length < 1 or length > n - pos:
            e = E_REC_LENGTH
            w.err.a = length
            break
        rec_end = pos + length
        pos += 1  # record attributes
        e = read_varint(p, &pos, rec_end, &ignored)  # timestamp delta
        if e:
            break
        e = read_varint(p, &pos, rec_end, &delta)
        if e:
            break
        if delta < 0 or delta > w.lod:
            e = E_DELTA
            w.err.a = delta
            w.err.b = w.lod
            break
        e = read_varint(p, &pos, rec_end, &klen)
        if e:
            break
        if klen < -1 or klen > rec_end - pos:
            e = E_KEY
            w.err.a = klen
            break
        offset = w.base + delta
        if klen >= 0 and w.start <= offset < w.stop:
            h = XXH3_128bits(p + pos, <size_t>klen)
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
        pos = rec_end
    if flush(t, pend, np, &w.stopped) == W_FULL:  # records before a bad one count, as in the twin
        return W_FULL
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


cdef inline int batch_error(Walk *w, int kind, int64_t a, int64_t b) noexcept nogil:
    w.err.kind = kind
    w.err.a = a
    w.err.b = b
    return W_ERROR


cdef int walk(Table *t, const uint8_t *p, Py_ssize_t n, Walk *w) noexcept nogil:
    """Walk batches from w.pos: W_OK at the end or at stop, W_FULL, W_COMPRESSED or W_ERROR."""
    cdef const uint8_t *q
    cdef int32_t length
    cdef int r
    while w.pos < n:
        q = p + w.pos
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
        if w.base >= w.stop:
            return W_OK
        w.end = w.pos + LOG_OVERHEAD + length
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
    return f"error {k}"


cdef class OffsetMap:
    """Key hash -> last offset; see pybroker/contracts/offset_map.py."""
    cdef Table t
    cdef int64_t latest

    def __cinit__(self, memory_bytes, double load_factor=DEFAULT_LOAD_FACTOR):
        cdef Py_ssize_t mem = memory_bytes
        cdef uint64_t capacity, limit
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor must be in (0, 1], not {load_factor}")
        capacity = <uint64_t>(mem // 24) if mem > 0 else 0
        limit = <uint64_t>(capacity * load_factor)
        if capacity == 0 or limit > capacity - 1:
            limit = capacity - 1 if capacity else 0
        if limit < 1:
            raise ValueError(f"{memory_bytes} bytes cannot hold a key at load factor {load_factor}")
        self.t.slots = <Entry *>malloc(capacity * sizeof(Entry))
        if self.t.slots == NULL:
            raise MemoryError(f"cannot allocate an offset map of {capacity * sizeof(Entry)} bytes")
        self.t.capacity = capacity
        self.t.limit = limit
        self.clear()

    def __dealloc__(self):
        free(self.t.slots)

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

    def add_batches(self, buf, int64_t start_offset, int64_t stop_offset):
        cdef Py_buffer view, sview
        cdef Walk w
        cdef int r
        cdef bytes section
        cdef const uint8_t *sp
        cdef Py_ssize_t sn
        if start_offset < 0 or start_offset > stop_offset:
            raise ValueError(f"bad offset range [{start_offset}, {stop_offset})")
        memset(&w, 0, sizeof(Walk))
        w.start = w.covered = start_offset
        w.stop = stop_offset
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            while True:
                with nogil:
                    r = walk(&self.t, <const uint8_t *>view.buf, view.len, &w)
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
