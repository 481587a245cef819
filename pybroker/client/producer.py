"""Kafka producer: ``AsyncProducer`` (asyncio) and ``Producer`` (blocking, runs its engine on a
background event-loop thread). Semantics and setting names follow Kafka's Java producer.

Settings (Kafka names and defaults): ``acks`` (all | 0 | 1, default all), ``linger.ms`` (5),
``batch.size`` (16384), ``compression.type`` (none | gzip | snappy | lz4 | zstd),
``enable.idempotence`` (true; needs acks=all, max.in.flight.requests.per.connection <= 5 and
retries > 0: when left at its default and another setting conflicts, it is turned off, when set
explicitly the conflict is a ConfigError), ``max.in.flight.requests.per.connection`` (5),
``buffer.memory`` (32 MiB), ``max.block.ms`` (60000), ``delivery.timeout.ms`` (120000),
``max.request.size`` (1048576), ``partitioner`` (see ``partitioner.py``),
``partitioner.ignore.keys`` (false), ``allow.auto.create.topics`` (true), plus the common client
settings (``bootstrap.servers``, ``client.id``, ``retries``, ``retry.backoff.ms``,
``request.timeout.ms``, ``metadata.max.age.ms``...).

Sending a record::

    producer.produce(topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                     on_delivery=None)

``value``/``key``: bytes-like, str (UTF-8 encoded) or None. ``partition`` -1 lets the
partitioner choose. ``timestamp``: ms since the epoch (default: now). ``headers``: a list of
``(str, bytes | None)`` pairs or a dict. ``on_delivery(err, RecordMetadata)`` reports the outcome
(``err`` None on success; on failure the metadata's offset is -1).

Errors known before a record is accepted are raised by ``produce``/``send``: a record larger than
``max.request.size`` or ``buffer.memory`` (KafkaError MESSAGE_TOO_LARGE), bad argument types
(TypeError/ValueError), a closed producer, and ``BufferFullError`` when ``buffer.memory`` stays
full for ``max.block.ms``. Everything else (unknown topic or partition after ``max.block.ms`` of
metadata lookups, broker errors after retries, ``delivery.timeout.ms`` passing) is reported
through the delivery callback / future. A record for a topic not yet in the metadata is accepted
at once and waits (counted in the buffer) while the metadata is fetched.

Synchronous ``Producer`` (like confluent-kafka's): ``produce`` returns at once; delivery callbacks
run on the caller's thread inside ``poll()`` and ``flush()``. ``send`` returns a
``concurrent.futures.Future`` of RecordMetadata, completed on the producer's loop thread (so
its done-callbacks run there). ``produce_batch`` returns a ``concurrent.futures.Future`` of
``[(partition, base_offset, count), ...]`` (one entry per run of records that landed in one
batch, in order). ``flush(timeout=None)`` sends everything now and waits; it returns how many
records (and undelivered callbacks) are still outstanding. ``close(timeout=None)`` flushes, then
fails whatever is left.

``AsyncProducer``: the same methods, as coroutines: ``await produce(...)`` (waits only when the
buffer is full; callbacks are called on the event loop), ``await send(...)`` returns the
RecordMetadata once delivered, ``await produce_batch(...)`` returns the list above once
delivered, ``await flush()``, ``await close()``. ``await start()`` (or ``async with``) starts it;
the first call starts it otherwise.

Bulk records (``produce_batch``) may be lists of bytes, pyarrow Arrays or ChunkedArrays
(binary, string, large_binary, large_string) or pandas Series; they are appended by the native
codec a batch at a time (no Python call per record). Keyed bulk records are partitioned by
murmur2 in a native loop, then grouped per partition with Arrow/NumPy (``take`` on a stable sort)
or, for lists, in a native loop. ``headers`` (one list for every record) and ``timestamp`` (one
value, default now) apply to all records.

Idempotence (default): the producer gets a producer id (InitProducerId) and numbers each
partition's batches; a retried batch is resent unchanged, so the broker drops duplicates. A
partition whose sequence can no longer be continued (OUT_OF_ORDER_SEQUENCE_NUMBER for the
batch the broker expects next, UNKNOWN_PRODUCER_ID, a batch that timed out after a lost
connection) fails: its waiting and later records get that error until the producer is recreated.
"""
import asyncio
import concurrent.futures
import importlib
import logging
import threading
import time
from collections import deque

from pybroker import core
from pybroker.client import config as client_config
from pybroker.client import partitioner as partitioners
from pybroker.client.accumulator import ProducerBatch, RecordAccumulator, is_fatal_for_partition
from pybroker.client.cluster import Cluster, backoff_s
from pybroker.client.errors import (INVALID_METADATA_CODES, BufferFullError, ConfigError, KafkaConnectionError,
                                    KafkaError, KafkaTimeoutError, UnknownTopicError, error_for)
from pybroker.client.runner import LoopThread
from pybroker.client.types import RecordMetadata
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

PRODUCE, INIT_PRODUCER_ID = 0, 22
PRODUCE_RANGE = (3, 8)  # record batches (v3) up to what the broker offers (v8: record errors)
FIRST_ZSTD_VERSION = 7
INIT_PRODUCER_ID_RANGE = (0, 4)
COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
DUPLICATE_SEQUENCE = ErrorCode.DUPLICATE_SEQUENCE_NUMBER
OUT_OF_ORDER = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
REAPER_MAX_S = 1.0
BUSY_SLEEP_S = 0.0005


def _acks(value):
    if isinstance(value, bool):
        raise ValueError("expected all, -1, 0 or 1")
    if isinstance(value, str):
        text = value.strip().lower()
        value = -1 if text == "all" else int(text)
    if value not in (-1, 0, 1):
        raise ValueError("expected all, -1, 0 or 1")
    return int(value)


PRODUCER_KEYS = {
    "acks": (_acks, -1),
    "linger.ms": (int, 5, 0),
    "batch.size": (int, 16384, 0),
    "compression.type": (str, "none", tuple(COMPRESSION)),
    "enable.idempotence": (bool, True),
    "max.in.flight.requests.per.connection": (int, 5, 1),
    "buffer.memory": (int, 32 * 1024 * 1024, 1),
    "max.block.ms": (int, 60000, 0),
    "delivery.timeout.ms": (int, 120000, 1),
    "max.request.size": (int, 1048576, 1),
    "partitioner": (partitioners.convert, partitioners.MURMUR2_RANDOM),
    "partitioner.ignore.keys": (bool, False),
    "allow.auto.create.topics": (bool, True),
}


def parse_config(conf) -> tuple:
    """The producer Config plus whether idempotence is on (after Kafka's consistency rules)."""
    cfg = client_config.parse(conf, "producer", PRODUCER_KEYS)
    explicit = isinstance(conf, dict) and "enable.idempotence" in conf
    idempotent = cfg["enable.idempotence"]
    if idempotent:
        conflicts = []
        if cfg["acks"] != -1:
            conflicts.append("acks=all")
        if cfg["max.in.flight.requests.per.connection"] > 5:
            conflicts.append("max.in.flight.requests.per.connection <= 5")
        if cfg["retries"] == 0:
            conflicts.append("retries > 0")
        if conflicts:
            if explicit:
                raise ConfigError("enable.idempotence=true requires " + " and ".join(conflicts))
            idempotent = False
    if cfg["delivery.timeout.ms"] < cfg["linger.ms"] + cfg["request.timeout.ms"]:
        raise ConfigError("delivery.timeout.ms should be equal to or larger than linger.ms + request.timeout.ms")
    return cfg, idempotent


