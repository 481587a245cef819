"""The loop-side producer shared by ``Producer`` and ``AsyncProducer``: topic metadata (and the
records held while it is fetched), one sender per broker, delivery timeouts, and completing
records. Methods run on the event loop unless they say otherwise."""
import asyncio
import importlib
import logging
import threading
import time

from pybroker import core
from pybroker.client import partitioner as partitioners
from pybroker.client.accumulator import ProducerBatch, RecordAccumulator, now_ms
from pybroker.client.cluster import Cluster, backoff_s
from pybroker.client.errors import (AuthenticationError, KafkaConnectionError, KafkaError, UnknownTopicError,
                                    error_for)
from pybroker.client.idempotence import request_producer_id
from pybroker.client.producer_config import COMPRESSION, parse_config
from pybroker.client.producer_delivery import deliver
from pybroker.client.producer_input import closed_error, key_partition, normalize, record_size
from pybroker.client.producer_sender import BrokerSender
from pybroker.client.transactions import TransactionManager
from pybroker.client.types import RecordMetadata
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

REAPER_MAX_S = 1.0
INVALID_DIFFERENT_RECORD = -138  # a local code (librdkafka's): refused only because a batch-mate was invalid
BUSY_SLEEP_S = 0.0002


def fast_module():
    """The native per-record path, or its pure twin (same choice as the rest of the core)."""
    if "producer_fast" in core.MODULES:
        return core.load("producer_fast")
    package = "pybroker._native" if core.IMPL == "native" else "pybroker._pure"
    return importlib.import_module(f"{package}.producer_fast")




class HeldRecord:
    """A record waiting for its topic (or partition) to appear in the metadata."""
    __slots__ = ("value", "key", "partition", "timestamp", "headers", "target", "size", "deadline_ms")

    def __init__(self, value, key, partition, timestamp, headers, target, size, deadline_ms):
        self.value, self.key, self.partition, self.timestamp = value, key, partition, timestamp
        self.headers, self.target, self.size, self.deadline_ms = headers, target, size, deadline_ms



