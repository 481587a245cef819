"""Kafka producer: ``AsyncProducer`` (asyncio) and ``Producer`` (blocking, runs its engine on a
background event-loop thread). Semantics and setting names follow Kafka's Java producer.

Settings (Kafka names and defaults): ``acks`` (all | 0 | 1, default all), ``linger.ms`` (5),
``batch.size`` (16384), ``compression.type`` (none | gzip | snappy | lz4 | zstd),
``enable.idempotence`` (true; needs acks=all, max.in.flight.requests.per.connection <= 5 and
retries > 0: when left at its default and another setting conflicts, it is turned off, when set
explicitly the conflict is a ConfigError), ``max.in.flight.requests.per.connection`` (5),
``buffer.memory`` (32 MiB), ``max.block.ms`` (60000), ``delivery.timeout.ms`` (120000),
``max.request.size`` (1048576), ``partitioner`` (see ``partitioner.py``),
``partitioner.ignore.keys`` (false), ``allow.auto.create.topics`` (true), ``transactional.id``
(none; implies enable.idempotence), ``transaction.timeout.ms`` (60000), plus the common client
settings (``bootstrap.servers``, ``client.id``, ``retries``, ``retry.backoff.ms``,
``request.timeout.ms``, ``metadata.max.age.ms``...).

Sending a record::

    producer.produce(topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                     on_delivery=None)

``value``/``key``: bytes-like, str (UTF-8 encoded) or None; with ``value.serializer`` /
``key.serializer`` (settings, or the keywords ``value_serializer=``/``key_serializer=``) any object,
turned into bytes by the serializer first, called as confluent-kafka calls it (see ``serialization.py``;
a failure raises Key/ValueSerializationError). ``partition`` -1 lets the
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

Transactions (``transactional.id``): ``init_transactions``, ``begin_transaction``,
``send_offsets_to_transaction``, ``commit_transaction``, ``abort_transaction``, as in
confluent-kafka; see ``producer_transactions.py``.

Idempotence (default): the producer gets a producer id (InitProducerId) and numbers each
partition's batches; a retried batch is resent unchanged, so the broker drops duplicates. A
partition whose sequence can no longer be continued (OUT_OF_ORDER_SEQUENCE_NUMBER for the
batch the broker expects next, UNKNOWN_PRODUCER_ID, a batch that timed out after a lost
connection) fails: its waiting and later records get that error until the producer is recreated.
"""
import asyncio
import concurrent.futures
import functools
import threading
import time
from collections import deque

from pybroker.client.accumulator import now_ms
from pybroker.client.errors import KafkaError
from pybroker.client.producer_bulk import BulkJob
from pybroker.client.producer_config import parse_config  # noqa: F401 (part of this module's API)
from pybroker.client.producer_delivery import call_logged, settle_future
from pybroker.client.producer_engine import ProducerEngine, fast_module, wait_event
from pybroker.client.producer_input import buffer_full_error, closed_error
from pybroker.client.producer_transactions import AsyncTransactions, SyncTransactions
from pybroker.client.runner import LoopThread
from pybroker.client.serialization import bind_serializers, merge_keywords
from pybroker.client.types import RecordMetadata

_fast_module = fast_module  # the native fast path or its pure twin (tests check which one is used)
BUSY_SLEEP_S = 0.0005


class AsyncProducer(AsyncTransactions):
    """The asyncio producer; see the module docstring for the API and settings."""

    def __init__(self, conf, *, key_serializer=None, value_serializer=None):
        self._engine = ProducerEngine(merge_keywords(conf, {"key_serializer": key_serializer,
                                                            "value_serializer": value_serializer}))
        self._space = None
        self._started = False
        self._closed = False
        self._yield = False
        bind_serializers(self, self._engine.cfg)

    @property
    def config(self):
        return self._engine.cfg

    async def start(self) -> None:
        if self._started:
            return
        eng = self._engine
        self._space = asyncio.Event()
        eng.report_callback = call_logged
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
        if self._engine.txn is not None:
            self._engine.txn.check_produce()
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
        if self._engine.txn is not None:
            self._engine.txn.check_produce()
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
                st, value, key, partition, headers = eng.hold_checked(topic, value, key, partition, timestamp,
                                                                      headers, target)
            elif st in (fast.ST_BUFFER_FULL, fast.ST_BUSY):
                now = now_ms()
                if deadline is None:
                    deadline = now + eng.max_block_ms
                if now >= deadline:
                    raise buffer_full_error(eng)
                await wait_event(self._space, (deadline - now) / 1000)
                st = eng.appender.try_append(topic, value, key, partition, timestamp, headers, target)
            elif st == fast.ST_PARTITION_FAILED:
                eng.refuse_for_failed_partition(target, topic, key, partition, timestamp)
                return
            else:
                st, value, key, partition, headers = eng.append_fixed(st, topic, value, key, partition, timestamp,
                                                                      headers, target)
            if st == fast.ST_OK:
                return

    async def produce_batch(self, topic, values, keys=None, partition=-1, timestamp=None, headers=None) -> list:
        """Queue many records; returns [(partition, base_offset, count), ...] once all are delivered
        (raises the first error if any failed)."""
        if not self._started:
            await self.start()
        eng = self._engine
        if eng.txn is not None:
            eng.txn.check_produce()
        fut = eng.loop.create_future()
        job = BulkJob(eng, topic, values, keys, partition, timestamp, headers, functools.partial(settle_future, fut))
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
                now = now_ms()
                deadline = deadline or now + eng.max_block_ms
                if now >= deadline:
                    job.handle.fail(buffer_full_error(eng))
                    break
                await wait_event(self._space, (deadline - now) / 1000)
                continue
            deadline = None
            if st in (eng.fast.ST_UNKNOWN_TOPIC, eng.fast.ST_UNKNOWN_PARTITION):
                await eng.ensure_topic(topic, p)
                continue
            job.fail(st, p)
            break
        job.seal()
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
                if not await wait_event(self._space, remaining):
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
        sendable = await self._abort_before_close()
        left = await self.flush(timeout) if sendable else len(self)
        await self._engine.close(abort=left > 0)

    async def partitions_for(self, topic: str) -> list:
        """The partition ids of ``topic`` (waits up to max.block.ms for its metadata)."""
        await self._ensure_started()
        return await self._engine.partitions_for(topic)

    def metrics(self) -> dict:
        return self._engine.metrics()

    def __len__(self) -> int:
        return self._engine.appender.pending


