"""The classic group coordinator on the event loop: join, sync, heartbeat, leave, commit, fetch.

Follows Kafka's classic GroupCoordinator. A rebalance's join phase ends when every known member
has rejoined (and no v4+ member is still fetching its id), or when the group's rebalance timeout
(the largest of its members') fires; a group that starts from Empty first waits
``group.initial.rebalance.delay.ms``, extended by that much while new members keep arriving, up
to the rebalance timeout. Members that miss a rebalance (dynamic ones) are dropped. Every member
has one session timer, reset by each heartbeat/join/sync/commit; members parked in JoinGroup or
SyncGroup are kept alive. Group membership lives in memory only: after a restart clients rejoin
(their member ids come back UNKNOWN_MEMBER_ID); committed offsets are durable (offsets.py).
JoinGroup/SyncGroup/Heartbeat/LeaveGroup for the id of a consumer group (KIP-848) are served by
that group (classic_members.py); conversions between the kinds: group_migration.py.
"""
import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from pybroker.coordinator import records
from pybroker.coordinator.consumer_coordinator import ConsumerGroupCoordinator
from pybroker.coordinator.group import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE,
                                        Group, Member, now_ms)
from pybroker.protocol.errors import (COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, GROUP_ID_NOT_FOUND,
                                      ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID,
                                      INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED, NONE, NON_EMPTY_GROUP,
                                      NOT_COORDINATOR, OFFSET_METADATA_TOO_LARGE, REBALANCE_IN_PROGRESS,
                                      UNKNOWN_MEMBER_ID, UNKNOWN_TOPIC_OR_PARTITION)

log = logging.getLogger(__name__)

# Kafka's broker defaults, hardcoded here (not configurable keys of this broker)
GROUP_MIN_SESSION_TIMEOUT_MS = 6000       # group.min.session.timeout.ms
GROUP_MAX_SESSION_TIMEOUT_MS = 1800000    # group.max.session.timeout.ms
OFFSET_METADATA_MAX_BYTES = 4096          # offset.metadata.max.bytes
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600000  # offsets.retention.check.interval.ms
UNKNOWN_MEMBER = ""


def _no_other_group(group_id) -> None:
    return None


@dataclass
class JoinResult:
    error: int
    member_id: str = UNKNOWN_MEMBER
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: list = field(default_factory=list)  # (member id, group instance id, metadata) for the leader
    skip_assignment: bool = False  # JoinGroup v9+: a static leader that rejoined keeps the current assignment


@dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol: str | None = None
    assignment: bytes = b""


@dataclass
class CommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    expire_timestamp: int = -1


