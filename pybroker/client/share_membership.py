"""Share group membership (KIP-932): ShareGroupHeartbeat from a share consumer.

The coordinator computes the assignment, and there is nothing to revoke: records are acquired one
delivery at a time under locks, so the member simply fetches from whatever partitions it was last told
(several members may share a partition). One task on the consumer's event loop joins (member epoch 0,
a member id made here, as Kafka's clients and librdkafka do), heartbeats every
``heartbeat_interval_ms`` the coordinator chose, and at once when the subscription changed. A request
carries the subscription and the rack only when they changed since the last one answered (after any
failure: again). An assignment comes by topic id; names are resolved through metadata (refreshed for
ids not known yet) and handed to ``on_assignment(set of TopicPartition)``.

FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the member lost its assignment; it joins again with epoch 0
and the same member id. Coordinator errors look the coordinator up again after a backoff. Errors that
no retry mends (authorization, GROUP_ID_NOT_FOUND for a group of another type, a full group, a
coordinator without share groups) are fatal: ``error`` is raised by the consumer's next poll.
Leaving sends epoch -1.
"""
import asyncio
import logging
import time

from pybroker.client.cluster import backoff_s
from pybroker.client.errors import KafkaError, error_for
from pybroker.client.group import CoordinatorLink
from pybroker.client.group_consumer_protocol import new_member_id, take_heartbeat
from pybroker.client.types import TopicPartition
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

SHARE_GROUP_HEARTBEAT = 76
HEARTBEAT_RANGE = (1, 1)
JOIN_EPOCH, LEAVE_EPOCH = 0, -1

UNJOINED, JOINING, STABLE, LEFT, FATAL = "unjoined", "joining", "stable", "left", "fatal"

_RETRY_CODES = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT})
_FENCING_CODES = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})


