"""The share consumer (KIP-932, Kafka 4.2): ``AsyncShareConsumer`` (asyncio) and ``ShareConsumer``
(blocking), consuming a topic as a queue with the other members of a share group.

Members of a share group may share partitions: each record is *acquired* by one member at a time, for
the group's lock duration (``group.share.record.lock.duration.ms``), and comes back with a higher
``delivery_count`` when released, when its lock runs out or when its member goes away, until the
group's delivery count limit archives it. ``poll`` returns a list of ``ShareConsumerRecord`` (a
ConsumerRecord's fields plus ``delivery_count``); with ``key.deserializer``/``value.deserializer``
their key and value are what those return, and a record they refuse is rejected and raised as
Key/ValueDeserializationError in its turn.

``share.acknowledgement.mode``: ``implicit`` (the default) accepts every record of a poll with the next
poll, commit or close; ``explicit``: the application calls ``acknowledge(record, "accept" | "release" |
"reject")`` for each record (all of a poll's records before the next poll) and the acknowledgements go
to the brokers with the next poll, ``commit_sync``/``commit_async`` or ``close`` — on the next
ShareFetch to the record's leader when one goes out, else in a ShareAcknowledge. ``commit_sync``
returns ``{TopicPartition: None | KafkaError}`` for the acknowledgements it waited for;
``set_acknowledgement_commit_callback(fn)`` sees every answer as ``fn({tp: {offsets}}, error)``, called
from poll/commit/close on the application's thread. ``close`` sends what is pending, releases what was
fetched but not delivered (and, in explicit mode, what was delivered but not acknowledged), closes the
share sessions (epoch -1) and leaves the group (epoch -1).

``share.acquire.mode``: ``batch_optimized`` (the default) lets a leader acquire whole batches for the
member, up to about ``max.poll.records``; ``record_limit`` (KIP-1206, ShareFetch v2) never more than
``max.poll.records`` records per fetch, cutting batches, so a slow member holds no more locks than it
will process.

Where a share group starts reading is a group config (``share.auto.offset.reset``, latest by default),
as are the isolation level and the lock duration: ``AdminClient.incremental_alter_configs`` on the
GROUP resource, or ``pybroker configs``. Membership: ``share_membership``; sessions and fetching:
``share_fetcher``; the bookkeeping: ``share_session``. One consumer is used from one thread (or task).

Example::

    with ShareConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "workers"}) as consumer:
        consumer.subscribe(["jobs"])
        while True:
            for record in consumer.poll(timeout_ms=1000):
                handle(record.value)  # accepted by the next poll
"""
import asyncio
import logging
import time

from pybroker.client.cluster import Cluster
from pybroker.client.config import parse
from pybroker.client.errors import ConfigError, KafkaTimeoutError
from pybroker.client.runner import LoopThread
from pybroker.client.serialization import (KeyDeserializationError, MessageField, SerializationContext,
                                          SerializationError, ValueDeserializationError, check_serde,
                                          merge_keywords)
from pybroker.client.share_fetcher import Chunk, ShareFetcher
from pybroker.client.share_membership import ShareMembership
from pybroker.client.share_session import (AcknowledgeType, Acknowledgements, IllegalStateError,
                                           ShareConsumerRecord, ack_type)
from pybroker.client.types import TopicPartition

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_MS = 30000

SHARE_CONSUMER_KEYS = {
    "group.id": (str, None),
    "share.acknowledgement.mode": (str, "implicit", ("implicit", "explicit")),
    "share.acquire.mode": (str, "batch_optimized", ("batch_optimized", "record_limit")),
    "fetch.min.bytes": (int, 1, 0),
    "fetch.max.wait.ms": (int, 500, 0),
    "fetch.max.bytes": (int, 52428800, 0),
    "max.poll.records": (int, 500, 1),
    "check.crcs": (bool, True),
    "client.rack": (str, ""),
    "key.deserializer": (check_serde, None),
    "value.deserializer": (check_serde, None),
}

