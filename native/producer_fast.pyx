# cython: freethreading_compatible=False
"""The producer's per-record path (native; twin: pybroker/_pure/producer_fast.py).

An ``Appender`` holds, per topic, the partition count, the sticky partition and per partition the
open ``BatchBuilder`` plus the sealed batches waiting for the sender. ``produce()`` picks the
partition (explicit, murmur2 of the key, or sticky), appends to the open builder and returns; only
when it cannot finish on its own (unknown topic or partition, full buffer, oversized record, a
failed partition, a partitioner written in Python) does it call the Python ``slow`` callable. It
calls ``wake`` once per new batch (never per record) so the sender can arm the linger timer or send
a full batch.

Threads: user threads append while the event-loop thread seals and drains. The GIL alone does
not make a method atomic: the builder's append may drop it while copying large values, and any
allocation may run the cyclic garbage collector, whose finalizers are Python code that can hand
the GIL to another thread. So an append marks itself ``busy`` from the moment it picks a
partition's open batch until that batch's count, size and delivery entries agree again, and the
loop-thread methods that seal or take the open batch (and forced appends) leave it alone while
``busy`` is non-zero.

A sealed batch is the tuple ``(builder, entries, created_ms, nbytes, count)``: ``entries`` lists
``(offset_delta, timestamp_or_count, target)`` for records that want a delivery report (None if
none), ``created_ms`` is the monotonic time of its first record, ``nbytes`` the buffer memory it
holds.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_Check, PyUnicode_GET_LENGTH
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, timespec

import os
import threading
from collections import deque

cdef extern from "Python.h":
    bint PyList_CheckExact(object o)
    bint PyTuple_CheckExact(object o)
    bint PyDict_Check(object o)
    bint PyLong_CheckExact(object o)

# status codes of try_append; the slow path knows what to do with each
ST_OK = 0
ST_UNKNOWN_TOPIC = 1       # topic not (yet) in the metadata the appender has
ST_UNKNOWN_PARTITION = 2   # explicit partition >= the known partition count
ST_BUFFER_FULL = 3         # buffer.memory would be exceeded
ST_TOO_LARGE = 4           # record larger than max.request.size or buffer.memory
ST_PARTITION_FAILED = 5    # the partition has a fatal error
ST_NEEDS_PYTHON = 6        # headers dict, a Python partitioner, a bad partition argument
ST_CLOSED = 7              # the producer is closing
ST_BUSY = 8                # another thread is inside an append that dropped the GIL

cdef enum:
    S_OK = 0
    S_UNKNOWN_TOPIC = 1
    S_UNKNOWN_PARTITION = 2
    S_BUFFER_FULL = 3
    S_TOO_LARGE = 4
    S_PARTITION_FAILED = 5
    S_NEEDS_PYTHON = 6
    S_CLOSED = 7
    S_BUSY = 8

# partitioner modes for keyed records
MODE_MURMUR2 = 0   # Java's default: murmur2(key) % n
MODE_PYTHON = 1    # keyed records go to the slow path, which asks the Python partitioner
MODE_IGNORE_KEY = 2  # keys do not choose the partition (every record is sticky)

RECORD_OVERHEAD = 16   # buffer bytes charged per record on top of key, value and headers
BATCH_OVERHEAD = 61 + 40  # batch header plus the worst-case record framing (size checks)


cdef inline int64_t _clock_ms(int clk) noexcept nogil:
    cdef timespec t
    clock_gettime(clk, &t)
    return <int64_t>t.tv_sec * 1000 + t.tv_nsec // 1000000


def monotonic_ms():
    """The clock of ``created_ms`` (CLOCK_MONOTONIC, as time.monotonic)."""
    return _clock_ms(CLOCK_MONOTONIC)


def wall_ms():
    """Milliseconds since the epoch: the default record timestamp."""
    return _clock_ms(CLOCK_REALTIME)


cdef extern from "murmur2.h" nogil:
    uint32_t pb_murmur2(const uint8_t *p, size_t n)


cdef inline uint32_t _murmur2(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    return pb_murmur2(p, <size_t>n)


cdef int _key_partition(object key, int n) except -1:
    cdef Py_buffer view
    cdef uint32_t h
    if PyBytes_CheckExact(key):
        h = _murmur2(<const uint8_t *>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
    else:
        PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
        h = _murmur2(<const uint8_t *>view.buf, view.len)
        PyBuffer_Release(&view)
    return <int>((h & 0x7FFFFFFF) % <uint32_t>n)


def partition_for_key(key, int num_partitions):
    """Kafka's default partition of a non-null key (same result as client_codec's)."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    if PyUnicode_Check(key):
        key = PyUnicode_AsUTF8String(key)
    return _key_partition(key, num_partitions)


