"""Produce decode and Fetch encode for the hot paths (native; twin: pybroker/_pure/kafka_codec.py).

Wire layouts, zero-copy and error contract: pybroker/contracts/kafka_codec.py. The request is
read through one {pointer, length} view of the frame with the bytes left checked before every
read; records come back as memoryview slices of the frame. The response is assembled in a C
buffer that becomes one bytes object per run between the caller's file slices.
"""
from cpython.buffer cimport (PyBUF_RECORDS_RO, PyBuffer_IsContiguous, PyBuffer_Release,
                             PyObject_GetBuffer)
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.number cimport PyNumber_Index
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_DecodeUTF8
from libc.stdint cimport (INT16_MAX, INT16_MIN, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, int16_t,
                          int32_t, int64_t, uint8_t, uint32_t)
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from pybroker.contracts.kafka_codec import (FETCH_MAX_VERSION, FETCH_MIN_VERSION, PRODUCE_MAX_VERSION,
                                            PRODUCE_MIN_VERSION, DecodeError, EncodeError,
                                            PartitionData, ProduceData, TopicData,
                                            UnsupportedVersionError)

cdef extern from *:
    """
    /* Build a tuple-subclass (NamedTuple) instance directly, as tuple.__new__(cls, items) does. */
    static PyObject *pb_tuple2(PyObject *cls, PyObject *a, PyObject *b) {
        PyTypeObject *t = (PyTypeObject *)cls;
        PyObject *o = t->tp_alloc(t, 2);
        if (o == NULL) return NULL;
        Py_INCREF(a); PyTuple_SET_ITEM(o, 0, a);
        Py_INCREF(b); PyTuple_SET_ITEM(o, 1, b);
        return o;
    }
    static PyObject *pb_tuple4(PyObject *cls, PyObject *a, PyObject *b, PyObject *c, PyObject *d) {
        PyTypeObject *t = (PyTypeObject *)cls;
        PyObject *o = t->tp_alloc(t, 4);
        if (o == NULL) return NULL;
        Py_INCREF(a); PyTuple_SET_ITEM(o, 0, a);
        Py_INCREF(b); PyTuple_SET_ITEM(o, 1, b);
        Py_INCREF(c); PyTuple_SET_ITEM(o, 2, c);
        Py_INCREF(d); PyTuple_SET_ITEM(o, 3, d);
        return o;
    }
    """
    object pb_tuple2(object cls, object a, object b)
    object pb_tuple4(object cls, object a, object b, object c, object d)

cdef object _PartitionData = PartitionData
cdef object _TopicData = TopicData
cdef object _ProduceData = ProduceData


cdef inline uint32_t _be32(const uint8_t *p) noexcept nogil:
    return <uint32_t>p[0] << 24 | <uint32_t>p[1] << 16 | <uint32_t>p[2] << 8 | <uint32_t>p[3]

cdef inline int16_t _be16s(const uint8_t *p) noexcept nogil:
    return <int16_t>(<uint32_t>p[0] << 8 | p[1])


# ---- Produce request -----------------------------------------------------------------------

cdef struct Reader:
    const uint8_t *p
    Py_ssize_t pos   # offset in the frame of the next byte
    Py_ssize_t end   # frame length
    int version


cdef object _short(Reader *r, what, Py_ssize_t need):
    return DecodeError(f"ProduceRequest v{r.version}: {what} at offset {r.pos} needs {need} bytes, "
                       f"only {r.end - r.pos} left")


cdef object _string(Reader *r, what, bint nullable):
    """An int16-length string at r.pos (None when null and allowed); advances r.pos."""
    cdef Py_ssize_t n
    if r.end - r.pos < 2:
        raise _short(r, what + " length", 2)
    n = _be16s(r.p + r.pos)
    if n < 0:
        if n == -1 and nullable:
            r.pos += 2
            return None
        raise DecodeError(f"ProduceRequest v{r.version}: {what} at offset {r.pos} has length {n}")
    r.pos += 2
    if r.end - r.pos < n:
        raise _short(r, what, n)
    try:
        s = PyUnicode_DecodeUTF8(<const char *>r.p + r.pos, n, NULL)
    except UnicodeDecodeError:
        raise DecodeError(f"ProduceRequest v{r.version}: {what} at offset {r.pos} is not valid UTF-8") from None
    r.pos += n
    return s


