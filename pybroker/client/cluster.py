"""What a client knows about the cluster (brokers, topics, leaders, group coordinators) and
the connections to its brokers, plus ``call``: one request with retries.

Connections are shared per broker address and opened on demand; a broken one is replaced on the
next use, after ``reconnect.backoff.ms`` (doubling per failure up to ``reconnect.backoff.max.ms``).
``call`` retries retriable errors (the broker's, lost connections, timeouts) up to ``retries``
times within ``default.api.timeout.ms``, sleeping ``retry.backoff.ms`` doubling up to
``retry.backoff.max.ms`` (with +-20% jitter, as Kafka does) and refreshing metadata first when the
error says it is stale.
"""
import asyncio
import random
import time

from pybroker.client.config import Config
from pybroker.client.connection import BrokerConnection
from pybroker.client.errors import (COORDINATOR_CODES, INVALID_METADATA_CODES, KafkaConnectionError,
                                    KafkaError, KafkaTimeoutError, error_for)
from pybroker.client.types import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

METADATA, FIND_COORDINATOR = 3, 10
METADATA_RANGE = (1, 12)  # v0 cannot ask for "all topics" and "no topics" distinctly
FIND_COORDINATOR_RANGE = (0, 6)  # v5: TRANSACTION_ABORTABLE; v6 only adds the share-group key type
CONTROLLER = "controller"  # ``call`` target: the active controller
GROUP_KEY, TRANSACTION_KEY = 0, 1
JITTER = 0.2
IDLE_CHECK_S = 1.0


def backoff_s(attempt: int, base_ms: int, max_ms: int) -> float:
    """Kafka's exponential backoff: base * 2^attempt capped at max, +-20% jitter."""
    ms = min(base_ms * (2 ** min(attempt, 30)), max_ms)
    return ms * random.uniform(1 - JITTER, 1 + JITTER) / 1000.0


def _default_check(body):
    return getattr(body, "error_code", 0)