def _fast_module():
    """The native per-record path, or its pure twin (same choice as the rest of the core)."""
    if "producer_fast" in core.MODULES:
        return core.load("producer_fast")
    package = "pybroker._native" if core.IMPL == "native" else "pybroker._pure"
    return importlib.import_module(f"{package}.producer_fast")


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class _Held:
    """A record waiting for its topic (or partition) to appear in the metadata."""
    __slots__ = ("value", "key", "partition", "timestamp", "headers", "target", "size", "deadline_ms")

    def __init__(self, value, key, partition, timestamp, headers, target, size, deadline_ms):
        self.value, self.key, self.partition, self.timestamp = value, key, partition, timestamp
        self.headers, self.target, self.size, self.deadline_ms = headers, target, size, deadline_ms


class _BulkHandle:
    """Collects the (partition, base_offset, count) of each run of a produce_batch call."""

    def __init__(self, settle):
        self._settle = settle  # settle(result_list, error) once everything is known
        self._lock = threading.Lock()
        self._results = {}
        self._error = None
        self._total = None
        self._done = False

    def chunk_done(self, index, partition, offset, count, err):
        with self._lock:
            self._results[index] = (partition, offset, count)
            if err is not None and self._error is None:
                self._error = err
            ready = self._ready()
        if ready:
            self._finish()

    def fail(self, err):
        with self._lock:
            if self._error is None:
                self._error = err

    def seal(self, total):
        """All runs are appended: ``total`` of them."""
        with self._lock:
            self._total = total
            ready = self._ready()
        if ready:
            self._finish()

    def _ready(self):
        if self._done or self._total is None or len(self._results) < self._total:
            return False
        self._done = True
        return True

    def _finish(self):
        results = [self._results[i] for i in range(self._total)]
        self._settle(results, self._error)


def _record_size(value, key) -> int:
    n = 0
    for x in (value, key):
        if x is not None:
            n += len(x) if isinstance(x, (bytes, str)) else memoryview(x).nbytes
    return n


