# cython: freethreading_compatible=False
"""Client-side record codec (native): build producer batches, decode fetched records.

The twin of pybroker/_pure/client_codec.py (its docstring gives the formats and the error
contract); both return the same values and raise the same errors with the same reasons.
Every read is bounded by the length of its batch, record or buffer; a damaged batch raises
CorruptRecordError, never reads outside the input. Long loops run without the GIL.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_FromStringAndSize
from cpython.list cimport PyList_Append
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset
from varint cimport VARINT_OK, VARINT_TRUNCATED, read_zigzag

from pybroker.compression import compress, decompress
from pybroker.errors import CorruptRecordError

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

cdef extern from "crc32c_hw.h" nogil:
    uint32_t pb_crc32c(uint32_t crc, const uint8_t *p, size_t n)

cdef extern from "bigendian.h" nogil:
    int64_t pb_get64(const uint8_t *p)
    int32_t pb_get32(const uint8_t *p)
    int16_t pb_get16(const uint8_t *p)
    void pb_put64(uint8_t *p, int64_t v)
    void pb_put32(uint8_t *p, uint32_t v)
    void pb_put16(uint8_t *p, uint16_t v)

cdef enum:
    HEADER_SIZE = 61
    LOG_OVERHEAD = 12
    MIN_BATCH_LENGTH = 49
    CRC_START = 21
    ATTR_LOG_APPEND_TIME = 0x08
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20
    NOGIL_MIN = 4096  # below this, dropping and retaking the GIL costs more than it frees
    MAX_ARROW_BYTES = 0x7FFFFFFF

# Record-level failures; the texts match the pure twin's.
cdef enum RecErr:
    R_OK = 0
    R_TRUNCATED
    R_VARINT_TRUNCATED
    R_VARINT_LONG
    R_LENGTH
    R_KEY
    R_VALUE
    R_HEADER_COUNT
    R_HEADER_KEY
    R_HEADER_VALUE
    R_FIELDS
    # batch-level outcomes of the column decoder
    R_COUNT_EXCEEDS
    R_BYTES_LEFT
    R_TOO_BIG
    R_NO_MEMORY

_RECORD_ERRORS = {
    R_TRUNCATED: "truncated",
    R_VARINT_TRUNCATED: "truncated varint",
    R_VARINT_LONG: "varint longer than 10 bytes",
    R_LENGTH: "length out of range",
    R_KEY: "key length out of range",
    R_VALUE: "value length out of range",
    R_HEADER_COUNT: "header count out of range",
    R_HEADER_KEY: "header key length out of range",
    R_HEADER_VALUE: "header value length out of range",
    R_FIELDS: "length does not match its fields",
}


# ---------------------------------------------------------------- murmur2

cdef extern from "murmur2.h" nogil:
    uint32_t pb_murmur2(const uint8_t *p, size_t n)


cdef inline int32_t _murmur2(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    return <int32_t>pb_murmur2(p, <size_t>n)


cdef int _acquire(object data, Py_buffer *view) except -1:
    try:
        PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    except BufferError as exc:  # same type as the pure twin's memoryview.cast failure
        raise TypeError(f"expected a contiguous buffer: {exc}") from None
    return 0


def murmur2(data):
    """Java's ``Utils.murmur2`` (seed 0x9747b28c) of ``data``, as a signed 32-bit int."""
    cdef Py_buffer view
    cdef int32_t h
    if PyBytes_CheckExact(data):
        return _murmur2(<const uint8_t *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    _acquire(data, &view)
    h = _murmur2(<const uint8_t *>view.buf, view.len)
    PyBuffer_Release(&view)
    return h


def frame_buffer(Py_ssize_t size):
    """A bytearray of ``size`` bytes left uninitialised: a network read fills it at once, so
    zero-filling first (as ``bytearray(size)`` does) would only cost time."""
    if size < 0:
        raise ValueError("size must not be negative")
    return PyByteArray_FromStringAndSize(NULL, size)


def partition_for_key(key, int64_t num_partitions):
    """Kafka's default partition for a non-null key: positive murmur2 modulo the partition count."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# ---------------------------------------------------------------- growable C buffers

cdef struct Buf:
    uint8_t *p
    size_t len
    size_t cap

cdef inline int buf_reserve(Buf *b, size_t extra) noexcept nogil:
    """Room for ``extra`` more bytes; -1 when out of memory."""
    cdef size_t want = b.len + extra, cap
    cdef uint8_t *p
    if want <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 256
    if cap < want:
        cap = want
    p = <uint8_t *>realloc(b.p, cap)
    if p == NULL:
        return -1
    b.p = p
    b.cap = cap
    return 0


cdef inline int vsize(int64_t v) noexcept nogil:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    cdef int n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


cdef inline uint8_t *put_varint(uint8_t *p, int64_t v) noexcept nogil:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    while z >= 0x80:
        p[0] = <uint8_t>(z | 0x80)
        p += 1
        z >>= 7
    p[0] = <uint8_t>z
    return p + 1


cdef inline uint8_t *put_field(uint8_t *p, const uint8_t *src, int64_t n) noexcept nogil:
    if n < 0:
        p[0] = 1  # zigzag(-1): null
        return p + 1
    p = put_varint(p, n)
    memcpy(p, src, <size_t>n)
    return p + n


# ---------------------------------------------------------------- batch builder

cdef struct Builder:
    Buf buf  # the 61 header bytes are reserved at the front
    int64_t max_bytes
    int32_t count
    int64_t first_ts
    int64_t max_ts


cdef int64_t _add(Builder *s, int64_t ts, const uint8_t *k, int64_t kn, const uint8_t *v, int64_t vn,
                  const uint8_t *hdr, int64_t hn) noexcept nogil:
    """Append one record (hdr = encoded header count + headers, NULL for none).

    Returns its offset delta, -1 when it does not fit, -2 when out of memory."""
    cdef int64_t delta_ts = 0 if s.count == 0 else <int64_t>(<uint64_t>ts - <uint64_t>s.first_ts)
    cdef int64_t delta_off = s.count
    cdef int64_t body = (1 + vsize(delta_ts) + vsize(delta_off) + (1 if kn < 0 else vsize(kn) + kn)
                         + (1 if vn < 0 else vsize(vn) + vn) + (1 if hdr == NULL else hn))
    cdef int64_t total = vsize(body) + body
    cdef uint8_t *p
    if s.count and <int64_t>s.buf.len + total > s.max_bytes:
        return -1
    if buf_reserve(&s.buf, <size_t>total) < 0:
        return -2
    p = put_varint(s.buf.p + s.buf.len, body)
    p[0] = 0  # record attributes
    p = put_varint(p + 1, delta_ts)
    p = put_varint(p, delta_off)
    p = put_field(p, k, kn)
    p = put_field(p, v, vn)
    if hdr == NULL:
        p[0] = 0
    else:
        memcpy(p, hdr, <size_t>hn)
    s.buf.len += <size_t>total
    if s.count == 0:
        s.first_ts = s.max_ts = ts
    elif ts > s.max_ts:
        s.max_ts = ts
    s.count += 1
    return delta_off


cdef struct Src:
    const uint8_t *p
    int64_t n  # -1: null
    bint held


cdef inline int src_get(object o, Src *s, Py_buffer *view, str what) except -1:
    s.held = False
    if o is None:
        s.p = NULL
        s.n = -1
    elif PyBytes_CheckExact(o):
        s.p = <const uint8_t *>PyBytes_AS_STRING(o)
        s.n = PyBytes_GET_SIZE(o)
    else:
        try:
            PyObject_GetBuffer(o, view, PyBUF_SIMPLE)
        except (TypeError, BufferError):
            raise TypeError(f"{what} must be a bytes-like object or None, not {type(o).__name__}") from None
        s.held = True
        s.p = <const uint8_t *>view.buf
        s.n = view.len
    return 0


cdef inline void src_release(Src *s, Py_buffer *view) noexcept:
    if s.held:
        PyBuffer_Release(view)
        s.held = False


cdef bytes _encode_headers(object headers):
    """Header count varint + headers, encoded."""
    cdef list pairs = []
    cdef Py_ssize_t size = 0, kn
    cdef const char *kp
    cdef Src vs
    cdef Py_buffer view
    for hkey, hval in headers:
        if isinstance(hkey, str):
            kb = PyBytes_FromStringAndSize(PyUnicode_AsUTF8AndSize(hkey, &kn), kn)
        elif hkey is None:
            raise TypeError("header key must be str or bytes, not None")
        else:
            src_get(hkey, &vs, &view, "header key")
            kb = PyBytes_FromStringAndSize(<const char *>vs.p, vs.n)
            src_release(&vs, &view)
        if hval is None:
            vb = None
        else:
            src_get(hval, &vs, &view, "header value")
            vb = PyBytes_FromStringAndSize(<const char *>vs.p, vs.n)
            src_release(&vs, &view)
        pairs.append((kb, vb))
    cdef bytes out
    cdef uint8_t *p
    size = vsize(len(pairs))
    for kb, vb in pairs:
        size += vsize(len(kb)) + len(kb) + (1 if vb is None else vsize(len(vb)) + len(vb))
    out = PyBytes_FromStringAndSize(NULL, size)
    p = <uint8_t *>PyBytes_AS_STRING(out)
    p = put_varint(p, len(pairs))
    for kb, vb in pairs:
        p = put_field(p, <const uint8_t *>PyBytes_AS_STRING(kb), len(kb))
        if vb is None:
            p = put_field(p, NULL, -1)
        else:
            p = put_field(p, <const uint8_t *>PyBytes_AS_STRING(vb), len(vb))
    return out


cdef struct ArrowCol:
    const uint8_t *validity
    const uint8_t *offsets
    const uint8_t *data
    size_t data_len
    bint wide
    int64_t base


cdef inline int arrow_get(const ArrowCol *c, int64_t i, const uint8_t **p, int64_t *n) noexcept nogil:
    """Entry i of an Arrow binary column; -1 when its offsets are out of range."""
    cdef int64_t j = c.base + i, lo, hi
    if c.validity != NULL and not (c.validity[j >> 3] >> (j & 7)) & 1:
        p[0] = NULL
        n[0] = -1
        return 0
    if c.wide:
        lo = (<const int64_t *>c.offsets)[j]
        hi = (<const int64_t *>c.offsets)[j + 1]
    else:
        lo = (<const int32_t *>c.offsets)[j]
        hi = (<const int32_t *>c.offsets)[j + 1]
    if lo < 0 or hi < lo or <uint64_t>hi > c.data_len:
        return -1
    p[0] = c.data + lo
    n[0] = hi - lo
    return 0


cdef int arrow_open(ArrowCol *c, object validity, object offsets, object data, bint wide, int64_t base,
                    int64_t stop, Py_buffer *views) except -1:
    """Acquire one column's buffers (views[0..2]) and check their sizes; caller releases them."""
    memset(c, 0, sizeof(ArrowCol))
    c.wide = wide
    c.base = base
    _acquire(offsets, &views[1])
    c.offsets = <const uint8_t *>views[1].buf
    if stop > views[1].len // (8 if wide else 4) - 1 - base:  # (base + stop + 1) entries, without overflow
        raise ValueError("arrow offsets buffer is too short")
    if data is not None:
        _acquire(data, &views[2])
        c.data = <const uint8_t *>views[2].buf
        c.data_len = <size_t>views[2].len
    if validity is not None:
        _acquire(validity, &views[0])
        c.validity = <const uint8_t *>views[0].buf
        if stop > views[0].len * 8 - base:
            raise ValueError("arrow validity bitmap is too short")
    return 0


cdef class BatchBuilder:
    """One open v2 record batch being filled (records section kept uncompressed until ``build``)."""
    cdef Builder s
    cdef bint busy  # append_arrow runs without the GIL: other calls must not touch the buffer then

    cdef inline int _check_idle(self) except -1:
        if self.busy:
            raise RuntimeError("BatchBuilder is in use by another thread")
        return 0

    def __cinit__(self, int64_t max_bytes):
        cdef size_t cap = <size_t>max_bytes if max_bytes > 1024 else 1024
        if cap > (1 << 20):
            cap = 1 << 20  # large limits grow on demand
        self.s.buf.p = <uint8_t *>malloc(cap)
        if self.s.buf.p == NULL:
            raise MemoryError()
        self.s.buf.cap = cap
        self.s.buf.len = HEADER_SIZE
        self.s.max_bytes = max_bytes
        self.s.first_ts = self.s.max_ts = -1

    def __dealloc__(self):
        free(self.s.buf.p)

    @property
    def count(self):
        """records appended so far"""
        return self.s.count

    @property
    def size_bytes(self):
        """size of the batch built without compression"""
        return self.s.buf.len

    @property
    def first_timestamp(self):
        """base timestamp (-1 when empty)"""
        return self.s.first_ts

    @property
    def max_timestamp(self):
        """largest timestamp (-1 when empty)"""
        return self.s.max_ts

    def append(self, int64_t timestamp, key, value, headers=None):
        """Append one record; returns its offset delta, or -1 when it does not fit in ``max_bytes``."""
        cdef Src ks, vs
        cdef Py_buffer kview, vview
        cdef int64_t r
        cdef bytes hdr
        self._check_idle()
        if value is not None and key is None and headers is None and PyBytes_CheckExact(value):
            r = _add(&self.s, timestamp, NULL, -1, <const uint8_t *>PyBytes_AS_STRING(value),
                     PyBytes_GET_SIZE(value), NULL, 0)
        else:
            src_get(key, &ks, &kview, "key")
            try:
                src_get(value, &vs, &vview, "value")
                try:
                    if headers is None:
                        r = _add(&self.s, timestamp, ks.p, ks.n, vs.p, vs.n, NULL, 0)
                    else:
                        hdr = _encode_headers(headers)
                        r = _add(&self.s, timestamp, ks.p, ks.n, vs.p, vs.n,
                                 <const uint8_t *>PyBytes_AS_STRING(hdr), PyBytes_GET_SIZE(hdr))
                finally:
                    src_release(&vs, &vview)
            finally:
                src_release(&ks, &kview)
        if r == -2:
            raise MemoryError()
        return r

    @cython.boundscheck(True)
    def append_many(self, keys, values, int64_t timestamp, Py_ssize_t start=0):
        """Append ``values[start:]`` (with ``keys[i]`` when keys is not None) until full; returns the next index."""
        cdef Py_ssize_t n = len(values), i
        cdef Src ks, vs
        cdef Py_buffer kview, vview
        cdef int64_t r = 0
        if keys is not None and len(keys) < n:
            raise ValueError("keys is shorter than values")
        if start < 0:
            raise ValueError("start must not be negative")
        self._check_idle()
        ks.p = NULL
        ks.n = -1
        ks.held = False
        i = start
        while i < n:
            if keys is not None:
                src_get(keys[i], &ks, &kview, "key")
            try:
                src_get(values[i], &vs, &vview, "value")
                r = _add(&self.s, timestamp, ks.p, ks.n, vs.p, vs.n, NULL, 0)
                src_release(&vs, &vview)
            finally:
                src_release(&ks, &kview)
            if r < 0:
                break
            i += 1
        if r == -2:
            raise MemoryError()
        return i

    def append_arrow(self, key_validity, key_offsets, key_data, value_validity, value_offsets, value_data,
                     bint offsets_64bit, int64_t array_offset, int64_t start, int64_t stop, int64_t timestamp):
        """Append rows [start, stop) of Arrow binary arrays given as raw buffers; returns the next index."""
        cdef Py_buffer views[6]
        cdef ArrowCol kc, vc
        cdef bint has_keys = key_offsets is not None
        cdef int64_t i, r = 0, kn = -1, vn
        cdef const uint8_t *kp = NULL
        cdef const uint8_t *vp
        cdef int bad = 0, j
        if start < 0 or stop < start or array_offset < 0:
            raise ValueError("bad row range")
        memset(views, 0, sizeof(views))
        self._check_idle()
        self.busy = True
        try:
            arrow_open(&vc, value_validity, value_offsets, value_data, offsets_64bit, array_offset, stop, &views[3])
            if has_keys:
                arrow_open(&kc, key_validity, key_offsets, key_data, offsets_64bit, array_offset, stop, &views[0])
            i = start
            with nogil:
                while i < stop:
                    if has_keys and arrow_get(&kc, i, &kp, &kn) < 0:
                        bad = 1
                        break
                    if arrow_get(&vc, i, &vp, &vn) < 0:
                        bad = 1
                        break
                    r = _add(&self.s, timestamp, kp, kn, vp, vn, NULL, 0)
                    if r < 0:
                        break
                    i += 1
        finally:
            self.busy = False
            for j in range(6):
                if <void *>views[j].obj != NULL:  # acquired (a failed or skipped acquire leaves NULL)
                    PyBuffer_Release(&views[j])
        if bad:
            raise ValueError("arrow offsets out of range")
        if r == -2:
            raise MemoryError()
        return i

    def build(self, int codec, int64_t producer_id=-1, int16_t producer_epoch=-1, int32_t base_sequence=-1,
              bint transactional=False):
        """The complete batch: baseOffset 0, header, CRC-32C; records compressed with ``codec`` (0-4);
        ``transactional`` sets the transactional attribute bit (0x10)."""
        cdef bytes out, body
        cdef uint8_t *p
        cdef const uint8_t *src
        cdef Py_ssize_t n
        self._check_idle()
        if not 0 <= codec <= 4:
            raise ValueError(f"unknown compression codec {codec}")
        if self.s.count == 0:
            raise ValueError("a record batch needs at least one record")
        if codec == 0:
            src = self.s.buf.p + HEADER_SIZE
            n = self.s.buf.len - HEADER_SIZE
        else:
            body = compress(codec, PyBytes_FromStringAndSize(<const char *>self.s.buf.p + HEADER_SIZE,
                                                             self.s.buf.len - HEADER_SIZE))
            src = <const uint8_t *>PyBytes_AS_STRING(body)
            n = PyBytes_GET_SIZE(body)
        out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + n)
        p = <uint8_t *>PyBytes_AS_STRING(out)
        pb_put64(p, 0)
        pb_put32(p + 8, <uint32_t>(HEADER_SIZE + n - LOG_OVERHEAD))
        pb_put32(p + 12, <uint32_t>-1)  # partitionLeaderEpoch: set by the broker
        p[16] = 2
        pb_put16(p + 21, <uint16_t>(codec | (ATTR_TRANSACTIONAL if transactional else 0)))
        pb_put32(p + 23, <uint32_t>(self.s.count - 1))
        pb_put64(p + 27, self.s.first_ts)
        pb_put64(p + 35, self.s.max_ts)
        pb_put64(p + 43, producer_id)
        pb_put16(p + 51, <uint16_t>producer_epoch)
        pb_put32(p + 53, <uint32_t>base_sequence)
        pb_put32(p + 57, <uint32_t>self.s.count)
        memcpy(p + HEADER_SIZE, src, <size_t>n)
        if n >= NOGIL_MIN:
            with nogil:
                pb_put32(p + 17, pb_crc32c(0, p + CRC_START, <size_t>(HEADER_SIZE + n - CRC_START)))
        else:
            pb_put32(p + 17, pb_crc32c(0, p + CRC_START, <size_t>(HEADER_SIZE + n - CRC_START)))
        return out


