"""The consumer's fetcher: positions per partition, prefetching Fetch requests, buffered data.

Two threads may touch it. The event loop runs the fetch machinery (``run``): one Fetch (v4-17)
at a time per leader broker, on a connection of its own (so a long poll never delays the
group's or the metadata requests), in an incremental fetch session with that broker (v7+,
``fetch_session``): the first Fetch names every fetchable partition that broker leads, later
ones only the partitions whose position changed. v13+ name topics by id (when every topic's id
is known; UNKNOWN_TOPIC_ID refreshes the metadata), v12+ send the epoch of the last fetched
batch so the leader reports a diverging epoch after a log truncation. A
response is not decoded on the loop: each partition's records are checked only for where their
last complete batch ends (the next fetch offset), then queued as a ``Chunk`` and the next Fetch
goes out at once, so the broker works while the application consumes. The thread that polls
(the application's, or the loop itself for the asyncio consumer) decodes a chunk natively in
one call (``decode_records`` or ``decode_columns``) and hands out slices of the result.

Prefetching is bounded: a partition is not fetched while it holds
``PREFETCH_CHUNKS * max.partition.fetch.bytes`` of unconsumed data, nor any partition while the
whole buffer holds ``fetch.max.bytes``. A lock guards positions and the queue; decoding happens
outside it. Seeking, reassigning or resetting a partition bumps its epoch, which discards its
buffered chunks and any response already in flight for it. Paused partitions are not fetched and
their chunks stay queued (skipped by poll) until resumed.
"""
import asyncio
import collections
import logging
import struct
import threading
import time
import uuid

from pybroker import core
from pybroker.client.cluster import backoff_s
from pybroker.client.connection import BrokerConnection
from pybroker.client.errors import (INVALID_METADATA_CODES, KafkaConnectionError, KafkaError, error_for)
from pybroker.client.fetch_session import FINAL_EPOCH, INVALID_SESSION_ID, FetchParams, FetchSession
from pybroker.client.types import EARLIEST, LATEST, BrokerMetadata, RawChunk, TopicPartition
from pybroker.errors import CorruptRecordError
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

FETCH, LIST_OFFSETS = 1, 2
SESSION_CLOSE_TIMEOUT_S = 1.0  # the most a closing consumer waits for its sessions to be closed
FETCH_RANGE = (4, 17)  # v7+ sessions, v12+ flexible with diverging epochs, v13+ topic ids
FETCH_BY_NAME_MAX = 12  # the last version naming topics: used while some topic's id is unknown
FIRST_DIVERGING_EPOCH_VERSION = 12
SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH})
LEADER_MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})
NO_TOPIC_ID = uuid.UUID(int=0)
LIST_OFFSETS_RANGE = (1, 10)  # v7+ also answer MAX_TIMESTAMP (-3); v10 bounds remote lookups by timeout_ms
PREFETCH_CHUNKS = 4
RESET_STRATEGIES = {"earliest": EARLIEST, "latest": LATEST, "none": None}

_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_I32 = struct.Struct(">i")
_I64 = struct.Struct("<q")  # Arrow's little-endian int64 offsets column
LEADER_EPOCH_AT = 12  # base offset 8 + length 4
LAST_OFFSET_DELTA_AT = 23  # base offset 8 + length 4 + leader epoch 4 + magic 1 + crc 4 + attributes 2
MIN_BATCH = 61  # a v2 batch header


def batches_end(buf) -> tuple:
    """(one past the last offset, leader epoch) of the last complete batch in ``buf``; (-1, -1)
    if none is complete."""
    n = len(buf)
    pos, next_offset, last = 0, -1, -1
    head, i32 = _BATCH_HEAD.unpack_from, _I32.unpack_from
    while n - pos >= MIN_BATCH:
        base, length = head(buf, pos)
        end = pos + 12 + length
        if length < MIN_BATCH - 12 or end > n:
            break
        next_offset = base + i32(buf, pos + LAST_OFFSET_DELTA_AT)[0] + 1
        last = pos
        pos = end
    return next_offset, (i32(buf, last + LEADER_EPOCH_AT)[0] if last >= 0 else -1)


class PartitionState:
    """One assigned partition: the application's position and the fetcher's."""
    __slots__ = ("tp", "position", "position_epoch", "fetch_position", "fetch_epoch", "epoch", "paused", "buffered",
                 "reset", "error", "retry_at", "in_flight", "resolving", "high_watermark",
                 "last_stable_offset", "log_start_offset")

    def __init__(self, tp):
        self.tp = tp
        self.position = None  # next offset to hand to the application (None: not known yet)
        self.position_epoch = -1  # leader epoch of the last record handed out
        self.fetch_position = None  # next offset to fetch
        self.fetch_epoch = -1  # leader epoch of the last batch fetched (Fetch v12+: truncation detection)
        self.epoch = 0  # bumped by seek/reset: older chunks and responses are discarded
        self.paused = False
        self.buffered = 0  # bytes of queued, not fully consumed chunks
        self.reset = None  # EARLIEST/LATEST requested by seek_to_*; None: committed offset, then policy
        self.error = None  # a KafkaError for the next poll
        self.retry_at = 0.0
        self.in_flight = False
        self.resolving = False
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1


