"""Consumer group membership with the consumer group protocol (KIP-848, ``group.protocol=consumer``).

The coordinator computes the assignment; the member only heartbeats (ConsumerGroupHeartbeat) and
reconciles. ``ConsumerProtocolMembership`` offers the consumer the same interface as the classic
``GroupMembership``. Two tasks run on the consumer's event loop:

* the heartbeat task joins (member epoch 0, a member id generated here as KIP-1082 asks), then
  heartbeats every ``heartbeat_interval_ms`` the coordinator chose, at once when something needs
  telling (a reconciled assignment, a new subscription). A request carries only what changed since
  the last one answered (Kafka's rule); after any failure the next one carries everything again.
  It never runs application code, so callbacks taking their time never delay a heartbeat.
* the reconcile task brings the partitions the application owns to the latest assignment the
  coordinator sent (topic ids resolved through metadata): revoke (callback, then the revoked
  positions are committed when enable.auto.commit is on, while the epoch still owns them), then
  assign; the next heartbeat acknowledges with the owned partitions, so the coordinator can hand
  the revoked ones to their next owner. A fenced member (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID)
  reports its partitions lost, then joins again with epoch 0.

Leaving sends member epoch -1 (-2 for a static member, who means to come back). A member that does
not poll within ``max.poll.interval.ms`` leaves; its next poll reports the partitions lost and
joins again. A pattern subscription is sent as a regex (ConsumerGroupHeartbeat v1+) or, on older
coordinators, matched here against metadata and sent as topic names.
"""
import asyncio
import base64
import logging
import time
import uuid

from pybroker.client.cluster import backoff_s
from pybroker.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, error_for
from pybroker.client.group import CoordinatorLink, MembershipLifecycle
from pybroker.client.types import TopicPartition
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

CONSUMER_GROUP_HEARTBEAT = 68
HEARTBEAT_RANGE = (0, 1)
REGEX_VERSION = 1  # first version with SubscribedTopicRegex
OFFSET_COMMIT_RANGE = (2, 9)  # Kafka wants v9+ from members of a consumer group
JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2
FIRST_HEARTBEAT_INTERVAL_MS = 0  # the first heartbeat goes at once

UNJOINED, JOINING, STABLE, FENCED, STALE, LEFT, FATAL = (
    "unjoined", "joining", "stable", "fenced", "stale", "left", "fatal")

_RETRY_CODES = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
_FENCING_CODES = {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID}


def new_member_id() -> str:
    """A member id as Kafka prints a Uuid: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def take_heartbeat(member, resp, kind: str) -> None:
    """A heartbeat answered without error (KIP-848 and share groups): the member's epoch, the interval the
    coordinator asks for, and the join done. ``kind`` names the group in the log ("group", "share group")."""
    member.member_epoch = resp.member_epoch
    if resp.heartbeat_interval_ms > 0:
        member._interval_s = resp.heartbeat_interval_ms / 1000
        member._next_heartbeat = time.monotonic() + member._interval_s
    if member.state == JOINING:
        member.state = STABLE
        log.info("%s %s: joined as %s with epoch %d", kind, member.group_id, member.member_id, member.member_epoch)


class _SentFields:
    """What the last heartbeat told the coordinator; None means "not told": send it."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.rebalance_timeout_ms = None
        self.subscription = None
        self.server_assignor = None
        self.assignment_version = None