class Producer(SyncTransactions):
    """The blocking producer; see the module docstring. Starts itself; ``close()`` (or ``with``)
    stops it. ``produce`` is the native per-record path."""

    def __init__(self, conf, *, key_serializer=None, value_serializer=None):
        self._engine = eng = ProducerEngine(merge_keywords(conf, {"key_serializer": key_serializer,
                                                                  "value_serializer": value_serializer}))
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
        if eng.txn is not None:  # records only inside a transaction
            self.produce = self._txn_produce
        bind_serializers(self, eng.cfg)  # only when a serializer is set: produce stays native otherwise

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

    def send(self, topic, value=None, key=None, partition=-1, timestamp=None,
             headers=None) -> concurrent.futures.Future:
        """Queue one record; a Future of its RecordMetadata."""
        if self._engine.txn is not None:
            self._engine.txn.check_produce()
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
                st, value, key, partition, headers = eng.hold_checked(topic, value, key, partition, timestamp,
                                                                      headers, target)
            elif st == fast.ST_BUFFER_FULL:
                if self._thread.in_loop_thread():  # (a future's callback) waiting here would stop the sender
                    raise buffer_full_error(eng)
                now = now_ms()
                if deadline is None:
                    deadline = now + eng.max_block_ms
                with self._cv:
                    st = app.try_append(topic, value, key, partition, timestamp, headers, target)
                    if st == fast.ST_BUFFER_FULL:
                        if now >= deadline:
                            raise buffer_full_error(eng)
                        self._cv.wait(min((deadline - now) / 1000, 0.1))
                        continue
            elif st == fast.ST_BUSY:
                now = now_ms()
                if deadline is None:
                    deadline = now + eng.max_block_ms
                if now >= deadline:
                    raise buffer_full_error(eng)
                time.sleep(BUSY_SLEEP_S)
                st = app.try_append(topic, value, key, partition, timestamp, headers, target)
            elif st == fast.ST_PARTITION_FAILED:
                eng.refuse_for_failed_partition(target, topic, key, partition, timestamp)
                return None
            else:
                st, value, key, partition, headers = eng.append_fixed(st, topic, value, key, partition, timestamp,
                                                                      headers, target)
            if st == fast.ST_OK:
                return None

    def produce_batch(self, topic, values, keys=None, partition=-1, timestamp=None,
                      headers=None) -> concurrent.futures.Future:
        """Queue many records; a Future of [(partition, base_offset, count), ...] (see module doc).
        Blocks while the buffer is full; raises BufferFullError after max.block.ms without room."""
        self._check_open()
        eng = self._engine
        if eng.txn is not None:
            eng.txn.check_produce()
        fast = eng.fast
        fut = concurrent.futures.Future()
        job = BulkJob(eng, topic, values, keys, partition, timestamp, headers, functools.partial(settle_future, fut))
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
                    now = now_ms()
                    deadline = deadline or now + eng.max_block_ms
                    with self._cv:  # re-checked under the lock so a completion's notify is not missed
                        st, p = job.advance()
                        if st in (fast.ST_BUFFER_FULL, fast.ST_BUSY):
                            if now >= deadline:
                                raise buffer_full_error(eng)
                            self._cv.wait(min((deadline - now) / 1000, 0.1))
                            continue
                if st == fast.ST_OK:
                    break
                deadline = None
                if st in (fast.ST_UNKNOWN_TOPIC, fast.ST_UNKNOWN_PARTITION):
                    try:
                        self._thread.run(eng.ensure_topic(topic, p), wait_s)
                    except KafkaError as exc:
                        job.handle.fail(exc)
                        break
                    continue
                job.fail(st, p)
                break
        finally:
            job.seal()
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
            sendable = self._abort_before_close()
            left = (self.flush(timeout) if sendable else len(self)) if self._thread.running else 0
            if self._thread.running:
                self._thread.run(self._engine.close(abort=left > 0), 30)
            self.poll(0)
        finally:
            self._thread.stop()

    def _check_open(self) -> None:
        if self._closed or not self._thread.running:
            raise closed_error()

    def partitions_for(self, topic: str) -> list:
        """The partition ids of ``topic`` (waits up to max.block.ms for its metadata)."""
        self._check_open()
        return self._thread.run(self._engine.partitions_for(topic), self._engine.max_block_ms / 1000 + 5)

    def metrics(self) -> dict:
        return self._engine.metrics()

    def __len__(self) -> int:
        """Records not yet delivered plus delivery callbacks not yet run (as confluent-kafka)."""
        return max(0, self._engine.appender.pending) + len(self._reports)