class _Engine:
    """The loop-side producer: metadata, the per-broker senders, completions. Methods run on
    the event loop unless they say otherwise."""

    def __init__(self, conf):
        self.cfg, self.idempotent = parse_config(conf)
        cfg = self.cfg
        self.fast = _fast_module()
        self.codec = COMPRESSION[cfg["compression.type"]]
        self.acks = cfg["acks"]
        self.partitioner = cfg["partitioner"]
        self.mode = partitioners.mode_of(self.partitioner, cfg["partitioner.ignore.keys"], self.fast)
        self.max_block_ms = cfg["max.block.ms"]
        self.delivery_timeout_ms = cfg["delivery.timeout.ms"]
        self.max_in_flight = cfg["max.in.flight.requests.per.connection"]
        self.retries = cfg["retries"]
        self.auto_create = cfg["allow.auto.create.topics"]
        self.appender = self.fast.Appender(core.client_codec.BatchBuilder, max(cfg["batch.size"], 1),
                                           cfg["buffer.memory"], cfg["max.request.size"], self.mode)
        self.acc = RecordAccumulator(self.appender, codec=self.codec, idempotent=self.idempotent,
                                     max_in_flight=self.max_in_flight, linger_ms=cfg["linger.ms"],
                                     max_request_size=cfg["max.request.size"])
        self.cluster = Cluster(cfg)
        self.loop = None
        self.senders: dict = {}
        self.held: dict = {}  # topic -> [_Held] (guarded by appender.lock)
        self.waiters: dict = {}  # topic -> [(partition, deadline_ms, future)]
        self.failed_partitions: dict = {}
        self.tasks = []
        self.started = False
        self.stopped = False
        self.pid_ready = None
        self.md_event = None
        self.md_requested = False  # no network until a record or a lookup needs it (as Kafka's producer)
        self.lookups: dict = {}  # topic -> futures of callers waiting for one metadata round with it
        self.looked_up = set()  # topics whose first lookup is done (later misses hold records at once)
        # hooks the facade sets
        self.report_callback = None  # report_callback(cb, err, md): deliver a user callback
        self.on_progress = None  # records completed or buffer freed (thread-safe notify)
        self.stats = {"records_sent": 0, "batches_sent": 0, "bytes_sent": 0, "requests": 0, "retries": 0,
                      "record_errors": 0, "batch_errors": 0}

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self, wake) -> None:
        if self.started:
            return
        self.loop = asyncio.get_running_loop()
        self.appender.wake = wake
        self.md_event = asyncio.Event()
        self.pid_ready = self.loop.create_future()
        if not self.idempotent:
            self.pid_ready.set_result(None)
        self.tasks = [self.loop.create_task(self._metadata_loop(), name="producer-metadata"),
                      self.loop.create_task(self._reaper_loop(), name="producer-expiry")]
        self.started = True

    def _need_producer_id(self) -> None:
        """Ask for a producer id once records need one (no network before that)."""
        if self.idempotent and not self.pid_ready.done() and not self.stopped and not any(
                t.get_name() == "producer-init-id" for t in self.tasks):
            self.tasks.append(self.loop.create_task(self._init_producer_id(), name="producer-init-id"))

    def on_wake(self) -> None:
        """A batch was created or sealed (called on the loop)."""
        self.appender.wake_pending = False
        self._need_producer_id()
        if not self.senders:
            self.request_metadata()
        for s in self.senders.values():
            s.kick()

    def kick_all(self) -> None:
        for s in self.senders.values():
            s.kick()

    def begin_flush(self) -> None:
        self.acc.flushing += 1
        self.kick_all()

    def end_flush(self) -> None:
        self.acc.flushing = max(0, self.acc.flushing - 1)

    async def close(self, abort: bool) -> None:
        """Stop: with ``abort`` everything not yet delivered fails first."""
        if self.stopped:
            return
        self.appender.closed = True
        if abort:
            err = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer was closed before the record was delivered",
                             retriable=False, name="PRODUCER_CLOSED")
            for b in self.acc.take_everything():
                self.acc.dropped(b, False)
                self._complete(b, err)
            with self.appender.lock:
                held, self.held = self.held, {}
            for topic, records in held.items():
                for h in records:
                    self.appender.release(h.size, 1)
                    self.report_one(h.target, err, topic, h.partition, h.timestamp)
        self.stopped = True
        for s in self.senders.values():
            s.stop()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, *(s.task for s in self.senders.values() if s.task),
                             return_exceptions=True)
        await self.cluster.close()
        if abort:  # in-flight requests failed with the closed connections
            for st in self.acc.states.values():
                for b in list(st.inflight):
                    self.acc.dropped(b, True)
                    self._complete(b, KafkaConnectionError("the producer was closed while the batch was in flight"))
        self._progress()

    # ---- metadata -------------------------------------------------------------------------

    def request_metadata(self) -> None:
        self.md_requested = True
        if self.md_event is not None:
            self.md_event.set()

    def want_topic(self, topic) -> None:
        """Start fetching metadata for a topic records are held for (any thread)."""
        if self.loop is None:
            return
        if threading.get_ident() == getattr(self, "_loop_ident", None):
            self.request_metadata()
        else:
            try:
                self.loop.call_soon_threadsafe(self.request_metadata)
            except RuntimeError:
                pass

    async def first_lookup(self, topic: str) -> None:
        """Wait for one metadata round that asked for ``topic`` (bounded by max.block.ms and
        request.timeout.ms): the first record for a topic waits for its metadata instead of
        being held, as Kafka's producer does; a topic still unknown after it is held."""
        self.looked_up.add(topic)
        fut = self.loop.create_future()
        self.lookups.setdefault(topic, []).append(fut)
        self.request_metadata()
        timeout_s = min(self.max_block_ms, self.cfg["request.timeout.ms"]) / 1000
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            waiting = self.lookups.get(topic)
            if waiting is not None and fut in waiting:
                waiting.remove(fut)
                if not waiting:
                    del self.lookups[topic]

    async def ensure_topic(self, topic: str, partition: int = -1):
        """Wait (max.block.ms) until the appender knows ``topic`` with ``partition``; raises
        UnknownTopicError (or the topic's metadata error) otherwise."""
        deadline = _now_ms() + self.max_block_ms
        while True:
            ts = self.appender.topic(topic)
            if ts is not None and ts.ready and partition < ts.num_partitions:
                return ts
            fut = self.loop.create_future()
            self.waiters.setdefault(topic, []).append((partition, deadline, fut))
            self.request_metadata()
            await fut

    async def _metadata_loop(self) -> None:
        self._loop_ident = threading.get_ident()
        attempt = 0
        max_age_s = self.cfg.seconds("metadata.max.age.ms")
        min_interval_s = self.cfg.seconds("retry.backoff.ms")
        last_refresh = 0.0
        while not self.stopped:
            wanted = self._wanted_topics()
            stale = bool(self.appender.topics) and self.cluster.needs_update
            if not (self.md_requested or wanted or stale):
                self.md_event.clear()
                try:
                    await asyncio.wait_for(self.md_event.wait(), max_age_s)
                except asyncio.TimeoutError:
                    pass
                continue
            since = time.monotonic() - last_refresh
            if since < min_interval_s and not self.lookups:  # a leaderless partition must not spin refreshes
                await asyncio.sleep(min_interval_s - since)
            self.md_requested = False
            self.md_event.clear()
            last_refresh = time.monotonic()
            topics = sorted(set(self.appender.topics) | wanted | set(self.cluster.topics))
            timeout_s = self.cfg.seconds("request.timeout.ms")
            nearest = self._nearest_deadline()
            if nearest is not None:
                timeout_s = max(0.05, min(timeout_s, (nearest - _now_ms()) / 1000))
            md, error = None, None
            try:
                md = await self.cluster.refresh(topics, auto_create=self.auto_create, timeout_s=timeout_s,
                                                retries=0)
            except KafkaError as exc:
                error = exc
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep the loop alive whatever the metadata looked like
                log.exception("metadata refresh failed")
                error = KafkaError(-1, f"metadata refresh failed: {exc!r}", retriable=True)
            self._apply_metadata(md, error)
            for name in topics:  # callers waiting for one round that included their topic
                for fut in self.lookups.pop(name, ()):
                    if not fut.done():
                        fut.set_result(None)
            if self._wanted_topics() or error is not None:
                delay = backoff_s(attempt, self.cfg["retry.backoff.ms"], self.cfg["retry.backoff.max.ms"])
                attempt += 1
                nearest = self._nearest_deadline()
                if nearest is not None:
                    delay = max(0.0, min(delay, (nearest - _now_ms()) / 1000))
                self.md_event.clear()
                try:
                    await asyncio.wait_for(self.md_event.wait(), delay)
                except asyncio.TimeoutError:
                    pass
            else:
                attempt = 0

    def _wanted_topics(self) -> set:
        return set(self.held) | {t for t, w in self.waiters.items() if w} | set(self.lookups)

    def _nearest_deadline(self):
        ds = [w[1] for ws in self.waiters.values() for w in ws]
        with self.appender.lock:
            ds += [h.deadline_ms for hs in self.held.values() for h in hs[:1]]
        return min(ds) if ds else None

    def _apply_metadata(self, md, error) -> None:
        now = _now_ms()
        known = self.cluster.topics
        for name in list(self.appender.topics):
            t = known.get(name)
            if t is not None and self.appender.topic(name).ready:
                self._install(name, t)
        for name in self._wanted_topics():
            t = known.get(name)
            sent = md.topics.get(name) if md is not None else None
            if t is not None and t.partitions:
                self._install(name, t)
            elif sent is not None and sent.error and sent.error not in (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE) and \
                    not error_for(sent.error).retriable:
                self._fail_topic(name, error_for(sent.error, f"metadata for topic {name!r}: "
                                                 f"{ErrorCode(sent.error).name}"))
        self._expire_topic_waits(now, error)
        self._ensure_senders()
        self.kick_all()

    def _install(self, name, t) -> None:
        """Put a topic's partitions into the appender and replay records held for it."""
        n = (max(t.partitions) + 1) if t.partitions else 0
        available = sorted(p for p, pm in t.partitions.items() if pm.leader >= 0)
        with self.appender.lock:
            ts = self.appender.topic(name)
            replay = self.held.get(name)
            if ts is not None and ts.ready and not replay:
                self.appender.set_topic(name, n, available, True)
            else:
                self.appender.set_topic(name, n, available, False)
                keep = []
                for h in replay or ():
                    if h.partition >= n:
                        keep.append(h)
                        continue
                    self.appender.release(h.size, 1)
                    self._append_forced(name, h)
                if keep:
                    self.held[name] = keep
                else:
                    self.held.pop(name, None)
                self.appender.topic(name).ready = True
        for partition, deadline, fut in self.waiters.pop(name, []):
            if partition < n:
                if not fut.done():
                    fut.set_result(None)
            else:
                self.waiters.setdefault(name, []).append((partition, deadline, fut))

    def _append_forced(self, topic, h) -> None:
        partition, key = h.partition, h.key
        if partition < 0 and key is not None and self.mode == self.fast.MODE_PYTHON:
            partition = partitioners.python_partition(self.partitioner, key, self.appender.topic(topic).num_partitions)
        try:
            st = self.appender.try_append(topic, h.value, key, partition, h.timestamp, h.headers, h.target, True)
        except Exception as exc:
            st = -1
            err = KafkaError(ErrorCode.INVALID_RECORD, f"record for {topic!r} could not be appended: {exc}",
                             retriable=False)
        else:
            err = self._status_error(st, topic, partition)
        if st != self.fast.ST_OK:
            self.report_one(h.target, err, topic, partition, h.timestamp)

    def _status_error(self, st, topic, partition):
        fast = self.fast
        if st == fast.ST_PARTITION_FAILED:
            return self.partition_error(topic, partition)
        if st == fast.ST_CLOSED:
            return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed", retriable=False,
                              name="PRODUCER_CLOSED")
        return KafkaError(-1, f"record for {topic!r} could not be appended (status {st})", retriable=False)

    def partition_error(self, topic, partition):
        err = self.failed_partitions.get((topic, partition))
        if err is None:  # keyless records when every partition of the topic failed
            err = next((e for (t, _), e in self.failed_partitions.items() if t == topic), None)
        return err or KafkaError(-1, f"partition {topic}-{partition} has failed", retriable=False)

    def _fail_topic(self, name, err) -> None:
        with self.appender.lock:
            held = self.held.pop(name, [])
        for h in held:
            self.appender.release(h.size, 1)
            self.report_one(h.target, err, name, h.partition, h.timestamp)
        for _, _, fut in self.waiters.pop(name, []):
            if not fut.done():
                fut.set_exception(err)
        if held:
            self._progress()

    def _expire_topic_waits(self, now, error) -> None:
        expired = []
        with self.appender.lock:
            for name, records in list(self.held.items()):
                keep = [h for h in records if h.deadline_ms > now]
                expired += [(name, h) for h in records if h.deadline_ms <= now]
                if keep:
                    self.held[name] = keep
                else:
                    del self.held[name]
        for name, h in expired:
            self.appender.release(h.size, 1)
            self.report_one(h.target, self._missing_error(name, h.partition, error), name, h.partition, h.timestamp)
        for name, ws in list(self.waiters.items()):
            keep = []
            for partition, deadline, fut in ws:
                if fut.done():
                    continue
                if deadline <= now:
                    fut.set_exception(self._missing_error(name, partition, error))
                else:
                    keep.append((partition, deadline, fut))
            if keep:
                self.waiters[name] = keep
            else:
                del self.waiters[name]
        if expired:
            self._progress()

    def _missing_error(self, topic, partition, error):
        ts = self.appender.topic(topic)
        if ts is not None and ts.ready and partition >= 0:
            return UnknownTopicError(f"partition {partition} of topic {topic!r} (which has {ts.num_partitions} "
                                     f"partitions) is not present in metadata after {self.max_block_ms} ms")
        why = f" (last error: {error.message})" if error is not None else ""
        return UnknownTopicError(f"topic {topic!r} not present in metadata after {self.max_block_ms} ms{why}")

    def _ensure_senders(self) -> None:
        nodes = set()
        for name, ts in self.appender.topics.items():
            t = self.cluster.topics.get(name)
            if t is not None:
                nodes.update(pm.leader for pm in t.partitions.values() if pm.leader >= 0)
        for node in nodes:
            if node not in self.senders:
                s = self.senders[node] = _NodeSender(self, node)
                s.task = self.loop.create_task(s.run(), name=f"producer-sender-{node}")

    async def partitions_for(self, topic: str) -> list:
        await self.ensure_topic(topic)
        return list(range(self.appender.topic(topic).num_partitions))

    # ---- holding records for unknown topics (any thread) ------------------------------------

    def hold(self, topic, value, key, partition, timestamp, headers, target) -> int:
        """Keep a record until its topic/partition shows up in the metadata. Returns ST_OK when
        held, else the status of a fresh append attempt (the topic got ready meanwhile, or the
        buffer is full)."""
        fast = self.fast
        if isinstance(value, str):
            value = value.encode("utf-8")
        if isinstance(key, str):
            key = key.encode("utf-8")
        for x in (value, key):
            if x is not None and not isinstance(x, bytes):
                try:
                    memoryview(x)
                except TypeError:
                    raise TypeError(f"key and value must be bytes-like, str or None, not {type(x).__name__}") from None
        if timestamp is None:
            timestamp = fast.wall_ms()
        size = _record_size(value, key) + fast.RECORD_OVERHEAD
        with self.appender.lock:
            st = self.appender.try_append(topic, value, key, partition, timestamp, headers, target)
            if st not in (fast.ST_UNKNOWN_TOPIC, fast.ST_UNKNOWN_PARTITION):
                return st
            if self.appender.closed:
                return fast.ST_CLOSED
            if self.appender.buffered > 0 and self.appender.buffered + size > self.appender.buffer_memory:
                return fast.ST_BUFFER_FULL
            records = self.held.setdefault(topic, [])
            records.append(_Held(value, key, partition, timestamp, headers, target, size,
                                 _now_ms() + self.max_block_ms))
            self.appender.reserve(size, 1)
            first = len(records) == 1
        if first:
            self.want_topic(topic)
        return fast.ST_OK

    # ---- sending (called by _NodeSender) ---------------------------------------------------

    def batch_done(self, b: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        self.acc.acked(b)
        self.stats["records_sent"] += b.count
        self.stats["batches_sent"] += 1
        self._complete(b, None, base_offset, log_append_time)

    def batch_failed(self, b: ProducerBatch, err: KafkaError, maybe_written: bool) -> None:
        now = _now_ms()
        code = err.code
        retriable = err.retriable
        fatal = False
        if self.idempotent and code == OUT_OF_ORDER:
            retriable = self.acc.out_of_order_is_retriable(b)
            fatal = not retriable
        elif self.idempotent and is_fatal_for_partition(code):
            retriable, fatal = False, True
        if b.tp in self.failed_partitions:
            retriable = False
        if (retriable and not self.stopped and b.attempts <= self.retries
                and now - b.created_ms < self.delivery_timeout_ms):
            if isinstance(err, KafkaConnectionError) or code in INVALID_METADATA_CODES:
                self.cluster.request_update()
                self.request_metadata()
            delay = backoff_s(b.attempts - 1, self.cfg["retry.backoff.ms"], self.cfg["retry.backoff.max.ms"])
            self.acc.requeue(b, now + int(delay * 1000), maybe_written)
            self.stats["retries"] += 1
            return
        unknowable = self.acc.dropped(b, maybe_written)
        if retriable and now - b.created_ms >= self.delivery_timeout_ms:
            err = KafkaTimeoutError(f"expiring {b.count} record(s) for {b.topic}-{b.partition}: "
                                    f"{now - b.created_ms} ms has passed since batch creation "
                                    f"(last error: {err.name}: {err.message})")
        self._complete(b, err)
        if (fatal or unknowable) and b.tp not in self.failed_partitions:
            self.fail_partition(b.tp, err, unknowable)

    def fail_partition(self, tp, err, unknowable=False) -> None:
        """Fail every waiting and future record of a partition."""
        why = ("the outcome of an earlier batch is unknown, so its sequence cannot be continued"
               if unknowable else "its producer sequence cannot be continued")
        perr = KafkaError(err.code, f"partition {tp[0]}-{tp[1]} failed for this producer ({why}): {err.message}",
                          retriable=False, name=err.name)
        self.failed_partitions[tp] = perr
        batches = self.acc.take_partition(tp)
        batches += [ProducerBatch(tp[0], tp[1], s) for s in self.appender.fail_partition(tp[0], tp[1], perr)]
        for b in batches:
            self.acc.dropped(b, False)
            self._complete(b, perr)

    def _complete(self, b: ProducerBatch, err, base_offset: int = -1, log_append_time: int = -1) -> None:
        if b.done:
            return
        b.done = True
        self.appender.release(b.nbytes, b.count)
        if err is not None:
            self.stats["record_errors"] += b.count
            self.stats["batch_errors"] += 1
        entries = b.entries
        if entries:
            topic, partition = b.topic, b.partition
            for delta, x, target in entries:
                offset = base_offset + delta if base_offset >= 0 and err is None else -1
                if type(target) is tuple:
                    target[0].chunk_done(target[1], partition, offset, x, err)
                else:
                    md = RecordMetadata(topic, partition, offset, log_append_time if log_append_time >= 0 else x)
                    self._report(target, err, md)
        self._progress()

    def report_one(self, target, err, topic, partition, timestamp) -> None:
        """Report the failure of a record that never reached a batch."""
        self.stats["record_errors"] += 1
        if target is None:
            log.debug("record for %s-%s failed: %s", topic, partition, err)
            return
        if type(target) is tuple:
            target[0].chunk_done(target[1], partition, -1, 1, err)
            return
        self._report(target, err, RecordMetadata(topic, partition, -1, -1 if timestamp is None else timestamp))

    def _report(self, target, err, md) -> None:
        if isinstance(target, asyncio.Future):
            if not target.done():
                if err is None:
                    target.set_result(md)
                else:
                    target.set_exception(err)
        elif isinstance(target, concurrent.futures.Future):
            try:
                if err is None:
                    target.set_result(md)
                else:
                    target.set_exception(err)
            except concurrent.futures.InvalidStateError:
                pass  # cancelled by its owner
        else:
            self.report_callback(target, err, md)

    def _progress(self) -> None:
        if self.on_progress is not None:
            self.on_progress()

    async def _reaper_loop(self) -> None:
        interval = min(REAPER_MAX_S, self.delivery_timeout_ms / 4000)
        while not self.stopped:
            await asyncio.sleep(interval)
            for b, err in self.acc.expire(_now_ms(), self.delivery_timeout_ms):
                unknowable = self.acc.dropped(b, False)
                self._complete(b, err)
                if unknowable and b.tp not in self.failed_partitions:
                    self.fail_partition(b.tp, err, True)

    async def _init_producer_id(self) -> None:
        attempt = 0
        req = REQUESTS[INIT_PRODUCER_ID](transactional_id=None, transaction_timeout_ms=60000,
                                         producer_id=-1, producer_epoch=-1)
        while not self.stopped:
            try:
                body = await self.cluster.call(None, req, *INIT_PRODUCER_ID_RANGE)
            except KafkaError as exc:
                log.warning("InitProducerId failed (%s); retrying", exc)
                await asyncio.sleep(backoff_s(attempt, self.cfg["retry.backoff.ms"],
                                              self.cfg["retry.backoff.max.ms"]))
                attempt += 1
                continue
            self.acc.producer_id, self.acc.producer_epoch = body.producer_id, body.producer_epoch
            self.pid_ready.set_result(None)
            self.kick_all()
            return

    def metrics(self) -> dict:
        out = dict(self.stats)
        out.update(buffered_bytes=self.appender.buffered, pending_records=self.appender.pending,
                   in_flight_batches=self.acc.in_flight(), producer_id=self.acc.producer_id,
                   failed_partitions=sorted(self.failed_partitions))
        return out


class _NodeSender:
    """Sends Produce requests to one broker: drains ready batches of the partitions it leads,
    up to max.in.flight.requests.per.connection requests pipelined on one connection."""

    def __init__(self, engine: _Engine, node_id: int):
        self.engine = engine
        self.node_id = node_id
        self.event = asyncio.Event()
        self.inflight = 0
        self.conn = None
        self.task = None
        self._timer = None
        self._stopped = False

    def kick(self) -> None:
        self.event.set()

    def stop(self) -> None:
        self._stopped = True
        self.event.set()

    async def run(self) -> None:
        while not self._stopped:
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not silently stop sending for this broker
                log.exception("the producer's sender for broker %s failed; restarting it", self.node_id)
                await asyncio.sleep(0.1)

    async def _run(self) -> None:
        eng = self.engine
        loop = eng.loop
        connect_failures = 0
        while not self._stopped:
            self.event.clear()
            if not eng.pid_ready.done():
                await eng.pid_ready  # sequence numbers need the producer id
                continue
            wait_ms = -1
            if self.inflight < eng.max_in_flight:
                now = _now_ms()
                batches, next_ms, leaderless = eng.acc.drain(self.node_id, eng.cluster.leader_for, now)
                if leaderless:
                    eng.request_metadata()
                if batches:
                    conn = self.conn
                    if conn is None or conn.closed:
                        try:
                            conn = self.conn = await eng.cluster.connection(self.node_id)
                            connect_failures = 0
                        except KafkaError as exc:
                            connect_failures += 1
                            for b in batches:
                                b.attempts += 1
                                eng.batch_failed(b, exc, False)
                            eng.request_metadata()
                            await asyncio.sleep(backoff_s(connect_failures, eng.cfg["reconnect.backoff.ms"],
                                                          eng.cfg["reconnect.backoff.max.ms"]))
                            continue
                    self._send(conn, batches)
                    continue
                wait_ms = -1 if next_ms < 0 else max(0, next_ms - now)
            timer = loop.call_later(wait_ms / 1000, self.event.set) if wait_ms >= 0 else None
            await self.event.wait()
            if timer is not None:
                timer.cancel()

    def _send(self, conn, batches) -> None:
        eng = self.engine
        try:
            version = conn.version(PRODUCE, *PRODUCE_RANGE)
            if eng.codec == 4 and version < FIRST_ZSTD_VERSION:
                raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                 f"broker {conn.address} cannot take zstd batches (Produce v{version})")
        except KafkaError as exc:
            for b in batches:
                b.attempts += 1
                eng.batch_failed(b, KafkaError(exc.code, exc.message, retriable=False), False)
            return
        api = REQUESTS[PRODUCE]
        topics = {}
        size = 0
        for b in batches:
            topics.setdefault(b.topic, []).append(api.PartitionProduceData(index=b.partition, records=b.data))
            eng.acc.sent(b)
            size += len(b.data)
        req = api(transactional_id=None, acks=eng.acks, timeout_ms=eng.cfg["request.timeout.ms"],
                  topic_data=[api.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()])
        eng.stats["requests"] += 1
        eng.stats["bytes_sent"] += size
        if eng.acks == 0:
            try:
                conn.send_nowait(req, version)
            except KafkaError as exc:
                for b in batches:
                    eng.batch_failed(b, exc, True)
                return
            for b in batches:
                eng.batch_done(b, -1, -1)
            return
        try:
            fut = asyncio.ensure_future(conn.request(req, version))  # written now; answered later
        except Exception as exc:  # could not even encode or write it: nothing reached the broker
            err = exc if isinstance(exc, KafkaError) else KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot send a Produce request: {exc!r}", retriable=False)
            for b in batches:
                eng.batch_failed(b, err, False)
            return
        self.inflight += 1
        fut.add_done_callback(lambda f: self._on_response(f, batches))

    def _on_response(self, fut, batches) -> None:
        eng = self.engine
        self.inflight -= 1
        try:
            body = fut.result()
        except asyncio.CancelledError:
            body, exc = None, KafkaConnectionError("the request was cancelled")
        except KafkaError as e:
            body, exc = None, e
        except Exception as e:
            body, exc = None, KafkaError(-1, f"Produce request failed: {e!r}", retriable=True)
        try:
            if body is None:
                for b in batches:
                    eng.batch_failed(b, exc, True)
                return
            parts = {}
            for t in body.responses:
                for pr in t.partition_responses:
                    parts[(t.name, pr.index)] = pr
            for b in batches:
                pr = parts.get((b.topic, b.partition))
                if pr is None:
                    eng.batch_failed(b, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                   f"no response for {b.topic}-{b.partition}", retriable=True), True)
                elif pr.error_code == 0 or pr.error_code == DUPLICATE_SEQUENCE:
                    eng.batch_done(b, pr.base_offset, pr.log_append_time_ms)
                else:
                    msg = pr.error_message or _description(pr.error_code)
                    eng.batch_failed(b, error_for(pr.error_code, f"{b.topic}-{b.partition}: {msg}"), False)
        finally:
            self.kick()