class ConsumerProtocolMembership(MembershipLifecycle):
    offset_commit_range = OFFSET_COMMIT_RANGE

    def __init__(self, config, cluster, invoke, commit_positions, notify):
        self.config = config
        self.cluster = cluster
        self.group_id = config["group.id"]
        self.instance_id = config["group.instance.id"]
        self.rebalance_timeout_ms = config["max.poll.interval.ms"]
        self.rack = config["client.rack"] or None
        self.server_assignor = config["group.remote.assignor"]
        self._invoke = invoke  # async (kind, partitions) -> {tp: (position, epoch)} for revoke/lost
        self._commit_positions = commit_positions  # async ({tp: (offset, epoch)}) -> None (auto-commit)
        self._notify = notify  # wakes a waiting poll so that it raises ``error``
        self.member_id = new_member_id()
        self.member_epoch = JOIN_EPOCH
        self.state = UNJOINED
        self.topics: set = set()  # subscribed names (for a pattern matched here: those matching now)
        self.pattern = None
        self.error = None  # a fatal error for the next poll
        self.last_poll = time.monotonic()
        self.poll_timed_out = False
        self._owned: dict = {}  # (topic id, partition) -> TopicPartition the application has now
        self._target = None  # {(topic id, partition)} of the latest assignment received, or None
        self._target_epoch = -1
        self._acked_epoch = -1  # the epoch whose assignment the owned partitions were last reported for
        self._assignment_version = 0  # bumped when there is a reconciled assignment to report
        self._sent = _SentFields()
        self._interval_s = FIRST_HEARTBEAT_INTERVAL_MS / 1000
        self._next_heartbeat = 0.0
        self._incarnation = 0  # bumped when the membership restarts: reconciliation of older news stops
        self._lose_pending = False  # owned partitions must be reported lost before joining again
        self._link = CoordinatorLink(config, cluster, self.group_id)
        self._wake = None  # asyncio.Event: heartbeat now
        self._changed = None  # asyncio.Event: something to reconcile
        self._task = None
        self._reconcile_task = None
        self._next_metadata = 0.0
        self._version = None  # the ConsumerGroupHeartbeat version the coordinator offers
        self._regex_ok = False  # the coordinator takes SubscribedTopicRegex
        self._urgent = False  # heartbeat as soon as the one in flight (if any) is answered
        self._closing = False

    # ---- what the consumer sees ---------------------------------------------------------------

    @property
    def owned(self) -> set:
        return set(self._owned.values())

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._task = loop.create_task(self._run())
        self._reconcile_task = loop.create_task(self._reconcile_loop())

    def subscribe(self, topics=None, pattern=None) -> None:
        """Set the subscription (loop thread); the next heartbeat, sent at once, carries it."""
        self.pattern = pattern
        if pattern is not None:
            topics = self._matching(self.cluster.topics)
            self._next_metadata = 0.0  # match against fresh metadata soon
        self.topics = set(topics or ())
        if self.state in (UNJOINED, LEFT):
            self.state = JOINING
        self._heartbeat_soon()

    def request_rejoin(self, reason: str) -> None:
        log.debug("group %s: heartbeat requested: %s", self.group_id, reason)
        self._heartbeat_soon()

    def polled(self) -> None:
        """The application polled (loop thread): rejoin if a poll timeout made us leave."""
        if self.poll_timed_out:
            self.poll_timed_out = False
            self._lose_pending = True
            self._changed.set()

    def generation_info(self):
        """(member epoch, member id, instance id) for OffsetCommit and transactional commits."""
        if self.member_epoch > 0 and self.state in (STABLE, JOINING):
            return self.member_epoch, self.member_id, self.instance_id
        return -1, "", self.instance_id

    def on_commit_error(self, exc: KafkaError) -> None:
        """An OffsetCommit answer that says our membership is stale: a heartbeat finds out at once."""
        if exc.code in _FENCING_CODES or exc.code == ErrorCode.STALE_MEMBER_EPOCH:
            self._heartbeat_soon()

    def _fail(self, exc: KafkaError) -> None:
        self.state = FATAL
        self.error = exc
        self._notify()

    def _heartbeat_soon(self) -> None:
        self._urgent = True
        if self._wake is not None:
            self._wake.set()

    # ---- lifecycle ------------------------------------------------------------------------------

    def _tasks(self) -> tuple:
        return self._task, self._reconcile_task

    async def leave(self, reason: str) -> None:
        """Heartbeat with epoch -1 (a static member: -2, it comes back under its instance id)."""
        if self.member_epoch > 0:
            epoch = STATIC_LEAVE_EPOCH if self.instance_id is not None else LEAVE_EPOCH
            api = REQUESTS[CONSUMER_GROUP_HEARTBEAT]
            req = api(group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
                      instance_id=self.instance_id)
            log.info("group %s: member %s leaves (%s)", self.group_id, self.member_id, reason)
            await self._link.send_leave(req, HEARTBEAT_RANGE, self.config.seconds("request.timeout.ms"),
                                        f"group {self.group_id}")
        self.member_epoch = JOIN_EPOCH
        self._incarnation += 1
        self._target = None
        self._sent.reset()
        self.state = LEFT

    # ---- heartbeats -------------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while not self._closing:
            try:
                await self._maybe_refresh_metadata()
                if await self._maybe_poll_timeout_leave():
                    continue
                if self._version is None and self.state == JOINING:
                    await self._negotiate()
                if self._wants_heartbeat() and (self._urgent or time.monotonic() >= self._next_heartbeat):
                    self._wake.clear()
                    await self._heartbeat()
                    failures = 0
                await self._sleep_until_due()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                self._sent.reset()
                if not exc.retriable:
                    log.warning("group %s: %s", self.group_id, exc)
                    self._fail(exc)
                    return
                log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
                await asyncio.sleep(backoff_s(failures, self.config["retry.backoff.ms"],
                                              self.config["retry.backoff.max.ms"]))
                failures += 1
                self._urgent = True  # the backoff spaced it: try again now, not an interval later
            except Exception as exc:  # a bug must surface in poll, not vanish in a task
                log.exception("group %s: heartbeat task failed", self.group_id)
                self._fail(KafkaError(-1, f"group membership failed: {exc!r}", retriable=False))
                return

    def _wants_heartbeat(self) -> bool:
        if self.state == JOINING:
            # a first heartbeat must name at least one topic (or a regex the coordinator matches)
            return bool(self.topics) or (self.pattern is not None and self._regex_ok)
        return self.state == STABLE

    async def _negotiate(self) -> None:
        """The ConsumerGroupHeartbeat version to use; a coordinator without one is a fatal error."""
        try:
            self._version = await self._link.version(CONSUMER_GROUP_HEARTBEAT, *HEARTBEAT_RANGE)
        except KafkaError as exc:
            if exc.code != ErrorCode.UNSUPPORTED_VERSION:
                raise
            raise KafkaError(exc.code, f"{exc.message}: the cluster does not support the consumer group "
                             "protocol; use group.protocol=classic", retriable=False) from None
        self._regex_ok = self._version >= REGEX_VERSION

    async def _sleep_until_due(self) -> None:
        self._wake.clear()  # urgency lives in _urgent: a wake-up with nothing to send must not spin
        now = time.monotonic()
        wait = self._next_metadata - now
        if self._wants_heartbeat():
            wait = 0 if self._urgent else min(wait, self._next_heartbeat - now)
        if self.state == STABLE:  # check the poll interval at least once a second
            wait = min(wait, 1.0)
        if wait <= 0:
            return
        try:
            await asyncio.wait_for(self._wake.wait(), wait)
        except asyncio.TimeoutError:
            pass

    async def _maybe_poll_timeout_leave(self) -> bool:
        if self.state != STABLE or time.monotonic() - self.last_poll <= self.rebalance_timeout_ms / 1000:
            return False
        log.warning("group %s: poll() was not called within max.poll.interval.ms (%d ms); leaving the group "
                    "until the next poll", self.group_id, self.rebalance_timeout_ms)
        self.poll_timed_out = True
        await self.leave("consumer poll timeout has expired")
        self.state = STALE
        await self._invoke("drop", sorted(self._owned.values()))  # no more records from them meanwhile
        return True

    async def _heartbeat(self) -> None:
        if self._link.conn is None or self._link.conn.closed:
            await self._negotiate()  # a new coordinator connection: its versions may differ
        version = self._version
        self._urgent = False
        req = self._build(version)
        epoch, incarnation = req.member_epoch, self._incarnation
        timeout = self.config.seconds("request.timeout.ms")
        self._next_heartbeat = time.monotonic() + max(self._interval_s, self.config.seconds("retry.backoff.ms"))
        resp = await self._link.request(req, (version, version), timeout)
        if incarnation != self._incarnation or self._closing:
            return  # the member left (or restarted) while this was in flight
        code = resp.error_code
        if code:
            self._sent.reset()
            self._on_error(code, resp.error_message, epoch)
            return
        if resp.member_id:
            self.member_id = resp.member_id
        take_heartbeat(self, resp, "group")
        if resp.assignment is not None:
            self._target = {(t.topic_id, p) for t in resp.assignment.topic_partitions for p in t.partitions}
            self._target_epoch = resp.member_epoch
            self._changed.set()
        elif resp.member_epoch != self._acked_epoch and self._target is not None:
            self._target_epoch = resp.member_epoch  # same partitions, a newer epoch: acknowledge it
            self._changed.set()

    def _build(self, version: int):
        api = REQUESTS[CONSUMER_GROUP_HEARTBEAT]
        joining = self.state == JOINING
        if joining:
            self.member_epoch = JOIN_EPOCH
            self._sent.reset()
        sent = self._sent
        req = api(group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
                  instance_id=self.instance_id)
        if sent.rebalance_timeout_ms != self.rebalance_timeout_ms:
            req.rebalance_timeout_ms = sent.rebalance_timeout_ms = self.rebalance_timeout_ms
            req.rack_id = self.rack  # told with the other member settings: on joining and after failures
        if self.pattern is not None and version >= REGEX_VERSION:
            subscription = ("regex", self.pattern.pattern)
        else:
            subscription = ("names", tuple(sorted(self.topics)))
        if sent.subscription != subscription:
            sent.subscription = subscription
            if subscription[0] == "regex":
                req.subscribed_topic_regex = subscription[1]
                req.subscribed_topic_names = []
            else:
                req.subscribed_topic_names = list(subscription[1])
        if self.server_assignor is not None and sent.server_assignor != self.server_assignor:
            req.server_assignor = sent.server_assignor = self.server_assignor
        if joining:
            req.topic_partitions = []
            sent.assignment_version = self._assignment_version
        elif sent.assignment_version != self._assignment_version:
            sent.assignment_version = self._assignment_version
            req.topic_partitions = self._owned_by_topic_id(api)
        return req

    def _owned_by_topic_id(self, api) -> list:
        by_id: dict = {}
        for topic_id, partition in self._owned:
            by_id.setdefault(topic_id, []).append(partition)
        return [api.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(by_id.items())]

    def _on_error(self, code: int, message, sent_epoch: int) -> None:
        if code in _RETRY_CODES:
            raise error_for(code, message)
        if code in _FENCING_CODES:
            if sent_epoch == JOIN_EPOCH:
                # the coordinator still holds this id at a later epoch: join under a new one, after a backoff
                self.member_id = new_member_id()
                raise KafkaError(code, message, retriable=True)
            self._fence(f"heartbeat: {error_for(code).name}")
            return
        if code == ErrorCode.UNSUPPORTED_VERSION:
            message = message or ("the coordinator does not support the consumer group protocol: "
                                  "use group.protocol=classic")
        err = error_for(code, message or f"ConsumerGroupHeartbeat of group {self.group_id} failed")
        if err.retriable:
            raise err
        raise KafkaError(code, err.message, retriable=False)

    def _fence(self, reason: str) -> None:
        """The coordinator no longer knows this member (or this epoch): lose everything, join again."""
        log.info("group %s: member %s fenced (%s); its partitions are lost and it joins again",
                 self.group_id, self.member_id, reason)
        self.state = FENCED
        self.member_epoch = JOIN_EPOCH
        self._incarnation += 1
        self._target = None
        self._lose_pending = True
        self._changed.set()

    # ---- reconciliation ------------------------------------------------------------------------

    async def _reconcile_loop(self) -> None:
        failures = 0
        while not self._closing:
            await self._changed.wait()
            self._changed.clear()
            try:
                if self._lose_pending:
                    await self._lose_all()
                    continue
                if not await self._reconcile():
                    # some topic ids are not in the metadata yet: look again after a backoff
                    await asyncio.sleep(backoff_s(failures, self.config["retry.backoff.ms"],
                                                  self.config["retry.backoff.max.ms"]))
                    failures += 1
                    self._changed.set()
                else:
                    failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must surface in poll, not vanish in a task
                log.exception("group %s: reconciliation failed", self.group_id)
                self._fail(KafkaError(-1, f"group membership failed: {exc!r}", retriable=False))
                return

    async def _lose_all(self) -> None:
        """Report every owned partition lost (no commit: the epoch is gone), then join again."""
        self._lose_pending = False
        if self._owned:
            lost = sorted(self._owned.values())
            self._owned = {}
            await self._invoke("lost", lost)
        self._assignment_version += 1
        self._acked_epoch = -1
        if self.state in (FENCED, STALE, LEFT) and not self._closing:
            self.state = JOINING
            self._sent.reset()
            self._heartbeat_soon()

    async def _reconcile(self) -> bool:
        """Bring the owned partitions to the latest assignment; False if some topic ids are unknown."""
        if self._target is None or self.state != STABLE:
            return True
        target, epoch, incarnation = set(self._target), self._target_epoch, self._incarnation
        names, unresolved = await self._resolve(target)
        revoked = [key for key in self._owned if key not in target]
        added = [key for key in sorted(names) if key not in self._owned]
        if revoked:
            tps = sorted(self._owned[key] for key in revoked)
            log.info("group %s epoch %d: revoking %s", self.group_id, epoch, tps)
            positions = await self._invoke("revoke", tps)
            if positions and incarnation == self._incarnation:
                try:  # still owned by this epoch on the coordinator: the commit is accepted
                    await self._commit_positions(positions)
                except KafkaError as exc:
                    log.info("group %s: committing revoked partitions failed: %s", self.group_id, exc)
            for key in revoked:
                self._owned.pop(key, None)
        if incarnation != self._incarnation:
            return True  # fenced or left meanwhile: the loss is reported next
        if added:
            tps = [names[key] for key in added]
            log.info("group %s epoch %d: assigned %s", self.group_id, epoch, tps)
            for key in added:
                self._owned[key] = names[key]
            await self._invoke("assign", tps)
        if incarnation == self._incarnation and (revoked or added or epoch != self._acked_epoch):
            self._acked_epoch = epoch
            self._assignment_version += 1
            self._heartbeat_soon()  # acknowledge: the coordinator may now move what was revoked
        return not unresolved

    async def _resolve(self, target: set):
        """({(topic id, partition): TopicPartition}, unresolved keys), refreshing metadata for unknown ids."""
        names = {key: tp for key, tp in self._owned.items() if key in target}
        missing = [key for key in target if key not in names]
        if not missing:
            return names, []
        ids = self._names_by_id()
        if any(topic_id not in ids for topic_id, _ in missing):
            try:
                await self.cluster.refresh(None if self.pattern is not None else sorted(self.topics))
            except KafkaError as exc:
                log.debug("group %s: metadata refresh failed: %s", self.group_id, exc)
            ids = self._names_by_id()
        unresolved = []
        for key in missing:
            name = ids.get(key[0])
            if name is None:
                unresolved.append(key)
            else:
                names[key] = TopicPartition(name, key[1])
        if unresolved:
            log.debug("group %s: topic ids not in the metadata yet: %s", self.group_id,
                      sorted({str(k[0]) for k in unresolved}))
        return names, unresolved

    def _names_by_id(self) -> dict:
        return {t.topic_id: name for name, t in self.cluster.topics.items() if t.topic_id is not None}

    # ---- metadata -------------------------------------------------------------------------------

    async def _maybe_refresh_metadata(self) -> None:
        """Every metadata.max.age.ms (and soon after subscribing to a pattern): match the pattern again."""
        now = time.monotonic()
        if now < self._next_metadata:
            return
        self._next_metadata = now + self.config.seconds("metadata.max.age.ms")
        if self.pattern is None:
            return
        try:
            await self.cluster.refresh(None)
        except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as exc:
            self._next_metadata = now + self.config.seconds("retry.backoff.max.ms")
            log.debug("group %s: metadata refresh failed: %s", self.group_id, exc)
            return
        matched = self._matching(self.cluster.topics)
        if matched != self.topics:
            self.topics = matched
            self._heartbeat_soon()
        if not matched:  # nothing matches yet: look again soon, as for a topic that does not exist yet
            self._next_metadata = min(self._next_metadata, now + self.config.seconds("retry.backoff.max.ms"))

    def _matching(self, topics) -> set:
        exclude_internal = self.config["exclude.internal.topics"]
        return {t for t, meta in topics.items()
                if self.pattern.fullmatch(t) and not (exclude_internal and getattr(meta, "internal", False))}
