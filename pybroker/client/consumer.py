"""The consumer: ``AsyncConsumer`` (asyncio) and ``Consumer`` (blocking), with Kafka's semantics.

Partitions come from group management (``subscribe`` to topics or a pattern; needs
``group.id``) or are chosen by the application (``assign``). Positions start at the committed
offset (with a group id) or follow ``auto.offset.reset``. ``poll`` returns a list of
``ConsumerRecord``; with ``key.deserializer``/``value.deserializer`` (settings, or the keywords
``key_deserializer=``/``value_deserializer=``; confluent-kafka's deserializers or any callable
``(data, SerializationContext)``, see ``serialization.py``) its key and value are what they return, and a
record they refuse raises Key/ValueDeserializationError in its turn (``poll_batch`` and ``poll_raw``
return bytes). ``poll_batch`` returns a ``pyarrow.RecordBatch`` (schema
``pybroker.client.arrow.SCHEMA``; rows of several partitions concatenated; no rows on timeout).

``group.protocol`` picks the group protocol: ``classic`` (JoinGroup/SyncGroup; the default) or
``consumer`` (KIP-848: the coordinator assigns, see ``group_consumer_protocol``).

Rebalance callbacks ``on_assign(consumer, partitions)``, ``on_revoke(consumer, partitions)`` and
``on_lost(consumer, partitions)`` (default: ``on_revoke``) run inside ``poll`` on the calling
thread, as Java's ConsumerRebalanceListener; for the asyncio consumer they may be coroutines.

``isolation.level`` is ``read_uncommitted`` by default (as Kafka's Java consumer; confluent-kafka
defaults to ``read_committed``). With ``read_committed`` fetches stop at the last stable offset and
records of aborted transactions are dropped while decoding; transaction markers never surface at
either level. ``consumer_group_metadata()`` is what ``Producer.send_offsets_to_transaction`` takes.

Like Kafka's consumer, one consumer is used from one thread (or one task) at a time.

Example::

    with Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "g",
                   "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe(["events"])
        for record in consumer.poll(timeout_ms=1000):
            print(record.offset, record.value)
"""
import asyncio
import collections
import inspect
import logging
import re
import time

from pybroker.client import assignors as assignor_module
from pybroker.client.cluster import Cluster
from pybroker.client.config import INT_MAX, parse
from pybroker.client.errors import ConfigError, KafkaError, KafkaTimeoutError
from pybroker.client.fetcher import Fetcher
from pybroker.client.group import GroupMembership, compile_pattern
from pybroker.client.group_consumer_protocol import ConsumerProtocolMembership
from pybroker.client.runner import LoopThread
from pybroker.client.serialization import RecordDeserializer, check_serde, merge_keywords
from pybroker.client.types import EARLIEST, LATEST, ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

OFFSET_COMMIT, OFFSET_FETCH = 8, 9
OFFSET_COMMIT_RANGE = (2, 9)  # v9 also serves classic members (generation + member id)
OFFSET_FETCH_RANGE = (1, 9)  # v7+: require_stable waits for pending transactional offsets; v8+: groups array
UNLIMITED = INT_MAX
RAW_POLL_BYTES = 64 << 20  # poll_raw: about this many fetched bytes per call
CLOSE_TIMEOUT_MS = 30000  # Java's KafkaConsumer.close() default
STALE_EPOCH_RETRIES = 3  # a commit racing a new member epoch is sent again with the new one
# settings the coordinator owns under group.protocol=consumer (Kafka refuses them there too)
CLASSIC_ONLY_KEYS = ("partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms")


def _strategies(value):
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise ValueError("at least one strategy is required")
    for n in names:
        assignor_module.assignor_for(n)  # raises ValueError for an unknown one
    return names


# Kafka's consumer settings (names, types, defaults); the common client ones are in config.py
CONSUMER_KEYS = {
    "group.id": (str, None),
    "group.instance.id": (str, None),
    "group.protocol": (str, "classic", ("classic", "consumer")),
    "group.remote.assignor": (str, None),  # consumer protocol: the coordinator's assignor (None: its default)
    "auto.offset.reset": (str, "latest", ("earliest", "latest", "none")),
    "enable.auto.commit": (bool, True),
    "auto.commit.interval.ms": (int, 5000, 0),
    "isolation.level": (str, "read_uncommitted", ("read_uncommitted", "read_committed")),
    "fetch.min.bytes": (int, 1, 0),
    "fetch.max.wait.ms": (int, 500, 0),
    "fetch.max.bytes": (int, 52428800, 0),
    "max.partition.fetch.bytes": (int, 1048576, 1),
    "max.poll.records": (int, 500, 1),
    "max.poll.interval.ms": (int, 300000, 1),
    "session.timeout.ms": (int, 45000, 1),
    "heartbeat.interval.ms": (int, 3000, 1),
    "partition.assignment.strategy": (_strategies, ["range", "cooperative-sticky"]),
    "check.crcs": (bool, True),
    "client.rack": (str, ""),
    "allow.auto.create.topics": (bool, True),
    "exclude.internal.topics": (bool, True),
    "key.deserializer": (check_serde, None),  # callables as confluent-kafka's: see serialization.py
    "value.deserializer": (check_serde, None),
}


