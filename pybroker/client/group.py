"""Consumer group membership with the classic protocol: join, sync, heartbeat, leave.

``GroupMembership`` runs on the consumer's event loop. Its main task keeps the member in the
group: FindCoordinator, JoinGroup (v4+: first learning the member id), SyncGroup (the leader
runs the agreed assignor over every member's subscription), then waits until something asks for
a rebalance: a heartbeat answered REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION /
UNKNOWN_MEMBER_ID, a changed subscription, a topic matching the pattern appearing, partition
counts changing, or (cooperative protocol) partitions it had to give up. A separate task sends a
Heartbeat every ``heartbeat.interval.ms`` while the member is stable, and leaves the group when
the application has not polled for ``max.poll.interval.ms`` (it rejoins on the next poll).

Join, sync, heartbeat and leave travel on a connection of their own to the coordinator
(``CoordinatorLink``, which the consumer group protocol's membership uses too), so a
JoinGroup parked for a whole rebalance never delays offset commits or metadata requests.

Rebalance protocol (as Java's ConsumerCoordinator): EAGER revokes every owned partition before
joining; COOPERATIVE (every configured assignor supports it, e.g. cooperative-sticky) keeps them,
revokes after SyncGroup only those no longer assigned, and rejoins when it revoked any so that
the next rebalance can hand them to their new owner. A member whose generation was lost
(ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, poll timeout) reports its partitions as lost instead.

The consumer supplies ``invoke(kind, partitions)``: "revoke" / "lost" / "assign" run the
application's callbacks (inside its poll) and update the fetcher; "revoke" and "lost" return
the positions of the removed partitions, which are auto-committed after a revoke; "drop" only
stops fetching (a member that left on a poll timeout).
"""
import asyncio
import logging
import re
import time

from pybroker.client import assignors as assignor_module
from pybroker.client.assignors import COOPERATIVE, Subscription, decode_assignment
from pybroker.client.cluster import backoff_s
from pybroker.client.connection import BrokerConnection
from pybroker.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, error_for
from pybroker.client.types import TopicPartition
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
JOIN_RANGE, SYNC_RANGE, HEARTBEAT_RANGE, LEAVE_RANGE = (1, 9), (0, 5), (0, 4), (0, 5)  # v8+/v5: a reason (KIP-800)
PROTOCOL_TYPE = "consumer"
UNJOINED, REBALANCING, STABLE = "unjoined", "rebalancing", "stable"

_COORDINATOR_ERRORS = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
_FATAL_JOIN_ERRORS = {ErrorCode.INCONSISTENT_GROUP_PROTOCOL, ErrorCode.INVALID_SESSION_TIMEOUT,
                      ErrorCode.INVALID_GROUP_ID, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                      ErrorCode.FENCED_INSTANCE_ID, ErrorCode.GROUP_MAX_SIZE_REACHED,
                      ErrorCode.UNSUPPORTED_VERSION}


class _RetryJoin(Exception):
    """The join or sync must be tried again (after a backoff when ``backoff``)."""

    def __init__(self, reason: str, backoff: bool = True):
        super().__init__(reason)
        self.backoff = backoff


class CoordinatorLink:
    """A connection of its own to a group's coordinator (found with FindCoordinator); dropped, and
    looked up again on the next request, after a lost connection or a coordinator error."""

    def __init__(self, config, cluster, group_id: str):
        self.config = config
        self.cluster = cluster
        self.group_id = group_id
        self.conn = None

    async def connection(self) -> BrokerConnection:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        shared = await self.cluster.coordinator(self.group_id)
        self.conn = await BrokerConnection.open(
            shared.host, shared.port, self.cluster.client_id,
            self.config.seconds("socket.connection.setup.timeout.ms"),
            request_timeout_s=self.config.seconds("request.timeout.ms"), node_id=shared.node_id,
            max_frame_bytes=self.config["receive.message.max.bytes"], security=self.config.security)
        return self.conn

    async def version(self, api_key: int, lo: int, hi: int) -> int:
        """The highest version in lo..hi the coordinator supports (UNSUPPORTED_VERSION if none)."""
        try:
            conn = await self.connection()
        except (KafkaConnectionError, KafkaTimeoutError):
            self.lost()
            raise
        return conn.version(api_key, lo, hi)

    def lost(self) -> None:
        self.cluster.forget_coordinator(self.group_id)
        if self.conn is not None:
            conn, self.conn = self.conn, None
            asyncio.get_running_loop().create_task(conn.close())

    async def request(self, obj, version_range, timeout_s=None):
        try:
            conn = await self.connection()
            version = conn.version(obj.API_KEY, *version_range)
            body = await conn.request(obj, version, timeout_s)
        except (KafkaConnectionError, KafkaTimeoutError):
            self.lost()
            raise
        except KafkaError as exc:
            if exc.code in _COORDINATOR_ERRORS:
                self.lost()
            raise
        if body.error_code in _COORDINATOR_ERRORS:
            self.lost()
        return body

    async def send_leave(self, obj, version_range, timeout_s, what: str) -> None:
        """Send a leave heartbeat (``what``: who leaves, for the logs); its answer or failure changes
        nothing: the member is gone either way."""
        try:
            resp = await self.request(obj, version_range, timeout_s)
            if resp.error_code:
                log.debug("%s: leaving answered %s", what, error_for(resp.error_code).name)
        except KafkaError as exc:
            log.debug("%s: leaving failed: %s", what, exc)

    async def abort_busy(self) -> None:
        """Close the connection if a request waits on it (a parked JoinGroup must not delay a leave)."""
        if self.conn is not None and self.conn.in_flight:
            conn, self.conn = self.conn, None
            await conn.close()

    async def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            await conn.close()


