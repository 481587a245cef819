"""The producer's per-record path in pure Python: the twin of pybroker._native.producer_fast.

Same classes, methods, status codes and results (the native module's docstring describes them).
Here Python code can switch threads anywhere, so every method holds ``lock`` (an RLock, also
the lock that guards the Python-side state kept next to the appender).
"""
import os
import random
import threading
import time
from collections import deque

ST_OK = 0
ST_UNKNOWN_TOPIC = 1
ST_UNKNOWN_PARTITION = 2
ST_BUFFER_FULL = 3
ST_TOO_LARGE = 4
ST_PARTITION_FAILED = 5
ST_NEEDS_PYTHON = 6
ST_CLOSED = 7
ST_BUSY = 8

MODE_MURMUR2 = 0
MODE_PYTHON = 1
MODE_IGNORE_KEY = 2

RECORD_OVERHEAD = 16
BATCH_OVERHEAD = 61 + 40

_M32 = 0xFFFFFFFF


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _murmur2(data) -> int:
    view = memoryview(data).cast("B")
    n = len(view)
    m = 0x5BD1E995
    h = (0x9747B28C ^ n) & _M32
    words = n >> 2
    for i in range(words):
        b = i * 4
        k = view[b] | (view[b + 1] << 8) | (view[b + 2] << 16) | (view[b + 3] << 24)
        k = (k * m) & _M32
        k ^= k >> 24
        k = (k * m) & _M32
        h = ((h * m) & _M32) ^ k
    b = words * 4
    tail = n & 3
    if tail == 3:
        h ^= view[b + 2] << 16
    if tail >= 2:
        h ^= view[b + 1] << 8
    if tail >= 1:
        h ^= view[b]
        h = (h * m) & _M32
    h ^= h >> 13
    h = (h * m) & _M32
    h ^= h >> 15
    return h


def _key_partition(key, n: int) -> int:
    return (_murmur2(key) & 0x7FFFFFFF) % n