def _description(code):
    try:
        return ErrorCode(code).description
    except ValueError:
        return "unknown error code"


# ---- input normalisation shared by both facades -----------------------------------------------

def _normalize(engine: _Engine, st, topic, value, key, partition, headers):
    """Fix what the native path refused with ST_NEEDS_PYTHON / ST_TOO_LARGE / ST_CLOSED: returns
    (value, key, partition, headers) to try again, or raises."""
    fast = engine.fast
    if st == fast.ST_TOO_LARGE:
        size = _record_size(value, key)
        raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                         f"the record is {size} bytes, larger than max.request.size "
                         f"({engine.cfg['max.request.size']}) or buffer.memory ({engine.cfg['buffer.memory']})",
                         retriable=False)
    if st == fast.ST_CLOSED:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed", retriable=False,
                         name="PRODUCER_CLOSED")
    if not isinstance(topic, str) or not topic:
        raise TypeError(f"topic must be a non-empty str, not {topic!r}")
    headers = _normalize_headers(headers)
    if partition is None:
        partition = -1
    elif not isinstance(partition, int) or isinstance(partition, bool):
        try:
            partition = int(partition.__index__())
        except (AttributeError, TypeError):
            raise TypeError(f"partition must be an int, not {type(partition).__name__}") from None
    if partition < -1:
        raise ValueError(f"partition must be >= 0 (or -1 for the partitioner's choice), not {partition}")
    if partition == -1 and key is not None and engine.mode == fast.MODE_PYTHON:
        ts = engine.appender.topic(topic)
        if ts is not None and ts.ready:
            k = key.encode("utf-8") if isinstance(key, str) else bytes(key)
            partition = partitioners.python_partition(engine.partitioner, k, ts.num_partitions)
    return value, key, partition, headers