def _tp(item) -> TopicPartition:
    return TopicPartition(item[0], int(item[1]))


def _tps(items) -> list:
    return [_tp(i) for i in items]


def _offsets_arg(offsets) -> dict:
    """{tp: OffsetAndMetadata} from a dict {tp: offset | OffsetAndMetadata} or (topic, partition, offset)s."""
    if isinstance(offsets, dict):
        items = offsets.items()
    else:
        items = [((o[0], o[1]), o[2]) for o in offsets]
    out = {}
    for tp, value in items:
        if isinstance(value, OffsetAndMetadata):
            out[_tp(tp)] = value
        elif isinstance(value, tuple):
            out[_tp(tp)] = OffsetAndMetadata(*value)
        else:
            out[_tp(tp)] = OffsetAndMetadata(int(value))
    return out


def _subscription_arg(topics):
    """(topic list, None) or (None, compiled pattern): a name starting with '^' is a regex."""
    if isinstance(topics, re.Pattern):
        return None, topics
    if isinstance(topics, str):
        topics = [topics]
    topics = list(topics)
    if not topics or not all(isinstance(t, str) and t for t in topics):
        raise ValueError("subscribe() takes topic names, a regex pattern, or names starting with '^' as regexes")
    if any(t.startswith("^") for t in topics):
        return None, compile_pattern("|".join(f"(?:{t})" if t.startswith("^") else re.escape(t) for t in topics))
    return sorted(set(topics)), None