class Chunk:
    """One partition's records from one Fetch response, consumed in slices."""
    __slots__ = ("state", "epoch", "data", "aborted", "size", "next_offset", "records", "table", "index",
                 "dropped")

    def __init__(self, state, data, aborted, next_offset):
        self.state = state
        self.epoch = state.epoch
        self.data = data
        self.aborted = aborted
        self.size = len(data)
        self.next_offset = next_offset  # one past the last batch: the position once consumed
        self.records = None  # decoded ConsumerRecords (poll), or
        self.table = None  # a decoded pyarrow.RecordBatch (poll_batch)
        self.index = 0  # first unconsumed entry of records/table
        self.dropped = False


class Fetcher:
    """Positions, pause state and the prefetch buffer of a consumer's assigned partitions."""

    def __init__(self, config, cluster, committed_lookup=None):
        self.config = config
        self.cluster = cluster
        self.committed_lookup = committed_lookup  # async (tps) -> {tp: offset or None}; None: no group
        self.read_committed = config["isolation.level"] == "read_committed"
        self.check_crcs = config["check.crcs"]
        self.default_reset = RESET_STRATEGIES[config["auto.offset.reset"]]
        self.reset_is_none = config["auto.offset.reset"] == "none"
        self.max_wait_ms = config["fetch.max.wait.ms"]
        self.min_bytes = config["fetch.min.bytes"]
        self.max_bytes = config["fetch.max.bytes"]
        self.partition_max_bytes = config["max.partition.fetch.bytes"]
        self.partition_limit = PREFETCH_CHUNKS * self.partition_max_bytes
        self.rack = config["client.rack"]
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)  # the application thread waits here for data
        self.states: dict = {}  # TopicPartition -> PartitionState, in assignment order
        self.ready = collections.deque()  # Chunks in arrival order
        self.buffered = 0
        self.on_data = None  # called on the loop when data or an error is queued (wakes async poll)
        self._loop = None
        self._loop_thread = None
        self._wakeup = None
        self._space_waiting = False  # the planner skipped partitions because the buffer is full
        self._task = None
        self._node_tasks: dict = {}  # node id -> the task of its Fetch in flight
        self._aux_tasks: set = set()
        self._conns: dict = {}  # node id -> our own BrokerConnection for fetching
        self._sessions: dict = {}  # node id -> FetchSession
        self.leader_hints = 0  # partitions moved by a response's leader hint (KIP-951)
        self._conn_failures: dict = {}
        self._node_failures: dict = {}  # node id -> unexpected failures of its fetch loop in a row
        self._node_retry_at: dict = {}  # node id -> when its fetch loop may start again
        self._node_reported: set = set()  # nodes whose failure streak poll has been told about
        self.error = None  # a fetch failure that persisted, for the next poll (raised once)
        self._metadata_task = None
        self._metadata_failures = 0
        self._closed = False
        self.decode_records = core.client_codec.decode_records
        self.decode_columns = core.client_codec.decode_columns

    # ---- lifecycle (loop thread) -----------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wakeup = asyncio.Event()
        self._task = self._loop.create_task(self._run())

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in [self._task, self._metadata_task, *self._node_tasks.values(), *self._aux_tasks] if t]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._close_sessions()
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()
        with self.lock:
            self.ready.clear()
            self.cond.notify_all()

    def wake(self) -> None:
        """Make the fetch loop look again (thread-safe)."""
        if self._loop is None or self._closed:
            return
        if threading.get_ident() == self._loop_thread:
            self._wakeup.set()
        else:
            try:
                self._loop.call_soon_threadsafe(self._wakeup.set)
            except RuntimeError:
                pass  # the loop is closed

    # ---- assignment and positions (any thread) ---------------------------------------------

    def assigned(self) -> list:
        with self.lock:
            return list(self.states)

    def set_assignment(self, tps, positions: dict | None = None) -> None:
        """Replace the assignment; kept partitions keep their positions and buffered data."""
        tps = [TopicPartition(*tp) for tp in tps]
        with self.lock:
            wanted = set(tps)
            for tp in [tp for tp in self.states if tp not in wanted]:
                self._drop_locked(self.states.pop(tp))
            for tp in tps:
                if tp not in self.states:
                    self.states[tp] = PartitionState(tp)
            for tp, offset in (positions or {}).items():
                if tp in self.states and offset is not None and offset >= 0:
                    self._seek_locked(self.states[tp], offset)
        self.wake()

    def add_partitions(self, tps) -> None:
        with self.lock:
            for tp in tps:
                tp = TopicPartition(*tp)
                if tp not in self.states:
                    self.states[tp] = PartitionState(tp)
        self.wake()

    def remove_partitions(self, tps) -> dict:
        """Unassign ``tps``; returns {tp: (position, leader epoch)} of those with a known position."""
        positions = {}
        with self.lock:
            for tp in tps:
                state = self.states.pop(TopicPartition(*tp), None)
                if state is not None:
                    self._drop_locked(state)
                    if state.position is not None:
                        positions[state.tp] = (state.position, state.position_epoch)
        self.wake()
        return positions

    def _state(self, tp) -> PartitionState:
        state = self.states.get(tp)
        if state is None:
            raise ValueError(f"partition {tp[0]}-{tp[1]} is not assigned to this consumer")
        return state

    def _drop_locked(self, state) -> None:
        """Discard a partition's queued chunks and make in-flight responses for it stale."""
        state.epoch += 1
        if state.buffered:
            for chunk in self.ready:
                if chunk.state is state:
                    chunk.dropped = True
            self.ready = collections.deque(c for c in self.ready if not c.dropped)
            self.buffered -= state.buffered
            state.buffered = 0
            self._space_freed_locked()

    def _seek_locked(self, state, offset) -> None:
        self._drop_locked(state)
        state.position = state.fetch_position = offset
        state.position_epoch = state.fetch_epoch = -1
        state.reset = None
        state.error = None
        state.retry_at = 0.0

    def seek(self, tp, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"seek offset must be >= 0, got {offset}")
        with self.lock:
            self._seek_locked(self._state(TopicPartition(*tp)), offset)
        self.wake()

    def request_reset(self, tps, strategy: int) -> None:
        """Look the position up again: EARLIEST or LATEST (seek_to_beginning/seek_to_end)."""
        with self.lock:
            for tp in tps:
                state = self._state(TopicPartition(*tp))
                self._drop_locked(state)
                state.position = state.fetch_position = None
                state.reset = strategy
                state.error = None
                state.retry_at = 0.0
        self.wake()

    def position(self, tp):
        """The next offset poll will return for ``tp``, or None while it is being looked up."""
        with self.lock:
            return self._state(TopicPartition(*tp)).position

    def positions(self) -> dict:
        """{tp: (position, leader epoch)} of every assigned partition whose position is known."""
        with self.lock:
            return {tp: (s.position, s.position_epoch) for tp, s in self.states.items() if s.position is not None}

    def watermarks(self, tp) -> tuple:
        """(log start offset, high watermark) from the latest fetch response (-1 if none yet)."""
        with self.lock:
            s = self._state(TopicPartition(*tp))
            return s.log_start_offset, s.high_watermark

    def pause(self, tps) -> None:
        with self.lock:
            for tp in tps:
                self._state(TopicPartition(*tp)).paused = True

    def resume(self, tps) -> None:
        with self.lock:
            for tp in tps:
                self._state(TopicPartition(*tp)).paused = False
            self.cond.notify_all()
        self.wake()
        if self.on_data is not None:
            self._call_on_loop(self.on_data)

    def paused(self) -> list:
        with self.lock:
            return [tp for tp, s in self.states.items() if s.paused]

    def _call_on_loop(self, fn) -> None:
        if self._loop is None or self._closed:
            return
        if threading.get_ident() == self._loop_thread:
            fn()
        else:
            try:
                self._loop.call_soon_threadsafe(fn)
            except RuntimeError:
                pass

    # ---- consuming (the polling thread) ------------------------------------------------------

    def has_data(self) -> bool:
        """True when poll would return something (or raise) without waiting. Call with the lock held."""
        if self.error is not None:
            return True
        for chunk in self.ready:
            if not chunk.state.paused:
                return True
        for s in self.states.values():
            if s.error is not None:
                return True
        return False

    def raise_errors(self) -> None:
        """Raise a partition's pending error (a position that cannot be found or reset, a
        corrupt batch, a fetch loop that keeps failing). Errors about a missing position stay
        until the partition is sought."""
        with self.lock:
            err, self.error = self.error, None
            if err is not None:
                raise err
            for s in self.states.values():
                err = s.error
                if err is not None:
                    if err.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                        s.error = None
                    raise err

    def _next_chunk_locked(self, skip=()):
        for chunk in self.ready:
            if chunk.dropped or chunk.epoch != chunk.state.epoch:
                continue
            if not chunk.state.paused and chunk.state not in skip:
                return chunk
        return None

    def _finish_chunk_locked(self, chunk, advance: bool = True) -> None:
        chunk.dropped = True
        try:
            self.ready.remove(chunk)
        except ValueError:
            pass
        state = chunk.state
        state.buffered -= chunk.size
        self.buffered -= chunk.size
        if (advance and chunk.epoch == state.epoch and state.position is not None
                and chunk.next_offset > state.position):
            state.position = chunk.next_offset  # past control batches and aborted data at the end
        self._space_freed_locked()

    def _space_freed_locked(self) -> None:
        if self._space_waiting:
            self._space_waiting = False
            self.wake()

    def _fail_chunk_locked(self, chunk, exc) -> None:
        """A chunk that cannot be decoded: drop it, fetch again from the position, report."""
        state = chunk.state
        self._finish_chunk_locked(chunk, advance=False)
        if chunk.epoch == state.epoch:
            self._drop_locked(state)
            state.fetch_position = state.position
        raise exc

    def take_records(self, max_records: int) -> list:
        """Up to ``max_records`` records from the queue, in fetch order, advancing positions."""
        out = None
        while True:
            with self.lock:
                chunk = self._next_chunk_locked()
                if chunk is None:
                    break
                state = chunk.state
                start = state.position
                need_decode = chunk.records is None
            if need_decode:  # outside the lock: the loop keeps queueing meanwhile
                try:
                    records, _ = self.decode_records(chunk.data, state.tp.topic, state.tp.partition, start,
                                                     self.read_committed, chunk.aborted, self.check_crcs)
                except (CorruptRecordError, ValueError) as exc:
                    with self.lock:
                        self._fail_chunk_locked(chunk, _corrupt(state.tp, exc))
                with self.lock:
                    if chunk.dropped or chunk.epoch != state.epoch or state.position != start:
                        continue
                    chunk.records, chunk.table, chunk.index = records, None, 0
            with self.lock:
                if chunk.dropped or chunk.epoch != state.epoch:
                    continue
                records, i = chunk.records, chunk.index
                want = max_records - (len(out) if out is not None else 0)
                if i == 0 and len(records) <= want:
                    part = records  # the whole chunk: no copy
                else:
                    part = records[i:i + want]
                chunk.index = i + len(part)
                if part:
                    last = part[-1]
                    state.position = last.offset + 1
                    state.position_epoch = last.leader_epoch
                if chunk.index >= len(records):
                    self._finish_chunk_locked(chunk)
            if out is None:
                out = part
            else:
                out += part
            if len(out) >= max_records:
                break
        return out if out is not None else []

    def take_raw(self, max_bytes: int) -> list:
        """Whole fetched chunks, undecoded, up to about ``max_bytes``, advancing positions past them
        (a chunk that poll has begun to hand out is finished by poll, not here)."""
        out, size = [], 0
        with self.lock:
            skip = set()
            while size < max_bytes:
                chunk = self._next_chunk_locked(skip)
                if chunk is None:
                    break
                state = chunk.state
                if chunk.index or state.position is None:
                    skip.add(state)
                    continue
                out.append(RawChunk(state.tp.topic, state.tp.partition, state.position, chunk.data,
                                    chunk.next_offset))
                size += chunk.size
                self._finish_chunk_locked(chunk)
        return out

    def take_tables(self, max_records: int, to_record_batch, one_chunk_per_partition: bool = False) -> list:
        """Up to ``max_records`` rows as pyarrow RecordBatches (slices of decoded chunks). With
        ``one_chunk_per_partition`` no partition contributes rows of two fetch responses (so the
        caller's concatenation never copies one partition's data just to merge it)."""
        out, rows = [], 0
        taken = set()
        while rows < max_records:
            with self.lock:
                chunk = self._next_chunk_locked(taken)
                if chunk is None:
                    break
                state = chunk.state
                start = state.position
                need_decode = chunk.table is None
            if need_decode:
                try:
                    cols = self.decode_columns(chunk.data, start, self.read_committed, chunk.aborted,
                                               self.check_crcs)
                    table = to_record_batch(cols, state.tp.topic, state.tp.partition)
                except (CorruptRecordError, ValueError) as exc:
                    with self.lock:
                        self._fail_chunk_locked(chunk, _corrupt(state.tp, exc))
                with self.lock:
                    if chunk.dropped or chunk.epoch != state.epoch or state.position != start:
                        continue
                    chunk.table, chunk.records, chunk.index = (table, cols.offsets), None, 0
            with self.lock:
                if chunk.dropped or chunk.epoch != state.epoch:
                    continue
                (table, offsets), i = chunk.table, chunk.index
                n = min(max_records - rows, table.num_rows - i)
                if n > 0:
                    out.append(table if i == 0 and n == table.num_rows else table.slice(i, n))
                    rows += n
                    chunk.index = i + n
                    state.position = _I64.unpack_from(offsets, 8 * (i + n - 1))[0] + 1
                    if one_chunk_per_partition:
                        taken.add(state)
                if chunk.index >= table.num_rows:
                    self._finish_chunk_locked(chunk)
        return out

    # ---- the fetch loop (loop thread) ----------------------------------------------------------

    async def _run(self) -> None:
        while not self._closed:
            self._wakeup.clear()
            next_retry = self._plan_and_send()
            timeout = None if next_retry is None else max(0.0, next_retry - time.monotonic())
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    def _plan_and_send(self):
        """Start a fetch loop for every idle leader with fetchable partitions; start position
        lookups. Returns when to look again for partitions in backoff (monotonic time) or None."""
        now = time.monotonic()
        next_retry = None
        nodes = set()
        unresolved = []
        need_metadata = False
        with self.lock:
            for tp, s in self.states.items():
                if s.retry_at > now:
                    next_retry = s.retry_at if next_retry is None else min(next_retry, s.retry_at)
                    continue
                if s.position is None:
                    if not s.resolving and s.error is None:
                        unresolved.append(s)
                    continue
                if not self._fetchable_locked(s, now):
                    continue
                node = self.cluster.leader_for(tp)
                if node < 0:
                    need_metadata = True
                elif node not in self._node_tasks:
                    nodes.add(node)
        for node in nodes:
            retry_at = self._node_retry_at.get(node, 0.0)
            if retry_at > now:  # its fetch loop failed unexpectedly: backing off
                next_retry = retry_at if next_retry is None else min(next_retry, retry_at)
                continue
            self._node_tasks[node] = self._loop.create_task(self._node_loop(node))
        if unresolved:
            for s in unresolved:
                s.resolving = True
            self._spawn(self._resolve_positions(unresolved))
        if need_metadata:
            self._refresh_metadata_soon()
        return next_retry

    def _fetchable_locked(self, s, now: float) -> bool:
        if s.position is None or s.paused or s.in_flight or s.error is not None or s.retry_at > now:
            return False
        if self.buffered >= self.max_bytes or s.buffered >= self.partition_limit:
            self._space_waiting = True  # consuming will wake the loop
            return False
        return True

    def _take_fetchable(self, node: int) -> list:
        """The partitions to name in the next Fetch to ``node`` (marked in flight)."""
        now = time.monotonic()
        leader_for = self.cluster.leader_for
        with self.lock:
            states = [s for tp, s in self.states.items() if self._fetchable_locked(s, now) and leader_for(tp) == node]
            for s in states:
                s.in_flight = True
        return states

    def _release(self, states) -> None:
        with self.lock:
            for s in states:
                s.in_flight = False

    def _notify_data(self) -> None:
        with self.lock:
            self.cond.notify_all()
        if self.on_data is not None:
            self.on_data()

    def _spawn(self, coro) -> None:
        task = self._loop.create_task(coro)
        self._aux_tasks.add(task)
        task.add_done_callback(self._aux_tasks.discard)

    def _refresh_metadata_soon(self) -> None:
        if self._metadata_task is None or self._metadata_task.done():
            self._metadata_task = self._loop.create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        delay = backoff_s(self._metadata_failures, self.config["retry.backoff.ms"],
                          self.config["retry.backoff.max.ms"]) if self._metadata_failures else 0
        if delay:
            await asyncio.sleep(delay)
        with self.lock:
            topics = sorted({tp.topic for tp in self.states})
        try:
            await self.cluster.refresh(topics)
            self._metadata_failures = 0
        except KafkaError as exc:
            self._metadata_failures += 1
            log.debug("metadata refresh for fetching failed: %s", exc)
        self._wakeup.set()

    async def _connection(self, node: int) -> BrokerConnection:
        conn = self._conns.get(node)
        if conn is not None and not conn.closed:
            return conn
        broker = self.cluster.brokers.get(node)
        if broker is None:
            await self.cluster.refresh([])
            broker = self.cluster.brokers.get(node)
            if broker is None:
                raise KafkaConnectionError(f"broker {node} is not in the cluster metadata")
        failures = self._conn_failures.get(node, 0)
        if failures:
            await asyncio.sleep(backoff_s(failures - 1, self.config["reconnect.backoff.ms"],
                                          self.config["reconnect.backoff.max.ms"]))
        try:
            conn = await BrokerConnection.open(
                broker.host, broker.port, self.cluster.client_id,
                self.config.seconds("socket.connection.setup.timeout.ms"),
                request_timeout_s=self.config.seconds("request.timeout.ms"), node_id=node,
                max_frame_bytes=self.config["receive.message.max.bytes"], security=self.config.security)
        except KafkaError:
            self._conn_failures[node] = failures + 1
            raise
        self._conn_failures.pop(node, None)
        if self._closed:
            await conn.close()
            raise KafkaConnectionError("the consumer is closed")
        self._conns[node] = conn
        return conn

    def _wanted(self, states) -> tuple:
        """({(topic, partition): FetchParams}, {topic id: name} or None when some topic's id is
        unknown, the sent map {tp: (state, epoch, fetch offset)} for the response)."""
        topics = self.cluster.topics
        wanted, sent, ids = {}, {}, {}
        max_bytes = self.partition_max_bytes
        for s in states:
            tp = s.tp
            t = topics.get(tp.topic)
            pm = None if t is None else t.partitions.get(tp.partition)
            topic_id = None if t is None else t.topic_id
            if ids is not None:
                if topic_id is None or topic_id == NO_TOPIC_ID:
                    ids = None
                else:
                    ids[topic_id] = tp.topic
            wanted[tp] = FetchParams(topic_id, s.fetch_position, -1 if pm is None else pm.leader_epoch,
                                     s.fetch_epoch, max_bytes)
            sent[tp] = (s, s.epoch, s.fetch_position)
        return wanted, ids, sent

    def _fetch_request(self, session, wanted: dict, by_id: bool):
        """The Fetch for ``wanted`` in ``session`` (names or, ``by_id``, topic ids)."""
        api = REQUESTS[FETCH]
        plan = session.plan(wanted, by_id)
        topics: dict = {}
        for (topic, partition), fp in plan.send.items():
            topics.setdefault(topic, []).append(api.FetchPartition(
                partition=partition, current_leader_epoch=fp.current_leader_epoch, fetch_offset=fp.fetch_offset,
                last_fetched_epoch=fp.last_fetched_epoch, log_start_offset=-1, partition_max_bytes=fp.max_bytes))
        forgotten: dict = {}
        for topic, topic_id, partition in plan.forgotten:
            forgotten.setdefault((topic, topic_id), []).append(partition)
        return api(replica_id=-1, max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
                   isolation_level=1 if self.read_committed else 0, session_id=plan.session_id,
                   session_epoch=plan.epoch,
                   topics=[api.FetchTopic(topic=t, topic_id=wanted[(t, ps[0].partition)].topic_id or NO_TOPIC_ID,
                                          partitions=ps) for t, ps in topics.items()],
                   forgotten_topics_data=[api.ForgottenTopic(topic=t, topic_id=i or NO_TOPIC_ID, partitions=ps)
                                          for (t, i), ps in forgotten.items()],
                   rack_id=self.rack)

    async def _close_sessions(self) -> None:
        """A last empty Fetch with epoch -1 to each broker holding a session of ours, so its cache slot
        frees now (as Kafka's consumer closes). It goes over the client's other connection to that
        broker when one is open (the fetch connection may hold a long poll the close would wait
        behind); bounded, and otherwise the session is left to the broker's eviction."""
        api, waits = REQUESTS[FETCH], []
        for node, session in self._sessions.items():
            conn = self.cluster.open_connection(node)
            if session.session_id == INVALID_SESSION_ID or conn is None:
                continue
            req = api(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=self.max_bytes, isolation_level=0,
                      session_id=session.session_id, session_epoch=FINAL_EPOCH, topics=[], forgotten_topics_data=[],
                      rack_id=self.rack)
            version = conn.version(FETCH, FETCH_RANGE[0], FETCH_RANGE[1] if session.by_id else FETCH_BY_NAME_MAX)
            waits.append(conn.request_future(req, version, SESSION_CLOSE_TIMEOUT_S))
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)

    def _session(self, node: int) -> FetchSession:
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = FetchSession()
        return session

    async def _node_loop(self, node: int) -> None:
        """Fetch from one leader back to back while it has fetchable partitions. The next request
        goes out before the application is told about the data just received, so the broker
        works while the application decodes."""
        states, notify, refetched = [], False, False
        session = self._session(node)
        try:
            states = self._take_fetchable(node)
            while states and not self._closed:
                try:
                    conn = await self._connection(node)
                    with self.lock:
                        wanted, ids, sent = self._wanted(states)
                    version = conn.version(FETCH, FETCH_RANGE[0],
                                           FETCH_RANGE[1] if ids is not None else FETCH_BY_NAME_MAX)
                    by_id = version > FETCH_BY_NAME_MAX
                    req = self._fetch_request(session, wanted, by_id)
                    fut = conn.request_future(req, version, self.config.seconds("request.timeout.ms")
                                              + self.max_wait_ms / 1000.0)
                    if notify:
                        notify = False
                        self._notify_data()
                    resp = await fut
                except KafkaError as exc:
                    session.failed(None)
                    self._release(states)
                    self._backoff(states, exc, metadata=True)
                    return
                if resp.error_code:
                    session.failed(resp.error_code)
                    if resp.error_code in SESSION_ERRORS and not refetched:  # the next Fetch is full: at once
                        refetched = True
                        log.debug("fetch session with broker %s lost (%s); fetching in full", node,
                                  error_for(resp.error_code).name)
                        self._release(states)
                        states = self._take_fetchable(node)
                        continue
                    self._release(states)
                    self._backoff(states, error_for(resp.error_code), metadata=True)
                    return
                session.answered(resp.session_id)
                refetched = False
                notify = self._handle_response(resp, sent, ids if by_id else None,
                                               version >= FIRST_DIVERGING_EPOCH_VERSION)
                if node in self._node_failures:
                    self._node_recovered(node)
                self._release(states)
                states = self._take_fetchable(node)
        except Exception as exc:  # a bug or unexpected data: retried later, never in a tight loop
            session.restart()
            self._node_failed(node, exc)
        finally:
            self._release(states)
            if notify:
                self._notify_data()
            if self._node_tasks.get(node) is asyncio.current_task():
                del self._node_tasks[node]
            if not self._closed:
                self._wakeup.set()

    def _node_failed(self, node: int, exc: BaseException) -> None:
        """An unexpected failure of ``node``'s fetch loop: restart it after an exponential
        backoff (retry.backoff.ms .. retry.backoff.max.ms); log the first failure of a streak;
        once the backoff has grown to its maximum, report the failure to the next poll (once)."""
        failures = self._node_failures.get(node, 0)
        self._node_failures[node] = failures + 1
        base_ms, max_ms = self.config["retry.backoff.ms"], self.config["retry.backoff.max.ms"]
        self._node_retry_at[node] = time.monotonic() + backoff_s(failures, base_ms, max_ms)
        if failures == 0:
            log.warning("fetching from broker %s failed unexpectedly; retrying with backoff "
                        "(repeats are logged at debug level until a fetch succeeds)", node, exc_info=exc)
        else:
            log.debug("fetching from broker %s failed again (%d in a row): %r", node, failures + 1, exc)
        if base_ms * (2 ** min(failures, 30)) >= max_ms and node not in self._node_reported:
            self._node_reported.add(node)
            with self.lock:
                self.error = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                        f"fetching from broker {node} failed {failures + 1} times in a row "
                                        f"({exc!r}); still retrying", retriable=True)
                self.cond.notify_all()
            if self.on_data is not None:
                self.on_data()

    def _node_recovered(self, node: int) -> None:
        failures = self._node_failures.pop(node)
        self._node_retry_at.pop(node, None)
        self._node_reported.discard(node)
        log.info("fetching from broker %s works again after %d failed attempts", node, failures)

    def _backoff(self, states, exc, metadata: bool) -> None:
        log.debug("fetch failed, backing off: %s", exc)
        retry_at = time.monotonic() + self.config.seconds("retry.backoff.ms")
        with self.lock:
            for s in states:
                s.retry_at = retry_at
        if metadata:
            self.cluster.request_update()
            self._refresh_metadata_soon()

    def _handle_response(self, resp, sent: dict, names: dict | None = None, diverging: bool = False) -> bool:
        """Queue the data, note errors; True when a waiting poll should be woken. ``names``: topic
        id -> name when the response names topics by id; ``diverging``: it may carry diverging
        epochs (v12+)."""
        queued = False
        reset, retry, failed, hinted = [], [], False, False
        with self.lock:
            for t in resp.responses:
                topic = t.topic if names is None else names.get(t.topic_id)
                for p in t.partitions:
                    tp = TopicPartition(topic, p.partition_index)
                    entry = sent.get(tp)
                    if entry is None:
                        continue
                    state, epoch, offset = entry
                    if state.epoch != epoch or self.states.get(tp) is not state:
                        continue  # sought, reset or unassigned while the fetch was in flight
                    code = p.error_code
                    if code == ErrorCode.NONE:
                        state.high_watermark = p.high_watermark
                        state.last_stable_offset = p.last_stable_offset
                        state.log_start_offset = p.log_start_offset
                        data = p.records
                        if data is None or len(data) == 0:
                            if diverging and p.diverging_epoch.epoch >= 0:
                                failed |= self._truncated_locked(state, p.diverging_epoch)
                            continue
                        next_offset, last_epoch = batches_end(data)
                        if next_offset <= offset:
                            continue  # only a partial batch: fetch the same offset again
                        state.fetch_epoch = last_epoch
                        aborted = None
                        if self.read_committed and p.aborted_transactions:
                            aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
                        chunk = Chunk(state, data, aborted, next_offset)
                        state.fetch_position = next_offset
                        state.buffered += chunk.size
                        self.buffered += chunk.size
                        self.ready.append(chunk)
                        queued = True
                    elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        reset.append(state)
                    elif code in LEADER_MOVED and self._apply_hint(tp, p.current_leader, resp.node_endpoints):
                        hinted = True  # the response named the new leader: fetch there, no refresh
                    elif code in INVALID_METADATA_CODES or code in (ErrorCode.OFFSET_NOT_AVAILABLE,
                                                                    ErrorCode.REQUEST_TIMED_OUT):
                        retry.append(state)
                    else:
                        state.error = error_for(code, f"fetching {tp.topic}-{tp.partition}")
                        failed = True
            for state in reset:
                self._out_of_range_locked(state)
        if retry:
            self._backoff(retry, None, metadata=True)
        if hinted:
            self._wakeup.set()
        return bool(queued or failed or reset)

    def _apply_hint(self, tp, leader, endpoints) -> bool:
        """KIP-951: move ``tp`` to the leader the response named (True if it was newer)."""
        if leader is None or leader.leader_id < 0:
            return False
        known = {n.node_id: BrokerMetadata(n.node_id, n.host, n.port, n.rack) for n in endpoints or ()}
        if not self.cluster.maybe_update_leader(tp.topic, tp.partition, leader.leader_id, leader.leader_epoch, known):
            return False
        self.leader_hints += 1
        return True

    def _truncated_locked(self, state, diverging) -> bool:
        """The leader's log diverged from what was fetched (it ends the epoch of our last batch at
        ``diverging.end_offset``): go back there, as Kafka's consumer does, or with
        auto.offset.reset=none report the truncation. True when an error was queued."""
        tp = state.tp
        end = diverging.end_offset
        if self.reset_is_none:
            state.error = KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                     f"log truncation detected for {tp.topic}-{tp.partition}: the leader's epoch "
                                     f"{diverging.epoch} ends at offset {end}, before the fetch position "
                                     f"{state.fetch_position}", retriable=False, name="LOG_TRUNCATION")
            return True
        target = end if state.position is None else min(state.position, end)
        log.warning("truncation detected for %s-%s: the leader's epoch %s ends at offset %s; fetching again "
                    "from offset %s", tp.topic, tp.partition, diverging.epoch, end, target)
        self._seek_locked(state, max(target, 0))
        return False

    def _out_of_range_locked(self, state) -> None:
        tp = state.tp
        if self.reset_is_none:
            state.error = KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                     f"fetch position {state.fetch_position} is out of range for partition "
                                     f"{tp.topic}-{tp.partition} and auto.offset.reset is none")
            return
        log.info("offset %s out of range for %s-%s; resetting to the %s offset", state.fetch_position,
                 tp.topic, tp.partition, "earliest" if self.default_reset == EARLIEST else "latest")
        self._drop_locked(state)
        state.position = state.fetch_position = None
        state.reset = self.default_reset

    # ---- finding positions (loop thread) ----------------------------------------------------------

    async def _resolve_positions(self, states) -> None:
        """Committed offsets first (group consumers), then the reset policy, then ListOffsets."""
        try:
            epochs = {s.tp: s.epoch for s in states}
            lookups = [s for s in states if s.reset is None]
            committed = {}
            if lookups and self.committed_lookup is not None:
                try:
                    committed = await self.committed_lookup([s.tp for s in lookups])
                except KafkaError as exc:
                    self._resolve_failed(states, exc)
                    return
            to_reset = {}
            with self.lock:
                for s in states:
                    if s.epoch != epochs[s.tp] or self.states.get(s.tp) is not s or s.position is not None:
                        continue
                    offset = committed.get(s.tp) if s.reset is None else None
                    if offset is not None and offset >= 0:
                        self._seek_locked(s, offset)
                        continue
                    strategy = s.reset if s.reset is not None else self.default_reset
                    if strategy is None:
                        s.error = KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                             f"no committed offset for partition {s.tp.topic}-{s.tp.partition} "
                                             "and auto.offset.reset is none")
                        self.cond.notify_all()
                        continue
                    to_reset[s.tp] = (s, strategy)
            if to_reset:
                try:
                    offsets = await self.list_offsets({tp: st for tp, (_, st) in to_reset.items()})
                except KafkaError as exc:
                    self._resolve_failed([s for s, _ in to_reset.values()], exc)
                    return
                with self.lock:
                    for tp, (s, _) in to_reset.items():
                        if s.epoch == epochs[tp] and self.states.get(tp) is s and s.position is None:
                            self._seek_locked(s, offsets[tp])
            if self.on_data is not None and any(s.error is not None for s in states):
                self.on_data()
        except Exception as exc:  # a bug, not a broker answer: retry after a backoff, not at once
            log.warning("looking up positions failed unexpectedly", exc_info=True)
            self._resolve_failed(states, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc), retriable=True))
        finally:
            with self.lock:
                for s in states:
                    s.resolving = False
            if not self._closed:
                self._wakeup.set()

    def _resolve_failed(self, states, exc) -> None:
        log.debug("looking up positions failed: %s", exc)
        retry_at = time.monotonic() + self.config.seconds("retry.backoff.ms")
        fatal = not exc.retriable
        with self.lock:
            for s in states:
                s.retry_at = retry_at
                if fatal:
                    s.error = exc
            if fatal:
                self.cond.notify_all()
        if fatal and self.on_data is not None:
            self.on_data()

    async def list_offsets(self, specs: dict) -> dict:
        """{tp: EARLIEST|LATEST|timestamp} -> {tp: offset}, asking each partition's leader. A leader
        that fails retriably (gone, moved, its high watermark not yet caught up) is looked up again
        in fresh metadata, until default.api.timeout.ms."""
        config = self.cluster.config
        deadline = time.monotonic() + config.seconds("default.api.timeout.ms")
        out, attempt = {}, 0
        while True:
            try:
                await self._list_offsets_once({tp: s for tp, s in specs.items() if tp not in out}, out, deadline)
                return out
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() >= deadline:
                    raise
                log.debug("listing offsets: %s; looking the leaders up again", exc)
            await asyncio.sleep(min(backoff_s(attempt, config["retry.backoff.ms"], config["retry.backoff.max.ms"]),
                                    max(0.0, deadline - time.monotonic())))
            attempt += 1
            await self.cluster.refresh(sorted({tp.topic for tp in specs}))

    async def _list_offsets_once(self, specs: dict, out: dict, deadline: float) -> None:
        """One round: each leader asked once; ``out`` gets the partitions answered."""
        api = REQUESTS[LIST_OFFSETS]
        missing = [tp for tp in specs if self.cluster.leader_for(tp) < 0]
        if missing:
            await self.cluster.refresh(sorted({tp.topic for tp in specs}))
        by_node: dict = {}
        for tp, spec in specs.items():
            node = self.cluster.leader_for(tp)
            if node < 0:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader known for {tp.topic}-{tp.partition}")
            by_node.setdefault(node, {}).setdefault(tp.topic, []).append(
                api.ListOffsetsPartition(partition_index=tp.partition, current_leader_epoch=-1, timestamp=spec))

        def check(body):
            for t in body.topics:
                for p in t.partitions:
                    if p.error_code:
                        return p.error_code, f"listing offsets of {t.name}-{p.partition_index}"
            return 0

        for node, topics in by_node.items():
            req = api(replica_id=-1, isolation_level=1 if self.read_committed else 0,
                      timeout_ms=self.cluster.config["request.timeout.ms"],
                      topics=[api.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])
            body = await self.cluster.call(node, req, *LIST_OFFSETS_RANGE, check=check, retries=0,
                                           timeout_s=max(0.001, deadline - time.monotonic()))
            for t in body.topics:
                for p in t.partitions:
                    out[TopicPartition(t.name, p.partition_index)] = p.offset


def _corrupt(tp, exc) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, f"corrupt data fetched from {tp.topic}-{tp.partition}: {exc}; "
                      "seek past the damaged offset to continue", retriable=False)