# consumer settings with no meaning for a share consumer: refused with the reason (as Kafka refuses them)
NOT_FOR_SHARE = {
    "auto.offset.reset": "a share group starts where its group config share.auto.offset.reset says "
                         "(IncrementalAlterConfigs on the GROUP resource)",
    "enable.auto.commit": "a share consumer acknowledges records (share.acknowledgement.mode); it commits no offsets",
    "auto.commit.interval.ms": "a share consumer acknowledges records (share.acknowledgement.mode); it commits "
                               "no offsets",
    "isolation.level": "the group config share.isolation.level decides it",
    "group.instance.id": "share groups have no static members",
    "group.protocol": "a share consumer always speaks the share group protocol",
    "group.remote.assignor": "the share group's coordinator assigns the partitions",
    "partition.assignment.strategy": "the share group's coordinator assigns the partitions",
    "session.timeout.ms": "the broker's group.share.session.timeout.ms (or the group's config) decides it",
    "heartbeat.interval.ms": "the broker's group.share.heartbeat.interval.ms (or the group's config) decides it",
}


def _topics_arg(topics) -> list:
    if isinstance(topics, str):
        topics = [topics]
    topics = list(topics)
    if not all(isinstance(t, str) and t for t in topics):
        raise ValueError("subscribe() takes a list of topic names")
    if any(t.startswith("^") for t in topics):
        raise ValueError("a share consumer subscribes to topic names, not patterns")
    if len(set(topics)) != len(topics):
        raise ValueError("subscribe() was given a topic twice")
    return sorted(topics)