# ---- bulk input ------------------------------------------------------------------------------

def _normalize_headers(headers):
    """A list of (str|bytes, bytes|None) tuples from a list of pairs or a dict (str values encoded)."""
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    out = []
    for h in items:
        h = tuple(h)
        if len(h) != 2:
            raise ValueError(f"a header must be a (key, value) pair, not {h!r}")
        k, v = h
        if not isinstance(k, (str, bytes)):
            raise TypeError(f"a header key must be str or bytes, not {type(k).__name__}")
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif v is not None and not isinstance(v, bytes):
            v = bytes(memoryview(v))
        out.append((k, v))
    return out


def _bytes_list(items, what):
    """``items`` with str entries UTF-8 encoded; TypeError for entries that are not bytes-like."""
    kinds = set(map(type, items))  # a C-level pass, no Python call per entry
    if kinds <= {bytes, type(None)}:
        return items
    if kinds <= {bytes, type(None), bytearray, memoryview, str}:
        return [v.encode("utf-8") if type(v) is str else v for v in items] if str in kinds else items
    bad = next(k for k in kinds if k not in (bytes, type(None), bytearray, memoryview, str))
    raise TypeError(f"{what} entries must be bytes, str or None, not {bad.__name__}")


def _is_arrow(x) -> bool:
    return type(x).__module__.startswith("pyarrow")