# ---------------------------------------------------------------- record parsing

cdef struct Rec:
    int64_t ts_delta
    int64_t off_delta
    Py_ssize_t key_pos
    int64_t key_len  # -1: null
    Py_ssize_t value_pos
    int64_t value_len
    int64_t n_headers
    Py_ssize_t headers_pos
    Py_ssize_t end


cdef inline int read_varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) noexcept nogil:
    """R_OK or this module's varint error (native/varint.pxd reads it)."""
    cdef int e = read_zigzag(p, pos, end, out)
    if e == VARINT_OK:
        return R_OK
    return R_VARINT_TRUNCATED if e == VARINT_TRUNCATED else R_VARINT_LONG


cdef int parse_record(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, Rec *r) noexcept nogil:
    """Validate the record at pos (within end) and locate its fields; returns a RecErr."""
    cdef int64_t length, n, h
    cdef Py_ssize_t rec_end
    cdef int e = read_varint(p, &pos, end, &length)
    if e:
        return e
    if length < 0 or length > end - pos:
        return R_LENGTH
    rec_end = pos + length
    if pos >= rec_end:
        return R_TRUNCATED
    pos += 1  # record attributes: unused
    e = read_varint(p, &pos, rec_end, &r.ts_delta)
    if e:
        return e
    e = read_varint(p, &pos, rec_end, &r.off_delta)
    if e:
        return e
    e = read_varint(p, &pos, rec_end, &n)
    if e:
        return e
    if n < -1 or n > rec_end - pos:
        return R_KEY
    r.key_pos = pos
    r.key_len = n
    if n > 0:
        pos += n
    e = read_varint(p, &pos, rec_end, &n)
    if e:
        return e
    if n < -1 or n > rec_end - pos:
        return R_VALUE
    r.value_pos = pos
    r.value_len = n
    if n > 0:
        pos += n
    e = read_varint(p, &pos, rec_end, &r.n_headers)
    if e:
        return e
    if r.n_headers < 0 or r.n_headers > (rec_end - pos) // 2:  # every header takes at least 2 bytes
        return R_HEADER_COUNT
    r.headers_pos = pos
    for h in range(r.n_headers):
        e = read_varint(p, &pos, rec_end, &n)
        if e:
            return e
        if n < 0 or n > rec_end - pos:
            return R_HEADER_KEY
        pos += n
        e = read_varint(p, &pos, rec_end, &n)
        if e:
            return e
        if n < -1 or n > rec_end - pos:
            return R_HEADER_VALUE
        if n > 0:
            pos += n
    if pos != rec_end:
        return R_FIELDS
    r.end = rec_end
    return R_OK