class AsyncShareConsumer:
    """The asyncio share consumer. ``await start()`` (or ``async with``) before use."""

    def __init__(self, conf: dict, *, key_deserializer=None, value_deserializer=None):
        conf = merge_keywords(conf, {"key_deserializer": key_deserializer, "value_deserializer": value_deserializer})
        for key in conf or {}:
            if key in NOT_FOR_SHARE:
                raise ConfigError(f"{key} is not a share consumer setting: {NOT_FOR_SHARE[key]}")
        self.config = parse(conf, "consumer", SHARE_CONSUMER_KEYS)
        if not self.config["group.id"]:
            raise ConfigError("group.id is required: a share consumer is a member of a share group")
        self.group_id = self.config["group.id"]
        self.explicit = self.config["share.acknowledgement.mode"] == "explicit"
        self._max_poll_records = self.config["max.poll.records"]
        self._kd, self._vd = self.config["key.deserializer"], self.config["value.deserializer"]
        self._acks = Acknowledgements(self.explicit)
        self._cluster = Cluster(self.config)
        self._membership = None
        self._fetcher = None
        self._commit_callback = None
        self._raise_next = None  # a deserialization error to raise from the next poll
        self._loop = None
        self._wakeup = None
        self._started = False
        self._closed = False

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> "AsyncShareConsumer":
        if self._started:
            return self
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._membership = ShareMembership(self.config, self._cluster, self._on_assignment, self._notify)
        self._fetcher = ShareFetcher(self.config, self._cluster, self.group_id, lambda: self._membership.member_id,
                                     self._acks, self._notify)
        self._fetcher.start()
        self._started = True
        return self

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the share consumer is closed")
        if not self._started:
            raise IllegalStateError("the share consumer is not started: await start() first")

    @property
    def member_id(self) -> str | None:
        """The member id this consumer has in its share group (None before start)."""
        return None if self._membership is None else self._membership.member_id

    async def close(self, timeout_ms: int = CLOSE_TIMEOUT_MS) -> None:
        await self._close(timeout_ms)
        self._run_callbacks()

    async def _close(self, timeout_ms: int) -> None:
        """Acknowledge (implicit: accept; explicit: release what was not acknowledged), release what is
        buffered, close the share sessions, leave the group, disconnect."""
        if self._closed or not self._started:
            self._closed = True
            return
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        try:
            self._acks.settle_held(AcknowledgeType.RELEASE if self.explicit else AcknowledgeType.ACCEPT)
            await self._fetcher.close(max(0.0, deadline - time.monotonic()))
            try:
                await asyncio.wait_for(self._membership.close(leave=True), max(0.001, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                log.warning("share group %s: leaving did not finish within %d ms", self.group_id, timeout_ms)
        finally:
            self._closed = True
            await self._cluster.close()
            self._notify()

    # ---- subscription ------------------------------------------------------------------------------

    def subscribe(self, topics) -> None:
        """Join the share group for ``topics`` (a list of names; replaces the subscription)."""
        self._check_open()
        names = _topics_arg(topics)
        if not names:
            raise ValueError("subscribe() needs at least one topic: use unsubscribe() to stop")
        m = self._membership
        m.subscribe(names)
        if m._task is None:
            m.start()

    def subscription(self) -> list:
        return [] if self._membership is None else list(self._membership.topics)

    def assignment(self) -> list:
        """The partitions the share group's coordinator gave this member (others may share them)."""
        return [] if self._membership is None else sorted(self._membership.assignment)

    async def unsubscribe(self) -> None:
        """Acknowledge what the last poll delivered (implicit mode), release what is buffered, leave."""
        self._check_open()
        if not self.explicit:
            self._acks.settle_held(AcknowledgeType.ACCEPT)
        self._fetcher.release_buffered()
        self._acks.flush()
        self._fetcher.wake()
        await self._membership.unsubscribe()

    def _on_assignment(self, tps: set) -> None:
        self._fetcher.set_assignment(tps)

    # ---- polling ----------------------------------------------------------------------------------

    def _notify(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _raise_errors(self) -> None:
        if self._membership.error is not None:
            raise self._membership.error
        if self._fetcher.error is not None:
            raise self._fetcher.error

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list:
        """Records acquired for this member (at most ``max_records``, default max.poll.records), waiting
        up to ``timeout_ms`` for some; [] on timeout. Acknowledges the previous poll's records first
        (implicit mode) or checks that they all were (explicit mode)."""
        try:
            return await self._poll(timeout_ms, max_records)
        finally:
            self._run_callbacks()

    async def _poll(self, timeout_ms: int, max_records: int | None) -> list:
        self._check_open()
        if not self._membership.topics:
            raise IllegalStateError("the share consumer is not subscribed to any topic")
        if self._raise_next is not None:
            exc, self._raise_next = self._raise_next, None
            raise exc
        if self.explicit:
            left = self._acks.held_count()
            if left:
                raise IllegalStateError(f"{left} record(s) of the previous poll are not acknowledged: in explicit "
                                        "acknowledgement mode every record must be acknowledged before the next poll")
        else:
            self._acks.settle_held(AcknowledgeType.ACCEPT)
        self._acks.flush()
        self._fetcher.wake()
        n = self._max_poll_records if max_records is None else max(1, int(max_records))
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        while True:
            self._wakeup.clear()
            self._raise_errors()
            got = self._fetcher.take(n)
            if got:
                records = self._deliver(got)
                if records:
                    self._fetcher.wanted = False
                    return records
                continue
            self._fetcher.want()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except asyncio.TimeoutError:
                pass
            if self._closed:
                return []

    def _deliver(self, got: list) -> list:
        """ShareConsumerRecords of taken slices, held for acknowledgement. A record the deserializers
        refuse is rejected and raised: at once when it comes first, else by the next poll, the records
        after it going back to the buffer."""
        out = []
        for i, (chunk, part) in enumerate(got):
            if self._kd is None and self._vd is None:
                out += [ShareConsumerRecord.of(r, count) for r, count in part]
                self._acks.hold(chunk.tp, [r.offset for r, _ in part], chunk.source)
                continue
            for j, (r, count) in enumerate(part):
                try:
                    out.append(self._deserialized(r, count))
                except SerializationError as exc:
                    self._acks.hold(chunk.tp, [x.offset for x, _ in part[:j]], chunk.source)
                    self._acks.stage(chunk.source, chunk.tp, [r.offset], AcknowledgeType.REJECT)
                    rest = [(chunk, part[j + 1:])] + got[i + 1:]
                    for c, p in reversed(rest):
                        if p:
                            self._fetcher.buffer.appendleft(Chunk(c.tp, c.source, list(p)))
                    if not out:
                        raise
                    self._raise_next = exc
                    return out
            self._acks.hold(chunk.tp, [r.offset for r, _ in part], chunk.source)
        return out

    def _deserialized(self, r, count: int) -> ShareConsumerRecord:
        ctx = SerializationContext(r.topic, MessageField.KEY, r.headers or None)
        key, value = r.key, r.value
        if self._kd is not None:
            try:
                key = self._kd(key, ctx)
            except Exception as exc:
                raise KeyDeserializationError(exc, r) from exc
        if self._vd is not None:
            ctx.field = MessageField.VALUE
            try:
                value = self._vd(value, ctx)
            except Exception as exc:
                raise ValueDeserializationError(exc, r) from exc
        return ShareConsumerRecord.of(r, count, key, value, deserialized=True)

    # ---- acknowledgements ---------------------------------------------------------------------------

    def acknowledge(self, record, type="accept") -> None:
        """Explicit mode: acknowledge a record of the last poll ("accept", "release" or "reject", or an
        AcknowledgeType); sent with the next poll, commit or close."""
        self._check_ack_mode()
        self._acks.acknowledge(TopicPartition(record.topic, record.partition), int(record.offset), ack_type(type))

    def acknowledge_offset(self, topic: str, partition: int, offset: int, type="accept") -> None:
        """``acknowledge`` by the record's coordinates."""
        self._check_ack_mode()
        self._acks.acknowledge(TopicPartition(topic, int(partition)), int(offset), ack_type(type))

    def _check_ack_mode(self) -> None:
        if self._closed:
            raise IllegalStateError("the share consumer is closed")
        if not self.explicit:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit (implicit mode "
                                    "accepts every record of a poll with the next poll or commit)")

    def set_acknowledgement_commit_callback(self, callback) -> None:
        """``callback({TopicPartition: {offsets}}, error or None)`` for every answer to acknowledgements,
        called from poll/commit/close; None removes it."""
        if callback is not None and not callable(callback):
            raise TypeError("the acknowledgement commit callback must be callable or None")
        self._commit_callback = callback
        self._acks.record_completions = callback is not None

    def _run_callbacks(self) -> None:
        done = self._acks.take_completed()
        cb = self._commit_callback
        if cb is None:
            return
        for offsets, error in done:
            cb(offsets, error)

    def _prepare_commit(self):
        """Implicit mode: accept the last poll's records; make everything due; a waiter or None."""
        self._check_open()
        if not self.explicit:
            self._acks.settle_held(AcknowledgeType.ACCEPT)
        self._acks.flush()
        waiter = self._acks.waiter()
        self._fetcher.wake()
        return waiter

    async def _wait_commit(self, waiter, timeout_s: float | None) -> dict:
        if waiter is None:
            return {}
        if not waiter.done:
            fut = self._loop.create_future()
            waiter.on_done = lambda: fut.done() or fut.set_result(None)
            if waiter.done and not fut.done():
                fut.set_result(None)
            try:
                await asyncio.wait_for(fut, timeout_s)
            except asyncio.TimeoutError:
                self._acks.forget_waiter(waiter)
                raise KafkaTimeoutError(f"the acknowledgements were not answered within {timeout_s:g} s") from None
        return dict(waiter.results)

    async def commit_sync(self, timeout_ms: int | None = None) -> dict:
        """Send the pending acknowledgements and wait (at most ``timeout_ms``, default
        default.api.timeout.ms) for their answers: {TopicPartition: None | KafkaError}; {} when none."""
        try:
            return await self._commit_sync(timeout_ms)
        finally:
            self._run_callbacks()

    async def _commit_sync(self, timeout_ms):
        waiter = self._prepare_commit()
        timeout_s = self.config.seconds("default.api.timeout.ms") if timeout_ms is None else max(0, timeout_ms) / 1000
        return await self._wait_commit(waiter, timeout_s)

    def commit_async(self):
        """Send the pending acknowledgements without waiting: an asyncio.Task of what ``commit_sync``
        would return (answers also reach the acknowledgement commit callback)."""
        waiter = self._prepare_commit()
        self._run_callbacks()
        task = self._loop.create_task(self._wait_commit(waiter, None))
        task.add_done_callback(_log_failed_commit)
        return task


def _log_failed_commit(task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.info("asynchronous acknowledgement commit failed: %s", task.exception())


class ShareConsumer:
    """The blocking share consumer: AsyncShareConsumer's methods, run on a private event-loop thread;
    the acknowledgement commit callback runs on the calling thread."""

    def __init__(self, conf: dict, *, key_deserializer=None, value_deserializer=None):
        self._async = AsyncShareConsumer(conf, key_deserializer=key_deserializer,
                                         value_deserializer=value_deserializer)
        self.config = self._async.config
        self._runner = LoopThread("pybroker-share-consumer-loop")
        try:
            self._runner.run(self._async.start())
        except BaseException:
            self._runner.stop()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run(self, coro, timeout=None):
        return self._runner.run(coro, timeout)

    def _call(self, fn, *args):
        async def call():
            return fn(*args)
        return self._runner.run(call())

    @property
    def member_id(self) -> str | None:
        return self._async.member_id

    def subscribe(self, topics) -> None:
        self._call(self._async.subscribe, topics)

    def subscription(self) -> list:
        return self._async.subscription()

    def assignment(self) -> list:
        return self._call(self._async.assignment)

    def unsubscribe(self) -> None:
        self._run(self._async.unsubscribe())
        self._async._run_callbacks()

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list:
        """Records acquired for this member, waiting up to ``timeout_ms``; see AsyncShareConsumer.poll."""
        try:
            return self._run(self._async._poll(timeout_ms, max_records), max(0, timeout_ms) / 1000 + 60)
        finally:
            self._async._run_callbacks()

    def acknowledge(self, record, type="accept") -> None:
        self._async.acknowledge(record, type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int, type="accept") -> None:
        self._async.acknowledge_offset(topic, partition, offset, type)

    def set_acknowledgement_commit_callback(self, callback) -> None:
        self._async.set_acknowledgement_commit_callback(callback)

    def commit_sync(self, timeout_ms: int | None = None) -> dict:
        """Send the pending acknowledgements and wait for their answers: {TopicPartition: None | KafkaError}."""
        try:
            return self._run(self._async._commit_sync(timeout_ms))
        finally:
            self._async._run_callbacks()

    def commit_async(self):
        """Send the pending acknowledgements without waiting: a concurrent.futures.Future of the
        per-partition results (answers also reach the acknowledgement commit callback)."""
        a = self._async

        async def commit():
            return await a._wait_commit(a._prepare_commit(), None)
        fut = self._runner.submit(commit())
        fut.add_done_callback(_log_failed_future)
        a._run_callbacks()
        return fut

    def close(self, timeout_ms: int = CLOSE_TIMEOUT_MS) -> None:
        """Send pending acknowledgements, close the share sessions, leave the group, stop the loop thread."""
        a = self._async
        if a._closed or not self._runner.running:
            return
        try:
            self._run(a._close(timeout_ms))
        finally:
            self._runner.stop()
            a._run_callbacks()


def _log_failed_future(fut) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.info("asynchronous acknowledgement commit failed: %s", fut.exception())


__all__ = ["AcknowledgeType", "AsyncShareConsumer", "IllegalStateError", "ShareConsumer", "ShareConsumerRecord"]