def partitions_for_keys(keys, int num_partitions):
    """The partition of each key of a list (-1 for a None key), as a bytes of int32 (native order)."""
    cdef Py_ssize_t i, n
    cdef object k
    cdef bytearray out
    cdef int32_t *dst
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    if not PyList_CheckExact(keys):
        keys = list(keys)
    n = PyList_GET_SIZE(keys)
    out = bytearray(n * 4)
    dst = <int32_t *><char *>out
    for i in range(n):
        k = <object>PyList_GET_ITEM(keys, i)
        if k is None:
            dst[i] = -1
        else:
            if PyUnicode_Check(k):
                k = PyUnicode_AsUTF8String(k)
            dst[i] = _key_partition(k, num_partitions)
    return out


def partitions_for_arrow_keys(validity, offsets, data, bint wide, int64_t array_offset, int64_t length,
                              int num_partitions):
    """The partition of each row of an Arrow binary/string key column (-1 for a null), as int32s."""
    cdef Py_buffer ov, dv, vv
    cdef bint has_validity = validity is not None
    cdef int64_t i, j, lo, hi, nbytes_off
    cdef bytearray out
    cdef int32_t *dst
    cdef const uint8_t *bits
    cdef const uint8_t *dp
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    if length < 0 or array_offset < 0:
        raise ValueError("bad arrow row range")
    out = bytearray(length * 4)
    dst = <int32_t *><char *>out
    PyObject_GetBuffer(offsets, &ov, PyBUF_SIMPLE)
    try:
        nbytes_off = (array_offset + length + 1) * (8 if wide else 4)
        if ov.len < nbytes_off:
            raise ValueError("arrow offsets buffer is too short")
        if data is None:
            data = b""
        PyObject_GetBuffer(data, &dv, PyBUF_SIMPLE)
        try:
            if has_validity:
                PyObject_GetBuffer(validity, &vv, PyBUF_SIMPLE)
            try:
                if has_validity and vv.len * 8 < array_offset + length:
                    raise ValueError("arrow validity bitmap is too short")
                bits = <const uint8_t *>vv.buf if has_validity else NULL
                dp = <const uint8_t *>dv.buf
                for i in range(length):
                    j = array_offset + i
                    if has_validity and not ((bits[j >> 3] >> (j & 7)) & 1):
                        dst[i] = -1
                        continue
                    if wide:
                        lo = (<const int64_t *>ov.buf)[j]
                        hi = (<const int64_t *>ov.buf)[j + 1]
                    else:
                        lo = (<const int32_t *>ov.buf)[j]
                        hi = (<const int32_t *>ov.buf)[j + 1]
                    if lo < 0 or hi < lo or hi > dv.len:
                        raise ValueError("arrow offsets out of range")
                    dst[i] = <int32_t>((_murmur2(dp + lo, hi - lo) & 0x7FFFFFFF) % <uint32_t>num_partitions)
            finally:
                if has_validity:
                    PyBuffer_Release(&vv)
        finally:
            PyBuffer_Release(&dv)
    finally:
        PyBuffer_Release(&ov)
    return out