class ShareMembership:
    """One share consumer's membership of its share group (runs on the consumer's event loop)."""

    def __init__(self, config, cluster, on_assignment, notify):
        self.config = config
        self.cluster = cluster
        self.group_id = config["group.id"]
        self.rack = config["client.rack"] or None
        self._on_assignment = on_assignment  # (set of TopicPartition) -> None, on the loop
        self._notify = notify  # wakes a waiting poll so that it raises ``error``
        self.member_id = new_member_id()
        self.member_epoch = JOIN_EPOCH
        self.state = UNJOINED
        self.topics: list = []
        self.error = None  # fatal: raised by the next poll
        self.assignment: set = set()  # TopicPartitions handed to the consumer
        self._target = None  # {(topic id, partition)} not resolved to names yet
        self._sent_topics = None  # the subscription the coordinator last acknowledged
        self._sent_rack = False
        self._interval_s = 0.0
        self._next_heartbeat = 0.0
        self._urgent = False
        self._link = CoordinatorLink(config, cluster, self.group_id)
        self._wake = None
        self._task = None
        self._closing = False
        self._incarnation = 0  # bumped when the member leaves: an answer in flight then is ignored

    # ---- the consumer's side --------------------------------------------------------------------

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def subscribe(self, topics: list) -> None:
        """Set the subscription (loop thread); the next heartbeat, sent at once, carries it."""
        self.topics = sorted(set(topics))
        if self.state in (UNJOINED, LEFT):
            self.state = JOINING
        self._heartbeat_soon()

    def _heartbeat_soon(self) -> None:
        self._urgent = True
        if self._wake is not None:
            self._wake.set()

    async def close(self, leave: bool = True) -> None:
        """Stop heartbeating; with ``leave``, leave the group (epoch -1)."""
        self._closing = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if leave:
            await self.leave("the consumer is closing")
        await self._link.close()

    async def leave(self, reason: str) -> None:
        if self.member_epoch > 0 or self.state == STABLE:
            api = REQUESTS[SHARE_GROUP_HEARTBEAT]
            req = api(group_id=self.group_id, member_id=self.member_id, member_epoch=LEAVE_EPOCH)
            log.info("share group %s: member %s leaves (%s)", self.group_id, self.member_id, reason)
            await self._link.send_leave(req, HEARTBEAT_RANGE, self.config.seconds("request.timeout.ms"),
                                        f"share group {self.group_id}")
        self.member_epoch = JOIN_EPOCH
        self._incarnation += 1
        self._sent_topics = None
        self._sent_rack = False
        self.state = LEFT
        self._set_assignment(set())

    async def unsubscribe(self) -> None:
        """Leave the group and forget the subscription; a later subscribe() joins again."""
        await self.leave("the consumer unsubscribed")
        self.topics = []

    # ---- heartbeats -------------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while not self._closing:
            try:
                if self.state in (JOINING, STABLE) and self.topics and (
                        self._urgent or time.monotonic() >= self._next_heartbeat):
                    await self._heartbeat()
                    failures = 0
                if self._target is not None:
                    await self._resolve()
                await self._sleep_until_due()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                self._sent_topics, self._sent_rack = None, False
                if not exc.retriable:
                    self._fail(exc)
                    return
                log.debug("share group %s: heartbeat failed: %s", self.group_id, exc)
                await asyncio.sleep(backoff_s(failures, self.config["retry.backoff.ms"],
                                              self.config["retry.backoff.max.ms"]))
                failures += 1
                self._urgent = True
            except Exception as exc:  # a bug must surface in poll, not vanish in a task
                log.exception("share group %s: heartbeat task failed", self.group_id)
                self._fail(KafkaError(-1, f"share group membership failed: {exc!r}", retriable=False))
                return

    def _fail(self, exc: KafkaError) -> None:
        log.warning("share group %s: %s", self.group_id, exc)
        self.state = FATAL
        self.error = exc
        self._notify()

    async def _sleep_until_due(self) -> None:
        self._wake.clear()
        if self._urgent and self.state in (JOINING, STABLE) and self.topics:
            return
        wait = max(0.0, self._next_heartbeat - time.monotonic())
        if self._target is not None:
            wait = min(wait, self.config.seconds("retry.backoff.ms"))
        if not self.topics or self.state not in (JOINING, STABLE):
            wait = 1.0
        try:
            await asyncio.wait_for(self._wake.wait(), wait)
        except asyncio.TimeoutError:
            pass

    def build(self):
        """The next ShareGroupHeartbeat (joining: epoch 0 and everything; then only what changed)."""
        api = REQUESTS[SHARE_GROUP_HEARTBEAT]
        if self.state == JOINING:
            self.member_epoch = JOIN_EPOCH
            self._sent_topics, self._sent_rack = None, False
        req = api(group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch)
        if self._sent_topics != self.topics:
            req.subscribed_topic_names = list(self.topics)
        if not self._sent_rack:
            req.rack_id = self.rack
        return req

    async def _heartbeat(self) -> None:
        self._urgent = False
        req = self.build()
        incarnation, topics = self._incarnation, req.subscribed_topic_names
        self._next_heartbeat = time.monotonic() + max(self._interval_s, self.config.seconds("retry.backoff.ms"))
        resp = await self._link.request(req, HEARTBEAT_RANGE, self.config.seconds("request.timeout.ms"))
        if incarnation != self._incarnation or self._closing:
            return  # left (or closing) while this was in flight
        if resp.error_code:
            self._sent_topics, self._sent_rack = None, False
            self._on_error(resp.error_code, resp.error_message, req.member_epoch)
            return
        if topics is not None:
            self._sent_topics = list(topics)
        self._sent_rack = True
        take_heartbeat(self, resp, "share group")
        if resp.assignment is not None:
            self._target = {(t.topic_id, p) for t in resp.assignment.topic_partitions for p in t.partitions}

    def _on_error(self, code: int, message, sent_epoch: int) -> None:
        if code in _RETRY_CODES:
            raise error_for(code, message)
        if code in _FENCING_CODES:
            log.info("share group %s: member %s %s at epoch %d; joining again", self.group_id, self.member_id,
                     error_for(code).name, sent_epoch)
            self.state = JOINING
            self.member_epoch = JOIN_EPOCH
            self._target = None
            self._set_assignment(set())
            if sent_epoch == JOIN_EPOCH:  # refused even a join: not at once
                raise KafkaError(code, message, retriable=True)
            self._heartbeat_soon()
            return
        if code == ErrorCode.UNSUPPORTED_VERSION:
            message = message or "the coordinator does not support share groups"
        err = error_for(code, message or f"ShareGroupHeartbeat of share group {self.group_id} failed")
        if err.retriable:
            raise err
        raise KafkaError(code, err.message, retriable=False)

    async def _resolve(self) -> None:
        """Turn the target's topic ids into names (refreshing metadata once for unknown ones)."""
        target = self._target
        ids = self._names_by_id()
        if any(tid not in ids for tid, _ in target):
            try:
                await self.cluster.refresh(sorted(self.topics))
            except KafkaError as exc:
                log.debug("share group %s: metadata refresh failed: %s", self.group_id, exc)
            ids = self._names_by_id()
        if target is not self._target:
            return  # a newer assignment came meanwhile
        unknown = [tid for tid, _ in target if tid not in ids]
        if unknown:
            log.debug("share group %s: topic ids not in the metadata yet: %s", self.group_id,
                      sorted({str(t) for t in unknown}))
            return  # tried again after a backoff
        self._target = None
        self._set_assignment({TopicPartition(ids[tid], p) for tid, p in target})

    def _names_by_id(self) -> dict:
        return {t.topic_id: name for name, t in self.cluster.topics.items() if t.topic_id is not None}

    def _set_assignment(self, tps: set) -> None:
        if tps != self.assignment:
            log.info("share group %s: assigned %s", self.group_id, sorted(tps))
            self.assignment = set(tps)
            self._on_assignment(set(tps))
