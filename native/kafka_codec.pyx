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
                          int32_t, int64_t, uint8_t, uint32_t, uint64_t)
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

import uuid

from pybroker.contracts.kafka_codec import (FETCH_MAX_VERSION, FETCH_MIN_VERSION, MAX_STRING,
                                            PRODUCE_FIRST_FLEXIBLE_VERSION, PRODUCE_MAX_VERSION,
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
    /* The 16 big-endian bytes of a non-negative int below 2**128 (a UUID's .int); -1 with an
       exception set otherwise. */
    static int pb_u128_be(PyObject *v, unsigned char *out) {
    #if PY_VERSION_HEX >= 0x030D0000
        Py_ssize_t n = PyLong_AsNativeBytes(v, out, 16, Py_ASNATIVEBYTES_BIG_ENDIAN |
                                            Py_ASNATIVEBYTES_UNSIGNED_BUFFER | Py_ASNATIVEBYTES_REJECT_NEGATIVE);
        if (n < 0) return -1;
        if (n > 16) { PyErr_SetString(PyExc_OverflowError, "int too big for 16 bytes"); return -1; }
        return 0;
    #else
        return _PyLong_AsByteArray((PyLongObject *)v, out, 16, 0, 0);
    #endif
    }
    """
    int pb_u128_be(object v, unsigned char *out) except -1
    object pb_tuple2(object cls, object a, object b)
    object pb_tuple4(object cls, object a, object b, object c, object d)

cdef object _UUID = uuid.UUID
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


# Flexible versions (v9+): compact strings/arrays/records and tagged fields. ``what`` names the
# field in error messages; callers pass literals so no text is built unless there is an error.

cdef int64_t _uvarint(Reader *r, what) except -1:
    """An unsigned varint of at most 5 bytes and 32 bits at r.pos; advances r.pos."""
    cdef Py_ssize_t start = r.pos
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    if r.pos < r.end and r.p[r.pos] < 0x80:  # the usual one-byte case
        r.pos += 1
        return r.p[r.pos - 1]
    for shift in range(0, 35, 7):
        if r.pos >= r.end:
            raise DecodeError(f"ProduceRequest v{r.version}: {what} at offset {start} is a truncated varint")
        b = r.p[r.pos]
        r.pos += 1
        value |= <uint64_t>(b & 0x7F) << shift
        if b < 0x80:
            if value > <uint64_t>0xFFFFFFFF:
                raise DecodeError(f"ProduceRequest v{r.version}: {what} at offset {start} is a varint over 32 bits")
            return <int64_t>value
    raise DecodeError(f"ProduceRequest v{r.version}: {what} at offset {start} is a varint longer than 5 bytes")


cdef object _compact_string(Reader *r, what, bint nullable):
    """A compact string (uvarint length + 1, 0 = null) at r.pos; advances r.pos."""
    cdef Py_ssize_t start = r.pos
    cdef int64_t n = _uvarint(r, what)
    if n == 0:
        if nullable:
            return None
        raise DecodeError(f"ProduceRequest v{r.version}: {what} at offset {start} is null")
    n -= 1
    if n > MAX_STRING:
        raise DecodeError(f"ProduceRequest v{r.version}: {what} at offset {r.pos} has length {n}, "
                          f"over {MAX_STRING}")
    if r.end - r.pos < n:
        raise _short(r, what, n)
    try:
        s = PyUnicode_DecodeUTF8(<const char *>r.p + r.pos, n, NULL)
    except UnicodeDecodeError:
        raise DecodeError(f"ProduceRequest v{r.version}: {what} at offset {r.pos} is not valid UTF-8") from None
    r.pos += n
    return s


cdef Py_ssize_t _compact_count(Reader *r, what, int64_t elem_min) except -1:
    """A non-nullable compact array count, refused when even minimal elements could not fit."""
    cdef Py_ssize_t start = r.pos
    cdef int64_t n = _uvarint(r, what)
    if n == 0:
        raise DecodeError(f"ProduceRequest v{r.version}: {what} at offset {start} is null")
    n -= 1
    if n * elem_min > r.end - r.pos:
        raise DecodeError(f"ProduceRequest v{r.version}: {what} {n} at offset {start} exceeds the "
                          f"{r.end - r.pos} bytes left")
    return <Py_ssize_t>n


cdef int _skip_tags(Reader *r, what) except -1:
    """Past a tagged-field section: Produce requests define no tags, so each is skipped."""
    cdef int64_t n, i, size
    if r.pos < r.end and r.p[r.pos] == 0:  # the usual empty section
        r.pos += 1
        return 0
    n = _uvarint(r, what)
    if 2 * n > r.end - r.pos:  # each field takes at least its tag and size bytes
        raise DecodeError(f"ProduceRequest v{r.version}: {n} {what} at offset {r.pos} exceed the "
                          f"{r.end - r.pos} bytes left")
    for i in range(n):
        _uvarint(r, what)
        size = _uvarint(r, what)
        if r.end - r.pos < size:
            raise _short(r, what, size)
        r.pos += size
    return 0


cdef object _decode_flexible(Reader *r, frame):
    cdef Py_ssize_t ntopics, nparts, t, k
    cdef int32_t index
    cdef int64_t n
    transactional_id = _compact_string(r, "transactional_id", True)
    if r.end - r.pos < 6:
        raise _short(r, "acks and timeout_ms", 6)
    acks = _be16s(r.p + r.pos)
    timeout_ms = <int32_t>_be32(r.p + r.pos + 2)
    r.pos += 6
    ntopics = _compact_count(r, "topic count", 3)  # name + partition count + tags
    topics = []
    for t in range(ntopics):
        name = _compact_string(r, "topic name", False)
        nparts = _compact_count(r, "partition count", 6)  # index + records length + tags
        parts = []
        for k in range(nparts):
            if r.end - r.pos < 4:
                raise _short(r, "partition index", 4)
            index = <int32_t>_be32(r.p + r.pos)
            r.pos += 4
            n = _uvarint(r, "records")
            if n == 0:
                records = None
            else:
                n -= 1
                if r.end - r.pos < n:
                    raise _short(r, "records", n)
                records = frame[r.pos:r.pos + n]
                r.pos += n
            _skip_tags(r, "partition tagged fields")
            parts.append(pb_tuple2(_PartitionData, index, records))
        _skip_tags(r, "topic tagged fields")
        topics.append(pb_tuple2(_TopicData, name, parts))
    _skip_tags(r, "request tagged fields")
    return pb_tuple4(_ProduceData, transactional_id, acks, timeout_ms, topics)


def decode_produce(frame, pos, version):
    """ProduceRequest v3-v11 body at ``pos`` of ``frame`` -> ProduceData (records zero-copy)."""
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
        if version >= PRODUCE_FIRST_FLEXIBLE_VERSION:
            return _decode_flexible(&r, frame)
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
    PART_MAX = 48  # largest fixed part of one partition (v11; flexible v12+: 40, and its empty tag section)
    TAGS_MAX = 32  # a partition's tagged fields: count, diverging_epoch (15), current_leader (11)
    FIRST_FLEXIBLE = 12
    FIRST_TOPIC_ID = 13
    FIRST_NODE_ENDPOINTS = 16


cdef inline void _putuv(Out *o, uint32_t v) noexcept:
    """An unsigned varint (at most 5 bytes: the caller reserved them)."""
    while v >= 0x80:
        o.p[o.n] = <uint8_t>(v | 0x80)
        o.n += 1
        v >>= 7
    o.p[o.n] = <uint8_t>v
    o.n += 1


cdef bytes _topic_id(tid):
    """16 bytes of a topic id given as a uuid.UUID or 16 bytes."""
    if type(tid) is bytes and len(<bytes>tid) == 16:
        return tid
    try:
        b = tid.bytes
    except AttributeError:
        raise EncodeError(f"FetchResponse: topic id must be a UUID or 16 bytes, not {type(tid).__name__}") from None
    if type(b) is not bytes or len(<bytes>b) != 16:
        raise EncodeError(f"FetchResponse: topic id must be a UUID or 16 bytes, not {type(tid).__name__}")
    return b


cdef int _put_topic(Out *o, t, int v) except -1:
    """The topic's name (v4-v12) or id (v13+)."""
    cdef Py_ssize_t n
    if v >= FIRST_TOPIC_ID:
        tid = t.topic_id
        _reserve(o, 16)
        if type(tid) is _UUID:  # its 128-bit int straight into the buffer: no bytes object
            iv = tid.int
            if type(iv) is int:
                pb_u128_be(iv, o.p + o.n)
                o.n += 16
                return 0
        b = _topic_id(tid)
        memcpy(o.p + o.n, <const char *>b, 16)
        o.n += 16
        return 0
    b = _topic_name(t.topic)
    n = len(<bytes>b)
    _reserve(o, 5 + n)
    if v >= FIRST_FLEXIBLE:
        _putuv(o, <uint32_t>(n + 1))
    else:
        _put16(o, n)
    memcpy(o.p + o.n, <const char *>b, n)
    o.n += n
    return 0


cdef int _put_tags(Out *o, r) except -1:
    """A partition's tagged fields (v12+): diverging_epoch (tag 0) and current_leader (tag 1) when set."""
    cdef int64_t a, b
    diverging = r.diverging_epoch
    leader = r.current_leader
    _reserve(o, TAGS_MAX)
    o.p[o.n] = (diverging is not None) + (leader is not None)
    o.n += 1
    if diverging is not None:
        de, dend = diverging
        a = _int(de, INT32_MIN, INT32_MAX, "diverging epoch")
        b = _int(dend, INT64_MIN, INT64_MAX, "diverging end offset")
        o.p[o.n] = 0  # tag
        o.p[o.n + 1] = 13  # size: epoch, end offset, empty tagged fields
        o.n += 2
        _put32(o, a)
        _put64(o, b)
        o.p[o.n] = 0
        o.n += 1
    if leader is not None:
        lid, lepoch = leader
        a = _int(lid, INT32_MIN, INT32_MAX, "current leader id")
        b = _int(lepoch, INT32_MIN, INT32_MAX, "current leader epoch")
        o.p[o.n] = 1
        o.p[o.n + 1] = 9  # size: leader id, leader epoch, empty tagged fields
        o.n += 2
        _put32(o, a)
        _put32(o, b)
        o.p[o.n] = 0
        o.n += 1
    return 0


cdef inline Py_ssize_t _uvlen(Py_ssize_t v) noexcept:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef bytes _utf8(s, what, bint nullable):
    if s is None and nullable:
        return None
    if type(s) is not str:
        raise EncodeError(f"FetchResponse: {what} must be a str, not {type(s).__name__}")
    b = _topic_name(s)  # same checks: UTF-8, at most 32767 bytes
    return b


cdef int _put_node_endpoints(Out *o, endpoints) except -1:
    """The response's tagged fields (v12+): node_endpoints (tag 0, v16+) when there are any:
    (node id, host, port, rack or None) tuples."""
    cdef Py_ssize_t size, n
    cdef int64_t node_id, port
    if not endpoints:
        _reserve(o, 1)
        o.p[o.n] = 0
        o.n += 1
        return 0
    rows = []
    size = _uvlen(len(endpoints) + 1)
    for e in endpoints:
        nid, host, nport, rack = e
        node_id = _int(nid, INT32_MIN, INT32_MAX, "node id")
        port = _int(nport, INT32_MIN, INT32_MAX, "node port")
        h = _utf8(host, "node host", False)
        rb = _utf8(rack, "node rack", True)
        rows.append((node_id, h, port, rb))
        size += 4 + _uvlen(len(h) + 1) + len(h) + 4 + 1
        size += 1 if rb is None else _uvlen(len(rb) + 1) + len(rb)
    _reserve(o, 2 + 5 + size)
    o.p[o.n] = 1  # one tagged field
    o.p[o.n + 1] = 0  # tag 0
    o.n += 2
    _putuv(o, <uint32_t>size)
    _putuv(o, <uint32_t>(len(rows) + 1))
    for node_id, h, port, rb in rows:
        _put32(o, node_id)
        n = len(<bytes>h)
        _putuv(o, <uint32_t>(n + 1))
        memcpy(o.p + o.n, <const char *>h, n)
        o.n += n
        _put32(o, port)
        if rb is None:
            o.p[o.n] = 0
            o.n += 1
        else:
            n = len(<bytes>rb)
            _putuv(o, <uint32_t>(n + 1))
            memcpy(o.p + o.n, <const char *>rb, n)
            o.n += n
        o.p[o.n] = 0  # the endpoint's tagged fields
        o.n += 1
    return 0


def encode_fetch(version, topics, results, committed_only, session_id=0, error_code=0, node_endpoints=None,
                 tagged=True):
    """FetchResponse v4-v17 body as [bytes, slice, bytes, slice, ..., bytes?] (see the contract)."""
    cdef Out o
    cdef Py_ssize_t total = 0, k = 0, nres, i
    cdef int64_t partition, error, hw, lso, lstart = 0, length, pid, first, sid, top_error
    cdef int32_t aborted
    cdef Py_ssize_t ntxns
    cdef bint committed = bool(committed_only)
    cdef bint tags = bool(tagged)
    cdef bint flexible
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
    flexible = v >= FIRST_FLEXIBLE
    sid = _int(session_id, INT32_MIN, INT32_MAX, "session id")
    top_error = _int(error_code, INT16_MIN, INT16_MAX, "error code")
    aborted = 0 if committed else -1  # empty array / null (read_uncommitted), unless aborted transactions follow
    out = []
    o.p = NULL
    o.n = o.cap = 0
    try:
        _reserve(&o, 16)
        _put32(&o, 0)  # throttle_time_ms
        if v >= 7:
            _put16(&o, top_error)
            _put32(&o, sid)
        if flexible:
            _putuv(&o, <uint32_t>(len(topics) + 1))
        else:
            _put32(&o, len(topics))
        for t in topics:
            _put_topic(&o, t, v)
            parts = t.partitions
            _reserve(&o, 5)
            if flexible:
                _putuv(&o, <uint32_t>(len(parts) + 1))
            else:
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
                    if flexible:
                        _putuv(&o, <uint32_t>(ntxns + 1))
                    else:
                        _put32(&o, ntxns)
                    for txn in txns:
                        tpid, tfirst = txn
                        pid = _int(tpid, INT64_MIN, INT64_MAX, "aborted producer id")
                        first = _int(tfirst, INT64_MIN, INT64_MAX, "aborted first offset")
                        _reserve(&o, 17 + PART_MAX)
                        _put64(&o, pid)
                        _put64(&o, first)
                        if flexible:
                            o.p[o.n] = 0  # the entry's tagged fields
                            o.n += 1
                elif flexible:  # compact: empty array / null (read_uncommitted), empty for an error answered unread
                    o.p[o.n] = 1 if committed or (error != 0 and r.aborted_transactions is not None) else 0
                    o.n += 1
                else:
                    _put32(&o, 0 if committed or (error != 0 and r.aborted_transactions is not None) else -1)
                if v >= 11:
                    _put32(&o, -1)  # preferred read replica
                if flexible:
                    _putuv(&o, <uint32_t>(length + 1))
                else:
                    _put32(&o, length)
                if records is not None:
                    out.append(PyBytes_FromStringAndSize(<const char *>o.p, o.n))
                    out.append(records)
                    o.n = 0
                if flexible:
                    if tags:
                        _put_tags(&o, r)
                    else:  # no result carries a tagged field: an empty section, nothing read
                        o.p[o.n] = 0  # room: PART_MAX covers a flexible partition and this byte
                        o.n += 1
            if flexible:
                _reserve(&o, 1)
                o.p[o.n] = 0  # the topic's tagged fields
                o.n += 1
        if flexible:
            _put_node_endpoints(&o, node_endpoints if v >= FIRST_NODE_ENDPOINTS else None)
        if o.n:
            out.append(PyBytes_FromStringAndSize(<const char *>o.p, o.n))
        return out
    finally:
        free(o.p)