def _to_arrow_or_list(x, what):
    """A list, or a pyarrow Array (binary family) for Arrow/pandas/NumPy input."""
    if x is None:
        return None
    if isinstance(x, list):
        return x
    if isinstance(x, tuple):
        return list(x)
    mod = type(x).__module__
    import pyarrow as pa
    if mod.startswith("pandas"):
        x = pa.Array.from_pandas(x)
    elif mod.startswith("numpy"):
        x = pa.array(x)
    if isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks() if x.num_chunks != 1 else x.chunk(0)
    if isinstance(x, pa.Array):
        t = x.type
        if pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or \
                pa.types.is_large_string(t):
            return x
        if pa.types.is_null(t):
            return x.cast(pa.binary())
        if pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t) or pa.types.is_string_view(t):
            return x.cast(pa.binary())
        raise TypeError(f"{what} must be binary or string data, not Arrow type {t}")
    try:
        return list(x)
    except TypeError:
        raise TypeError(f"{what} must be a list, a pyarrow Array/ChunkedArray or a pandas Series, "
                        f"not {type(x).__name__}") from None


def _arrow_buffers(values, keys):
    """(key_validity, key_offsets, key_data, value_validity, value_offsets, value_data, wide, offset)
    for append_arrow, with both arrays made the same width and offset."""
    import pyarrow as pa
    wide = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    if keys is not None:
        kwide = pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type)
        if kwide != wide:
            if wide:
                keys = keys.cast(pa.large_binary())
            else:
                values = values.cast(pa.large_binary())
                wide = True
        if keys.offset != values.offset:
            keys, values = _unoffset(keys), _unoffset(values)
    vb = values.buffers()
    if keys is None:
        kb = (None, None, None)
    else:
        kb = keys.buffers()
    return (kb[0], kb[1], kb[2], vb[0], vb[1], vb[2], wide, values.offset)


def _unoffset(arr):
    import pyarrow as pa
    return pa.concat_arrays([arr]) if arr.offset else arr


class _BulkJob:
    """One produce_batch call: its rows split into (partition, keys, values) groups, appended
    group by group as buffer space allows."""

    def __init__(self, engine: _Engine, topic, values, keys, partition, timestamp, headers, handle):
        self.engine = engine
        self.topic = topic
        self.handle = handle
        self.partition = partition
        self.timestamp = engine.fast.wall_ms() if timestamp is None else int(timestamp)
        self.headers = _normalize_headers(headers)
        self.values = _to_arrow_or_list(values, "values")
        self.keys = _to_arrow_or_list(keys, "keys")
        if isinstance(self.values, list):
            self.values = _bytes_list(self.values, "values")
        if isinstance(self.keys, list):
            self.keys = _bytes_list(self.keys, "keys")
        if self.values is None:
            raise TypeError("values must not be None")
        self.arrow = _is_arrow(self.values) or _is_arrow(self.keys)
        if self.arrow:
            import pyarrow as pa
            if not _is_arrow(self.values):
                self.values = pa.array(self.values, pa.binary())
            if self.keys is not None and not _is_arrow(self.keys):
                self.keys = pa.array(self.keys, pa.binary())
            if self.headers is not None:  # the per-record header path works on lists
                self.values = self.values.to_pylist()
                self.keys = None if self.keys is None else self.keys.to_pylist()
                self.arrow = False
        if self.keys is not None and len(self.keys) != len(self.values):
            raise ValueError(f"keys has {len(self.keys)} entries, values {len(self.values)}")
        if partition is None:
            self.partition = -1
        if self.partition < -1:
            raise ValueError(f"partition must be >= 0 or -1, not {self.partition}")
        self.groups = None  # [(partition, keys, values, arrow buffers or None, next row, stop)]
        self.chunks = 0
        self.count = len(self.values)

    def plan(self, num_partitions: int) -> None:
        """Split rows by partition (needs the topic's partition count for keyed rows)."""
        fast = self.engine.fast
        keyed = self.keys is not None and self.partition < 0 and self.engine.mode != fast.MODE_IGNORE_KEY
        if not keyed:
            self.groups = [self._group(self.partition, self.keys, self.values)]
            return
        if self.arrow:
            self.groups = self._plan_arrow(num_partitions)
        else:
            if self.engine.mode == fast.MODE_MURMUR2:
                parts = fast.partitions_for_keys(self.keys, num_partitions)
            else:  # a Python partitioner: one call per keyed record
                import array
                parts = array.array("i", [-1 if k is None else partitioners.python_partition(
                    self.engine.partitioner, k.encode() if isinstance(k, str) else bytes(k), num_partitions)
                    for k in self.keys]).tobytes()
            groups = fast.split_by_partition(parts, self.keys, self.values)
            self.groups = [self._group(p, ks, vs) for p, (ks, vs) in sorted(groups.items())]

    def _plan_arrow(self, num_partitions):
        import numpy as np
        import pyarrow as pa
        fast = self.engine.fast
        keys, values = self.keys, self.values
        kb = keys.buffers()
        kwide = pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type)
        if self.engine.mode == fast.MODE_MURMUR2:
            raw = fast.partitions_for_arrow_keys(kb[0], kb[1], kb[2], kwide, keys.offset, len(keys), num_partitions)
            parts = np.frombuffer(raw, dtype=np.int32)
        else:
            parts = np.array([-1 if k is None else partitioners.python_partition(self.engine.partitioner, k,
                                                                                 num_partitions)
                              for k in keys.cast(pa.binary()).to_pylist()], dtype=np.int32)
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        idx = pa.array(order)
        keys, values = keys.take(idx), values.take(idx)
        cuts = np.flatnonzero(np.diff(sorted_parts)) + 1
        starts = np.concatenate(([0], cuts)).astype(np.int64)
        stops = np.concatenate((cuts, [len(parts)])).astype(np.int64)
        groups = []
        for a, z in zip(starts.tolist(), stops.tolist()):
            if z > a:
                groups.append(self._group(int(sorted_parts[a]), keys.slice(a, z - a), values.slice(a, z - a)))
        return groups

    def _group(self, partition, keys, values):
        if self.arrow:
            bufs = _arrow_buffers(values, keys)
            return [partition, None, None, bufs, 0, len(values)]
        return [partition, keys, values, None, 0, len(values)]

    def advance(self):
        """Append as much as fits; ST_OK when every row is in, else the status that stopped it
        (the job can be advanced again later)."""
        fast = self.engine.fast
        app = self.engine.appender
        for g in self.groups:
            partition, keys, values, bufs, pos, stop = g
            while pos < stop:
                with app.lock:
                    pos, self.chunks, st = app.append_bulk(self.topic, partition, keys, values, self.headers,
                                                           self.timestamp, pos, stop, self.handle, self.chunks, bufs)
                g[4] = pos
                if st != fast.ST_OK:
                    return st, partition
        return fast.ST_OK, -1


# ---- facades --------------------------------------------------------------------------------

