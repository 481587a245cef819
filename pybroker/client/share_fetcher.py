"""The share consumer's fetcher (KIP-932): one share session per partition leader, ShareFetch and
ShareAcknowledge, and the buffer of acquired records.

Each leader gets a task on the consumer's event loop with a connection of its own (the leader ends
the member's sessions with the connection, releasing what they hold) and one request in flight at a
time, so the session epochs stay in order. Fetching follows the application: a ShareFetch goes out
while a poll wants records (``want``) and nothing fetched from that leader is still buffered, so
records are acquired only about as fast as the application takes them (their acquisition locks run
meanwhile). Acknowledgements made due by a poll, a commit or close ride on that ShareFetch; when none is
due they go alone in a ShareAcknowledge. ShareFetch long-polls ``fetch.max.wait.ms``.

A response's records are decoded at once: only those inside the acquired ranges are buffered (with
their delivery counts); acquired offsets without a record are acknowledged as gaps, acquired offsets
whose batches did not come are released. Records of partitions no longer assigned (and, when closing,
everything still buffered) are released. Errors: SHARE_SESSION_NOT_FOUND / INVALID_SHARE_SESSION_EPOCH
or a lost connection reset the session (epoch 0 next; acknowledgements of the old one fail);
NOT_LEADER_OR_FOLLOWER and the like move the partition to the leader the response names, or refresh
the metadata; authorization and version errors are fatal (raised by the next poll).
"""
import asyncio
import collections
import logging
import time

from pybroker import core
from pybroker.client.cluster import backoff_s
from pybroker.client.connection import BrokerConnection
from pybroker.client.errors import INVALID_METADATA_CODES, KafkaConnectionError, KafkaError, error_for
from pybroker.client.share_session import GAP, AcknowledgeType, ShareSession, deliverable
from pybroker.client.types import BrokerMetadata, TopicPartition
from pybroker.errors import CorruptRecordError
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
SHARE_FETCH_RANGE = (1, 1)  # v2 only for share.acquire.mode=record_limit (KIP-1206); renewals are not used
RECORD_LIMIT_FETCH_RANGE = (2, 2)
RECORD_LIMIT = 1  # ShareAcquireMode: at most max_records records acquired, batches cut (0: whole batches)
SHARE_ACKNOWLEDGE_RANGE = (1, 1)
SESSION_ERRORS = frozenset({ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH})
LEADER_MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})
FATAL_CODES = frozenset({ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                         ErrorCode.UNSUPPORTED_VERSION, ErrorCode.INVALID_REQUEST, ErrorCode.GROUP_ID_NOT_FOUND})
SESSION_GONE = ErrorCode.SHARE_SESSION_NOT_FOUND


class Chunk:
    """Records of one partition from one ShareFetch: [(ConsumerRecord, delivery count)], handed out in
    order; ``expires``: when their acquisition locks run out (monotonic seconds, None: unknown)."""
    __slots__ = ("tp", "source", "records", "index", "expires")

    def __init__(self, tp, source, records, expires=None):
        self.tp = tp
        self.source = source
        self.records = records
        self.index = 0
        self.expires = expires

    def left(self) -> list:
        return self.records[self.index:]


class _Leader:
    """One partition leader: its share session, connection and task."""

    def __init__(self, node: int):
        self.node = node
        self.session = ShareSession(node)
        self.conn = None
        self.wake = asyncio.Event()
        self.task = None
        self.failures = 0
        self.not_before = 0.0