class ProducerEngine:
    """The loop-side producer: metadata, the per-broker senders, completions. Methods run on
    the event loop unless they say otherwise."""

    def __init__(self, conf):
        self.cfg, self.idempotent = parse_config(conf)
        cfg = self.cfg
        self.fast = fast_module()
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
        self.transactional_id = cfg["transactional.id"]
        self.txn = TransactionManager(self) if self.transactional_id is not None else None
        self.acc.txn_gate = self.txn
        self.acc.transactional = self.txn is not None
        self.loop = None
        self.senders: dict = {}
        self.held: dict = {}  # topic -> [HeldRecord] (guarded by appender.lock)
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
        self._loop_ident = None  # the event loop's thread, once the metadata task runs
        # hooks the facade sets
        self.report_callback = None  # report_callback(cb, err, md): deliver a user callback
        self.on_progress = None  # records completed or buffer freed (thread-safe notify)
        self.stats = {"records_sent": 0, "batches_sent": 0, "bytes_sent": 0, "requests": 0, "retries": 0,
                      "record_errors": 0, "batch_errors": 0, "leader_hints": 0}  # hints: KIP-951 moves

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
        if self.idempotent and self.txn is None and not self.pid_ready.done() and not self.stopped and not any(
                t.get_name() == "producer-init-id" for t in self.tasks):
            self.tasks.append(self.loop.create_task(self._init_producer_id(), name="producer-init-id"))

    def on_wake(self) -> None:
        """A batch was created or sealed (called on the loop)."""
        self.appender.wake_pending = False
        if self.txn is not None:  # join the transaction while the batch lingers
            self.txn.register(self.appender.scan(now_ms(), 0)[0])
        self._need_producer_id()
        if not self.senders:
            self.request_metadata()
        for s in self.senders.values():
            s.kick()

    def kick_all(self) -> None:
        for s in self.senders.values():
            s.kick()

    def kick_leader(self, node_id: int) -> None:
        """A partition moved to ``node_id`` (a leader hint): make sure its sender runs."""
        self._ensure_senders()
        s = self.senders.get(node_id)
        if s is not None:
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
                self.complete(b, err)
            self.fail_held(err)
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
                    self.complete(b, KafkaConnectionError("the producer was closed while the batch was in flight"))
        self._progress()

    def fail_held(self, err) -> None:
        """Fail every record still waiting for its topic's metadata."""
        with self.appender.lock:
            held, self.held = self.held, {}
        for topic, records in held.items():
            for h in records:
                self.appender.release(h.size, 1)
                self.report_one(h.target, err, topic, h.partition, h.timestamp)

    # ---- metadata -------------------------------------------------------------------------

    def request_metadata(self) -> None:
        self.md_requested = True
        if self.md_event is not None:
            self.md_event.set()

    def want_topic(self, topic) -> None:
        """Start fetching metadata for a topic records are held for (any thread)."""
        if self.loop is None:
            return
        if threading.get_ident() == self._loop_ident:
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
        deadline = now_ms() + self.max_block_ms
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
                await wait_event(self.md_event, max_age_s)
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
                timeout_s = max(0.05, min(timeout_s, (nearest - now_ms()) / 1000))
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
                    delay = max(0.0, min(delay, (nearest - now_ms()) / 1000))
                await wait_event(self.md_event, delay)
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
        now = now_ms()
        known = self.cluster.topics
        for name in list(self.appender.topics):
            t = known.get(name)
            if t is not None and self.appender.topic(name).ready:
                self._install(name, t)
        if isinstance(error, AuthenticationError):  # the same credentials fail the same way: fail now
            for name in self._wanted_topics():
                self._fail_topic(name, error)
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
            deadline = time.monotonic() + self.max_block_ms / 1000
            while st == self.fast.ST_BUSY and time.monotonic() < deadline:  # a user thread is mid-append
                time.sleep(BUSY_SLEEP_S)  # lets it finish (it needs nothing this thread holds)
                st = self.appender.try_append(topic, h.value, key, partition, h.timestamp, h.headers, h.target,
                                              True)
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
            return closed_error()
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
                s = self.senders[node] = BrokerSender(self, node)
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
        size = record_size(value, key) + fast.RECORD_OVERHEAD
        with self.appender.lock:
            st = self.appender.try_append(topic, value, key, partition, timestamp, headers, target)
            if st not in (fast.ST_UNKNOWN_TOPIC, fast.ST_UNKNOWN_PARTITION):
                return st
            if self.appender.closed:
                return fast.ST_CLOSED
            if self.appender.buffered > 0 and self.appender.buffered + size > self.appender.buffer_memory:
                return fast.ST_BUFFER_FULL
            records = self.held.setdefault(topic, [])
            records.append(HeldRecord(value, key, partition, timestamp, headers, target, size,
                                 now_ms() + self.max_block_ms))
            self.appender.reserve(size, 1)
            first = len(records) == 1
        if first:
            self.want_topic(topic)
        return fast.ST_OK

    # ---- the steps both front ends take when the native path refuses a record (caller's thread)

    def hold_checked(self, topic, value, key, partition, timestamp, headers, target):
        """Check the record's arguments, then ``hold`` it: (status, value, key, partition, headers)."""
        value, key, partition, headers = normalize(self, self.fast.ST_NEEDS_PYTHON, topic, value, key,
                                                   partition, headers)
        st = self.hold(topic, value, key, partition, timestamp, headers, target)
        return st, value, key, partition, headers

    def append_fixed(self, st, topic, value, key, partition, timestamp, headers, target):
        """Fix what ``st`` refused and append again: (status, value, key, partition, headers)."""
        value, key, partition, headers = normalize(self, st, topic, value, key, partition, headers)
        st = self.appender.try_append(topic, value, key, partition, timestamp, headers, target)
        if st == self.fast.ST_NEEDS_PYTHON:
            raise ValueError(f"cannot produce this record (partition {partition!r}, headers {headers!r})")
        return st, value, key, partition, headers

    def refuse_for_failed_partition(self, target, topic, key, partition, timestamp) -> None:
        """Report a record bound for a failed partition with that partition's error."""
        p = partition if isinstance(partition, int) and partition >= 0 else key_partition(self, topic, key)
        self.report_one(target, self.partition_error(topic, p), topic, p, timestamp)

    # ---- outcomes (batches from the senders and the expiry task) -----------------------------

    def give_up(self, b: ProducerBatch, err, maybe_written: bool, fatal: bool = False) -> None:
        """Fail a batch for good; its partition fails too when ``fatal`` or when the batch's
        outcome leaves the partition's sequence unknowable."""
        unknowable = self.acc.dropped(b, maybe_written)
        self.complete(b, err)
        if self.txn is not None:  # the transaction fails instead; aborting it restarts the sequences
            self.txn.batch_failed(err, fatal or unknowable)
            return
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
            self.complete(b, perr)

    def complete(self, b: ProducerBatch, err, base_offset: int = -1, log_append_time: int = -1) -> None:
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
            named = getattr(err, "record_errors", None)
            for delta, x, target in entries:
                if named:
                    err = record_error(b, delta, named)
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
        if self.txn is not None and err.name != "PURGE_QUEUE":
            self.txn.batch_failed(err, False)
        if target is None:
            log.debug("record for %s-%s failed: %s", topic, partition, err)
            return
        if type(target) is tuple:
            target[0].chunk_done(target[1], partition, -1, 1, err)
            return
        self._report(target, err, RecordMetadata(topic, partition, -1, -1 if timestamp is None else timestamp))

    def _report(self, target, err, md) -> None:
        deliver(target, err, md, self.report_callback)

    def _progress(self) -> None:
        if self.txn is not None:
            self.txn.progress.set()
        if self.on_progress is not None:
            self.on_progress()

    async def _reaper_loop(self) -> None:
        interval = min(REAPER_MAX_S, self.delivery_timeout_ms / 4000)
        while not self.stopped:
            await asyncio.sleep(interval)
            for b, err in self.acc.expire(now_ms(), self.delivery_timeout_ms):
                self.give_up(b, err, False)

    async def _init_producer_id(self) -> None:
        got = await request_producer_id(self.cluster, self.cfg, lambda: self.stopped)
        if got is None:
            return
        self.acc.producer_id, self.acc.producer_epoch = got
        self.pid_ready.set_result(None)
        self.kick_all()

    def metrics(self) -> dict:
        out = dict(self.stats)
        out.update(buffered_bytes=self.appender.buffered, pending_records=self.appender.pending,
                   in_flight_batches=self.acc.in_flight(), producer_id=self.acc.producer_id,
                   producer_epoch=self.acc.producer_epoch,
                   failed_partitions=sorted(self.failed_partitions))
        return out



def record_error(b: ProducerBatch, index: int, named: dict) -> KafkaError:
    """KIP-467, as librdkafka: a record the broker named fails INVALID_RECORD with the broker's reason;
    the others of its batch fail retriably (they were refused only for their company)."""
    if index in named:
        return KafkaError(ErrorCode.INVALID_RECORD, f"{b.topic}-{b.partition}: record {index} of its batch: "
                                                    f"{named[index] or 'invalid record'}")
    return KafkaError(INVALID_DIFFERENT_RECORD, f"{b.topic}-{b.partition}: another record of the same batch was "
                                                "invalid; this one may be sent again", retriable=True,
                      name="INVALID_DIFFERENT_RECORD")


async def wait_event(event: asyncio.Event, timeout_s) -> bool:
    """Clear ``event`` and wait up to ``timeout_s`` (None: no limit) for it to be set again;
    whether it was."""
    event.clear()
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except asyncio.TimeoutError:
        return False
    return True