cdef inline void next_header(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t *kpos, int64_t *kn,
                             Py_ssize_t *vpos, int64_t *vn) noexcept nogil:
    """One header of an already validated headers section."""
    kn[0] = 0
    vn[0] = -1
    read_varint(p, pos, end, kn)
    kpos[0] = pos[0]
    pos[0] += kn[0]
    read_varint(p, pos, end, vn)
    vpos[0] = pos[0]
    if vn[0] > 0:
        pos[0] += vn[0]


cdef list _headers_list(const uint8_t *p, const Rec *r):
    cdef list out = []
    cdef Py_ssize_t pos = r.headers_pos, kpos, vpos
    cdef int64_t kn, vn, h
    for h in range(r.n_headers):
        next_header(p, &pos, r.end, &kpos, &kn, &vpos, &vn)
        out.append((PyUnicode_DecodeUTF8(<const char *>p + kpos, kn, "replace"),
                    None if vn < 0 else PyBytes_FromStringAndSize(<const char *>p + vpos, vn)))
    return out


# ---------------------------------------------------------------- batch walking

cdef struct BatchInfo:
    Py_ssize_t position
    Py_ssize_t end
    int64_t base_offset
    int32_t leader_epoch
    int16_t attributes
    int32_t last_offset_delta
    int64_t base_ts
    int64_t max_ts
    int64_t producer_id
    int32_t count