class ShareFetcher:
    def __init__(self, config, cluster, group_id: str, member_id, acks, on_data):
        self.config = config
        self.cluster = cluster
        self.group_id = group_id
        self._member_id = member_id  # () -> the member id (the membership's)
        self.acks = acks
        self._on_data = on_data  # wakes a waiting poll
        self.assigned: set = set()
        self.buffer: collections.deque = collections.deque()
        self.wanted = False
        self.error = None  # fatal: raised by the next poll
        self.acquisition_lock_timeout_ms = None
        self._leaders: dict = {}
        self._closing = False
        self._closing_event = asyncio.Event()
        self._metadata_wanted = asyncio.Event()
        self._metadata_task = None
        self._decode = core.client_codec.decode_records
        self._check_crcs = config["check.crcs"]

    def start(self) -> None:
        self._metadata_task = asyncio.get_running_loop().create_task(self._metadata_loop())

    # ---- the consumer's side ----------------------------------------------------------------------

    def set_assignment(self, tps: set) -> None:
        """The partitions to fetch (loop thread). Buffered records of the others are released."""
        self.assigned = set(tps)
        kept = collections.deque()
        released = False
        for c in self.buffer:
            if c.tp in self.assigned:
                kept.append(c)
            else:
                self.acks.stage(c.source, c.tp, [r.offset for r, _ in c.left()], AcknowledgeType.RELEASE)
                released = True
        self.buffer = kept
        if released:
            self.acks.flush()
        if any(self.cluster.leader_for(tp) < 0 for tp in self.assigned):
            self._metadata_wanted.set()
        self.wake()

    def want(self) -> None:
        """A poll waits for records: fetch from every leader with nothing buffered."""
        self.wanted = True
        self.wake()

    def wake(self) -> None:
        """Look for work: records wanted, acknowledgements due."""
        nodes = set(self._by_leader()) | self.acks.due_nodes()
        for node in nodes:
            leader = self._leader(node)
            leader.wake.set()

    def has_data(self) -> bool:
        return bool(self.buffer)

    def take(self, max_records: int) -> list:
        """Up to ``max_records`` (chunk, [(record, delivery count)]) slices from the buffer, in order.
        Records buffered past their acquisition lock are dropped: the leader has given them to others."""
        out, n = [], 0
        now = time.monotonic()
        while self.buffer and n < max_records:
            c = self.buffer[0]
            if c.expires is not None and now >= c.expires:
                log.info("share group %s: %d record(s) of %s-%d stayed buffered past their acquisition lock: "
                         "dropped", self.group_id, len(c.records) - c.index, c.tp.topic, c.tp.partition)
                self.buffer.popleft()
                self._leader(c.source[0]).wake.set()
                continue
            part = c.records[c.index:c.index + max_records - n]
            c.index += len(part)
            if c.index >= len(c.records):
                self.buffer.popleft()
                self._leader(c.source[0]).wake.set()  # its leader may fetch again
            if part:
                out.append((c, part))
                n += len(part)
        return out

    def release_buffered(self) -> None:
        """Closing: every buffered record goes back to the group."""
        for c in self.buffer:
            self.acks.stage(c.source, c.tp, [r.offset for r, _ in c.left()], AcknowledgeType.RELEASE)
        self.buffer.clear()

    # ---- leaders and metadata ------------------------------------------------------------------------

    def _leader(self, node: int) -> _Leader:
        leader = self._leaders.get(node)
        if leader is None:
            leader = self._leaders[node] = _Leader(node)
            if not self._closing:
                leader.task = asyncio.get_running_loop().create_task(self._leader_loop(leader))
        return leader

    def _by_leader(self) -> dict:
        """{node: {TopicPartition}} of the assigned partitions whose leader and topic id are known."""
        out: dict = {}
        topics = self.cluster.topics
        for tp in self.assigned:
            t = topics.get(tp.topic)
            leader = self.cluster.leader_for(tp)
            if t is None or t.topic_id is None or leader < 0:
                self._metadata_wanted.set()
                continue
            out.setdefault(leader, set()).add(tp)
        return out

    async def _metadata_loop(self) -> None:
        """Refresh metadata when a leader or topic id is missing or moved, and every metadata.max.age.ms."""
        failures = 0
        while not self._closing:
            try:
                await asyncio.wait_for(self._metadata_wanted.wait(), self.config.seconds("metadata.max.age.ms"))
            except asyncio.TimeoutError:
                pass
            if self._closing:
                return
            self._metadata_wanted.clear()
            topics = sorted({tp.topic for tp in self.assigned})
            if not topics:
                continue
            try:
                await self.cluster.refresh(topics)
                failures = 0
            except KafkaError as exc:
                log.debug("share group %s: metadata refresh failed: %s", self.group_id, exc)
                failures += 1
                self._metadata_wanted.set()
            self.wake()
            await asyncio.sleep(backoff_s(failures, self.config["retry.backoff.ms"],
                                          self.config["retry.backoff.max.ms"]))

    # ---- one leader ---------------------------------------------------------------------------------

    async def _leader_loop(self, leader: _Leader) -> None:
        while not self._closing:
            await leader.wake.wait()
            leader.wake.clear()
            if self._closing:
                return
            wait = leader.not_before - time.monotonic()
            if wait > 0:
                try:
                    await asyncio.wait_for(self._closing_event.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                if self._closing:
                    return
            try:
                await self._step(leader)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must surface in poll, not vanish in a task
                log.exception("share group %s: fetching from broker %d failed", self.group_id, leader.node)
                self._fail(KafkaError(-1, f"share fetching failed: {exc!r}", retriable=False))
                return

    def _buffered_from(self, node: int) -> bool:
        return any(c.source[0] == node for c in self.buffer)

    async def _step(self, leader: _Leader) -> None:
        """One request to ``leader`` if one is due: a ShareFetch (with due acknowledgements) when
        records are wanted, else a ShareAcknowledge when acknowledgements are due."""
        wanted = self._by_leader().get(leader.node, set())
        fetch = self.wanted and bool(wanted) and not self._buffered_from(leader.node)
        send = self.acks.take(leader.node, leader.session.incarnation)
        self._fail_stale(send)
        if not fetch and not send:
            return
        if not fetch and not leader.session.is_open:  # no session: nothing acquired through it is still held
            self.acks.complete(send.keys, send.acks, {}, error_for(SESSION_GONE))
            return
        sreq = leader.session.fetch_request(wanted) if fetch else leader.session.acknowledge_request()
        await self._exchange(leader, sreq, send, fetch)
        if (self.wanted and wanted and not self._buffered_from(leader.node)) or leader.node in self.acks.due_nodes():
            leader.wake.set()

    def _fail_stale(self, send) -> None:
        if send.stale_keys:
            self.acks.complete(send.stale_keys, send.stale, {}, error_for(SESSION_GONE, "the share session the "
                                                                         "records were acquired in is gone"))

    async def _exchange(self, leader: _Leader, sreq, send, fetch: bool) -> None:
        """Send one request of the session and handle its answer."""
        max_wait_ms = self.config["fetch.max.wait.ms"]
        if fetch:
            record_limit = self.config["share.acquire.mode"] == "record_limit"
            obj = self._share_fetch(sreq, send, max_wait_ms, RECORD_LIMIT if record_limit else 0)
            api_range = RECORD_LIMIT_FETCH_RANGE if record_limit else SHARE_FETCH_RANGE
        else:
            obj, api_range = self._share_acknowledge(sreq, send), SHARE_ACKNOWLEDGE_RANGE
        timeout = self.config.seconds("request.timeout.ms") + (max_wait_ms / 1000 if fetch else 0)
        try:
            conn = await self._connection(leader)
            version = conn.version(obj.API_KEY, *api_range)
            resp = await conn.request(obj, version, timeout)
        except KafkaError as exc:
            self._request_failed(leader, send, exc)
            return
        code = resp.error_code
        if code:
            err = error_for(code, resp.error_message)
            self.acks.complete(send.keys, send.acks, {}, err)
            if code in SESSION_ERRORS:
                log.info("share group %s: share session with broker %d: %s; opening a new one", self.group_id,
                         leader.node, err.name)
                leader.session.reset()
                leader.wake.set()
            elif code in FATAL_CODES:
                self._fail(KafkaError(code, err.message, retriable=False))
            else:
                log.info("share group %s: %s from broker %d: %s", self.group_id, type(obj).__name__, leader.node, err)
                if code in INVALID_METADATA_CODES or code in (ErrorCode.NOT_COORDINATOR,):
                    self._metadata_wanted.set()
                self._backoff(leader)
            return
        leader.failures = 0
        source = leader.session.source
        leader.session.answered(sreq)
        if fetch:
            self.acquisition_lock_timeout_ms = resp.acquisition_lock_timeout_ms
        self._handle_partitions(leader, resp, send, fetch, source)

    def _request_failed(self, leader: _Leader, send, exc: KafkaError) -> None:
        """No answer: the connection (and with it the session on the leader) is dropped."""
        self.acks.complete(send.keys, send.acks, {}, exc)
        if exc.code == ErrorCode.UNSUPPORTED_VERSION:
            self._fail(KafkaError(exc.code, f"broker {leader.node} cannot serve this share consumer: {exc.message}",
                                  retriable=False))
            return
        log.info("share group %s: request to broker %d failed: %s", self.group_id, leader.node, exc)
        leader.session.reset()
        if leader.conn is not None:
            conn, leader.conn = leader.conn, None
            asyncio.get_running_loop().create_task(conn.close())
        if isinstance(exc, KafkaConnectionError):
            self.cluster.request_update()
            self._metadata_wanted.set()
        self._backoff(leader)

    def _backoff(self, leader: _Leader) -> None:
        leader.not_before = time.monotonic() + backoff_s(leader.failures, self.config["retry.backoff.ms"],
                                                         self.config["retry.backoff.max.ms"])
        leader.failures += 1
        leader.wake.set()

    def _fail(self, exc: KafkaError) -> None:
        log.warning("share group %s: %s", self.group_id, exc)
        self.error = exc
        self._on_data()

    def _handle_partitions(self, leader: _Leader, resp, send, fetch: bool, source) -> None:
        names = {t.topic_id: name for name, t in self.cluster.topics.items() if t.topic_id is not None}
        ack_errors, queued, hinted = {}, False, False
        endpoints = {n.node_id: BrokerMetadata(n.node_id, n.host, n.port, n.rack) for n in resp.node_endpoints or ()}
        for t in resp.responses:
            name = names.get(t.topic_id)
            if name is None:
                self._metadata_wanted.set()
                continue
            for p in t.partitions:
                tp = TopicPartition(name, p.partition_index)
                ack_code = p.acknowledge_error_code if fetch else p.error_code
                if tp in send.acks:
                    ack_errors[tp] = error_for(ack_code, (p.acknowledge_error_message if fetch else p.error_message)
                                               or f"acknowledging records of {name}-{p.partition_index}") \
                        if ack_code else None
                if not fetch:
                    if p.error_code in LEADER_MOVED:
                        hinted |= self._apply_hint(tp, p.current_leader, endpoints)
                    continue
                if p.error_code:
                    if p.error_code in LEADER_MOVED and self._apply_hint(tp, p.current_leader, endpoints):
                        hinted = True
                    elif p.error_code in INVALID_METADATA_CODES or p.error_code in LEADER_MOVED:
                        self._metadata_wanted.set()
                    else:
                        log.info("share group %s: fetching %s-%d: %s", self.group_id, name, p.partition_index,
                                 error_for(p.error_code, p.error_message))
                if p.acquired_records:
                    queued |= self._queue(tp, source, p)
        missing = [tp for tp in send.acks if tp not in ack_errors]
        self.acks.complete(send.keys, send.acks, ack_errors,
                           error_for(ErrorCode.UNKNOWN_SERVER_ERROR, "the broker did not answer for the partition")
                           if missing else None)
        if hinted:
            self.wake()
        if queued:
            self._on_data()

    def _queue(self, tp, source, p) -> bool:
        """Buffer the acquired records of one partition; True if any."""
        acquired = [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
        start = min(a[0] for a in acquired)
        data = p.records
        records, end = [], start
        if data is not None and len(data):
            try:
                records, end = self._decode(data, tp.topic, tp.partition, start, False, None, self._check_crcs)
            except (CorruptRecordError, ValueError) as exc:
                log.warning("share group %s: records of %s-%d cannot be decoded (%s): released", self.group_id,
                            tp.topic, tp.partition, exc)
                records, end = [], start
        out, gaps, missing = deliverable(records, acquired, end)
        if gaps:
            self.acks.stage(source, tp, gaps, GAP)
        if self._closing or tp not in self.assigned:
            missing = missing + [r.offset for r, _ in out]
            out = []
        if missing:
            self.acks.stage(source, tp, missing, AcknowledgeType.RELEASE)
            self.acks.flush()
        if not out:
            return False
        lock_ms = self.acquisition_lock_timeout_ms
        expires = time.monotonic() + lock_ms / 1000 if lock_ms and lock_ms > 0 else None
        self.buffer.append(Chunk(tp, source, out, expires))
        return True

    def _apply_hint(self, tp, leader, endpoints) -> bool:
        """KIP-951: fetch ``tp`` from the leader the response named (True if it was newer)."""
        if leader is None or leader.leader_id < 0:
            self._metadata_wanted.set()
            return False
        if self.cluster.maybe_update_leader(tp.topic, tp.partition, leader.leader_id, leader.leader_epoch, endpoints):
            return True
        self._metadata_wanted.set()
        return False

    # ---- requests ----------------------------------------------------------------------------------

    def _share_fetch(self, sreq, send, max_wait_ms: int, acquire_mode: int):
        api = REQUESTS[SHARE_FETCH]
        ids = self._topic_ids()
        parts: dict = {}  # topic id -> {partition: [batches]}
        for tp in sreq.added:
            parts.setdefault(ids[tp.topic], {}).setdefault(tp.partition, [])
        for tp, batches in send.batches().items():
            parts.setdefault(ids[tp.topic], {})[tp.partition] = batches
        forgotten: dict = {}
        for tp in sreq.forgotten:
            if tp.topic in ids:
                forgotten.setdefault(ids[tp.topic], []).append(tp.partition)
        max_records = self.config["max.poll.records"]
        return api(group_id=self.group_id, member_id=self._member_id(), share_session_epoch=sreq.epoch,
                   max_wait_ms=max_wait_ms, min_bytes=self.config["fetch.min.bytes"],
                   max_bytes=self.config["fetch.max.bytes"], max_records=max_records, batch_size=max_records,
                   share_acquire_mode=acquire_mode, topics=[api.FetchTopic(topic_id=tid, partitions=[
                       api.FetchPartition(partition_index=p, acknowledgement_batches=[
                           api.AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=types)
                           for f, la, types in batches]) for p, batches in sorted(ps.items())])
                       for tid, ps in parts.items()],
                   forgotten_topics_data=[api.ForgottenTopic(topic_id=tid, partitions=sorted(ps))
                                          for tid, ps in forgotten.items()])

    def _share_acknowledge(self, sreq, send):
        api = REQUESTS[SHARE_ACKNOWLEDGE]
        ids = self._topic_ids()
        parts: dict = {}
        for tp, batches in send.batches().items():
            parts.setdefault(ids[tp.topic], {})[tp.partition] = batches
        return api(group_id=self.group_id, member_id=self._member_id(), share_session_epoch=sreq.epoch,
                   topics=[api.AcknowledgeTopic(topic_id=tid, partitions=[
                       api.AcknowledgePartition(partition_index=p, acknowledgement_batches=[
                           api.AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=types)
                           for f, la, types in batches]) for p, batches in sorted(ps.items())])
                       for tid, ps in parts.items()])

    def _topic_ids(self) -> dict:
        return {name: t.topic_id for name, t in self.cluster.topics.items() if t.topic_id is not None}

    async def _connection(self, leader: _Leader) -> BrokerConnection:
        conn = leader.conn
        if conn is not None and not conn.closed:
            return conn
        if conn is not None:  # the leader dropped it: the sessions on it are gone
            leader.session.reset()
        broker = self.cluster.brokers.get(leader.node)
        if broker is None:
            await self.cluster.refresh([])
            broker = self.cluster.brokers.get(leader.node)
            if broker is None:
                raise KafkaConnectionError(f"broker {leader.node} is not in the cluster metadata")
        conn = await BrokerConnection.open(
            broker.host, broker.port, self.cluster.client_id, self.config.seconds("socket.connection.setup.timeout.ms"),
            request_timeout_s=self.config.seconds("request.timeout.ms"), node_id=leader.node,
            max_frame_bytes=self.config["receive.message.max.bytes"], security=self.config.security)
        leader.conn = conn
        return conn

    # ---- closing ----------------------------------------------------------------------------------

    async def close(self, timeout_s: float) -> None:
        """Release what is buffered, send the due acknowledgements and close every session (epoch -1),
        within ``timeout_s``; then drop the connections."""
        self.release_buffered()
        self.acks.flush()
        self._closing = True
        self._closing_event.set()
        self._metadata_wanted.set()
        for leader in self._leaders.values():
            leader.wake.set()
        tasks = [leader.task for leader in self._leaders.values() if leader.task is not None]
        try:
            await asyncio.wait_for(self._finish(tasks), timeout_s)
        except asyncio.TimeoutError:
            log.warning("share group %s: closing the share sessions did not finish within %.1f s", self.group_id,
                        timeout_s)
        finally:
            for t in tasks + [self._metadata_task]:
                if t is not None and not t.done():
                    t.cancel()
            for leader in self._leaders.values():
                if leader.conn is not None:
                    conn, leader.conn = leader.conn, None
                    await conn.close()

    async def _finish(self, tasks) -> None:
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)  # requests in flight are answered first
        for node in sorted(set(self._leaders) | self.acks.due_nodes()):
            await self._close_session(self._leader(node))

    async def _close_session(self, leader: _Leader) -> None:
        """The last request of a session: its due acknowledgements with epoch -1."""
        send = self.acks.take(leader.node, leader.session.incarnation)
        self._fail_stale(send)
        if not leader.session.is_open:
            if send:
                self.acks.complete(send.keys, send.acks, {}, error_for(SESSION_GONE))
            return
        sreq = leader.session.close_request()
        obj = self._share_acknowledge(sreq, send)
        try:
            conn = await self._connection(leader)
            resp = await conn.request(obj, conn.version(obj.API_KEY, *SHARE_ACKNOWLEDGE_RANGE),
                                      self.config.seconds("request.timeout.ms"))
        except KafkaError as exc:
            self.acks.complete(send.keys, send.acks, {}, exc)
            return
        if resp.error_code:
            self.acks.complete(send.keys, send.acks, {}, error_for(resp.error_code, resp.error_message))
        else:
            self._handle_partitions(leader, resp, send, False, leader.session.source)
        leader.session.reset()