class AsyncConsumer:
    """The asyncio consumer. ``await start()`` (or ``async with``) before use."""

    def __init__(self, conf: dict, *, key_deserializer=None, value_deserializer=None, _facade=None):
        conf = merge_keywords(conf, {"key_deserializer": key_deserializer, "value_deserializer": value_deserializer})
        self.config = parse(conf, "consumer", CONSUMER_KEYS)
        if self.config["group.instance.id"] is not None and not self.config["group.id"]:
            raise ConfigError("group.instance.id requires group.id")
        self._consumer_protocol = self.config["group.protocol"] == "consumer"
        if self._consumer_protocol:
            given = [k for k in CLASSIC_ONLY_KEYS if k in conf]
            if given:
                raise ConfigError(f"{given[0]} is not supported with group.protocol=consumer: the group "
                                  "coordinator decides it (its group.consumer.* settings)")
        elif self.config["group.remote.assignor"] is not None:
            raise ConfigError("group.remote.assignor needs group.protocol=consumer")
        elif self.config["heartbeat.interval.ms"] >= self.config["session.timeout.ms"]:
            raise ConfigError("heartbeat.interval.ms must be lower than session.timeout.ms")
        self.group_id = self.config["group.id"] or None
        self._auto_commit = self.config["enable.auto.commit"] and self.group_id is not None
        self._auto_commit_s = self.config.seconds("auto.commit.interval.ms")
        self._max_poll_records = self.config["max.poll.records"]
        self._facade = _facade or self  # what callbacks receive: the blocking Consumer wraps this one
        self._cluster = Cluster(self.config)
        self._fetcher = Fetcher(self.config, self._cluster,
                                self._committed_positions if self.group_id else None)
        self._group = None
        self._leaving = None  # the group being left by close()
        self._subscription = None  # ("topics", list) or ("pattern", compiled) while subscribed
        self._manual = False
        self._on_assign = self._on_revoke = self._on_lost = None
        self._events = collections.deque()  # (kind, callback, partitions, future) for the polling thread
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._commit_tasks: set = set()
        self._loop = None
        self._wakeup = None
        self._started = False
        self._closed = False
        self._buffer = []  # records handed out one by one by the iterator
        self._buffer_at = 0
        self._deserialize = self._deserializer()  # None unless a deserializer is set

    def _deserializer(self):
        kd, vd = self.config["key.deserializer"], self.config["value.deserializer"]
        if kd is None and vd is None:
            return None
        from pybroker import core

        def seek(topic, partition, offset):
            try:
                self._fetcher.seek((topic, partition), offset)
            except ValueError:  # no longer assigned: whoever owns it now reads it
                pass
        return RecordDeserializer(kd, vd, core.client_codec.ConsumerRecord, seek)

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> "AsyncConsumer":
        if self._started:
            return self
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._fetcher.on_data = self._wakeup.set
        self._fetcher.start()
        self._started = True
        return self

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the consumer is closed")
        if not self._started:
            raise RuntimeError("the consumer is not started: await start() first")

    async def close(self, autocommit: bool = True, timeout_ms: int = CLOSE_TIMEOUT_MS) -> None:
        """Commit consumed offsets (enable.auto.commit), revoke, leave the group, disconnect.
        The commit and the LeaveGroup together wait at most ``timeout_ms``."""
        if self._closed:
            return
        owned = await self._stop_group()
        try:
            await self._call_user(self._on_revoke, owned)
        finally:
            await self._finish_close(autocommit, timeout_ms)

    async def _stop_group(self) -> list:
        """Stop the membership tasks (leaving comes later); the partitions the group gave us."""
        self._cancel_events()
        if self._group is None:
            return []
        await self._group.stop()
        return sorted(self._group.owned)

    async def _finish_close(self, autocommit: bool, timeout_ms: int = CLOSE_TIMEOUT_MS) -> None:
        try:
            await asyncio.wait_for(self._commit_and_leave(autocommit), max(0, timeout_ms) / 1000.0)
        except asyncio.TimeoutError:
            log.warning("closing the consumer: the final commit/LeaveGroup did not finish within %d ms", timeout_ms)
            if self._leaving is not None:
                await self._leaving.abort()
        finally:
            self._closed = True
            self._cancel_events()
            for t in list(self._commit_tasks):
                t.cancel()
            await self._fetcher.close()
            await self._cluster.close()

    async def _commit_and_leave(self, autocommit: bool) -> None:
        if autocommit and self._auto_commit:
            await self._auto_commit_now(self._fetcher.positions())
        if self._group is not None:
            self._leaving, self._group = self._group, None
            await self._leaving.close(leave=True)

    def _cancel_events(self) -> None:
        while self._events:
            fut = self._events.popleft()[3]
            if not fut.done():
                fut.cancel()

    # ---- subscription and assignment ------------------------------------------------------------------

    def subscribe(self, topics, on_assign=None, on_revoke=None, on_lost=None) -> None:
        """Join the group for ``topics``: a list of names, a regex (str starting with '^' or re.Pattern)."""
        self._check_open()
        if self.group_id is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "subscribe() needs group.id", retriable=False)
        if self._manual:
            raise RuntimeError("subscribe() and assign() are mutually exclusive: unassign with assign([]) first")
        names, pattern = _subscription_arg(topics)
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        self._subscription = ("pattern", pattern) if pattern is not None else ("topics", names)
        if self._group is None:
            membership = ConsumerProtocolMembership if self._consumer_protocol else GroupMembership
            self._group = membership(self.config, self._cluster, self._invoke, self._commit_revoked, self._notify)
            self._group.subscribe(names, pattern)
            self._group.start()
        else:
            self._group.subscribe(names, pattern)

    def subscription(self) -> list:
        """The subscribed topic names (for a pattern: those matching it now)."""
        if self._group is None:
            return []
        return sorted(self._group.topics)

    async def unsubscribe(self) -> None:
        """Revoke everything, leave the group, forget the subscription."""
        self._check_open()
        owned = await self._stop_group()
        await self._call_user(self._on_revoke, owned)
        await self._finish_unsubscribe()

    async def _finish_unsubscribe(self) -> None:
        if self._auto_commit and self._group is not None:
            await self._auto_commit_now(self._fetcher.positions())
        if self._group is not None:
            await self._group.close(leave=True)
            self._group = None
        self._subscription = None
        self._fetcher.set_assignment([])

    def assign(self, partitions) -> None:
        """Consume exactly these partitions (no group management). Items: TopicPartition,
        (topic, partition) or (topic, partition, offset); ``assign([])`` unassigns."""
        self._check_open()
        if self._subscription is not None:
            raise RuntimeError("assign() and subscribe() are mutually exclusive: unsubscribe() first")
        positions, tps = {}, []
        for item in partitions:
            tp = _tp(item)
            tps.append(tp)
            if len(item) > 2 and item[2] is not None and item[2] >= 0:
                positions[tp] = int(item[2])
        if self._auto_commit and self._fetcher.assigned():
            self._schedule_commit(self._fetcher.positions())
        self._manual = bool(tps)
        self._fetcher.set_assignment(tps, positions)

    def unassign(self) -> None:
        self.assign([])

    def assignment(self) -> list:
        return self._fetcher.assigned()

    def seek(self, partition, offset: int | None = None) -> None:
        """Fetch ``partition`` from ``offset`` next (``seek(tp, offset)`` or ``seek((t, p, offset))``);
        discards what is buffered for it."""
        if offset is None:
            partition, offset = partition[:2], partition[2]
        self._fetcher.seek(_tp(partition), int(offset))

    def seek_to_beginning(self, partitions=None) -> None:
        self._fetcher.request_reset(self.assignment() if partitions is None else _tps(partitions), EARLIEST)

    def seek_to_end(self, partitions=None) -> None:
        self._fetcher.request_reset(self.assignment() if partitions is None else _tps(partitions), LATEST)

    def pause(self, partitions) -> None:
        """Stop fetching these partitions; what is buffered stays until ``resume``."""
        self._fetcher.pause(_tps(partitions))

    def resume(self, partitions) -> None:
        self._fetcher.resume(_tps(partitions))

    def paused(self) -> list:
        return self._fetcher.paused()

    async def position(self, partition, timeout_ms: int | None = None) -> int:
        """The offset of the next record poll returns for ``partition`` (looked up if needed)."""
        self._check_open()
        tp = _tp(partition)
        deadline = time.monotonic() + self._timeout_s(timeout_ms)
        while True:
            pos = self._fetcher.position(tp)
            if pos is not None:
                return pos
            self._fetcher.raise_errors()
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"the position of {tp.topic}-{tp.partition} is not known yet")
            await asyncio.sleep(0.01)

    def _timeout_s(self, timeout_ms) -> float:
        return self.config.seconds("default.api.timeout.ms") if timeout_ms is None else timeout_ms / 1000.0

    # ---- polling -------------------------------------------------------------------------------------------

    def _notify(self) -> None:
        """Wake a waiting poll (loop thread)."""
        if self._wakeup is not None:
            self._wakeup.set()
        with self._fetcher.cond:
            self._fetcher.cond.notify_all()

    def _before_take(self, now: float, threadsafe: bool) -> None:
        """Per poll: note the poll for max.poll.interval.ms, raise pending errors, auto-commit."""
        if self._closed:
            raise RuntimeError("the consumer is closed")
        group = self._group
        if group is not None:
            group.last_poll = now
            if group.poll_timed_out:
                self._on_loop(group.polled, threadsafe)
            if group.error is not None:
                raise group.error
        elif self._subscription is None and not self._manual:
            raise RuntimeError("the consumer is not subscribed to any topic and has no assigned partitions")
        self._fetcher.raise_errors()
        if self._auto_commit and now >= self._next_auto_commit:
            self._next_auto_commit = now + self._auto_commit_s
            positions = self._fetcher.positions()
            if positions:
                self._on_loop(lambda: self._schedule_commit(positions), threadsafe)

    def _on_loop(self, fn, threadsafe: bool) -> None:
        if threadsafe:
            self._loop.call_soon_threadsafe(fn)
        else:
            fn()

    async def _run_events(self) -> None:
        while self._events:
            kind, fn, partitions, fut = self._events.popleft()
            error = None
            try:
                result = fn(self._facade, list(partitions))
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:  # raised from poll after the rebalance step is released
                error = exc
            removed = self._fetcher.remove_partitions(partitions) if kind != "assign" else None
            if not fut.done():
                fut.set_result(removed)
            if error is not None:
                raise error

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list:
        """Records fetched since the last poll (at most ``max_records``, default max.poll.records),
        waiting up to ``timeout_ms`` for some; [] on timeout."""
        self._check_open()
        n = self._max_poll_records if max_records is None else max(1, int(max_records))
        records = await self._take_when_ready(timeout_ms, lambda: self._fetcher.take_records(n))
        if records and self._deserialize is not None:
            return self._deserialize(records)
        return records or []

    async def poll_batch(self, timeout_ms: int = 1000, max_records: int | None = None):
        """Like poll, as one pyarrow.RecordBatch. ``max_records`` default: what is buffered, up to one
        fetch response per partition (rows of several partitions are concatenated)."""
        from pybroker.client import arrow
        self._check_open()
        n = UNLIMITED if max_records is None else max(1, int(max_records))
        tables = await self._take_when_ready(
            timeout_ms, lambda: self._fetcher.take_tables(n, arrow.to_record_batch, max_records is None))
        return arrow.concat(tables) if tables else arrow.empty_batch()

    async def poll_batches(self, timeout_ms: int = 1000) -> list:
        """What is buffered as pyarrow.RecordBatches, one per partition and fetch response, without
        concatenating them (no copy); [] on timeout."""
        from pybroker.client import arrow
        self._check_open()
        return await self._take_when_ready(
            timeout_ms, lambda: self._fetcher.take_tables(UNLIMITED, arrow.to_record_batch, True)) or []

    async def poll_raw(self, timeout_ms: int = 1000, max_bytes: int = RAW_POLL_BYTES) -> list:
        """The fetched record batches themselves, undecoded (for copying them elsewhere, as a mirror
        does): RawChunks of about ``max_bytes`` in all; [] on timeout. read_uncommitted only."""
        self._check_open()
        self._check_raw()
        return await self._take_when_ready(timeout_ms, lambda: self._fetcher.take_raw(max_bytes)) or []

    def _check_raw(self) -> None:
        if self._fetcher.read_committed:  # aborted data is filtered while decoding, which raw skips
            raise ConfigError("poll_raw needs isolation.level=read_uncommitted")

    async def _take_when_ready(self, timeout_ms: int, take):
        """``take()``'s first non-empty result, running pending group events between tries;
        None after ``timeout_ms``."""
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        wakeup = self._wakeup
        while True:
            wakeup.clear()
            if self._events:
                await self._run_events()
            now = time.monotonic()
            self._before_take(now, threadsafe=False)
            got = take()
            if got:
                return got
            remaining = deadline - now
            if remaining <= 0:
                return None
            try:
                await asyncio.wait_for(wakeup.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    def __aiter__(self):
        return self

    async def __anext__(self):
        """The next record, waiting as long as it takes (stops only when the consumer is closed)."""
        while self._buffer_at >= len(self._buffer):
            if self._closed:
                raise StopAsyncIteration
            self._buffer, self._buffer_at = await self.poll(1000), 0
        record = self._buffer[self._buffer_at]
        self._buffer_at += 1
        return record

    # ---- rebalance callbacks ------------------------------------------------------------------------------

    async def _invoke(self, kind: str, partitions: list):
        """Called by the group (loop): update the fetcher and run the application's callback in its poll."""
        if kind == "drop":
            return self._fetcher.remove_partitions(partitions)
        if kind == "assign":
            self._fetcher.add_partitions(partitions)
            fn = self._on_assign
            if fn is None:
                return None
        else:
            fn = self._on_revoke if kind == "revoke" else (self._on_lost or self._on_revoke)
            if fn is None or not partitions:
                return self._fetcher.remove_partitions(partitions)
        fut = self._loop.create_future()
        self._events.append((kind, fn, list(partitions), fut))
        self._notify()
        return await fut

    async def _call_user(self, fn, partitions) -> None:
        if fn is not None and partitions:
            result = fn(self._facade, list(partitions))
            if inspect.isawaitable(result):
                await result

    # ---- offsets ------------------------------------------------------------------------------------------------

    def _schedule_commit(self, positions: dict):
        task = self._loop.create_task(self._auto_commit_now(positions))
        self._commit_tasks.add(task)
        task.add_done_callback(self._commit_tasks.discard)
        return task

    async def _commit_revoked(self, positions: dict) -> None:
        """Positions of partitions the group took away: committed when enable.auto.commit is on."""
        if self._auto_commit:
            await self._auto_commit_now(positions)

    async def _auto_commit_now(self, positions: dict) -> None:
        """Commit {tp: (offset, epoch)}; failures are logged (auto-commit never raises)."""
        if not positions or self.group_id is None:
            return
        try:
            await self._commit({tp: OffsetAndMetadata(off, "", ep) for tp, (off, ep) in positions.items()})
        except KafkaError as exc:
            log.info("auto-commit of group %s failed: %s", self.group_id, exc)

    def commit(self, offsets=None, asynchronous: bool = False):
        """Commit ``offsets`` ({tp: offset | OffsetAndMetadata} or (topic, partition, offset)s; default:
        the current positions). Returns an awaitable of {tp: OffsetAndMetadata}; with
        ``asynchronous=True`` an asyncio.Task already running."""
        self._check_open()
        if self.group_id is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "committing offsets needs group.id", retriable=False)
        if offsets is None:
            chosen = {tp: OffsetAndMetadata(off, "", ep) for tp, (off, ep) in self._fetcher.positions().items()}
        else:
            chosen = _offsets_arg(offsets)
        coro = self._commit(chosen)
        if asynchronous:
            task = self._loop.create_task(coro)
            self._commit_tasks.add(task)
            task.add_done_callback(self._commit_tasks.discard)
            task.add_done_callback(_log_failed_commit)
            return task
        return coro

    async def _commit(self, offsets: dict) -> dict:
        if not offsets:
            return {}
        api = REQUESTS[OFFSET_COMMIT]
        generation, member_id, instance_id = (self._group.generation_info() if self._group is not None
                                              else (-1, "", self.config["group.instance.id"]))
        by_topic: dict = {}
        for tp, om in offsets.items():
            by_topic.setdefault(tp.topic, []).append(api.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=om.offset, committed_leader_epoch=om.leader_epoch,
                commit_timestamp=-1, committed_metadata=om.metadata or ""))
        topics = [api.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
        # members of a consumer group (KIP-848) need v9; the classic membership keeps the older range
        versions = getattr(self._group, "offset_commit_range", OFFSET_COMMIT_RANGE)

        def check(body):
            for t in body.topics:
                for p in t.partitions:
                    if p.error_code:
                        return p.error_code, f"committing {t.name}-{p.partition_index} for group {self.group_id}"
            return 0

        for attempt in range(STALE_EPOCH_RETRIES + 1):
            req = api(group_id=self.group_id, generation_id_or_member_epoch=generation, member_id=member_id,
                      group_instance_id=instance_id, retention_time_ms=-1, topics=topics)
            try:
                await self._cluster.call(None, req, *versions, group_id=self.group_id, check=check)
                return dict(offsets)
            except KafkaError as exc:
                if self._group is not None:
                    self._group.on_commit_error(exc)
                if exc.code != ErrorCode.STALE_MEMBER_EPOCH or attempt == STALE_EPOCH_RETRIES:
                    raise
            # the member epoch moved on while this was in flight: send again with the current one
            await asyncio.sleep(self.config.seconds("retry.backoff.ms"))
            if self._group is None:
                raise KafkaError(ErrorCode.STALE_MEMBER_EPOCH, "the consumer left the group", retriable=False)
            generation, member_id, instance_id = self._group.generation_info()

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """The group membership to pass to ``Producer.send_offsets_to_transaction``."""
        if self.group_id is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "consumer_group_metadata needs group.id", retriable=False)
        generation, member_id, instance_id = (self._group.generation_info() if self._group is not None
                                              else (-1, "", self.config["group.instance.id"]))
        return ConsumerGroupMetadata(self.group_id, generation, member_id, instance_id)

    async def committed(self, partitions, timeout_ms: int | None = None) -> dict:
        """{tp: OffsetAndMetadata or None} of the group's committed offsets."""
        self._check_open()
        if self.group_id is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "committed() needs group.id", retriable=False)
        return await self._offset_fetch(_tps(partitions), self._timeout_s(timeout_ms))

    async def _committed_positions(self, tps) -> dict:
        found = await self._offset_fetch(tps, None)
        return {tp: (om.offset if om is not None else None) for tp, om in found.items()}

    async def _offset_fetch(self, tps, timeout_s) -> dict:
        api = REQUESTS[OFFSET_FETCH]
        by_topic: dict = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        # both shapes: the version (v8+ carries a groups array) is chosen when the request goes out;
        # no member id/epoch (v9): the committed offsets are read without a membership check
        req = api(group_id=self.group_id, require_stable=True,
                  topics=[api.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
                  groups=[api.OffsetFetchRequestGroup(
                      group_id=self.group_id, member_id=None, member_epoch=-1,
                      topics=[api.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                              for t, ps in by_topic.items()])])

        def check(body):
            code, topics = (body.groups[0].error_code, body.groups[0].topics) if body.groups else (
                body.error_code, body.topics)
            if code:
                return code
            for t in topics:
                for p in t.partitions:
                    if p.error_code and p.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        return p.error_code, f"fetching the committed offset of {t.name}-{p.partition_index}"
            return 0

        body = await self._cluster.call(None, req, *OFFSET_FETCH_RANGE, group_id=self.group_id, check=check,
                                        timeout_s=timeout_s)
        out = {tp: None for tp in tps}
        for t in (body.groups[0].topics if body.groups else body.topics):
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if tp in out and p.committed_offset >= 0 and not p.error_code:
                    out[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "", p.committed_leader_epoch)
        return out

    async def beginning_offsets(self, partitions) -> dict:
        """{tp: log start offset}."""
        self._check_open()
        return await self._fetcher.list_offsets({tp: EARLIEST for tp in _tps(partitions)})

    async def end_offsets(self, partitions) -> dict:
        """{tp: end offset} (the last stable offset with read_committed)."""
        self._check_open()
        return await self._fetcher.list_offsets({tp: LATEST for tp in _tps(partitions)})

    async def list_topics(self) -> dict:
        """{topic: [partition ids]} of every topic the cluster has."""
        self._check_open()
        meta = await self._cluster.refresh(None)
        return {name: sorted(t.partitions) for name, t in meta.topics.items()}


def _log_failed_commit(task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.info("asynchronous commit failed: %s", task.exception())


class Consumer:
    """The blocking consumer: the same methods as AsyncConsumer, run on a private event-loop thread.

    ``poll`` takes data the loop thread has already fetched straight from a locked queue (no
    round trip to the loop), while the loop keeps the next Fetch in flight.
    """

    def __init__(self, conf: dict, *, key_deserializer=None, value_deserializer=None):
        self._async = AsyncConsumer(conf, key_deserializer=key_deserializer, value_deserializer=value_deserializer,
                                    _facade=self)
        self.config = self._async.config
        self._runner = LoopThread("pybroker-consumer-loop")
        try:
            self._runner.run(self._async.start())
        except BaseException:
            self._runner.stop()
            raise
        self._buffer = []
        self._buffer_at = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run(self, coro, timeout=None):
        return self._runner.run(coro, timeout)

    def _call(self, fn, *args):
        """Run a quick non-coroutine method on the loop thread (group state lives there)."""
        async def call():
            return fn(*args)
        return self._runner.run(call())

    # ---- subscription and assignment ------------------------------------------------------------

    def subscribe(self, topics, on_assign=None, on_revoke=None, on_lost=None) -> None:
        self._call(self._async.subscribe, topics, on_assign, on_revoke, on_lost)

    def subscription(self) -> list:
        return self._call(self._async.subscription)

    def unsubscribe(self) -> None:
        a = self._async
        a._check_open()
        owned = self._run(a._stop_group())
        self._call_user(a._on_revoke, owned)
        self._run(a._finish_unsubscribe())

    def assign(self, partitions) -> None:
        self._call(self._async.assign, list(partitions))

    def unassign(self) -> None:
        self.assign([])

    def assignment(self) -> list:
        return self._async.assignment()

    def seek(self, partition, offset: int | None = None) -> None:
        self._async.seek(partition, offset)

    def seek_to_beginning(self, partitions=None) -> None:
        self._async.seek_to_beginning(partitions)

    def seek_to_end(self, partitions=None) -> None:
        self._async.seek_to_end(partitions)

    def pause(self, partitions) -> None:
        self._async.pause(partitions)

    def resume(self, partitions) -> None:
        self._async.resume(partitions)

    def paused(self) -> list:
        return self._async.paused()

    def position(self, partition, timeout_ms: int | None = None) -> int:
        pos = self._async._fetcher.position(_tp(partition))
        if pos is not None:
            return pos
        return self._run(self._async.position(partition, timeout_ms))

    # ---- offsets ---------------------------------------------------------------------------------------

    def commit(self, offsets=None, asynchronous: bool = False):
        """Commit and wait; with ``asynchronous=True`` return a concurrent.futures.Future."""
        async def commit():
            return await self._async.commit(offsets)
        if asynchronous:
            fut = self._runner.submit(commit())
            fut.add_done_callback(_log_failed_future)
            return fut
        return self._run(commit())

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """The group membership to pass to ``Producer.send_offsets_to_transaction``."""
        return self._call(self._async.consumer_group_metadata)

    def committed(self, partitions, timeout_ms: int | None = None) -> dict:
        return self._run(self._async.committed(list(partitions), timeout_ms))

    def beginning_offsets(self, partitions) -> dict:
        return self._run(self._async.beginning_offsets(list(partitions)))

    def end_offsets(self, partitions) -> dict:
        return self._run(self._async.end_offsets(list(partitions)))

    def list_topics(self) -> dict:
        return self._run(self._async.list_topics())

    # ---- polling ------------------------------------------------------------------------------------------

    def _call_user(self, fn, partitions) -> None:
        if fn is not None and partitions:
            fn(self, list(partitions))

    def _run_events(self) -> None:
        a = self._async
        while a._events:
            try:
                kind, fn, partitions, fut = a._events.popleft()
            except IndexError:
                return
            error = None
            try:
                fn(self, list(partitions))
            except Exception as exc:
                error = exc
            removed = a._fetcher.remove_partitions(partitions) if kind != "assign" else None
            a._loop.call_soon_threadsafe(_resolve, fut, removed)
            if error is not None:
                raise error

    def _wait(self, deadline: float) -> bool:
        """Wait for data or an event until ``deadline``; False once it has passed."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        a = self._async
        fetcher = a._fetcher
        with fetcher.cond:
            if not a._events and not fetcher.has_data() and not a._closed:
                fetcher.cond.wait(remaining)
        return True

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list:
        """Records fetched since the last poll (at most ``max_records``, default max.poll.records),
        waiting up to ``timeout_ms`` for some; [] on timeout."""
        a = self._async
        n = a._max_poll_records if max_records is None else max(1, int(max_records))
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        take = a._fetcher.take_records
        while True:
            if a._events:
                self._run_events()
            a._before_take(time.monotonic(), threadsafe=True)
            records = take(n)
            if records:
                return records if a._deserialize is None else a._deserialize(records)
            if not self._wait(deadline):
                return []

    def poll_raw(self, timeout_ms: int = 1000, max_bytes: int = RAW_POLL_BYTES) -> list:
        """The fetched record batches themselves, undecoded (for copying them elsewhere, as a mirror
        does): RawChunks of about ``max_bytes`` in all; [] on timeout. read_uncommitted only."""
        a = self._async
        a._check_raw()
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        while True:
            if a._events:
                self._run_events()
            a._before_take(time.monotonic(), threadsafe=True)
            chunks = a._fetcher.take_raw(max_bytes)
            if chunks:
                return chunks
            if not self._wait(deadline):
                return []

    def poll_batch(self, timeout_ms: int = 1000, max_records: int | None = None):
        """Like poll, as one pyarrow.RecordBatch. ``max_records`` default: what is buffered, up to one
        fetch response per partition (rows of several partitions are concatenated)."""
        from pybroker.client import arrow
        n = UNLIMITED if max_records is None else max(1, int(max_records))
        return arrow.concat(self._take_tables(timeout_ms, n, max_records is None))

    def poll_batches(self, timeout_ms: int = 1000) -> list:
        """What is buffered as pyarrow.RecordBatches, one per partition and fetch response, without
        concatenating them (no copy); [] on timeout."""
        return self._take_tables(timeout_ms, UNLIMITED, True)

    def _take_tables(self, timeout_ms: int, n: int, one_chunk_per_partition: bool) -> list:
        from pybroker.client import arrow
        a = self._async
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        while True:
            if a._events:
                self._run_events()
            a._before_take(time.monotonic(), threadsafe=True)
            tables = a._fetcher.take_tables(n, arrow.to_record_batch, one_chunk_per_partition)
            if tables or not self._wait(deadline):
                return tables

    def __iter__(self):
        return self

    def __next__(self):
        """The next record, waiting as long as it takes (stops only when the consumer is closed)."""
        while self._buffer_at >= len(self._buffer):
            if self._async._closed:
                raise StopIteration
            self._buffer, self._buffer_at = self.poll(1000), 0
        record = self._buffer[self._buffer_at]
        self._buffer_at += 1
        return record

    def close(self, autocommit: bool = True, timeout_ms: int = CLOSE_TIMEOUT_MS) -> None:
        """Commit consumed offsets (enable.auto.commit), revoke, leave the group, stop the loop thread.
        The commit and the LeaveGroup together wait at most ``timeout_ms``."""
        a = self._async
        if a._closed or not self._runner.running:
            return
        try:
            owned = self._run(a._stop_group())
            try:
                self._call_user(a._on_revoke, owned)
            finally:
                self._run(a._finish_close(autocommit, timeout_ms))
        finally:
            self._runner.stop()
            with a._fetcher.cond:
                a._fetcher.cond.notify_all()


def _resolve(fut, result) -> None:
    if not fut.done():
        fut.set_result(result)


def _log_failed_future(fut) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.info("asynchronous commit failed: %s", fut.exception())