cdef Py_ssize_t _count(Reader *r, what, Py_ssize_t elem_min) except -1:
    """An int32 array count, refused when even minimal elements could not fit in the bytes left."""
    cdef int64_t n
    if r.end - r.pos < 4:
        raise _short(r, what + " count", 4)
    n = <int32_t>_be32(r.p + r.pos)
    if n < 0:
        raise DecodeError(f"ProduceRequest v{r.version}: {what} count at offset {r.pos} is {n}")
    r.pos += 4
    if n * elem_min > r.end - r.pos:
        raise DecodeError(f"ProduceRequest v{r.version}: {what} count {n} at offset {r.pos - 4} "
                          f"exceeds the {r.end - r.pos} bytes left")
    return <Py_ssize_t>n


def decode_produce(frame, pos, version):
    """ProduceRequest v3-v8 body at ``pos`` of ``frame`` -> ProduceData (records zero-copy)."""
    cdef Py_buffer view
    cdef Reader r
    cdef Py_ssize_t ntopics, nparts, t, k
    cdef int32_t index, n
    if not PRODUCE_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        raise UnsupportedVersionError("ProduceRequest (hot path)", 0, version)
    if type(frame) is not memoryview:
        frame = memoryview(frame)
    PyObject_GetBuffer(frame, &view, PyBUF_RECORDS_RO)
    try:
        if view.ndim != 1 or view.itemsize != 1 or not PyBuffer_IsContiguous(&view, b'C'):
            raise TypeError("frame must be a contiguous one-dimensional buffer of bytes")
        r.p = <const uint8_t *>view.buf
        r.end = view.len
        r.version = version
        if not 0 <= pos <= r.end:  # compared as Python ints: any int gets this error
            raise DecodeError(f"ProduceRequest v{version}: body offset {pos} is outside the "
                              f"{r.end}-byte frame")
        r.pos = pos
        transactional_id = _string(&r, "transactional_id", True)
        if r.end - r.pos < 6:
            raise _short(&r, "acks and timeout_ms", 6)
        acks = _be16s(r.p + r.pos)
        timeout_ms = <int32_t>_be32(r.p + r.pos + 2)
        r.pos += 6
        ntopics = _count(&r, "topic", 6)  # name length + partition count
        topics = []
        for t in range(ntopics):
            name = _string(&r, "topic name", False)
            nparts = _count(&r, "partition", 8)  # index + records length
            parts = []
            for k in range(nparts):
                if r.end - r.pos < 8:
                    raise _short(&r, "partition index and records length", 8)
                index = <int32_t>_be32(r.p + r.pos)
                n = <int32_t>_be32(r.p + r.pos + 4)
                r.pos += 8
                if n < 0:
                    if n != -1:
                        raise DecodeError(f"ProduceRequest v{version}: records at offset {r.pos - 4} "
                                          f"have length {n}")
                    records = None
                else:
                    if r.end - r.pos < n:
                        raise _short(&r, "records", n)
                    records = frame[r.pos:r.pos + n]
                    r.pos += n
                parts.append(pb_tuple2(_PartitionData, index, records))
            topics.append(pb_tuple2(_TopicData, name, parts))
        return pb_tuple4(_ProduceData, transactional_id, acks, timeout_ms, topics)
    finally:
        PyBuffer_Release(&view)


# ---- Fetch response ------------------------------------------------------------------------

cdef struct Out:
    uint8_t *p
    Py_ssize_t n
    Py_ssize_t cap