class GroupCoordinator:
    def __init__(self, config, store):
        """``store``: the OffsetStore (its partitions decide which groups are coordinated here)."""
        self.config = config
        self.store = store
        self.groups: dict[str, Group] = {}
        self.ready = False
        self.stopped = False
        self._loop = None
        self._expiry_task = None
        self.consumer = ConsumerGroupCoordinator(self)  # KIP-848 groups, beside the classic ones here
        # group id -> the type of a group of that id that is neither classic nor consumer ("share"), or None;
        # set by the broker (share groups live in pybroker/share, which this package does not know)
        self.other_group_type = _no_other_group

    # ---- lifecycle ------------------------------------------------------------------------

    @property
    def topics(self):
        """name -> topic record (for partition counts)."""
        return self.store.control.topics

    def startup(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._expiry_task = self._loop.create_task(self._expire_offsets_forever())
        self.ready = True

    def shutdown(self) -> None:
        """Answer every parked request (NOT_COORDINATOR: clients look again) and stop all timers."""
        self.ready = False
        self.stopped = True
        if self._expiry_task is not None:
            self._expiry_task.cancel()
        for group in self.groups.values():
            self._release(group)
        self.consumer.release_all()

    def _release(self, group, error: int = NOT_COORDINATOR) -> None:
        """Stop coordinating ``group`` here: timers stop, parked members hear ``error`` (clients look again)."""
        self._cancel(group.join_timer)
        for handle in group.pending.values():
            self._cancel(handle)
        for m in group.members.values():
            self._cancel(m.expiry)
            self._answer_join(m, JoinResult(error, m.member_id))
            self._answer_sync(m, SyncResult(error))

    def partition_moved(self, index: int, is_leader: bool) -> None:
        """An offsets partition became led here (its groups start Empty) or moved away."""
        for group_id in [g for g in self.groups if self.store.partition_for(g) == index]:
            self._release(self.groups.pop(group_id))
        for group_id in [g for g in self.consumer.groups if self.store.partition_for(g) == index]:
            self.consumer.release(group_id)
        if is_leader:
            for group_id in self.store.groups():  # groups known only by their offsets start Empty
                if self.store.partition_for(group_id) == index:
                    self.groups.setdefault(group_id, Group(group_id))

    def check_ready(self) -> int:
        if not self.ready:
            return NOT_COORDINATOR if self.stopped else COORDINATOR_NOT_AVAILABLE
        return NONE

    def check_available(self, group_id) -> int:
        if not self.ready:
            return self.check_ready()
        if group_id is None or group_id == "":
            return INVALID_GROUP_ID
        if not self.store.owns(group_id):
            return NOT_COORDINATOR
        return NONE

    # ---- JoinGroup ------------------------------------------------------------------------

    def join(self, group_id: str, member_id: str, group_instance_id, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str, protocols,
             require_known_member_id: bool, supports_skip_assignment: bool = False):
        """A JoinResult, or a Future of one when the member must wait for the rebalance.

        ``supports_skip_assignment`` (JoinGroup v9+): a static leader rejoining a Stable group gets
        the members and keeps the current assignment instead of forcing a rebalance."""
        error = self.check_available(group_id)
        if error:
            return JoinResult(error, member_id)
        if not GROUP_MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= GROUP_MAX_SESSION_TIMEOUT_MS:
            return JoinResult(INVALID_SESSION_TIMEOUT, member_id)
        if self.other_group_type(group_id) is not None:  # a share group's id: Kafka 4.2's answer
            return JoinResult(INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER)
        protocols = [(p.name, bytes(p.metadata)) for p in protocols]
        consumer_group = self.consumer.serves_classic(group_id)
        if consumer_group is not None:  # a consumer group with members takes classic members too
            error, member_id, epoch, protocol = self.consumer.classic.join(
                consumer_group, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                rebalance_timeout_ms, protocol_type, protocols, require_known_member_id)
            if error:
                return JoinResult(error, member_id)
            return JoinResult(NONE, member_id, epoch, protocol_type, protocol)
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            if member_id != UNKNOWN_MEMBER:
                return JoinResult(UNKNOWN_MEMBER_ID, member_id)
            group = self.groups[group_id] = Group(group_id)
        if not group.supports(protocol_type, protocols, member_id or None):
            return JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id)
        args = (group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                protocol_type, protocols)
        if member_id == UNKNOWN_MEMBER:
            return self._join_unknown(group, require_known_member_id, supports_skip_assignment, *args)
        return self._join_known(group, member_id, *args)

    def _join_unknown(self, group, require_known, skip_assignment, instance_id, client_id, *rest):
        new_id = f"{instance_id or client_id}-{uuid.uuid4()}"
        if instance_id is not None and instance_id in group.static:
            return self._rejoin_static(group, group.static[instance_id], new_id, skip_assignment, *rest)
        if require_known and instance_id is None:
            # v4+: the member learns its id first; it must come back with it within a session
            group.pending[new_id] = self._loop.call_later(rest[1] / 1000, self._expire_pending, group, new_id)
            return JoinResult(MEMBER_ID_REQUIRED, new_id)
        member = Member(new_id, instance_id, client_id, *rest)
        return self._add_and_rebalance(group, member)

    def _join_known(self, group, member_id, instance_id, client_id, client_host, session_ms, rebalance_ms,
                    protocol_type, protocols):
        if group.is_static_fenced(member_id, instance_id):
            return JoinResult(FENCED_INSTANCE_ID, member_id)
        if member_id in group.pending:
            self._cancel(group.pending.pop(member_id))
            member = Member(member_id, instance_id, client_id, client_host, session_ms, rebalance_ms,
                            protocol_type, protocols)
            return self._add_and_rebalance(group, member)
        member = group.members.get(member_id)
        if member is None:
            return JoinResult(UNKNOWN_MEMBER_ID, member_id)
        member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
        if group.is_(PREPARING_REBALANCE):
            return self._update_and_park(group, member, protocols)
        if group.is_(COMPLETING_REBALANCE) and member.same_protocols(protocols):
            return self._current_join_result(group, member)  # a retried join: same answer again
        if group.is_(STABLE) and member_id != group.leader and member.same_protocols(protocols):
            return self._current_join_result(group, member)  # a follower's rejoin changes nothing
        result = self._update_and_park(group, member, protocols)
        self._prepare_rebalance(group, f"member {member_id} rejoined with new metadata")
        return result

    def _rejoin_static(self, group, old_id, new_id, skip_assignment, client_host, session_ms, rebalance_ms,
                       protocol_type, protocols):
        """A known group.instance.id came back without a member id: it takes over, the old id is fenced."""
        old = group.members[old_id]
        was_leader = group.leader == old_id
        self._answer_join(old, JoinResult(FENCED_INSTANCE_ID, old_id))
        self._answer_sync(old, SyncResult(FENCED_INSTANCE_ID))
        member = group.replace_static(old_id, new_id)
        member.client_host = client_host
        member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
        self._heartbeat(group, member)
        if group.is_(STABLE) and member.same_protocols(protocols):
            if not was_leader:
                return self._current_join_result(group, member)  # no rebalance: it gets its old assignment
            if skip_assignment:  # v9+: the leader learns the members but must not assign again
                result = self._current_join_result(group, member)
                result.skip_assignment = True
                return result
        result = self._update_and_park(group, member, protocols)
        if not group.is_(PREPARING_REBALANCE):
            self._prepare_rebalance(group, f"static member {member.group_instance_id} rejoined")
        else:
            self._maybe_complete_join(group)
        return result

    def _add_and_rebalance(self, group, member):
        member.is_new = True
        group.new_member_added = True
        group.add(member)
        future = member.join_future = self._loop.create_future()
        self._heartbeat(group, member)
        if group.is_(PREPARING_REBALANCE):
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        return future

    def _update_and_park(self, group, member, protocols):
        member.protocols = protocols
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(REBALANCE_IN_PROGRESS, member.member_id))  # superseded
        future = member.join_future = self._loop.create_future()
        self._maybe_complete_join(group)
        return future

    def _current_join_result(self, group, member) -> JoinResult:
        self._heartbeat(group, member)
        members = self._member_list(group) if member.member_id == group.leader else []
        return JoinResult(NONE, member.member_id, group.generation, group.protocol_type, group.protocol,
                          group.leader or "", members)

    @staticmethod
    def _member_list(group):
        return [(m.member_id, m.group_instance_id, m.metadata(group.protocol)) for m in group.members.values()]

    # ---- rebalance ------------------------------------------------------------------------

    def _prepare_rebalance(self, group, reason: str) -> None:
        if group.is_(COMPLETING_REBALANCE):  # assignments being synced are void now
            for m in group.members.values():
                m.assignment = b""
                self._answer_sync(m, SyncResult(REBALANCE_IN_PROGRESS))
        self._cancel(group.join_timer)
        initial = group.is_(EMPTY)
        group.transition(PREPARING_REBALANCE)
        log.info("group %s: preparing rebalance (generation %d): %s", group.group_id, group.generation, reason)
        delay = self.config.group_initial_rebalance_delay_ms
        if initial and delay > 0:
            group.new_member_added = False
            group.initial_deadline = time.monotonic() + max(group.rebalance_timeout_ms, delay) / 1000
            group.join_timer = self._loop.call_later(delay / 1000, self._initial_delay_done, group)
        else:
            group.initial_deadline = 0.0
            group.join_timer = self._loop.call_later(group.rebalance_timeout_ms / 1000, self._complete_join, group)
            self._maybe_complete_join(group)

    def _initial_delay_done(self, group) -> None:
        remaining = group.initial_deadline - time.monotonic()
        if group.new_member_added and remaining > 0:  # members are still arriving: wait a bit more
            group.new_member_added = False
            wait = min(self.config.group_initial_rebalance_delay_ms / 1000, remaining)
            group.join_timer = self._loop.call_later(wait, self._initial_delay_done, group)
            return
        group.initial_deadline = 0.0
        self._complete_join(group)

    def _maybe_complete_join(self, group) -> None:
        if group.is_(PREPARING_REBALANCE) and not group.initial_deadline and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group) -> None:
        if not group.is_(PREPARING_REBALANCE):
            return
        self._cancel(group.join_timer)
        group.join_timer = None
        group.initial_deadline = 0.0
        for m in list(group.members.values()):  # dynamic members that did not rejoin are out
            if m.join_future is None and m.group_instance_id is None:
                self._remove_member(group, m, "did not rejoin in time", rebalance=False)
        group.init_next_generation()
        if group.is_(EMPTY):
            log.info("group %s is empty (generation %d)", group.group_id, group.generation)
            return
        log.info("group %s: generation %d with %d members, protocol %s, leader %s", group.group_id,
                 group.generation, len(group.members), group.protocol, group.leader)
        members = self._member_list(group)
        for m in group.members.values():
            if m.join_future is not None:
                self._answer_join(m, JoinResult(NONE, m.member_id, group.generation, group.protocol_type,
                                                group.protocol, group.leader,
                                                members if m.member_id == group.leader else []))
            self._heartbeat(group, m)

    # ---- SyncGroup ------------------------------------------------------------------------

    def sync(self, group_id, generation, member_id, group_instance_id, protocol_type, protocol, assignments):
        error = self.check_available(group_id)
        if error:
            return SyncResult(error)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            error, assignment = self.consumer.classic.sync(consumer_group, member_id, group_instance_id, generation,
                                                           protocol_type, protocol)
            return SyncResult(error, protocol_type, protocol, assignment)
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return SyncResult(UNKNOWN_MEMBER_ID)
        error = self._validate_member(group, member_id, group_instance_id, generation)
        if error:
            return SyncResult(error)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol is not None and protocol != group.protocol):
            return SyncResult(INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[member_id]
        if group.is_(PREPARING_REBALANCE):
            return SyncResult(REBALANCE_IN_PROGRESS)
        self._heartbeat(group, member)
        if group.is_(STABLE):
            return SyncResult(NONE, group.protocol_type, group.protocol, member.assignment)
        # CompletingRebalance: wait for the leader's assignment
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(REBALANCE_IN_PROGRESS))
        future = member.sync_future = self._loop.create_future()
        if member_id == group.leader:
            given = {}
            for a in assignments:  # the leader's bytes are relayed as they are: the assignor owns them
                given[a.member_id] = bytes(a.assignment)
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            group.transition(STABLE)
            for m in group.members.values():
                self._answer_sync(m, SyncResult(NONE, group.protocol_type, group.protocol, m.assignment))
        return future

    def _validate_member(self, group, member_id, group_instance_id, generation) -> int:
        if group.is_static_fenced(member_id, group_instance_id):
            return FENCED_INSTANCE_ID
        if member_id not in group.members:
            return UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ILLEGAL_GENERATION
        return NONE

    # ---- Heartbeat ------------------------------------------------------------------------

    def heartbeat(self, group_id, member_id, group_instance_id, generation) -> int:
        error = self.check_available(group_id)
        if error:
            return error
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            return self.consumer.classic.heartbeat(consumer_group, member_id, group_instance_id, generation)
        group = self.groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        if group.is_(DEAD):
            return COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, member_id, group_instance_id, generation)
        if error:
            return error
        self._heartbeat(group, group.members[member_id])
        return REBALANCE_IN_PROGRESS if group.is_(PREPARING_REBALANCE) else NONE

    # ---- LeaveGroup -----------------------------------------------------------------------

    def leave(self, group_id, identities) -> tuple[int, list[int]]:
        """``identities``: (member id, group instance id) pairs; (top-level error, per-member errors)."""
        error = self.check_available(group_id)
        if error:
            return error, [error] * len(identities)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            return NONE, self.consumer.classic.leave(consumer_group, identities)
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return NONE, [UNKNOWN_MEMBER_ID] * len(identities)
        errors = []
        for member_id, instance_id in identities:
            if instance_id is not None:
                current = group.static.get(instance_id)
                if current is None:
                    errors.append(UNKNOWN_MEMBER_ID)
                    continue
                if member_id != UNKNOWN_MEMBER and member_id != current:
                    errors.append(FENCED_INSTANCE_ID)
                    continue
                member_id = current
            if member_id in group.pending:
                self._cancel(group.pending.pop(member_id))
                errors.append(NONE)
                self._maybe_complete_join(group)
                continue
            member = group.members.get(member_id)
            if member is None:
                errors.append(UNKNOWN_MEMBER_ID)
                continue
            self._remove_member(group, member, "left the group")
            errors.append(NONE)
        return NONE, errors

    # ---- membership changes ---------------------------------------------------------------

    def _heartbeat(self, group, member) -> None:
        """(Re)start the member's session timer."""
        self._cancel(member.expiry)
        member.expiry = self._loop.call_later(member.session_timeout_ms / 1000, self._expire_member,
                                              group, member.member_id)

    def _expire_member(self, group, member_id) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        waiting = (member.join_future is not None and not member.join_future.done()) or \
                  (member.sync_future is not None and not member.sync_future.done())
        if waiting:  # parked in JoinGroup/SyncGroup: the member is alive, just waiting on us
            self._heartbeat(group, member)
            return
        self._remove_member(group, member, f"session timeout ({member.session_timeout_ms} ms) expired")

    def _expire_pending(self, group, member_id) -> None:
        if group.pending.pop(member_id, None) is not None:
            log.info("group %s: pending member %s never rejoined", group.group_id, member_id)
            self._maybe_complete_join(group)

    def _remove_member(self, group, member, reason: str, rebalance: bool = True) -> None:
        log.info("group %s: removing member %s: %s", group.group_id, member.member_id, reason)
        self._cancel(member.expiry)
        self._answer_join(member, JoinResult(UNKNOWN_MEMBER_ID, member.member_id))
        self._answer_sync(member, SyncResult(UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if not rebalance:
            return
        if group.is_(STABLE) or group.is_(COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} {reason}")
        elif group.is_(PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _maybe_drop(self, group) -> None:
        """Housekeeping: an Empty group with no offsets and nothing pending is forgotten (Dead)."""
        if group.is_(EMPTY) and not group.members and not group.pending and not self.store.has_offsets(group.group_id):
            group.transition(DEAD)
            self.groups.pop(group.group_id, None)

    @staticmethod
    def _answer_join(member, result) -> None:
        if member.join_future is not None:
            if not member.join_future.done():
                member.join_future.set_result(result)
            member.join_future = None

    @staticmethod
    def _answer_sync(member, result) -> None:
        if member.sync_future is not None:
            if not member.sync_future.done():
                member.sync_future.set_result(result)
            member.sync_future = None

    @staticmethod
    def _cancel(handle) -> None:
        if handle is not None:
            handle.cancel()

    # ---- offsets --------------------------------------------------------------------------

    async def commit(self, group_id, generation, member_id, group_instance_id, entries: list[CommitEntry],
                     unknown_group_error: int = ILLEGAL_GENERATION):
        """(top-level error or 0, {(topic, partition): error}). ``unknown_group_error``: the answer to a
        member commit (generation >= 0) for a group that does not exist (OffsetCommit v9+: GROUP_ID_NOT_FOUND)."""
        error = self.check_available(group_id)
        if not error:
            error = self._validate_commit(group_id, generation, member_id, group_instance_id, unknown_group_error)
        if error:
            return error, {(e.topic, e.partition): error for e in entries}
        results, values = self._offset_values(entries, now_ms())
        if values:
            error = await self.store.commit(group_id, values)
            if error:
                results.update({tp: error for tp in values})
            else:
                self.ensure_group(group_id)
        return NONE, results

    def _offset_values(self, entries: list[CommitEntry], now: int):
        """({(topic, partition): error} for entries refused, {(topic, partition): OffsetValue} to store)."""
        results, values = {}, {}
        for e in entries:
            tp = (e.topic, e.partition)
            topic = self.topics.get(e.topic)
            if topic is None or not 0 <= e.partition < topic.partitions:
                results[tp] = UNKNOWN_TOPIC_OR_PARTITION
            elif e.metadata is not None and len(e.metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                results[tp] = OFFSET_METADATA_TOO_LARGE
            else:
                values[tp] = records.OffsetValue(e.offset, e.leader_epoch, e.metadata or "", now,
                                                 e.expire_timestamp)
                results[tp] = NONE
        return results, values

    def _validate_commit(self, group_id, generation, member_id, group_instance_id, unknown_group_error) -> int:
        """Kafka's classic validateOffsetCommit: the member, then its generation, then the group's state."""
        if group_id in self.consumer.groups:  # KIP-848: the generation is the member epoch
            return self.consumer.validate_offset_commit(group_id, member_id, generation)
        group = self.groups.get(group_id)
        if group is None:
            # no group: only a simple commit (no generation) may create one
            return NONE if generation < 0 else unknown_group_error
        if group.is_(DEAD):
            return COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.is_(EMPTY):
            return NONE
        if group.is_static_fenced(member_id, group_instance_id):
            return FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ILLEGAL_GENERATION
        if group.is_(COMPLETING_REBALANCE):
            return REBALANCE_IN_PROGRESS
        self._heartbeat(group, member)
        return NONE

    async def commit_transactional(self, group_id, transactional_id, producer_id, producer_epoch, generation,
                                   member_id, group_instance_id, entries: list[CommitEntry]):
        """TxnOffsetCommit: {(topic, partition): error}; the offsets stay pending until the marker."""
        error = self.check_available(group_id)
        group = self.groups.get(group_id)
        if not error and group_id in self.consumer.groups:  # KIP-848: the generation is the member epoch
            error = self.consumer.validate_offset_commit(group_id, member_id, generation)
        elif not error:  # Kafka adds an unknown group as Empty: it accepts commits without a generation
            error = self._validate_txn_commit(group or Group(group_id), generation, member_id, group_instance_id)
        if error:
            return {(e.topic, e.partition): error for e in entries}
        results, values = self._offset_values(entries, now_ms())
        if values:
            error = await self.store.commit_transactional(group_id, transactional_id, producer_id, producer_epoch,
                                                          values)
            results.update({tp: error for tp in values})
            if not error:
                self.ensure_group(group_id)
        return results

    def _validate_txn_commit(self, group, generation, member_id, group_instance_id) -> int:
        """Kafka's transactional validateOffsetCommit: members are checked only when the request names one."""
        if group.is_(DEAD):
            return COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.is_(EMPTY):
            return NONE
        if generation < 0 and member_id == UNKNOWN_MEMBER and group_instance_id is None:
            return NONE  # older TxnOffsetCommit versions carry no member
        if group_instance_id is not None:
            current = group.static.get(group_instance_id)
            if current is None:
                return UNKNOWN_MEMBER_ID
            if current != member_id:
                return FENCED_INSTANCE_ID
        elif member_id not in group.members:
            return UNKNOWN_MEMBER_ID
        return ILLEGAL_GENERATION if generation != group.generation else NONE

    def ensure_group(self, group_id) -> None:
        """The group has offsets here (committed, or pending in a transaction): it exists, Empty at least."""
        if group_id not in self.groups and group_id not in self.consumer.groups and self.store.owns(group_id):
            self.groups[group_id] = Group(group_id)  # a simple (standalone) group: offsets only

    def fetch_offsets(self, group_id, partitions=None, require_stable: bool = False):
        """(error, {(topic, partition): OffsetValue}, unstable partitions) for the asked partitions (None:
        all committed); with ``require_stable`` a partition with a commit under way is unstable instead."""
        error = self.check_available(group_id)
        if error:
            return error, {}, set()
        found = self.store.fetch(group_id, partitions)
        unstable = set()
        if require_stable:
            unstable = {tp for tp in (found if partitions is None else partitions)
                        if self.store.is_unstable(group_id, tp)}
            found = {tp: v for tp, v in found.items() if tp not in unstable}
        return NONE, found, unstable

    # ---- admin ----------------------------------------------------------------------------

    def list_groups(self) -> list:
        """Classic groups (Group) and consumer groups (ConsumerGroup): both have group_id, state, group_type."""
        return [g for g in self.groups.values() if not g.is_(DEAD)] + list(self.consumer.groups.values())

    def drop_classic(self, group_id) -> None:
        """An Empty classic group becomes a consumer group: the classic one is forgotten (offsets stay)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            self._release(group)

    def retire_classic(self, group_id) -> None:
        """A classic group with members became a consumer group: members parked in JoinGroup or
        SyncGroup hear REBALANCE_IN_PROGRESS and join the consumer group."""
        self._release(self.groups.pop(group_id), REBALANCE_IN_PROGRESS)

    def adopt_classic(self, group: Group, reason: str) -> None:
        """A consumer group turned back into this classic group: its members rejoin in a rebalance."""
        self.groups[group.group_id] = group
        for m in group.members.values():
            self._heartbeat(group, m)
        self._prepare_rebalance(group, reason)

    def describe(self, group_id) -> Group | None:
        return self.groups.get(group_id)

    async def delete_group(self, group_id) -> int:
        error = self.check_available(group_id)
        if error:
            return error
        if group_id in self.consumer.groups:
            return await self.consumer.delete_group(group_id)
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return GROUP_ID_NOT_FOUND
        if not group.is_(EMPTY) or group.members or group.pending:
            return NON_EMPTY_GROUP
        error = await self.store.delete(group_id)
        if error:
            return error
        group.transition(DEAD)
        del self.groups[group_id]
        log.info("deleted group %s", group_id)
        return NONE

    async def _expire_offsets_forever(self) -> None:
        """offsets.retention.minutes: the offsets of groups without members expire."""
        retention_ms = self.config.offsets_retention_minutes * 60_000
        while True:
            await asyncio.sleep(OFFSETS_RETENTION_CHECK_INTERVAL_MS / 1000)
            try:
                removed = await self.store.expire(now_ms(), retention_ms, self._emptiness)
                if removed:
                    log.info("expired %d committed offsets", removed)
                for group in list(self.groups.values()):
                    self._maybe_drop(group)
                self.consumer.maybe_drop(self.store.has_offsets)
            except Exception:  # never let housekeeping die silently
                log.exception("offset expiration failed")

    def _emptiness(self, group_id):
        if group_id in self.consumer.groups:
            return self.consumer.emptiness(group_id)
        group = self.groups.get(group_id)
        if group is None:
            return True, 0
        return group.is_(EMPTY) and not group.members, group.state_since_ms