def partition_for_key(key, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    if isinstance(key, str):
        key = key.encode("utf-8")
    return _key_partition(key, num_partitions)


def partitions_for_keys(keys, num_partitions: int) -> bytearray:
    from array import array
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    out = array("i", [-1 if k is None else partition_for_key(k, num_partitions) for k in keys])
    return bytearray(out.tobytes())


def partitions_for_arrow_keys(validity, offsets, data, wide, array_offset, length, num_partitions):
    from array import array
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    if length < 0 or array_offset < 0:
        raise ValueError("bad arrow row range")
    raw = memoryview(offsets).cast("B")
    width = 8 if wide else 4
    if len(raw) < (array_offset + length + 1) * width:
        raise ValueError("arrow offsets buffer is too short")
    offs = raw[:(len(raw) // width) * width].cast("q" if wide else "i")
    dv = memoryview(b"" if data is None else data).cast("B")
    bits = None if validity is None else memoryview(validity).cast("B")
    if bits is not None and len(bits) * 8 < array_offset + length:
        raise ValueError("arrow validity bitmap is too short")
    out = array("i")
    for i in range(length):
        j = array_offset + i
        if bits is not None and not (bits[j >> 3] >> (j & 7)) & 1:
            out.append(-1)
            continue
        lo, hi = offs[j], offs[j + 1]
        if lo < 0 or hi < lo or hi > len(dv):
            raise ValueError("arrow offsets out of range")
        out.append(_key_partition(dv[lo:hi], num_partitions))
    return bytearray(out.tobytes())


def split_by_partition(parts, keys, values) -> dict:
    keys, values = list(keys), list(values)
    n = len(values)
    if len(keys) < n:
        raise ValueError("keys is shorter than values")
    pv = memoryview(parts).cast("B")
    if len(pv) < n * 4:
        raise ValueError("partition array is shorter than values")
    pv = pv[:n * 4].cast("i")
    groups = {}
    for i in range(n):
        g = groups.get(pv[i])
        if g is None:
            g = groups[pv[i]] = ([], [])
        g[0].append(keys[i])
        g[1].append(values[i])
    return groups


def _blen(o) -> int:
    if o is None:
        return 0
    if type(o) is bytes:
        return len(o)
    try:
        return memoryview(o).nbytes
    except TypeError:
        raise TypeError(f"key and value must be bytes-like, str or None, not {type(o).__name__}") from None


def _hlen(o) -> int:
    if o is None:
        return 0
    if isinstance(o, (bytes, str)):
        return len(o)
    return 16


class PartitionSlot:
    __slots__ = ("partition", "builder", "entries", "created_ms", "nbytes", "count", "sealed", "error")

    def __init__(self, partition: int):
        self.partition = partition
        self.builder = None
        self.entries = None
        self.created_ms = 0
        self.nbytes = 0
        self.count = 0
        self.sealed = deque()
        self.error = None


class TopicSlots:
    __slots__ = ("name", "slots", "num_partitions", "sticky", "available", "ready")

    def __init__(self, name: str):
        self.name = name
        self.slots = []
        self.num_partitions = 0
        self.sticky = -1
        self.available = []
        self.ready = False


class Appender:
    """Per-record append path; see the native twin's docstring."""

    def __init__(self, builder_cls, batch_size, buffer_memory, max_record_bytes, mode=0, slow=None, wake=None):
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
        self._rng = random.Random(int.from_bytes(os.urandom(8), "little"))

    # ---- per record -----------------------------------------------------------------------

    def produce(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                on_delivery=None):
        st = self.try_append(topic, value, key, partition, timestamp, headers, on_delivery)
        if st == ST_OK:
            return None
        return self.slow(st, topic, value, key, partition, timestamp, headers, on_delivery)

    def try_append(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                   target=None, force=False):
        with self.lock:
            st, wake = self._append(topic, value, key, partition, timestamp, headers, target, force)
        if wake:
            self.wake()
        return st

    def _append(self, topic, value, key, partition, timestamp, headers, target, force):
        if self.closed:
            return ST_CLOSED, False
        if isinstance(value, str):
            value = value.encode("utf-8")
        if isinstance(key, str):
            key = key.encode("utf-8")
        size = _blen(value) + _blen(key) + RECORD_OVERHEAD
        if headers is not None:
            if type(headers) not in (list, tuple):
                return ST_NEEDS_PYTHON, False
            for item in headers:
                if type(item) is not tuple or len(item) != 2:
                    return ST_NEEDS_PYTHON, False
                hk, hv = item
                if type(hk) not in (str, bytes) or not (hv is None or type(hv) is bytes):
                    return ST_NEEDS_PYTHON, False
                size += 8 + _hlen(hk) + _hlen(hv)
        if size + BATCH_OVERHEAD > self.max_record_bytes or size > self.buffer_memory:
            return ST_TOO_LARGE, False
        ts = self.topics.get(topic)
        if ts is None or (not ts.ready and not force):
            return ST_UNKNOWN_TOPIC, False
        if not force and self.buffered > 0 and self.buffered + size > self.buffer_memory:
            return ST_BUFFER_FULL, False
        ts_ms = wall_ms() if timestamp is None else int(timestamp)
        n = ts.num_partitions
        sticky = False
        if partition is None:
            p = -1
        elif type(partition) is int:
            p = partition
        else:
            return ST_NEEDS_PYTHON, False
        if p >= 0:
            if p >= n:
                return ST_UNKNOWN_PARTITION, False
        elif p != -1:
            return ST_NEEDS_PYTHON, False
        elif key is not None and self.mode != MODE_IGNORE_KEY:
            if self.mode != MODE_MURMUR2:
                return ST_NEEDS_PYTHON, False
            p = _key_partition(key, n)
        else:
            sticky = True
            p = ts.sticky
            if p < 0 or p >= n or ts.slots[p].builder is None:
                p = self._next_sticky(ts, p)
        slot = ts.slots[p]
        if slot.error is not None:
            return ST_PARTITION_FAILED, False
        new_batch = False
        tries = 0
        while True:
            b = slot.builder
            if b is None:
                b = slot.builder = self.builder_cls(self.batch_size)
                slot.entries = None
                slot.created_ms = monotonic_ms()
                slot.nbytes = slot.count = 0
                new_batch = True
            delta = b.append(ts_ms, key, value, headers)
            if delta >= 0:
                break
            self._seal(slot)
            new_batch = True
            tries += 1
            if sticky and tries == 1:
                p = self._next_sticky(ts, p)
                slot = ts.slots[p]
                if slot.error is not None:
                    return ST_PARTITION_FAILED, False
            if tries > 3:
                raise RuntimeError("an empty batch refused a record")
        slot.count += 1
        slot.nbytes += size
        self.buffered += size
        self.pending += 1
        if target is not None:
            if slot.entries is None:
                slot.entries = []
            slot.entries.append((delta, ts_ms, target))
        wake = new_batch and not self.wake_pending and self.wake is not None
        if wake:
            self.wake_pending = True
        return ST_OK, wake

    def _next_sticky(self, ts, prev):
        avail = ts.available or list(range(ts.num_partitions))
        if not avail:
            raise RuntimeError(f"topic {ts.name!r} has no partitions")
        x = self._rng.getrandbits(64)
        p = avail[x % len(avail)]
        if p == prev and len(avail) > 1:
            p = avail[(x + 1) % len(avail)]
        ts.sticky = p
        return p

    def _seal(self, slot):
        if slot.builder is not None and slot.count > 0:
            slot.sealed.append((slot.builder, slot.entries, slot.created_ms, slot.nbytes, slot.count))
        slot.builder = slot.entries = None
        slot.nbytes = slot.count = 0

    # ---- bulk -----------------------------------------------------------------------------

    def append_bulk(self, topic, partition, keys, values, headers, timestamp, start, stop, handle, chunk_no,
                    arrow=None):
        with self.lock:
            result, wake = self._append_bulk(topic, partition, keys, values, headers, timestamp, start, stop,
                                             handle, chunk_no, arrow)
        if wake:
            self.wake()
        return result

    def _append_bulk(self, topic, partition, keys, values, headers, timestamp, start, stop, handle, chunk_no,
                     arrow):
        if self.closed:
            return (start, chunk_no, ST_CLOSED), False
        ts = self.topics.get(topic)
        if ts is None or not ts.ready:
            return (start, chunk_no, ST_UNKNOWN_TOPIC), False
        sticky = partition < 0
        p = partition
        if not sticky and p >= ts.num_partitions:
            return (start, chunk_no, ST_UNKNOWN_PARTITION), False
        if sticky:
            p = ts.sticky
            if p < 0 or p >= ts.num_partitions or ts.slots[p].builder is None:
                p = self._next_sticky(ts, p)
        i, st, new_batch = start, ST_OK, False
        while i < stop:
            slot = ts.slots[p]
            if slot.error is not None:
                st = ST_PARTITION_FAILED
                break
            if self.buffered > 0 and self.buffered + self.batch_size > self.buffer_memory:
                st = ST_BUFFER_FULL
                break
            b = slot.builder
            fresh = b is None
            if fresh:
                b = slot.builder = self.builder_cls(self.batch_size)
                slot.entries = None
                slot.created_ms = monotonic_ms()
                slot.nbytes = slot.count = 0
                new_batch = True
            before = b.size_bytes
            if arrow is not None:
                j = b.append_arrow(*arrow, i, stop, timestamp)
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
                if slot.entries is None:
                    slot.entries = []
                slot.entries.append((slot.count, j - i, (handle, chunk_no)))
                chunk_no += 1
                slot.count += j - i
                slot.nbytes += nb
                self.buffered += nb
                self.pending += j - i
            elif fresh:
                raise RuntimeError("an empty batch refused a record")
            if j < stop:
                self._seal(slot)
                new_batch = True
                if sticky:
                    p = self._next_sticky(ts, p)
            i = j
        wake = new_batch and not self.wake_pending and self.wake is not None
        if wake:
            self.wake_pending = True
        return (i, chunk_no, st), wake

    # ---- metadata -------------------------------------------------------------------------

    def set_topic(self, name, num_partitions, available=None, ready=True):
        with self.lock:
            ts = self.topics.get(name) or TopicSlots(name)
            for i in range(len(ts.slots), num_partitions):
                ts.slots.append(PartitionSlot(i))
            if num_partitions > ts.num_partitions:
                ts.num_partitions = num_partitions
            ts.available = [p for p in (available if available is not None else range(ts.num_partitions))
                            if 0 <= p < ts.num_partitions and ts.slots[p].error is None]
            if ts.sticky not in ts.available:
                ts.sticky = -1
            ts.ready = ready
            self.topics[name] = ts
            return ts

    def topic(self, name):
        return self.topics.get(name)

    def fail_partition(self, topic, partition, error):
        with self.lock:
            ts = self.topics[topic]
            ts.slots[partition].error = error
            if partition in ts.available:
                ts.available.remove(partition)
            if ts.sticky == partition:
                ts.sticky = -1
            return self.take_all(topic, partition)

    # ---- sender side ----------------------------------------------------------------------

    def scan(self, now_ms, linger_ms):
        ready, next_ms = [], -1
        with self.lock:
            for ts in self.topics.values():
                for slot in ts.slots:
                    if slot.sealed:
                        ready.append((ts.name, slot.partition))
                    elif slot.count > 0:
                        due = slot.created_ms + linger_ms
                        if due <= now_ms:
                            ready.append((ts.name, slot.partition))
                        elif next_ms < 0 or due < next_ms:
                            next_ms = due
        return ready, next_ms

    def pop_batch(self, topic, partition, sealed_before_ms):
        with self.lock:
            ts = self.topics.get(topic)
            if ts is None or partition >= len(ts.slots):
                return None
            slot = ts.slots[partition]
            if slot.sealed:
                return slot.sealed.popleft()
            if slot.count > 0 and slot.created_ms <= sealed_before_ms and not self.busy:
                self._seal(slot)
                return slot.sealed.popleft()
            return None

    def pop_expired(self, topic, partition, created_before_ms):
        with self.lock:
            ts = self.topics.get(topic)
            if ts is None or partition >= len(ts.slots):
                return None
            slot = ts.slots[partition]
            if slot.sealed:
                return slot.sealed.popleft() if slot.sealed[0][2] <= created_before_ms else None
            if slot.count > 0 and slot.created_ms <= created_before_ms and not self.busy:
                self._seal(slot)
                return slot.sealed.popleft()
            return None

    def has_batch(self, topic, partition):
        with self.lock:
            ts = self.topics.get(topic)
            if ts is None or partition >= len(ts.slots):
                return False
            slot = ts.slots[partition]
            return bool(slot.sealed) or slot.count > 0

    def take_all(self, topic, partition):
        with self.lock:
            slot = self.topics[topic].slots[partition]
            if not self.busy:
                self._seal(slot)
            out = list(slot.sealed)
            slot.sealed.clear()
            return out

    def release(self, nbytes, nrecords):
        with self.lock:
            self.buffered = max(0, self.buffered - nbytes)
            self.pending -= nrecords

    def reserve(self, nbytes, nrecords):
        with self.lock:
            self.buffered += nbytes
            self.pending += nrecords