cdef list _aborted_by_first_offset(aborted):
    """[(first_offset, producer_id)] sorted by first offset, from (producer_id, first_offset) pairs
    or from objects with ``producer_id``/``first_offset`` attributes (a fetch response's entries)."""
    cdef list out = []
    for entry in aborted or ():
        if hasattr(entry, "producer_id"):
            out.append((int(entry.first_offset), int(entry.producer_id)))
        else:
            pid, first = entry
            out.append((int(first), int(pid)))
    out.sort(key=lambda a: a[0])
    return out


cdef class _Walker:
    """Walks the complete batches of a fetch response, applying Kafka's read_committed filter."""
    cdef Py_buffer view
    cdef bint held
    cdef const uint8_t *p
    cdef Py_ssize_t n, pos
    cdef int64_t start_offset, next_offset
    cdef bint read_committed, check_crcs
    cdef list aborted
    cdef Py_ssize_t aborted_next
    cdef set ongoing
    cdef BatchInfo b
    cdef object section_obj  # keeps a decompressed records section alive
    cdef const uint8_t *sec
    cdef Py_ssize_t sec_len

    def __cinit__(self, buf, int64_t start_offset, bint read_committed, aborted, bint check_crcs):
        _acquire(buf, &self.view)
        self.held = True
        self.p = <const uint8_t *>self.view.buf
        self.n = self.view.len
        self.start_offset = self.next_offset = start_offset
        self.read_committed = read_committed
        self.check_crcs = check_crcs
        self.aborted = _aborted_by_first_offset(aborted)
        self.ongoing = set()

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)

    cdef int fail(self, str reason) except -1:
        raise CorruptRecordError(reason, self.b.base_offset, self.b.position)

    cdef int next_batch(self) except -1:
        """Move to the next batch to decode (1) or report the end (0)."""
        cdef const uint8_t *q
        cdef int32_t length
        cdef uint32_t stored, computed
        cdef int64_t last
        cdef int codec
        while self.n - self.pos >= LOG_OVERHEAD:
            q = self.p + self.pos
            self.b.position = self.pos
            self.b.base_offset = pb_get64(q)
            length = pb_get32(q + 8)
            if length < MIN_BATCH_LENGTH:
                self.fail(f"batch length {length} is smaller than {MIN_BATCH_LENGTH}")
            if self.n - self.pos - LOG_OVERHEAD < length:
                return 0  # a trailing partial batch
            self.b.end = self.pos + LOG_OVERHEAD + length
            if q[16] != 2:
                self.fail(f"unsupported magic {<int8_t>q[16]}")
            stored = <uint32_t>pb_get32(q + 17)
            if self.check_crcs:
                if length >= NOGIL_MIN:
                    with nogil:
                        computed = pb_crc32c(0, q + CRC_START, <size_t>(LOG_OVERHEAD + length - CRC_START))
                else:
                    computed = pb_crc32c(0, q + CRC_START, <size_t>(LOG_OVERHEAD + length - CRC_START))
                if computed != stored:
                    self.fail(f"crc mismatch (stored {stored:#010x}, computed {computed:#010x})")
            self.b.leader_epoch = pb_get32(q + 12)
            self.b.attributes = pb_get16(q + 21)
            self.b.last_offset_delta = pb_get32(q + 23)
            self.b.base_ts = pb_get64(q + 27)
            self.b.max_ts = pb_get64(q + 35)
            self.b.producer_id = pb_get64(q + 43)
            self.b.count = pb_get32(q + 57)
            codec = self.b.attributes & 0x07
            if codec > 4:
                self.fail(f"unknown compression codec {codec}")
            if self.b.count < 0:
                self.fail(f"negative record count {self.b.count}")
            last = <int64_t>(<uint64_t>self.b.base_offset + <uint64_t><int64_t>self.b.last_offset_delta)
            if last + 1 > self.next_offset:  # (wraps like the pure twin's 64-bit arithmetic)
                self.next_offset = last + 1
            self.pos = self.b.end
            if self.read_committed and self.b.producer_id >= 0:
                self._consume_aborted_upto(last)
                if self.b.attributes & ATTR_CONTROL:
                    if self._is_abort_marker():
                        self.ongoing.discard(self.b.producer_id)
                    continue
                if self.b.attributes & ATTR_TRANSACTIONAL and self.b.producer_id in self.ongoing:
                    continue
            if self.b.attributes & ATTR_CONTROL or last < self.start_offset:
                continue
            self.load_section()
            return 1
        return 0

    cdef void _consume_aborted_upto(self, int64_t offset):
        while self.aborted_next < len(self.aborted) and self.aborted[self.aborted_next][0] <= offset:
            self.ongoing.add(self.aborted[self.aborted_next][1])
            self.aborted_next += 1

    cdef int load_section(self) except -1:
        cdef int codec = self.b.attributes & 0x07
        cdef const uint8_t *raw = self.p + self.b.position + HEADER_SIZE
        cdef Py_ssize_t raw_len = self.b.end - self.b.position - HEADER_SIZE
        self.section_obj = None
        if codec == 0:
            self.sec = raw
            self.sec_len = raw_len
            return 0
        try:
            out = decompress(codec, PyBytes_FromStringAndSize(<const char *>raw, raw_len))
        except Exception as exc:
            self.fail(f"decompression failed: {exc}")
        if not PyBytes_CheckExact(out):
            out = bytes(out)
        self.section_obj = out
        self.sec = <const uint8_t *>PyBytes_AS_STRING(out)
        self.sec_len = PyBytes_GET_SIZE(out)
        return 0

    cdef bint _is_abort_marker(self) except -1:
        cdef Rec r
        cdef int e
        if self.b.count < 1:
            return False
        self.load_section()
        e = parse_record(self.sec, 0, self.sec_len, &r)
        if e:
            self.fail(f"record 0: {_RECORD_ERRORS[e]}")
        if r.key_len < 4:
            self.fail("control record key shorter than 4 bytes")
        return pb_get16(self.sec + r.key_pos + 2) == 0

    cdef int record_fault(self, int e, int64_t index, Py_ssize_t pos) except -1:
        if e == R_COUNT_EXCEEDS:
            self.fail(f"record count {self.b.count} exceeds the records in the batch")
        if e == R_BYTES_LEFT:
            self.fail(f"{self.sec_len - pos} bytes left after {self.b.count} records")
        if e == R_TOO_BIG:
            raise ValueError("decoded column exceeds 2 GiB")
        if e == R_NO_MEMORY:
            raise MemoryError()
        self.fail(f"record {index}: {_RECORD_ERRORS[e]}")