def split_by_partition(parts, keys, values):
    """Group list rows by partition: {partition: (keys, values)}, rows kept in order (-1 = null key)."""
    cdef const int32_t *pp
    cdef Py_buffer pv
    cdef Py_ssize_t i, n
    cdef dict groups = {}
    cdef object g, p
    if not PyList_CheckExact(keys):
        keys = list(keys)
    if not PyList_CheckExact(values):
        values = list(values)
    n = PyList_GET_SIZE(values)
    if PyList_GET_SIZE(keys) < n:
        raise ValueError("keys is shorter than values")
    PyObject_GetBuffer(parts, &pv, PyBUF_SIMPLE)
    try:
        if pv.len < n * 4:
            raise ValueError("partition array is shorter than values")
        pp = <const int32_t *>pv.buf
        for i in range(n):
            p = pp[i]
            g = groups.get(p)
            if g is None:
                g = groups[p] = ([], [])
            (<list>PyTuple_GET_ITEM(g, 0)).append(<object>PyList_GET_ITEM(keys, i))
            (<list>PyTuple_GET_ITEM(g, 1)).append(<object>PyList_GET_ITEM(values, i))
    finally:
        PyBuffer_Release(&pv)
    return groups


cdef inline Py_ssize_t _blen(object o) except -1:
    # bytes length of a bytes-like value (None counts 0)
    cdef Py_buffer view
    cdef Py_ssize_t n
    if o is None:
        return 0
    if PyBytes_CheckExact(o):
        return PyBytes_GET_SIZE(o)
    try:
        PyObject_GetBuffer(o, &view, PyBUF_SIMPLE)
    except TypeError:
        raise TypeError(f"key and value must be bytes-like, str or None, not {type(o).__name__}") from None
    n = view.len
    PyBuffer_Release(&view)
    return n


cdef inline Py_ssize_t _hlen(object o) noexcept:
    # rough size of a header key/value for buffer accounting (exact sizes are the builder's job)
    if o is None:
        return 0
    if PyBytes_CheckExact(o):
        return PyBytes_GET_SIZE(o)
    if PyUnicode_Check(o):
        return PyUnicode_GET_LENGTH(o)
    return 16


cdef class PartitionSlot:
    """One partition's open batch and sealed batches."""
    cdef public int partition
    cdef public object builder    # open BatchBuilder or None
    cdef public list entries      # delivery entries of the open batch, or None
    cdef public int64_t created_ms
    cdef public Py_ssize_t nbytes
    cdef public Py_ssize_t count
    cdef public object sealed     # deque of sealed batch tuples
    cdef public object error      # a fatal KafkaError: records for this partition fail

    def __init__(self, int partition):
        self.partition = partition
        self.builder = None
        self.entries = None
        self.created_ms = 0
        self.nbytes = 0
        self.count = 0
        self.sealed = deque()
        self.error = None


cdef class TopicSlots:
    """One topic's partitions as the appender sees them."""
    cdef public str name
    cdef public list slots
    cdef public int num_partitions
    cdef public int sticky
    cdef public list available    # partitions sticky records may go to (leader known, no error)
    cdef public bint ready        # False while records held for the topic are replayed

    def __init__(self, str name):
        self.name = name
        self.slots = []
        self.num_partitions = 0
        self.sticky = -1
        self.available = []
        self.ready = False