class Cluster:
    """Metadata cache and connection pool for one client."""

    def __init__(self, config: Config):
        self.config = config
        self.client_id = config.client_id
        self.bootstrap = config.bootstrap
        self.cluster_id = None
        self.controller_id = -1
        self.brokers: dict = {}  # node id -> BrokerMetadata
        self._topics: dict = {}  # name -> TopicMetadata
        self._conns: dict = {}  # (host, port) -> BrokerConnection
        self._opening: dict = {}  # (host, port) -> Future of a connection being opened
        self._reconnect: dict = {}  # (host, port) -> (failures, monotonic time of the next allowed try)
        self._coordinators: dict = {}  # (key type, key) -> BrokerMetadata
        self._need_update = True
        self._last_refresh = 0.0
        self._last_idle_check = 0.0
        self._closed = False
        self._request_timeout_s = config.seconds("request.timeout.ms")
        self._setup_timeout_s = config.seconds("socket.connection.setup.timeout.ms")

    # ---- metadata -------------------------------------------------------------------------

    @property
    def topics(self) -> dict:
        """Known topics: name -> TopicMetadata (from the latest refreshes)."""
        return self._topics

    def metadata(self) -> ClusterMetadata:
        """The cached metadata as one snapshot."""
        return ClusterMetadata(self.cluster_id, self.controller_id, dict(self.brokers), dict(self._topics))

    def partitions_for(self, topic: str):
        """Sorted partition ids of ``topic``, or None if it is not known (yet)."""
        t = self._topics.get(topic)
        return None if t is None else sorted(t.partitions)

    def leader_for(self, tp) -> int:
        """The leader's node id of a TopicPartition, or -1 if unknown or leaderless."""
        t = self._topics.get(tp[0])
        if t is None:
            return -1
        p = t.partitions.get(tp[1])
        return -1 if p is None else p.leader

    def maybe_update_leader(self, topic: str, partition: int, leader: int, leader_epoch: int,
                            endpoints: dict) -> bool:
        """Apply a leader hint from a response (KIP-951) when its leader epoch is newer than the
        cached one; ``endpoints`` (node id -> BrokerMetadata) names brokers the cache may lack. True
        if applied, so the caller can retry at once instead of refreshing metadata."""
        t = self._topics.get(topic)
        p = None if t is None else t.partitions.get(partition)
        if p is None or leader < 0:
            return False
        newer = leader_epoch > p.leader_epoch if p.leader_epoch >= 0 else leader != p.leader
        if not newer:  # a stale or repeated hint: the caller backs off and refreshes as usual
            return False
        b = self.brokers.get(leader) or endpoints.get(leader)
        if b is None:
            return False
        self.brokers.setdefault(leader, b)
        t.partitions[partition] = p._replace(leader=leader, leader_epoch=leader_epoch, error=0)
        return True

    def request_update(self) -> None:
        """Mark the metadata stale: the next ``maybe_refresh`` fetches it again."""
        self._need_update = True

    @property
    def needs_update(self) -> bool:
        age = time.monotonic() - self._last_refresh
        return self._need_update or age * 1000 >= self.config["metadata.max.age.ms"]

    async def maybe_refresh(self, topics=None) -> None:
        """Refresh the known topics (plus ``topics``) if stale or older than metadata.max.age.ms."""
        if self.needs_update:
            await self.refresh(sorted(set(self._topics) | set(topics or ())))

    async def refresh(self, topics=None, auto_create: bool = False, *, timeout_s: float | None = None,
                      retries: int | None = None) -> ClusterMetadata:
        """Fetch metadata for ``topics`` (None: every topic; []: brokers only). Updates the cache
        (a full refresh replaces it) and returns what the broker sent. Retries like ``call``."""
        api = REQUESTS[METADATA]
        names = None if topics is None else [api.MetadataRequestTopic(name=t) for t in topics]
        req = api(topics=names, allow_auto_topic_creation=auto_create)
        resp = await self.call(None, req, *METADATA_RANGE, retries, timeout_s=timeout_s, check=lambda b: 0,
                               refresh_metadata=False)
        return self._apply_metadata(resp, full=topics is None)

    def _apply_metadata(self, resp, full: bool) -> ClusterMetadata:
        self.brokers = {b.node_id: BrokerMetadata(b.node_id, b.host, b.port, b.rack) for b in resp.brokers}
        self.cluster_id = resp.cluster_id
        self.controller_id = resp.controller_id
        topics = {}
        for t in resp.topics:
            parts = {p.partition_index: PartitionMetadata(t.name, p.partition_index, p.leader_id,
                                                          list(p.replica_nodes), list(p.isr_nodes),
                                                          p.leader_epoch, p.error_code)
                     for p in t.partitions}
            topics[t.name] = TopicMetadata(t.name, parts, t.is_internal, t.error_code, t.topic_id)
        if full:
            self._topics = {}
        for name, t in topics.items():
            if t.error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION) or (
                    t.error and not t.partitions):
                self._topics.pop(name, None)
            else:
                self._topics[name] = t
        self._need_update = False
        self._last_refresh = time.monotonic()
        return ClusterMetadata(self.cluster_id, self.controller_id, dict(self.brokers), topics)

    # ---- connections ----------------------------------------------------------------------

    async def connection(self, node_id: int) -> BrokerConnection:
        """An open connection to broker ``node_id`` (refreshing metadata once if it is unknown)."""
        b = self.brokers.get(node_id)
        if b is None:
            await self.refresh([], timeout_s=self._request_timeout_s, retries=0)
            b = self.brokers.get(node_id)
            if b is None:
                raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        return await self._connect((b.host, b.port), node_id)

    def open_connection(self, node_id: int) -> BrokerConnection | None:
        """The connection to broker ``node_id`` if one is open already (never connects)."""
        b = self.brokers.get(node_id)
        conn = self._conns.get((b.host, b.port)) if b is not None else None
        return conn if conn is not None and not conn.closed else None

    async def any_connection(self) -> BrokerConnection:
        """An open connection to some broker: the least busy open one, else the first of the
        known brokers and bootstrap servers that accepts."""
        if self._closed:
            raise KafkaConnectionError("the client is closed", retriable=False)
        self._close_idle()
        best = None
        for conn in self._conns.values():
            if not conn.closed and (best is None or conn.in_flight < best.in_flight):
                best = conn
        if best is not None:
            return best
        candidates = [(b.host, b.port, b.node_id) for b in self.brokers.values()]
        candidates += [(h, p, -1) for h, p in self.bootstrap]
        errors, seen = [], set()
        for host, port, node_id in candidates:
            if (host, port) in seen:
                continue
            seen.add((host, port))
            try:
                return await self._connect((host, port), node_id)
            except KafkaConnectionError as exc:
                errors.append(exc.message)
        raise KafkaConnectionError("no broker is reachable: " + "; ".join(errors))

    async def _connect(self, addr, node_id: int) -> BrokerConnection:
        if self._closed:
            raise KafkaConnectionError("the client is closed", retriable=False)
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            if conn.node_id < 0 <= node_id:
                conn.node_id = node_id
            return conn
        opening = self._opening.get(addr)
        if opening is None:
            opening = self._opening[addr] = asyncio.ensure_future(self._open(addr, node_id))
            opening.add_done_callback(lambda f, a=addr: self._opening_done(a, f))
        return await asyncio.shield(opening)

    def _opening_done(self, addr, fut) -> None:
        self._opening.pop(addr, None)
        if not fut.cancelled():
            fut.exception()  # retrieved here: a caller cancelled while waiting never sees it

    async def _open(self, addr, node_id: int) -> BrokerConnection:
        failures, not_before = self._reconnect.get(addr, (0, 0.0))
        wait = not_before - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            conn = await BrokerConnection.open(
                addr[0], addr[1], self.client_id, self._setup_timeout_s, request_timeout_s=self._request_timeout_s,
                node_id=node_id, max_frame_bytes=self.config["receive.message.max.bytes"],
                security=self.config.security)
        except KafkaError:
            delay = backoff_s(failures, self.config["reconnect.backoff.ms"], self.config["reconnect.backoff.max.ms"])
            self._reconnect[addr] = (failures + 1, time.monotonic() + delay)
            raise
        self._reconnect.pop(addr, None)
        if self._closed:
            await conn.close()
            raise KafkaConnectionError("the client is closed", retriable=False)
        self._conns[addr] = conn
        return conn

    def _close_idle(self) -> None:
        idle_ms = self.config["connections.max.idle.ms"]
        now = time.monotonic()
        if idle_ms < 0 or now - self._last_idle_check < IDLE_CHECK_S:
            return
        self._last_idle_check = now
        loop_now = asyncio.get_running_loop().time()
        for addr, conn in list(self._conns.items()):
            if conn.closed:
                del self._conns[addr]
            elif conn.in_flight == 0 and (loop_now - conn.last_used) * 1000 > idle_ms:
                del self._conns[addr]
                conn._fail(KafkaConnectionError(f"idle connection to {conn.address} closed"))

    # ---- coordinators ---------------------------------------------------------------------

    async def coordinator(self, group_id: str, key_type: int = GROUP_KEY) -> BrokerConnection:
        """A connection to the coordinator of ``group_id`` (looked up with FindCoordinator, cached)."""
        node = self._coordinators.get((key_type, group_id))
        if node is None:
            node = await self._find_coordinator(group_id, key_type)
            self._coordinators[(key_type, group_id)] = node
        try:
            return await self._connect((node.host, node.port), node.node_id)
        except KafkaError:
            self.forget_coordinator(group_id, key_type)
            raise

    def coordinator_id(self, group_id: str, key_type: int = GROUP_KEY) -> int:
        """The cached coordinator's node id, or -1."""
        node = self._coordinators.get((key_type, group_id))
        return -1 if node is None else node.node_id

    def forget_coordinator(self, group_id: str, key_type: int = GROUP_KEY) -> None:
        """Drop the cached coordinator (after NOT_COORDINATOR or a lost connection)."""
        self._coordinators.pop((key_type, group_id), None)

    async def _find_coordinator(self, key: str, key_type: int) -> BrokerMetadata:
        api = REQUESTS[FIND_COORDINATOR]
        req = api(key=key, key_type=key_type, coordinator_keys=[key])
        found = {}

        def check(body):
            if body.coordinators:  # v4+: one entry per key
                c = next((c for c in body.coordinators if c.key == key), None)
                if c is None:
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE, "no coordinator entry for the key"
                found["node"] = BrokerMetadata(c.node_id, c.host, c.port)
                return c.error_code, c.error_message
            found["node"] = BrokerMetadata(body.node_id, body.host, body.port)
            return body.error_code, body.error_message

        await self.call(None, req, *FIND_COORDINATOR_RANGE, check=check)
        return found["node"]

    # ---- requests with retries ------------------------------------------------------------

    async def call(self, node_id, obj, lo: int, hi: int, retries: int | None = None, *,
                   timeout_s: float | None = None, check=None, group_id: str | None = None,
                   refresh_metadata: bool = True, coordinator_key: int = GROUP_KEY):
        """Send ``obj`` (at the highest version in lo..hi the broker supports) and return the body.

        ``node_id``: a broker id, None (any broker) or CONTROLLER; with ``group_id`` the request
        goes to the coordinator of that key instead (a group's, or with ``coordinator_key``
        TRANSACTION_KEY a transactional id's). ``check(body)`` returns the error code (or
        ``(code, message)``) that decides success; by default the body's top-level
        ``error_code``. A non-zero code raises its KafkaError; retriable errors are retried
        (``retries``, default the ``retries`` setting) until ``timeout_s`` (default
        ``default.api.timeout.ms``) runs out."""
        if retries is None:
            retries = self.config["retries"]
        if timeout_s is None:
            timeout_s = self.config.seconds("default.api.timeout.ms")
        check = check or _default_check
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            try:
                if group_id is not None:
                    conn = await self.coordinator(group_id, coordinator_key)
                elif node_id is None:
                    conn = await self.any_connection()
                elif node_id == CONTROLLER:
                    if self.controller_id < 0 or self._need_update:
                        await self.refresh([], timeout_s=max(0.001, deadline - time.monotonic()), retries=0)
                    conn = await (self.connection(self.controller_id) if self.controller_id >= 0
                                  else self.any_connection())
                else:
                    conn = await self.connection(node_id)
                version = conn.version(obj.API_KEY, lo, hi)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError(f"{type(obj).__name__} did not complete within {timeout_s:g} s")
                body = await conn.request(obj, version, min(self._request_timeout_s, remaining))
                result = check(body)
                code, message = result if isinstance(result, tuple) else (result, None)
                if code:
                    raise error_for(code, message or getattr(body, "error_message", None))
                return body
            except KafkaError as exc:
                now = time.monotonic()
                if not exc.retriable or attempt >= retries or now >= deadline:
                    raise
                if isinstance(exc, KafkaConnectionError) or exc.code in INVALID_METADATA_CODES:
                    self._need_update = True
                if group_id is not None and (exc.code in COORDINATOR_CODES or isinstance(exc, KafkaConnectionError)):
                    self.forget_coordinator(group_id, coordinator_key)
                delay = backoff_s(attempt, self.config["retry.backoff.ms"], self.config["retry.backoff.max.ms"])
                await asyncio.sleep(max(0.0, min(delay, deadline - now)))
                attempt += 1
                remaining = deadline - time.monotonic()
                if refresh_metadata and self._need_update and remaining > 0:
                    try:  # one try, within this call's deadline; the next attempt reports failures
                        await self.refresh(sorted(self._topics), timeout_s=remaining, retries=0)
                    except KafkaError:
                        pass

    async def close(self) -> None:
        """Close every connection; later calls fail with KafkaConnectionError."""
        self._closed = True
        for fut in list(self._opening.values()):
            fut.cancel()
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()