class MembershipLifecycle:
    """Stop, close and abort, the same for both group protocols. A subclass holds ``_link`` (its
    CoordinatorLink) and ``_closing``, and defines ``_tasks()`` (its tasks) and ``leave(reason)``."""

    def _tasks(self) -> tuple:
        raise NotImplementedError

    async def stop(self) -> None:
        """Stop the membership's tasks (the member stays in the group until ``close``)."""
        self._closing = True
        tasks = [t for t in self._tasks() if t is not None and not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self, leave: bool = True) -> None:
        """Stop the tasks, then leave the group as the protocol does (``leave``)."""
        await self.stop()
        if leave:
            await self._link.abort_busy()  # a JoinGroup/SyncGroup or heartbeat parked there must not delay the leave
            await self.leave("the consumer is closing")
        await self._link.close()

    async def abort(self) -> None:
        """Drop the coordinator connection now (a close that ran out of time)."""
        await self._link.close()


class GroupMembership(MembershipLifecycle):
    def __init__(self, config, cluster, invoke, commit_positions, notify):
        self.config = config
        self.cluster = cluster
        self.group_id = config["group.id"]
        self.instance_id = config["group.instance.id"]
        self.session_timeout_ms = config["session.timeout.ms"]
        self.rebalance_timeout_ms = config["max.poll.interval.ms"]
        self.heartbeat_s = config.seconds("heartbeat.interval.ms")
        self.rack = config["client.rack"] or None
        self.assignors = [assignor_module.assignor_for(n) for n in config["partition.assignment.strategy"]]
        self.protocol = assignor_module.rebalance_protocol(self.assignors)
        self._invoke = invoke  # async (kind, partitions) -> {tp: (position, epoch)} for revoke/lost
        self._commit_positions = commit_positions  # async ({tp: (offset, epoch)}) -> None (auto-commit)
        self._notify = notify  # wakes a waiting poll so that it raises ``error``
        self.member_id = ""
        self.generation = -1
        self.chosen = None  # the assignor the group agreed on
        self.leader = False
        self.state = UNJOINED
        self.owned: set = set()
        self.topics: set = set()  # the subscription: topic names (for a pattern, those matching now)
        self.pattern = None
        self.error = None  # a fatal error for the next poll
        self.last_poll = time.monotonic()
        self.poll_timed_out = False
        self._rejoin = None  # asyncio.Event: a rebalance is wanted
        self.rejoin_reason = None  # why, for the next JoinGroup (v8+)
        self._link = CoordinatorLink(config, cluster, self.group_id)
        self._task = None
        self._hb_task = None
        self._snapshot: dict = {}  # topic -> partition count the last assignment was based on
        self._group_topics: set = set()  # (leader) every member's subscribed topics
        self._next_metadata = 0.0
        self._closing = False
        self._loop = None
        self._lost_generation = False

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._rejoin = asyncio.Event()
        self._rejoin.set()
        self._task = self._loop.create_task(self._run())
        self._hb_task = self._loop.create_task(self._heartbeat_loop())

    def subscribe(self, topics=None, pattern=None) -> None:
        """Set the subscription (loop thread); a change triggers a rebalance."""
        self.pattern = pattern
        if pattern is not None:
            topics = self._matching(self.cluster.topics)
        topics = set(topics or ())
        if topics != self.topics or self.state == UNJOINED:
            self.topics = topics
            self.request_rejoin("the subscription changed")

    def request_rejoin(self, reason: str) -> None:
        log.debug("group %s: rejoin requested: %s", self.group_id, reason)
        self.rejoin_reason = reason  # sent with the next JoinGroup (v8+) for the coordinator's log
        if self._rejoin is not None:
            self._rejoin.set()

    def polled(self) -> None:
        """The application polled (loop thread): rejoin if a poll timeout made us leave."""
        if self.poll_timed_out:
            self.poll_timed_out = False
            self.request_rejoin("polling resumed after a poll timeout")

    def generation_info(self):
        """(generation, member id, instance id) for OffsetCommit: the group's when stable."""
        if self.state == STABLE or (self.state == REBALANCING and self.generation >= 0):
            return self.generation, self.member_id, self.instance_id
        return -1, "", self.instance_id

    def on_commit_error(self, exc: KafkaError) -> None:
        """An OffsetCommit answer that says our membership is stale."""
        if exc.code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("a commit saw a rebalance in progress")
        elif exc.code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
            self._reset_generation(exc.code == ErrorCode.UNKNOWN_MEMBER_ID)
            self.request_rejoin(f"a commit failed with {exc.name}")
        elif exc.code == ErrorCode.FENCED_INSTANCE_ID:
            self._fail(exc)

    def _fail(self, exc: KafkaError) -> None:
        self.error = exc
        self._notify()

    def _tasks(self) -> tuple:
        return self._task, self._hb_task

    async def leave(self, reason: str) -> None:
        """LeaveGroup (dynamic members only, as Java's consumer: a static member's session
        simply times out), then forget the generation."""
        if self.member_id and self.instance_id is None:
            api = REQUESTS[LEAVE_GROUP]
            req = api(group_id=self.group_id, member_id=self.member_id,
                      members=[api.MemberIdentity(member_id=self.member_id, group_instance_id=None,
                                                  reason=reason)])
            try:
                await self._link.request(req, LEAVE_RANGE, self.config.seconds("request.timeout.ms"))
            except KafkaError as exc:
                log.debug("group %s: LeaveGroup failed: %s", self.group_id, exc)
        self._reset_generation(True)
        self.state = UNJOINED

    # ---- the membership loop --------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while not self._closing:
            try:
                await self._maybe_refresh_metadata()
                if self._rejoin.is_set() and not self.poll_timed_out:
                    await self._join()
                    failures = 0
                    continue
                wait = max(0.05, self._next_metadata - time.monotonic())
                try:
                    await asyncio.wait_for(self._rejoin.wait(), wait)
                except asyncio.TimeoutError:
                    pass
            except asyncio.CancelledError:
                raise
            except _RetryJoin as exc:
                log.debug("group %s: retrying the join: %s", self.group_id, exc)
                if exc.backoff:
                    await asyncio.sleep(backoff_s(failures, self.config["retry.backoff.ms"],
                                                  self.config["retry.backoff.max.ms"]))
                    failures += 1
            except KafkaError as exc:
                if exc.retriable:
                    log.debug("group %s: retriable error: %s", self.group_id, exc)
                    await asyncio.sleep(backoff_s(failures, self.config["retry.backoff.ms"],
                                                  self.config["retry.backoff.max.ms"]))
                    failures += 1
                    continue
                log.warning("group %s: %s", self.group_id, exc)
                self._fail(exc)
                self._rejoin.clear()
                return
            except Exception as exc:  # a bug must surface in poll, not vanish in a task
                log.exception("group %s: membership task failed", self.group_id)
                self._fail(KafkaError(-1, f"group membership failed: {exc!r}", retriable=False))
                return

    async def _maybe_refresh_metadata(self) -> None:
        """Every metadata.max.age.ms: match the pattern again, compare partition counts."""
        now = time.monotonic()
        if now < self._next_metadata:
            return
        self._next_metadata = now + self.config.seconds("metadata.max.age.ms")
        try:
            if self.pattern is not None:
                await self.cluster.refresh(None)
            else:
                await self.cluster.refresh(sorted(self.topics | self._group_topics),
                                           auto_create=self.config["allow.auto.create.topics"])
        except KafkaError as exc:
            self._next_metadata = now + self.config.seconds("retry.backoff.ms")
            log.debug("group %s: metadata refresh failed: %s", self.group_id, exc)
            return
        if any(self.cluster.partitions_for(t) is None for t in self.topics):
            # a subscribed topic does not exist (yet): look again soon, as Java's consumer does
            self._next_metadata = min(self._next_metadata, now + self.config.seconds("retry.backoff.max.ms"))
        if self.pattern is not None:
            matched = self._matching(self.cluster.topics)
            if matched != self.topics:
                self.topics = matched
                self.request_rejoin("topics matching the subscribed pattern changed")
        if self.state == STABLE and self._partition_counts() != self._snapshot:
            self.request_rejoin("partition counts of subscribed topics changed")

    def _matching(self, topics) -> set:
        exclude_internal = self.config["exclude.internal.topics"]
        return {t for t, meta in topics.items()
                if self.pattern.fullmatch(t) and not (exclude_internal and getattr(meta, "internal", False))}

    def _partition_counts(self) -> dict:
        out = {}
        for topic in sorted(self.topics | (self._group_topics if self.leader else set())):
            parts = self.cluster.partitions_for(topic)
            if parts is not None:
                out[topic] = len(parts)
        return out

    def _reset_generation(self, forget_member: bool) -> None:
        self.generation = -1
        if forget_member:
            self.member_id = ""
        if self.owned:
            self._lost_generation = True

    async def _join(self) -> None:
        await self._prepare()
        self._rejoin.clear()
        self.state = REBALANCING
        try:
            assigned = await self._join_and_sync()
        except BaseException:
            self._rejoin.set()
            raise
        self.state = STABLE
        await self._complete(assigned)

    async def _prepare(self) -> None:
        """Before JoinGroup: give up what must be given up (all of it, for the eager protocol)."""
        if self._lost_generation and self.owned:
            lost, self.owned = set(self.owned), set()
            self._lost_generation = False
            await self._invoke("lost", sorted(lost))
            return
        self._lost_generation = False
        if self.protocol == COOPERATIVE:
            gone = {tp for tp in self.owned if tp.topic not in self.topics}
        else:
            gone = set(self.owned)
        if gone:
            await self._revoke(gone)

    async def _revoke(self, partitions: set) -> None:
        self.owned -= partitions
        positions = await self._invoke("revoke", sorted(partitions))
        if positions and self.generation >= 0:
            try:
                await self._commit_positions(positions)
            except KafkaError as exc:
                log.info("group %s: committing revoked partitions failed: %s", self.group_id, exc)

    async def _join_and_sync(self) -> list:
        api = REQUESTS[JOIN_GROUP]
        protocols = []
        for a in self.assignors:
            sub = Subscription(topics=sorted(self.topics),
                               user_data=a.subscription_user_data(sorted(self.topics), self.generation),
                               owned_partitions=sorted(self.owned), generation_id=self.generation,
                               rack_id=self.rack)
            protocols.append(api.JoinGroupRequestProtocol(name=a.name,
                                                          metadata=assignor_module.encode_subscription(sub)))
        req = api(group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                  rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                  group_instance_id=self.instance_id, protocol_type=PROTOCOL_TYPE, protocols=protocols,
                  reason=self.rejoin_reason)
        timeout = max(self.config.seconds("request.timeout.ms"), self.rebalance_timeout_ms / 1000 + 5)
        resp = await self._link.request(req, JOIN_RANGE, timeout)
        code = resp.error_code
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
            raise _RetryJoin("the coordinator assigned a member id", backoff=False)
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset_generation(True)
            raise _RetryJoin("unknown member id", backoff=False)
        if code == ErrorCode.ILLEGAL_GENERATION:
            self._reset_generation(False)
            raise _RetryJoin("illegal generation", backoff=False)
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            raise _RetryJoin("rebalance in progress", backoff=False)
        if code in _COORDINATOR_ERRORS:
            raise _RetryJoin(f"coordinator: {error_for(code).name}")
        if code in _FATAL_JOIN_ERRORS or code:
            err = error_for(code, f"JoinGroup of group {self.group_id} failed")
            if err.retriable:
                raise _RetryJoin(err.message)
            raise err
        self.member_id = resp.member_id
        self.generation = resp.generation_id
        self.chosen = next((a for a in self.assignors if a.name == resp.protocol_name), None)
        if self.chosen is None:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"the group chose assignor {resp.protocol_name!r}, which this consumer lacks",
                             retriable=False)
        self.leader = resp.leader == resp.member_id
        assignments = []
        if self.leader:
            assignments = await self._assign(resp.members)
        sync_api = REQUESTS[SYNC_GROUP]
        sreq = sync_api(group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                        group_instance_id=self.instance_id, protocol_type=PROTOCOL_TYPE,
                        protocol_name=self.chosen.name,
                        assignments=[sync_api.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                     for m, a in assignments])
        sresp = await self._link.request(sreq, SYNC_RANGE, timeout)
        code = sresp.error_code
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            raise _RetryJoin("rebalance in progress during sync", backoff=False)
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset_generation(True)
            raise _RetryJoin("unknown member id during sync", backoff=False)
        if code == ErrorCode.ILLEGAL_GENERATION:
            self._reset_generation(False)
            raise _RetryJoin("illegal generation during sync", backoff=False)
        if code in _COORDINATOR_ERRORS:
            raise _RetryJoin(f"coordinator during sync: {error_for(code).name}")
        if code:
            err = error_for(code, f"SyncGroup of group {self.group_id} failed")
            if err.retriable:
                raise _RetryJoin(err.message)
            raise err
        try:
            assignment = decode_assignment(sresp.assignment)
        except ValueError as exc:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"unreadable assignment: {exc}",
                             retriable=False) from None
        self._snapshot = self._partition_counts()
        return [tp for tp in assignment.partitions]

    async def _assign(self, members) -> list:
        """(leader) Run the chosen assignor; [(member id, assignment bytes)]."""
        subscriptions, versions = {}, {}
        for m in members:
            try:
                sub = assignor_module.decode_subscription(m.metadata)
            except ValueError as exc:
                log.warning("group %s: member %s sent an unreadable subscription (%s); it gets nothing",
                            self.group_id, m.member_id, exc)
                sub = Subscription(topics=[], version=0)
            sub.group_instance_id = m.group_instance_id
            subscriptions[m.member_id] = sub
            versions[m.member_id] = min(max(sub.version, 0), assignor_module.ASSIGNMENT_VERSION)
        self._group_topics = set().union(*(s.topics for s in subscriptions.values())) if subscriptions else set()
        if self._group_topics:
            await self.cluster.refresh(sorted(self._group_topics | self.topics))
        counts = {}
        for topic in self._group_topics:
            parts = self.cluster.partitions_for(topic)
            if parts:
                counts[topic] = len(parts)
        result = self.chosen.assign(counts, subscriptions)
        log.info("group %s generation %d: leader assigned %s", self.group_id, self.generation,
                 {m: len(p) for m, p in result.items()})
        return [(m, assignor_module.encode_assignment(assignor_module.Assignment(result.get(m, [])), versions[m]))
                for m in subscriptions]

    async def _complete(self, assigned: list) -> None:
        assigned = {TopicPartition(*tp) for tp in assigned}
        if self.protocol == COOPERATIVE:
            revoked = self.owned - assigned
            added = assigned - self.owned
            if revoked:
                await self._revoke(revoked)
            self.owned = set(assigned)
            await self._invoke("assign", sorted(added))
            if revoked:
                self.request_rejoin(f"gave up {len(revoked)} partition(s) for their new owner")
        else:
            self.owned = set(assigned)
            await self._invoke("assign", sorted(assigned))

    # ---- heartbeats --------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        api = REQUESTS[HEARTBEAT]
        while not self._closing:
            await asyncio.sleep(self.heartbeat_s)
            if self.state != STABLE or self.generation < 0:
                continue
            if time.monotonic() - self.last_poll > self.rebalance_timeout_ms / 1000:
                log.warning("group %s: poll() was not called within max.poll.interval.ms (%d ms); leaving the "
                            "group until the next poll", self.group_id, self.rebalance_timeout_ms)
                self.poll_timed_out = True
                await self.leave("consumer poll timeout has expired")  # the next join reports the partitions lost
                await self._invoke("drop", sorted(self.owned))  # no more records from them meanwhile
                continue
            req = api(group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                      group_instance_id=self.instance_id)
            try:
                resp = await self._link.request(req, HEARTBEAT_RANGE, self.config.seconds("request.timeout.ms"))
            except KafkaError as exc:
                log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
                continue
            code = resp.error_code
            if not code or self.state != STABLE:
                continue
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.request_rejoin("the group is rebalancing")
            elif code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
                self._reset_generation(code == ErrorCode.UNKNOWN_MEMBER_ID)
                self.state = UNJOINED
                self.request_rejoin(f"heartbeat: {error_for(code).name}")
            elif code == ErrorCode.FENCED_INSTANCE_ID:
                self._fail(error_for(code, f"group.instance.id {self.instance_id!r} was fenced by another member"))
                self.state = UNJOINED
            elif code not in _COORDINATOR_ERRORS:
                log.warning("group %s: heartbeat error %s", self.group_id, error_for(code).name)


def compile_pattern(pattern):
    """A subscription pattern: a compiled regex or a string (Kafka patterns match the whole name)."""
    if isinstance(pattern, re.Pattern):
        return pattern
    return re.compile(pattern)