cdef class Appender:
    """Per-record append path; see the module docstring."""
    cdef readonly dict topics
    cdef public object builder_cls
    cdef public Py_ssize_t batch_size, buffer_memory, max_record_bytes
    cdef public Py_ssize_t buffered   # buffer bytes held by unfinished records
    cdef public Py_ssize_t pending    # records accepted and not yet completed
    cdef public int mode
    cdef public object slow           # slow(status, topic, value, key, partition, timestamp, headers, target)
    cdef public object wake           # wake(): a batch was created or sealed
    cdef public bint wake_pending
    cdef public bint closed
    cdef public int busy
    cdef public object lock           # guards the Python-side state kept next to this object
    cdef uint64_t rng

    def __init__(self, builder_cls, Py_ssize_t batch_size, Py_ssize_t buffer_memory,
                 Py_ssize_t max_record_bytes, int mode=0, slow=None, wake=None):
        self.topics = {}
        self.builder_cls = builder_cls
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self.max_record_bytes = max_record_bytes
        self.buffered = 0
        self.pending = 0
        self.mode = mode
        self.slow = slow
        self.wake = wake
        self.wake_pending = False
        self.closed = False
        self.busy = 0
        self.lock = threading.RLock()
        self.rng = <uint64_t>int.from_bytes(os.urandom(8), "little") | 1

    # ---- per record -----------------------------------------------------------------------

    def produce(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                on_delivery=None):
        """Queue one record; ``on_delivery(err, RecordMetadata)`` reports its fate."""
        cdef int st = self._append(topic, value, key, partition, timestamp, headers, on_delivery, False)
        if st == S_OK:
            return None
        return self.slow(st, topic, value, key, partition, timestamp, headers, on_delivery)

    def try_append(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                   target=None, bint force=False):
        """Append one record; a status code (ST_OK = done). ``force`` skips the buffer and ready checks."""
        return self._append(topic, value, key, partition, timestamp, headers, target, force)

    cdef int _append(self, topic, value, key, object partition, object timestamp, object headers,
                     object target, bint force) except -1:
        cdef TopicSlots ts
        cdef PartitionSlot slot
        cdef object o, b, item, hk, hv
        cdef Py_ssize_t size, i, nh
        cdef int64_t ts_ms
        cdef int p, n, tries
        cdef long delta
        cdef bint sticky = False, new_batch = False
        cdef list entries
        if self.closed:
            return S_CLOSED
        if value is not None and not PyBytes_CheckExact(value) and PyUnicode_Check(value):
            value = PyUnicode_AsUTF8String(value)
        if key is not None and not PyBytes_CheckExact(key) and PyUnicode_Check(key):
            key = PyUnicode_AsUTF8String(key)
        size = _blen(value) + _blen(key) + RECORD_OVERHEAD
        if headers is not None:
            if PyList_CheckExact(headers) or PyTuple_CheckExact(headers):
                nh = len(headers)
                for i in range(nh):
                    item = headers[i]
                    if not PyTuple_CheckExact(item) or PyTuple_GET_SIZE(item) != 2:
                        return S_NEEDS_PYTHON
                    hk = <object>PyTuple_GET_ITEM(item, 0)
                    hv = <object>PyTuple_GET_ITEM(item, 1)
                    if not (PyUnicode_Check(hk) or PyBytes_CheckExact(hk)) or not (hv is None or PyBytes_CheckExact(hv)):
                        return S_NEEDS_PYTHON
                    size += 8 + _hlen(hk) + _hlen(hv)
            else:
                return S_NEEDS_PYTHON
        if size + BATCH_OVERHEAD > self.max_record_bytes or size > self.buffer_memory:
            return S_TOO_LARGE
        o = self.topics.get(topic)
        if o is None:
            return S_UNKNOWN_TOPIC
        ts = <TopicSlots>o
        if not ts.ready and not force:
            return S_UNKNOWN_TOPIC
        if self.busy:  # another thread is half-way through an append (forced ones wait too)
            return S_BUSY
        if not force and self.buffered > 0 and self.buffered + size > self.buffer_memory:
            return S_BUFFER_FULL
        if timestamp is None:
            ts_ms = _clock_ms(CLOCK_REALTIME)
        else:
            ts_ms = timestamp
        n = ts.num_partitions
        if partition is None:
            p = -1
        elif PyLong_CheckExact(partition):
            p = partition
        else:
            return S_NEEDS_PYTHON
        if p >= 0:
            if p >= n:
                return S_UNKNOWN_PARTITION
        elif p != -1:
            return S_NEEDS_PYTHON
        elif key is not None and self.mode != MODE_IGNORE_KEY:
            if self.mode != MODE_MURMUR2:
                return S_NEEDS_PYTHON
            p = _key_partition(key, n)
        else:
            sticky = True
            p = ts.sticky
            if p < 0 or p >= n or (<PartitionSlot>ts.slots[p]).builder is None:
                p = self._next_sticky(ts, p)
        slot = <PartitionSlot>ts.slots[p]
        if slot.error is not None:
            return S_PARTITION_FAILED
        tries = 0
        self.busy += 1  # until the slot's builder, count, size and entries agree again
        try:
            while True:
                b = slot.builder
                if b is None:
                    b = self.builder_cls(self.batch_size)
                    slot.builder = b
                    slot.entries = None
                    slot.created_ms = _clock_ms(CLOCK_MONOTONIC)
                    slot.nbytes = 0
                    slot.count = 0
                    new_batch = True
                delta = b.append(ts_ms, key, value, headers)
                if delta >= 0:
                    break
                # the open batch is full: seal it and start a new one (sticky: on a new partition)
                self._seal(slot)
                new_batch = True
                tries += 1
                if sticky and tries == 1:
                    p = self._next_sticky(ts, p)
                    slot = <PartitionSlot>ts.slots[p]
                    if slot.error is not None:
                        return S_PARTITION_FAILED
                if tries > 3:
                    raise RuntimeError("an empty batch refused a record")
            if target is not None:
                entries = slot.entries  # a local reference: the slot's field is only read once
                if entries is None:
                    entries = slot.entries = []
                entries.append((delta, ts_ms, target))
            slot.count += 1
            slot.nbytes += size
            self.buffered += size
            self.pending += 1
        finally:
            self.busy -= 1
        if new_batch and not self.wake_pending and self.wake is not None:
            self.wake_pending = True
            self.wake()
        return S_OK

    cdef int _next_sticky(self, TopicSlots ts, int prev) except -1:
        # KIP-480: a new batch for keyless records goes to a random other available partition
        cdef list avail = ts.available
        cdef Py_ssize_t na = len(avail)
        cdef int p
        cdef uint64_t x
        if na == 0:
            if ts.num_partitions <= 0:
                raise RuntimeError(f"topic {ts.name!r} has no partitions")
            na = ts.num_partitions
            avail = None
        x = self.rng
        x ^= x << 13
        x ^= x >> 7
        x ^= x << 17
        self.rng = x
        if na == 1:
            p = avail[0] if avail is not None else 0
        else:
            p = avail[x % na] if avail is not None else <int>(x % na)
            if p == prev:  # never the partition just left when another exists
                p = avail[(x + 1) % na] if avail is not None else <int>((x + 1) % na)
        ts.sticky = p
        return p

    cdef void _seal(self, PartitionSlot slot):
        if slot.builder is not None and slot.count > 0:
            slot.sealed.append((slot.builder, slot.entries, slot.created_ms, slot.nbytes, slot.count))
        slot.builder = None
        slot.entries = None
        slot.nbytes = 0
        slot.count = 0

    # ---- bulk -----------------------------------------------------------------------------

    def append_bulk(self, topic, int partition, keys, values, headers, int64_t timestamp, Py_ssize_t start,
                    Py_ssize_t stop, handle, int chunk_no, arrow=None):
        """Append rows [start, stop) to ``partition`` (-1: sticky) until done or the buffer is full.
        ``values``/``keys`` are lists, or ``arrow`` = (key_validity, key_offsets, key_data,
        value_validity, value_offsets, value_data, offsets_64bit, array_offset). Every stretch of
        rows that lands in one batch gets the entry ``(delta, count, (handle, chunk_no))``.
        Returns (next row, next chunk_no, status)."""
        cdef TopicSlots ts
        cdef PartitionSlot slot
        cdef object o, b
        cdef Py_ssize_t i = start, j, k, before, nb
        cdef int p = partition, st = S_OK
        cdef bint sticky = partition < 0, new_batch = False, fresh
        cdef list entries
        if self.closed:
            return start, chunk_no, ST_CLOSED
        o = self.topics.get(topic)
        if o is None or not (<TopicSlots>o).ready:
            return start, chunk_no, ST_UNKNOWN_TOPIC
        ts = <TopicSlots>o
        if not sticky and p >= ts.num_partitions:
            return start, chunk_no, ST_UNKNOWN_PARTITION
        if self.busy:
            return start, chunk_no, ST_BUSY
        if sticky:
            p = ts.sticky
            if p < 0 or p >= ts.num_partitions or (<PartitionSlot>ts.slots[p]).builder is None:
                p = self._next_sticky(ts, p)
        self.busy += 1  # until the slot's builder, count, size and entries agree again
        try:
            while i < stop:
                slot = <PartitionSlot>ts.slots[p]
                if slot.error is not None:
                    st = S_PARTITION_FAILED
                    break
                if self.buffered > 0 and self.buffered + self.batch_size > self.buffer_memory:
                    st = S_BUFFER_FULL
                    break
                b = slot.builder
                fresh = b is None
                if fresh:
                    b = self.builder_cls(self.batch_size)
                    slot.builder = b
                    slot.entries = None
                    slot.created_ms = _clock_ms(CLOCK_MONOTONIC)
                    slot.nbytes = 0
                    slot.count = 0
                    new_batch = True
                before = b.size_bytes
                if arrow is not None:
                    j = b.append_arrow(arrow[0], arrow[1], arrow[2], arrow[3], arrow[4], arrow[5], arrow[6],
                                       arrow[7], i, stop, timestamp)
                elif headers is not None:
                    j = i
                    while j < stop:
                        if b.append(timestamp, None if keys is None else keys[j], values[j], headers) < 0:
                            break
                        j += 1
                else:
                    j = b.append_many(keys, values if stop == len(values) else values[:stop], timestamp, i)
                if j > i:
                    nb = b.size_bytes - before
                    entries = slot.entries  # a local reference: the slot's field is only read once
                    if entries is None:
                        entries = slot.entries = []
                    entries.append((slot.count, j - i, (handle, chunk_no)))
                    chunk_no += 1
                    slot.count += j - i
                    slot.nbytes += nb
                    self.buffered += nb
                    self.pending += j - i
                elif fresh:
                    raise RuntimeError("an empty batch refused a record")
                if j < stop:  # the batch is full
                    self._seal(slot)
                    new_batch = True
                    if sticky:
                        p = self._next_sticky(ts, p)
                i = j
        finally:
            self.busy -= 1
        if new_batch and not self.wake_pending and self.wake is not None:
            self.wake_pending = True
            self.wake()
        return i, chunk_no, st

    # ---- metadata -------------------------------------------------------------------------

    def set_topic(self, str name, int num_partitions, available=None, bint ready=True):
        """Install or update a topic (partitions only grow); ``available`` = sticky candidates."""
        cdef TopicSlots ts
        cdef PartitionSlot slot
        cdef int i
        o = self.topics.get(name)
        if o is None:
            ts = TopicSlots(name)
        else:
            ts = <TopicSlots>o
        for i in range(len(ts.slots), num_partitions):
            ts.slots.append(PartitionSlot(i))
        if num_partitions > ts.num_partitions:
            ts.num_partitions = num_partitions
        ts.available = [p for p in (available if available is not None else range(ts.num_partitions))
                        if 0 <= p < ts.num_partitions and (<PartitionSlot>ts.slots[p]).error is None]
        if ts.sticky not in ts.available:
            ts.sticky = -1
        ts.ready = ready
        self.topics[name] = ts
        return ts

    def topic(self, name):
        """The TopicSlots of ``name`` or None."""
        return self.topics.get(name)

    def fail_partition(self, str topic, int partition, error):
        """Mark a partition failed; returns every batch it held (open one sealed)."""
        cdef TopicSlots ts = <TopicSlots>self.topics[topic]
        cdef PartitionSlot slot = <PartitionSlot>ts.slots[partition]
        slot.error = error
        if partition in ts.available:
            ts.available.remove(partition)
        if ts.sticky == partition:
            ts.sticky = -1
        return self.take_all(topic, partition)

    # ---- sender side ----------------------------------------------------------------------

    def scan(self, int64_t now_ms, int64_t linger_ms):
        """([(topic, partition) with a batch to send], earliest monotonic ms an open batch gets
        ready, or -1). An open batch is ready once ``linger_ms`` passed since its first record."""
        cdef list ready = []
        cdef int64_t next_ms = -1, due
        cdef TopicSlots ts
        cdef PartitionSlot slot
        for o in self.topics.values():
            ts = <TopicSlots>o
            for so in ts.slots:
                slot = <PartitionSlot>so
                if len(slot.sealed):
                    ready.append((ts.name, slot.partition))
                elif slot.count > 0:
                    due = slot.created_ms + linger_ms
                    if due <= now_ms:
                        ready.append((ts.name, slot.partition))
                    elif next_ms < 0 or due < next_ms:
                        next_ms = due
        return ready, next_ms

    def pop_batch(self, str topic, int partition, int64_t sealed_before_ms):
        """The oldest sealed batch of a partition; failing that, the open batch if its first record
        is at or before ``sealed_before_ms`` (sealed now). None if neither (or an append is busy)."""
        cdef TopicSlots ts
        cdef PartitionSlot slot
        o = self.topics.get(topic)
        if o is None:
            return None
        ts = <TopicSlots>o
        if partition >= len(ts.slots):
            return None
        slot = <PartitionSlot>ts.slots[partition]
        if len(slot.sealed):
            return slot.sealed.popleft()
        if slot.count > 0 and slot.created_ms <= sealed_before_ms and not self.busy:
            self._seal(slot)
            return slot.sealed.popleft()
        return None

    def pop_expired(self, str topic, int partition, int64_t created_before_ms):
        """The oldest batch of a partition if its first record is at or before ``created_before_ms``
        (the open batch is sealed for it), else None."""
        cdef TopicSlots ts
        cdef PartitionSlot slot
        cdef tuple t
        o = self.topics.get(topic)
        if o is None:
            return None
        ts = <TopicSlots>o
        if partition >= len(ts.slots):
            return None
        slot = <PartitionSlot>ts.slots[partition]
        if len(slot.sealed):
            t = <tuple>slot.sealed[0]
            return slot.sealed.popleft() if <int64_t>t[2] <= created_before_ms else None
        if slot.count > 0 and slot.created_ms <= created_before_ms and not self.busy:
            self._seal(slot)
            return slot.sealed.popleft()
        return None

    def has_batch(self, str topic, int partition):
        """True if the partition has a sealed or non-empty open batch."""
        cdef PartitionSlot slot
        o = self.topics.get(topic)
        if o is None or partition >= len((<TopicSlots>o).slots):
            return False
        slot = <PartitionSlot>(<TopicSlots>o).slots[partition]
        return len(slot.sealed) > 0 or slot.count > 0

    def take_all(self, str topic, int partition):
        """Every batch of a partition, the open one sealed (for failing or closing). An open batch an
        append is busy with stays (empty list then)."""
        cdef TopicSlots ts = <TopicSlots>self.topics[topic]
        cdef PartitionSlot slot = <PartitionSlot>ts.slots[partition]
        if not self.busy:
            self._seal(slot)
        out = list(slot.sealed)
        slot.sealed.clear()
        return out

    def release(self, Py_ssize_t nbytes, Py_ssize_t nrecords):
        """Give back the buffer memory and pending count of finished records."""
        self.buffered -= nbytes
        self.pending -= nrecords
        if self.buffered < 0:
            self.buffered = 0

    def reserve(self, Py_ssize_t nbytes, Py_ssize_t nrecords):
        """Charge memory and pending records held outside the batches (records awaiting metadata)."""
        self.buffered += nbytes
        self.pending += nrecords