# ---------------------------------------------------------------- decode_records

@cython.freelist(64)
@cython.no_gc
cdef class ConsumerRecord:
    """One fetched record; attributes are read-only. ``headers`` is a list of (str, bytes|None), or
    the empty tuple when the record has none (no allocation per record on the hot path);
    ``timestamp_type`` is 0 (CreateTime) or 1 (LogAppendTime); ``leader_epoch`` is -1 when unknown."""
    cdef readonly object topic
    cdef readonly int32_t partition
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly int timestamp_type
    cdef readonly object key
    cdef readonly object value
    cdef readonly object headers
    cdef readonly int32_t leader_epoch

    def __init__(self, topic, int32_t partition, int64_t offset, int64_t timestamp, int timestamp_type,
                 key, value, headers, int32_t leader_epoch=-1):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self.headers = headers
        self.leader_epoch = leader_epoch

    def _fields(self):
        return (self.topic, self.partition, self.offset, self.timestamp, self.timestamp_type,
                self.key, self.value, self.headers, self.leader_epoch)

    def __eq__(self, other):
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None

    def __reduce__(self):
        return (ConsumerRecord, self._fields())

    def __repr__(self):
        return (f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
                f"timestamp={self.timestamp}, timestamp_type={self.timestamp_type}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r}, leader_epoch={self.leader_epoch})")