cdef int _reserve(Out *o, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap
    cdef uint8_t *q
    if o.n + extra <= o.cap:
        return 0
    cap = o.cap * 2 if o.cap else 256
    while cap < o.n + extra:
        cap *= 2
    q = <uint8_t *>realloc(o.p, cap)
    if q == NULL:
        raise MemoryError()
    o.p = q
    o.cap = cap
    return 0


cdef inline void _put16(Out *o, int64_t v) noexcept:
    o.p[o.n] = <uint8_t>(v >> 8)
    o.p[o.n + 1] = <uint8_t>v
    o.n += 2

cdef inline void _put32(Out *o, int64_t v) noexcept:
    cdef int i
    for i in range(4):
        o.p[o.n + i] = <uint8_t>(v >> (24 - 8 * i))
    o.n += 4

cdef inline void _put64(Out *o, int64_t v) noexcept:
    cdef int i
    for i in range(8):
        o.p[o.n + i] = <uint8_t>(v >> (56 - 8 * i))
    o.n += 8


cdef int64_t _int(object v, int64_t lo, int64_t hi, what) except? -1:
    """A Python integer checked against [lo, hi]; EncodeError naming ``what`` otherwise."""
    cdef int overflow = 0
    cdef long long x
    if type(v) is int:
        x = PyLong_AsLongLongAndOverflow(v, &overflow)
        if not overflow and lo <= x <= hi:
            return x  # the usual case: no conversion
    try:
        idx = PyNumber_Index(v)
    except TypeError:
        raise EncodeError(f"FetchResponse: {what} must be an integer, not {type(v).__name__}") from None
    x = PyLong_AsLongLongAndOverflow(idx, &overflow)
    if overflow or x < lo or x > hi:
        raise EncodeError(f"FetchResponse: {what} {idx} is out of range [{lo}, {hi}]")
    return x


cdef bytes _topic_name(name):
    if type(name) is not str:
        raise EncodeError(f"FetchResponse: topic name must be a str, not {type(name).__name__}")
    try:
        b = PyUnicode_AsUTF8String(name)
    except UnicodeEncodeError:
        raise EncodeError(f"FetchResponse: topic name {name!r} is not encodable as UTF-8") from None
    if len(b) > 0x7FFF:
        raise EncodeError(f"FetchResponse: topic name of {len(b)} bytes exceeds 32767")
    return b


cdef enum:
    PART_MAX = 48  # largest fixed part of one partition (v11)


def encode_fetch(version, topics, results, committed_only):
    """FetchResponse v4-v11 body as [bytes, slice, bytes, slice, ..., bytes?] (see the contract)."""
    cdef Out o
    cdef Py_ssize_t total = 0, k = 0, nres, i
    cdef int64_t partition, error, hw, lso, lstart = 0, length, pid, first
    cdef int32_t aborted
    cdef Py_ssize_t ntxns
    cdef bint committed = bool(committed_only)
    cdef int v
    if not FETCH_MIN_VERSION <= version <= FETCH_MAX_VERSION:
        raise EncodeError(f"FetchResponse: version {version} is not supported "
                          f"({FETCH_MIN_VERSION}-{FETCH_MAX_VERSION})")
    for t in topics:
        total += len(t.partitions)
    nres = len(results)
    if total != nres:
        raise EncodeError(f"FetchResponse: {nres} results for {total} requested partitions")
    v = version
    aborted = 0 if committed else -1  # empty array / null (read_uncommitted), unless aborted transactions follow
    out = []
    o.p = NULL
    o.n = o.cap = 0
    try:
        _reserve(&o, 14)
        _put32(&o, 0)  # throttle_time_ms
        if v >= 7:
            _put16(&o, 0)  # error_code
            _put32(&o, 0)  # session_id
        _put32(&o, len(topics))
        for t in topics:
            name = _topic_name(t.topic)
            parts = t.partitions
            _reserve(&o, 6 + len(<bytes>name))
            _put16(&o, len(<bytes>name))
            memcpy(o.p + o.n, <const char *>name, len(<bytes>name))
            o.n += len(<bytes>name)
            _put32(&o, len(parts))
            for p in parts:
                r = results[k]
                k += 1
                partition = _int(p.partition, INT32_MIN, INT32_MAX, "partition index")
                error = _int(r.error, INT16_MIN, INT16_MAX, "error code")
                hw = _int(r.high_watermark, INT64_MIN, INT64_MAX, "high watermark")
                lso = _int(r.last_stable_offset, INT64_MIN, INT64_MAX, "last stable offset")
                if v >= 5:
                    lstart = _int(r.log_start_offset, INT64_MIN, INT64_MAX, "log start offset")
                records = r.records
                length = 0 if records is None else _int(records.length, 0, INT32_MAX, "records length")
                _reserve(&o, PART_MAX)
                _put32(&o, partition)
                _put16(&o, error)
                _put64(&o, hw)
                _put64(&o, lso)
                if v >= 5:
                    _put64(&o, lstart)
                txns = r.aborted_transactions if committed else None
                if txns:  # read_committed: (producer id, first offset) of each aborted transaction
                    ntxns = len(txns)
                    _put32(&o, ntxns)
                    for txn in txns:
                        tpid, tfirst = txn
                        pid = _int(tpid, INT64_MIN, INT64_MAX, "aborted producer id")
                        first = _int(tfirst, INT64_MIN, INT64_MAX, "aborted first offset")
                        _reserve(&o, 16 + PART_MAX)
                        _put64(&o, pid)
                        _put64(&o, first)
                else:
                    _put32(&o, aborted)
                if v >= 11:
                    _put32(&o, -1)  # preferred read replica
                _put32(&o, length)
                if records is not None:
                    out.append(PyBytes_FromStringAndSize(<const char *>o.p, o.n))
                    out.append(records)
                    o.n = 0
        if o.n:
            out.append(PyBytes_FromStringAndSize(<const char *>o.p, o.n))
        return out
    finally:
        free(o.p)