class AsyncProducer:
    """The asyncio producer; see the module docstring for the API and settings."""

    def __init__(self, conf):
        self._engine = _Engine(conf)
        self._space = None
        self._started = False
        self._closed = False
        self._yield = False

    @property
    def config(self):
        return self._engine.cfg

    async def start(self) -> None:
        if self._started:
            return
        eng = self._engine
        self._space = asyncio.Event()
        eng.report_callback = _call_logged
        eng.on_progress = self._space.set
        self._yield = False

        def wake():  # a new batch: let the sender run at the producer's next await
            self._yield = True
            eng.on_wake()

        await eng.start(wake)
        self._started = True

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def _ensure_started(self):
        if not self._started:
            await self.start()

    async def produce(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                      on_delivery=None) -> None:
        """Queue one record; waits only while the buffer is full (at most max.block.ms)."""
        if not self._started:
            await self.start()
        st = self._engine.appender.try_append(topic, value, key, partition, timestamp, headers, on_delivery)
        if st:
            await self._slow(st, topic, value, key, partition, timestamp, headers, on_delivery)
        if self._yield:  # once per batch, not per record: a loop of awaits that never suspend starves the sender
            self._yield = False
            await asyncio.sleep(0)

    async def send(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None) -> RecordMetadata:
        """Queue one record and return its RecordMetadata once delivered (raises its error)."""
        if not self._started:
            await self.start()
        fut = self._engine.loop.create_future()
        st = self._engine.appender.try_append(topic, value, key, partition, timestamp, headers, fut)
        if st:
            await self._slow(st, topic, value, key, partition, timestamp, headers, fut)
        return await fut

    async def _slow(self, st, topic, value, key, partition, timestamp, headers, target) -> None:
        eng = self._engine
        fast = eng.fast
        deadline = None
        while True:
            if st == fast.ST_UNKNOWN_TOPIC and topic not in eng.looked_up and isinstance(topic, str):
                await eng.first_lookup(topic)
                st = eng.appender.try_append(topic, value, key, partition, timestamp, headers, target)
            elif st in (fast.ST_UNKNOWN_TOPIC, fast.ST_UNKNOWN_PARTITION):
                value, key, partition, headers = _normalize(eng, fast.ST_NEEDS_PYTHON, topic, value, key,
                                                            partition, headers)
                st = eng.hold(topic, value, key, partition, timestamp, headers, target)
            elif st in (fast.ST_BUFFER_FULL, fast.ST_BUSY):
                now = _now_ms()
                if deadline is None:
                    deadline = now + eng.max_block_ms
                if now >= deadline:
                    raise _buffer_full(eng)
                self._space.clear()
                try:
                    await asyncio.wait_for(self._space.wait(), (deadline - now) / 1000)
                except asyncio.TimeoutError:
                    pass
                st = eng.appender.try_append(topic, value, key, partition, timestamp, headers, target)
            elif st == fast.ST_PARTITION_FAILED:
                p = partition if isinstance(partition, int) and partition >= 0 else _key_partition(eng, topic, key)
                eng.report_one(target, eng.partition_error(topic, p), topic, p, timestamp)
                return
            else:
                value, key, partition, headers = _normalize(eng, st, topic, value, key, partition, headers)
                st = eng.appender.try_append(topic, value, key, partition, timestamp, headers, target)
                if st == fast.ST_NEEDS_PYTHON:
                    raise ValueError(f"cannot produce this record (partition {partition!r}, headers {headers!r})")
            if st == fast.ST_OK:
                return

    async def produce_batch(self, topic, values, keys=None, partition=-1, timestamp=None, headers=None) -> list:
        """Queue many records; returns [(partition, base_offset, count), ...] once all are delivered
        (raises the first error if any failed)."""
        if not self._started:
            await self.start()
        eng = self._engine
        fut = eng.loop.create_future()

        def settle(results, err):
            if not fut.done():
                if err is None:
                    fut.set_result(results)
                else:
                    fut.set_exception(err)

        handle = _BulkHandle(settle)
        job = _BulkJob(eng, topic, values, keys, partition, timestamp, headers, handle)
        if job.count == 0:
            return []
        ts = await eng.ensure_topic(topic, job.partition)
        job.plan(ts.num_partitions)
        deadline = None
        while True:
            st, p = job.advance()
            if st == eng.fast.ST_OK:
                break
            if st in (eng.fast.ST_BUFFER_FULL, eng.fast.ST_BUSY):
                now = _now_ms()
                deadline = deadline or now + eng.max_block_ms
                if now >= deadline:
                    handle.fail(_buffer_full(eng))
                    break
                self._space.clear()
                try:
                    await asyncio.wait_for(self._space.wait(), (deadline - now) / 1000)
                except asyncio.TimeoutError:
                    pass
                continue
            deadline = None
            if st in (eng.fast.ST_UNKNOWN_TOPIC, eng.fast.ST_UNKNOWN_PARTITION):
                await eng.ensure_topic(topic, p)
                continue
            handle.fail(eng.partition_error(topic, p) if st == eng.fast.ST_PARTITION_FAILED
                        else _normalize_error(eng, st))
            break
        handle.seal(job.chunks)
        return await fut

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything now and wait (at most ``timeout`` s); the count still undelivered."""
        if not self._started:
            return 0
        eng = self._engine
        deadline = None if timeout is None else time.monotonic() + timeout
        eng.begin_flush()
        try:
            while eng.appender.pending > 0:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._space.clear()
                try:
                    await asyncio.wait_for(self._space.wait(), remaining)
                except asyncio.TimeoutError:
                    break
        finally:
            eng.end_flush()
        return eng.appender.pending

    async def close(self, timeout: float | None = None) -> None:
        """Flush (at most ``timeout`` s), fail what is left, close the connections."""
        if self._closed:
            return
        self._closed = True
        if not self._started:
            await self._engine.cluster.close()
            return
        left = await self.flush(timeout)
        await self._engine.close(abort=left > 0)

    async def partitions_for(self, topic: str) -> list:
        """The partition ids of ``topic`` (waits up to max.block.ms for its metadata)."""
        await self._ensure_started()
        return await self._engine.partitions_for(topic)

    def metrics(self) -> dict:
        return self._engine.metrics()

    def __len__(self) -> int:
        return self._engine.appender.pending


class Producer:
    """The blocking producer; see the module docstring. Starts itself; ``close()`` (or ``with``)
    stops it. ``produce`` is the native per-record path."""

    def __init__(self, conf):
        self._engine = eng = _Engine(conf)
        self._thread = LoopThread("pybroker-producer")
        self._reports = deque()
        self._cv = threading.Condition()
        self._closed = False
        loop = self._thread.loop

        def wake():
            try:
                loop.call_soon_threadsafe(eng.on_wake)
            except RuntimeError:
                pass  # the loop is closed

        eng.report_callback = self._queue_report
        eng.on_progress = self._notify
        eng.appender.slow = self._slow
        try:
            self._thread.run(eng.start(wake))
        except BaseException:
            self._thread.stop()
            raise
        self.produce = eng.appender.produce  # the native fast path, bound directly

    @property
    def config(self):
        return self._engine.cfg

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def produce(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                on_delivery=None) -> None:  # replaced per instance by the native method
        """Queue one record; ``on_delivery(err, RecordMetadata)`` runs inside poll()/flush()."""
        return self._engine.appender.produce(topic, value, key, partition, timestamp, headers, on_delivery)

    def send(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None) -> concurrent.futures.Future:
        """Queue one record; a Future of its RecordMetadata."""
        fut = concurrent.futures.Future()
        st = self._engine.appender.try_append(topic, value, key, partition, timestamp, headers, fut)
        if st:
            self._slow(st, topic, value, key, partition, timestamp, headers, fut)
        return fut

    def _slow(self, st, topic, value, key, partition, timestamp, headers, target):
        """Everything the native path does not finish (runs on the caller's thread)."""
        eng = self._engine
        fast = eng.fast
        app = eng.appender
        deadline = None
        while True:
            if st == fast.ST_UNKNOWN_TOPIC and topic not in eng.looked_up and isinstance(topic, str) \
                    and not self._thread.in_loop_thread():
                self._thread.run(eng.first_lookup(topic), eng.max_block_ms / 1000 + 5)
                st = app.try_append(topic, value, key, partition, timestamp, headers, target)
            elif st in (fast.ST_UNKNOWN_TOPIC, fast.ST_UNKNOWN_PARTITION):
                value, key, partition, headers = _normalize(eng, fast.ST_NEEDS_PYTHON, topic, value, key,
                                                            partition, headers)
                st = eng.hold(topic, value, key, partition, timestamp, headers, target)
            elif st == fast.ST_BUFFER_FULL:
                if self._thread.in_loop_thread():  # (a future's callback) waiting here would stop the sender
                    raise _buffer_full(eng)
                now = _now_ms()
                if deadline is None:
                    deadline = now + eng.max_block_ms
                with self._cv:
                    st = app.try_append(topic, value, key, partition, timestamp, headers, target)
                    if st == fast.ST_BUFFER_FULL:
                        if now >= deadline:
                            raise _buffer_full(eng)
                        self._cv.wait(min((deadline - now) / 1000, 0.1))
                        continue
            elif st == fast.ST_BUSY:
                now = _now_ms()
                if deadline is None:
                    deadline = now + eng.max_block_ms
                if now >= deadline:
                    raise _buffer_full(eng)
                time.sleep(BUSY_SLEEP_S)
                st = app.try_append(topic, value, key, partition, timestamp, headers, target)
            elif st == fast.ST_PARTITION_FAILED:
                p = partition if isinstance(partition, int) and partition >= 0 else _key_partition(eng, topic, key)
                err = eng.partition_error(topic, p)
                eng.report_one(target, err, topic, p, timestamp)
                return None
            else:
                value, key, partition, headers = _normalize(eng, st, topic, value, key, partition, headers)
                st = app.try_append(topic, value, key, partition, timestamp, headers, target)
                if st == fast.ST_NEEDS_PYTHON:
                    raise ValueError(f"cannot produce this record (partition {partition!r}, headers {headers!r})")
            if st == fast.ST_OK:
                return None

    def produce_batch(self, topic, values, keys=None, partition=-1, timestamp=None, headers=None) -> concurrent.futures.Future:
        """Queue many records; a Future of [(partition, base_offset, count), ...] (see module doc).
        Blocks while the buffer is full; raises BufferFullError after max.block.ms without room."""
        self._check_open()
        eng = self._engine
        fast = eng.fast
        fut = concurrent.futures.Future()

        def settle(results, err):
            try:
                if err is None:
                    fut.set_result(results)
                else:
                    fut.set_exception(err)
            except concurrent.futures.InvalidStateError:
                pass

        handle = _BulkHandle(settle)
        job = _BulkJob(eng, topic, values, keys, partition, timestamp, headers, handle)
        if job.count == 0:
            fut.set_result([])
            return fut
        wait_s = eng.max_block_ms / 1000 + 5
        try:
            ts = self._thread.run(eng.ensure_topic(topic, job.partition), wait_s)
        except KafkaError as exc:
            fut.set_exception(exc)
            return fut
        job.plan(ts.num_partitions)
        deadline = None
        try:
            while True:
                st, p = job.advance()
                if st in (fast.ST_BUFFER_FULL, fast.ST_BUSY):
                    now = _now_ms()
                    deadline = deadline or now + eng.max_block_ms
                    with self._cv:  # re-checked under the lock so a completion's notify is not missed
                        st, p = job.advance()
                        if st in (fast.ST_BUFFER_FULL, fast.ST_BUSY):
                            if now >= deadline:
                                raise _buffer_full(eng)
                            self._cv.wait(min((deadline - now) / 1000, 0.1))
                            continue
                if st == fast.ST_OK:
                    break
                deadline = None
                if st in (fast.ST_UNKNOWN_TOPIC, fast.ST_UNKNOWN_PARTITION):
                    try:
                        self._thread.run(eng.ensure_topic(topic, p), wait_s)
                    except KafkaError as exc:
                        handle.fail(exc)
                        break
                    continue
                handle.fail(eng.partition_error(topic, p) if st == fast.ST_PARTITION_FAILED
                            else _normalize_error(eng, st))
                break
        finally:
            handle.seal(job.chunks)
        return fut

    # ---- delivery reports -----------------------------------------------------------------

    def _queue_report(self, cb, err, md) -> None:
        self._reports.append((cb, err, md))

    def _notify(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def poll(self, timeout: float | None = 0) -> int:
        """Run queued delivery callbacks on this thread; waits up to ``timeout`` s (None: until
        one arrives or nothing is pending) for the first. Returns how many ran."""
        served = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        reports = self._reports
        while True:
            while reports:
                cb, err, md = reports.popleft()
                served += 1
                cb(err, md)
            if served:
                return served
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return 0
            if deadline is None and self._engine.appender.pending == 0:
                return 0
            with self._cv:
                if not reports:
                    self._cv.wait(0.1 if remaining is None else min(remaining, 0.1))

    def flush(self, timeout: float | None = None) -> int:
        """Send everything now, run callbacks, and wait (at most ``timeout`` s) until every record
        is delivered. Returns how many records/callbacks are still outstanding."""
        eng = self._engine
        if not self._thread.running:
            self.poll(0)
            return len(self)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._thread.call_soon(eng.begin_flush)
        try:
            while True:
                self.poll(0)
                if eng.appender.pending <= 0 and not self._reports:
                    return 0
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return len(self)
                with self._cv:
                    if eng.appender.pending > 0 and not self._reports:
                        self._cv.wait(0.1 if remaining is None else min(remaining, 0.1))
        finally:
            if self._thread.running:
                self._thread.call_soon(eng.end_flush)

    def close(self, timeout: float | None = None) -> None:
        """Flush (at most ``timeout`` s), fail what is left, run the last callbacks, stop."""
        if self._closed:
            return
        self._closed = True
        try:
            left = self.flush(timeout) if self._thread.running else 0
            if self._thread.running:
                self._thread.run(self._engine.close(abort=left > 0), 30)
            self.poll(0)
        finally:
            self._thread.stop()

    def _check_open(self) -> None:
        if self._closed or not self._thread.running:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed", retriable=False,
                             name="PRODUCER_CLOSED")

    def partitions_for(self, topic: str) -> list:
        """The partition ids of ``topic`` (waits up to max.block.ms for its metadata)."""
        self._check_open()
        return self._thread.run(self._engine.partitions_for(topic), self._engine.max_block_ms / 1000 + 5)

    def metrics(self) -> dict:
        return self._engine.metrics()

    def __len__(self) -> int:
        """Records not yet delivered plus delivery callbacks not yet run (as confluent-kafka)."""
        return max(0, self._engine.appender.pending) + len(self._reports)


def _key_partition(eng, topic, key):
    ts = eng.appender.topic(topic)
    if key is None or ts is None or ts.num_partitions <= 0:
        return ts.sticky if ts is not None else -1
    if isinstance(key, str):
        key = key.encode("utf-8")
    return eng.fast.partition_for_key(key, ts.num_partitions)


def _buffer_full(eng) -> BufferFullError:
    return BufferFullError(
        f"the producer buffer ({eng.cfg['buffer.memory']} bytes of buffer.memory, "
        f"{eng.appender.buffered} in use) stayed full for max.block.ms ({eng.max_block_ms} ms); "
        "the broker is not keeping up or is unreachable, or records are produced faster than they can be sent")


def _normalize_error(eng, st):
    try:
        _normalize(eng, st, "x", None, None, -1, None)
    except KafkaError as exc:
        return exc
    return KafkaError(-1, f"records could not be appended (status {st})", retriable=False)


def _call_logged(cb, err, md) -> None:
    try:
        cb(err, md)
    except Exception:
        log.exception("a delivery callback raised")