def decode_records(buf, topic, int32_t partition, int64_t start_offset, bint read_committed=False,
                   aborted=None, bint check_crcs=True, int64_t max_records=-1):
    """Records (offset >= start_offset) of every complete batch in ``buf`` -> (list, next_offset).

    Control batches and (with read_committed) aborted transactions are skipped. next_offset is
    one past the last complete batch (never below start_offset); when ``max_records`` (>= 0)
    cuts the list short, it is the offset of the first record left out.
    """
    cdef _Walker w = _Walker(buf, start_offset, read_committed, aborted, check_crcs)
    cdef list out = []
    cdef Py_ssize_t taken = 0, pos
    cdef int32_t i
    cdef int e
    cdef Rec r
    cdef int64_t offset, ts
    cdef int ts_type
    cdef bint log_append
    cdef ConsumerRecord rec
    cdef const uint8_t *p
    while w.next_batch():
        p = w.sec
        pos = 0
        log_append = (w.b.attributes & ATTR_LOG_APPEND_TIME) != 0
        ts_type = 1 if log_append else 0
        for i in range(w.b.count):
            if pos >= w.sec_len:
                w.record_fault(R_COUNT_EXCEEDS, i, pos)
            e = parse_record(p, pos, w.sec_len, &r)
            if e:
                w.record_fault(e, i, pos)
            pos = r.end
            offset = <int64_t>(<uint64_t>w.b.base_offset + <uint64_t>r.off_delta)
            if offset < start_offset:
                continue
            if 0 <= max_records <= taken:
                return out, offset
            rec = ConsumerRecord.__new__(ConsumerRecord)
            rec.topic = topic
            rec.partition = partition
            rec.offset = offset
            rec.timestamp = w.b.max_ts if log_append else <int64_t>(<uint64_t>w.b.base_ts + <uint64_t>r.ts_delta)
            rec.timestamp_type = ts_type
            rec.key = None if r.key_len < 0 else PyBytes_FromStringAndSize(<const char *>p + r.key_pos, r.key_len)
            rec.value = (None if r.value_len < 0 else
                         PyBytes_FromStringAndSize(<const char *>p + r.value_pos, r.value_len))
            rec.headers = () if r.n_headers == 0 else _headers_list(p, &r)  # shared: no allocation per record
            rec.leader_epoch = w.b.leader_epoch
            PyList_Append(out, rec)
            taken += 1
        if pos != w.sec_len:
            w.record_fault(R_BYTES_LEFT, w.b.count, pos)
    return out, w.next_offset


# ---------------------------------------------------------------- decode_columns

@cython.final
cdef class ColumnBuffer:
    """A malloc'd buffer handed to Arrow without a copy (exports the buffer protocol)."""
    cdef uint8_t *p
    cdef Py_ssize_t n

    def __dealloc__(self):
        free(self.p)

    def __len__(self):
        return self.n

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, self.p, self.n, 0, flags)

    def __releasebuffer__(self, Py_buffer *view):
        pass

    def __eq__(self, other):
        return bytes(self) == bytes(other)

    def __repr__(self):
        return f"ColumnBuffer({self.n} bytes)"


cdef ColumnBuffer _take(Buf *b):
    """Hand a C buffer over to a Python object (b is left empty)."""
    cdef ColumnBuffer out = ColumnBuffer.__new__(ColumnBuffer)
    if b.p == NULL:
        b.p = <uint8_t *>malloc(1)
        if b.p == NULL:
            raise MemoryError()
    out.p = b.p
    out.n = <Py_ssize_t>b.len
    b.p = NULL
    b.len = b.cap = 0
    return out


cdef struct Bin:
    Buf offsets  # int32 entries, starting with 0
    Buf data
    Buf validity
    bint has_null
    int64_t n


cdef inline int bin_add(Bin *c, const uint8_t *src, int64_t n) noexcept nogil:
    """Append one entry (n < 0: null); returns a RecErr."""
    cdef int64_t i = c.n, j
    if n < 0 and not c.has_null:
        # the first null: earlier entries all valid
        if buf_reserve(&c.validity, <size_t>(i >> 3) + 1) < 0:
            return R_NO_MEMORY
        memset(c.validity.p, 0xFF, <size_t>(i >> 3))
        c.validity.p[i >> 3] = <uint8_t>((1 << (i & 7)) - 1)
        c.validity.len = <size_t>(i >> 3) + 1
        c.has_null = True
    if c.has_null:
        if c.validity.len < <size_t>(i >> 3) + 1:
            if buf_reserve(&c.validity, 1) < 0:
                return R_NO_MEMORY
            c.validity.p[c.validity.len] = 0
            c.validity.len += 1
        if n >= 0:
            c.validity.p[i >> 3] |= <uint8_t>(1 << (i & 7))
    if n > 0:
        if <int64_t>c.data.len + n > MAX_ARROW_BYTES:
            return R_TOO_BIG
        if buf_reserve(&c.data, <size_t>n) < 0:
            return R_NO_MEMORY
        memcpy(c.data.p + c.data.len, src, <size_t>n)
        c.data.len += <size_t>n
    if buf_reserve(&c.offsets, 4) < 0:
        return R_NO_MEMORY
    (<int32_t *>(c.offsets.p + c.offsets.len))[0] = <int32_t>c.data.len
    c.offsets.len += 4
    c.n = i + 1
    return R_OK


cdef inline int bin_init(Bin *c) noexcept nogil:
    memset(c, 0, sizeof(Bin))
    if buf_reserve(&c.offsets, 4) < 0:
        return -1
    (<int32_t *>c.offsets.p)[0] = 0
    c.offsets.len = 4
    return 0


cdef inline void bin_free(Bin *c) noexcept nogil:
    free(c.offsets.p)
    free(c.data.p)
    free(c.validity.p)


cdef inline int put64(Buf *b, int64_t v) noexcept nogil:
    if buf_reserve(b, 8) < 0:
        return -1
    memcpy(b.p + b.len, &v, 8)
    b.len += 8
    return 0


cdef inline int put32(Buf *b, int32_t v) noexcept nogil:
    if buf_reserve(b, 4) < 0:
        return -1
    memcpy(b.p + b.len, &v, 4)
    b.len += 4
    return 0


cdef struct Cols:
    Bin keys
    Bin values
    Bin hkeys
    Bin hvalues
    Buf offsets
    Buf timestamps
    Buf types
    Buf hoffsets
    int64_t count
    int64_t max_records
    int64_t start_offset
    bint stopped
    int64_t stop_offset
    # where a record-level fault happened
    int64_t fault_index
    Py_ssize_t fault_pos


cdef inline bint _ascii(const uint8_t *p, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        if p[i] >= 0x80:
            return False
    return True


cdef int _add_header_key(Bin *c, const uint8_t *p, int64_t n) except -1 nogil:
    """Arrow strings must be valid UTF-8: bad bytes become U+FFFD, as in decode_records."""
    cdef int e
    if _ascii(p, n):
        return bin_add(c, p, n)
    with gil:
        fixed = PyUnicode_DecodeUTF8(<const char *>p, n, "replace").encode("utf-8")
        e = bin_add(c, <const uint8_t *>PyBytes_AS_STRING(fixed), PyBytes_GET_SIZE(fixed))
    return e


cdef int _columns_batch(Cols *c, const uint8_t *p, Py_ssize_t n, const BatchInfo *b) except -1 nogil:
    """Decode one records section into the columns; returns a RecErr (fault_index/pos set)."""
    cdef Py_ssize_t pos = 0, kpos, vpos, hpos
    cdef int32_t i
    cdef int64_t offset, kn, vn, h
    cdef int e
    cdef Rec r
    cdef bint log_append = (b.attributes & ATTR_LOG_APPEND_TIME) != 0
    for i in range(b.count):
        c.fault_index = i
        if pos >= n:
            return R_COUNT_EXCEEDS
        e = parse_record(p, pos, n, &r)
        if e:
            return e
        pos = r.end
        offset = <int64_t>(<uint64_t>b.base_offset + <uint64_t>r.off_delta)
        if offset < c.start_offset:
            continue
        if 0 <= c.max_records <= c.count:
            c.stopped = True
            c.stop_offset = offset
            return R_OK
        if put64(&c.offsets, offset) < 0:
            return R_NO_MEMORY
        if put64(&c.timestamps, b.max_ts if log_append else
                 <int64_t>(<uint64_t>b.base_ts + <uint64_t>r.ts_delta)) < 0:
            return R_NO_MEMORY
        if put32(&c.types, 1 if log_append else 0) < 0:
            return R_NO_MEMORY
        e = bin_add(&c.keys, p + r.key_pos, r.key_len)
        if e:
            return e
        e = bin_add(&c.values, p + r.value_pos, r.value_len)
        if e:
            return e
        hpos = r.headers_pos
        for h in range(r.n_headers):
            next_header(p, &hpos, r.end, &kpos, &kn, &vpos, &vn)
            e = _add_header_key(&c.hkeys, p + kpos, kn)
            if e:
                return e
            e = bin_add(&c.hvalues, p + vpos, vn)
            if e:
                return e
        if put32(&c.hoffsets, <int32_t>c.hkeys.n) < 0:
            return R_NO_MEMORY
        c.count += 1
    c.fault_pos = pos
    if pos != n:
        return R_BYTES_LEFT
    return R_OK


cdef class Columns:
    """Arrow-ready buffers of decoded records (see pybroker.client.arrow.to_record_batch).

    Offsets buffers are int32 (count+1 entries); validity bitmaps are None when no entry is null.
    ``header_offsets`` index the flattened headers (``header_count`` of them)."""
    cdef readonly object count, next_offset
    cdef readonly object key_validity, key_offsets, key_data
    cdef readonly object value_validity, value_offsets, value_data
    cdef readonly object offsets, timestamps, timestamp_types
    cdef readonly object header_offsets, header_count, header_key_offsets, header_key_data
    cdef readonly object header_value_validity, header_value_offsets, header_value_data


cdef object _validity(Bin *b):
    return _take(&b.validity) if b.has_null else None


def decode_columns(buf, int64_t start_offset, bint read_committed=False, aborted=None, bint check_crcs=True,
                   int64_t max_records=-1):
    """Like decode_records, but into column buffers; at most ``max_records`` rows when >= 0."""
    cdef _Walker w = _Walker(buf, start_offset, read_committed, aborted, check_crcs)
    cdef Cols c
    cdef int e = 0
    cdef Columns out
    memset(&c, 0, sizeof(Cols))
    c.max_records = max_records
    c.start_offset = start_offset
    try:
        if (bin_init(&c.keys) < 0 or bin_init(&c.values) < 0 or bin_init(&c.hkeys) < 0 or
                bin_init(&c.hvalues) < 0 or put32(&c.hoffsets, 0) < 0):
            raise MemoryError()
        while not c.stopped and w.next_batch():
            if w.sec_len >= NOGIL_MIN:
                with nogil:
                    e = _columns_batch(&c, w.sec, w.sec_len, &w.b)
            else:
                e = _columns_batch(&c, w.sec, w.sec_len, &w.b)
            if e:
                w.record_fault(e, c.fault_index, c.fault_pos)
        out = Columns.__new__(Columns)
        out.count = c.count
        out.next_offset = c.stop_offset if c.stopped else w.next_offset
        out.key_validity = _validity(&c.keys)
        out.key_offsets = _take(&c.keys.offsets)
        out.key_data = _take(&c.keys.data)
        out.value_validity = _validity(&c.values)
        out.value_offsets = _take(&c.values.offsets)
        out.value_data = _take(&c.values.data)
        out.offsets = _take(&c.offsets)
        out.timestamps = _take(&c.timestamps)
        out.timestamp_types = _take(&c.types)
        out.header_offsets = _take(&c.hoffsets)
        out.header_count = c.hkeys.n
        out.header_key_offsets = _take(&c.hkeys.offsets)
        out.header_key_data = _take(&c.hkeys.data)
        out.header_value_validity = _validity(&c.hvalues)
        out.header_value_offsets = _take(&c.hvalues.offsets)
        out.header_value_data = _take(&c.hvalues.data)
        return out
    finally:
        bin_free(&c.keys)
        bin_free(&c.values)
        bin_free(&c.hkeys)
        bin_free(&c.hvalues)
        free(c.offsets.p)
        free(c.timestamps.p)
        free(c.types.p)
        free(c.hoffsets.p)
