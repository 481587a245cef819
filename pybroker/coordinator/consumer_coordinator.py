"""The consumer group protocol (KIP-848) on the event loop: ConsumerGroupHeartbeat and its timers.

A heartbeat (1) validates the request, (2) finds or creates the group (a classic group of that id
converts: an Empty one always, one with members as ``group.consumer.migration.policy`` allows, see
group_migration.py; classic members then stay in it, classic_members.py),
(3) joins, updates or fences the member (its epoch must be the current one, or the previous one
when the member only missed our last answer), (4) bumps the group epoch when membership,
subscriptions or the subscribed topics' partitions changed, (5) recomputes the target assignment
with the group's server assignor when the group epoch is ahead of it, and (6) reconciles the
member toward its target (consumer_group.py). Timers: a session timeout per member
(``group.consumer.session.timeout.ms``) and, while a member revokes, its rebalance timeout: a
member that does not let go in time is fenced. Regex subscriptions (RE2, full match, topic_regex.py)
are resolved against the non-internal topics, again only when the topic names or the group's regexes
changed; a group's topics (new ones, more partitions, deleted ones) are looked at again on a heartbeat
at most every ``METADATA_REFRESH_S`` seconds.
Membership lives in memory; committed offsets are durable (offsets.py). After a coordinator move
members hear UNKNOWN_MEMBER_ID and rejoin with epoch 0.
"""
import asyncio
import logging
import time
from dataclasses import dataclass

from pybroker.ids import random_uuid, uuid_to_base64
from pybroker.coordinator import assignors_server as assignors
from pybroker.coordinator import consumer_protocol, group_migration, topic_regex
from pybroker.coordinator.classic_members import ClassicMembers
from pybroker.coordinator.group import now_ms
from pybroker.coordinator.heartbeat_request import HeartbeatRequest
from pybroker.coordinator.consumer_group import (LEAVE_EPOCH, STATIC_LEAVE_EPOCH, UNREVOKED_PARTITIONS,
                                                 ConsumerGroup, ConsumerMember, is_subset, same)
from pybroker.protocol.errors import (FENCED_INSTANCE_ID, FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND,
                                      GROUP_MAX_SIZE_REACHED, ILLEGAL_GENERATION, INVALID_REGULAR_EXPRESSION,
                                      INVALID_REQUEST, NONE, NON_EMPTY_GROUP, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID,
                                      UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, UNSUPPORTED_VERSION)

log = logging.getLogger(__name__)

FIRST_CONSUMER_COMMIT_VERSION = 9  # OffsetCommit: members of consumer groups send v9+ (Kafka refuses older)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})  # never matched by a regex
METADATA_REFRESH_S = 1.0  # how stale a group's view of its topics (and regex matches) may get


@dataclass
class HeartbeatResult:
    error: int = NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict | None = None  # topic id -> its partitions (a set or a sorted list); None: unchanged


class ConsumerGroupCoordinator:
    def __init__(self, parent):
        """``parent``: the GroupCoordinator (readiness, ownership, the classic groups, topics)."""
        self.parent = parent
        self.config = parent.config
        self.groups: dict[str, ConsumerGroup] = {}
        self.regexes = topic_regex.TopicRegexes()  # shared by the groups: matched once per set of topic names
        self._names_checked = 0.0  # monotonic time the topic names were last handed to ``regexes``
        self.classic = ClassicMembers(self)  # JoinGroup/SyncGroup/Heartbeat/LeaveGroup of classic members

    @property
    def assignor_names(self) -> tuple:
        return self.config.group_consumer_assignors

    @property
    def session_timeout_ms(self) -> int:
        return self.config.group_consumer_session_timeout_ms

    @property
    def heartbeat_interval_ms(self) -> int:
        return self.config.group_consumer_heartbeat_interval_ms

    @property
    def max_size(self) -> int:
        return self.config.group_consumer_max_size

    @property
    def migration_policy(self) -> str:
        return self.config.group_consumer_migration_policy

    # ---- lifecycle ------------------------------------------------------------------------

    def release(self, group_id: str) -> None:
        """Stop coordinating ``group_id`` here (shutdown, or its offsets partition moved)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            for m in group.members.values():
                _cancel_timers(m)

    def release_all(self) -> None:
        for group_id in list(self.groups):
            self.release(group_id)

    # ---- ConsumerGroupHeartbeat ---------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest, version: int, client_id: str, client_host: str) -> HeartbeatResult:
        invalid = self._invalid(req, version)
        if invalid:
            return HeartbeatResult(INVALID_REQUEST, invalid)
        error = self.parent.check_available(req.group_id)
        if error:
            return HeartbeatResult(error)
        if req.server_assignor is not None and req.server_assignor not in self.assignor_names:
            return HeartbeatResult(UNSUPPORTED_ASSIGNOR, f"Assignor {req.server_assignor} is not supported. "
                                   f"Supported assignors: {', '.join(self.assignor_names)}.")
        if req.subscribed_regex:
            invalid_regex = topic_regex.invalid_message(req.subscribed_regex)
            if invalid_regex:
                return HeartbeatResult(INVALID_REGULAR_EXPRESSION, invalid_regex)
        if self.parent.other_group_type(req.group_id) is not None:  # a share group's id, as Kafka 4.2 answers
            return HeartbeatResult(GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(req)
        group, error, message = self._group_for(req)
        if error:
            return HeartbeatResult(error, message)
        if req.member_epoch == 0:
            member, error, message = self._join(group, req)
        else:
            member, error, message = self._known_member(group, req)
        if error:
            if not group.members and not group.group_epoch:  # created by this refused join: forget it
                self.groups.pop(group.group_id, None)
            return HeartbeatResult(error, message)
        before = dict(member.assigned)
        self.update_member(group, member, req, client_id, client_host)
        self.maybe_new_target(group)
        owned = {} if req.member_epoch == 0 else req.owned
        group.reconcile(member, owned)
        self._maybe_revocation_timer(group, member)
        self.touch(group, member)
        # as Kafka: the assignment goes out on a full request (join, or a client resending everything after
        # an error) or when it changed
        full = req.member_epoch == 0 or (req.rebalance_timeout_ms != -1 and req.subscribed_names is not None
                                         and req.owned is not None)
        give = full or not same(before, member.assigned)
        return HeartbeatResult(NONE, None, member.member_id, member.member_epoch, self.heartbeat_interval_ms,
                               dict(member.assigned) if give else None)

    @staticmethod
    def _invalid(req: HeartbeatRequest, version: int) -> str | None:
        """Kafka's request checks, in Kafka's order: why this heartbeat is an INVALID_REQUEST, or None.
        Any RebalanceTimeoutMs but -1 is taken (0 or less: a member must revoke at once)."""
        if _blank(req.member_id) and (version >= 1 or req.member_epoch > 0 or req.member_epoch == LEAVE_EPOCH):
            return "MemberId can't be empty."
        if _blank(req.group_id):
            return "GroupId can't be empty."
        if req.instance_id is not None and _blank(req.instance_id):
            return "InstanceId can't be empty."
        if req.rack_id is not None and _blank(req.rack_id):
            return "RackId can't be empty."
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                return "RebalanceTimeoutMs must be provided in first request."
            if req.owned is None or req.owned:  # an entry naming no partition is still an entry
                return "TopicPartitions must be empty when (re-)joining."
            if not req.subscribed_names and not req.subscribed_regex:
                return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
        elif req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
            return "InstanceId can't be null."
        elif req.member_epoch < STATIC_LEAVE_EPOCH:
            return f"MemberEpoch is invalid: {req.member_epoch}."
        return None

    def _group_for(self, req: HeartbeatRequest):
        """(group, error, message): the consumer group, created on a join (an Empty classic group converts)."""
        group = self.groups.get(req.group_id)
        if group is not None:
            return group, NONE, None
        classic = self.parent.groups.get(req.group_id)
        if classic is not None and (classic.members or classic.pending):
            group = self._upgrade(classic) if req.member_epoch == 0 else None
            if group is None:
                return None, GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group."
            return group, NONE, None
        if req.member_epoch != 0:  # membership is not kept across coordinator moves: rejoin
            return None, UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}."
        if classic is not None:
            self.parent.drop_classic(req.group_id)
            log.info("group %s: converted from an empty classic group to a consumer group", req.group_id)
        group = self.groups[req.group_id] = ConsumerGroup(req.group_id)
        return group, NONE, None

    def _upgrade(self, classic) -> ConsumerGroup | None:
        """A classic group with members becomes a consumer group (online upgrade), or None when it cannot."""
        why = None
        if not group_migration.upgrade_enabled(self.migration_policy):
            why = f"group.consumer.migration.policy is {self.migration_policy}"
        elif classic.protocol_type != consumer_protocol.PROTOCOL_TYPE:
            why = f"its protocol type is {classic.protocol_type!r}, not the consumer protocol"
        elif len(classic.members) > self.max_size:
            why = f"it has more members than group.consumer.max.size ({self.max_size})"
        if why is None:
            try:
                group = group_migration.to_consumer_group(classic, self.parent.topics)
            except consumer_protocol.MalformedProtocol as exc:
                why = f"a member's consumer protocol metadata is unreadable: {exc}"
        if why is not None:
            log.info("group %s: not upgraded to a consumer group: %s", classic.group_id, why)
            return None
        self.parent.retire_classic(classic.group_id)
        self.groups[group.group_id] = group
        for m in group.members.values():
            self.touch(group, m)
        log.info("group %s: upgraded from a classic group with %d members to a consumer group (epoch %d)",
                 group.group_id, len(group.members), group.group_epoch)
        return group

    def _downgrade(self, group: ConsumerGroup, leaving: ConsumerMember) -> bool:
        """The last consumer-protocol member goes and classic members remain: back to a classic group."""
        if not group_migration.downgrade_enabled(self.migration_policy) or \
                not group.classic_only_except(leaving.member_id):
            return False
        classic = group_migration.to_classic_group(group, leaving.member_id, self.topic_names())
        self.release(group.group_id)
        self.parent.adopt_classic(classic, f"downgraded from a consumer group: member {leaving.member_id} left")
        return True

    def _join(self, group: ConsumerGroup, req: HeartbeatRequest):
        member_id = req.member_id or uuid_to_base64(random_uuid())  # v0 lets the coordinator choose, as Kafka
        if req.instance_id is not None and req.instance_id in group.static:
            old = group.members[group.static[req.instance_id]]
            if old.member_epoch != STATIC_LEAVE_EPOCH:
                return None, UNRELEASED_INSTANCE_ID, (f"Instance id {req.instance_id} still belongs to member "
                                                      f"{old.member_id}: it has not left with epoch -2.")
            return self.replace_static(group, old, member_id), NONE, None
        member = group.members.get(member_id)
        if member is not None:  # a known member at epoch 0: only one that missed the answer to its join
            return self._check_epoch(member, req)
        if len(group.members) >= self.max_size:
            return (None, GROUP_MAX_SIZE_REACHED,
                    f"The consumer group has reached its maximum capacity of {self.max_size} members.")
        member = ConsumerMember(member_id, req.instance_id)
        group.add(member)  # its subscription, set next, moves the group epoch
        log.info("group %s: member %s joined", group.group_id, member_id)
        return member, NONE, None

    def replace_static(self, group: ConsumerGroup, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """A static member that left with epoch -2 came back: the new id takes its epoch and partitions."""
        _cancel_timers(old)
        assigned, revoking, target = old.assigned, old.revoking, group.target.get(old.member_id, {})
        epoch = old.previous_epoch if old.member_epoch == STATIC_LEAVE_EPOCH else old.member_epoch
        group.remove(old.member_id)
        member = ConsumerMember(member_id, old.instance_id, old.rack_id, rebalance_timeout_ms=old.rebalance_timeout_ms,
                                subscribed_names=old.subscribed_names, subscribed_regex=old.subscribed_regex,
                                server_assignor=old.server_assignor, state=old.state,
                                member_epoch=epoch, previous_epoch=old.previous_epoch)
        group.add(member)
        group._set_owned(member, assigned, revoking)
        group.target[member_id] = target
        return member

    def _known_member(self, group: ConsumerGroup, req: HeartbeatRequest):
        member = group.members.get(req.member_id)
        if member is None or member.classic is not None:
            return None, UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {group.group_id}."
        return self._check_epoch(member, req)

    @staticmethod
    def _check_epoch(member: ConsumerMember, req: HeartbeatRequest):
        """Kafka's member epoch rule: the current epoch, or the previous one when the member only missed
        our last answer (it owns no more than it was given); anything else is fenced."""
        if req.member_epoch == member.member_epoch:
            return member, NONE, None
        if req.member_epoch > member.member_epoch:
            return None, FENCED_MEMBER_EPOCH, (
                f"Member epoch {req.member_epoch} is ahead of the coordinator's ({member.member_epoch}): "
                f"the member must give up its partitions and join again.")
        owned = {} if req.member_epoch == 0 else req.owned  # a join reports nothing owned
        if req.member_epoch == member.previous_epoch and owned is not None and is_subset(owned, member.assigned):
            return member, NONE, None  # it missed our last answer: it gets it again
        return None, FENCED_MEMBER_EPOCH, (
            f"Member epoch {req.member_epoch} is behind the coordinator's ({member.member_epoch}): "
            f"the member must give up its partitions and join again.")

    def update_member(self, group, member, req, client_id, client_host) -> None:
        member.client_id, member.client_host = client_id, client_host
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor
        changed = False
        if req.subscribed_names is not None and tuple(sorted(req.subscribed_names)) != member.subscribed_names:
            member.subscribed_names, changed = tuple(sorted(req.subscribed_names)), True
        if req.subscribed_regex is not None and (req.subscribed_regex or None) != member.subscribed_regex:
            member.subscribed_regex, changed = req.subscribed_regex or None, True
        if changed or self._refresh_metadata(group, force=changed):
            group.bump_epoch()

    def _refresh_metadata(self, group: ConsumerGroup, force: bool) -> bool:
        """Resolve regexes and the subscribed topics' ids and partition counts, at most every
        METADATA_REFRESH_S unless ``force``d; True when they changed since the last target assignment."""
        now = time.monotonic()
        if not force and now - group.metadata_checked < METADATA_REFRESH_S:
            return False
        group.metadata_checked = now
        topics = self.parent.topics
        regexes = frozenset(m.subscribed_regex for m in group.members.values() if m.subscribed_regex)
        if regexes or group.regex_topics:
            self._maybe_new_topic_names(force)
            if group.regex_key != (self.regexes.version, regexes):  # re-match only when topics or regexes moved
                group.regex_topics = self.regexes.matches(regexes)
                group.regex_key = (self.regexes.version, regexes)
        subscribed = {}
        for names in group.subscriptions_by_member().values():
            for name in names:
                t = topics.get(name)
                if t is not None and t.partitions > 0:
                    subscribed[name] = (t.topic_id, t.partitions)
        if subscribed == group.subscribed:
            return False
        group.subscribed = subscribed
        return True

    def _maybe_new_topic_names(self, force: bool) -> None:
        """Hand the current topic names to the regex matcher, at most every METADATA_REFRESH_S unless
        ``force``d (a subscription changed: it must see the topics of now)."""
        now = time.monotonic()
        if force or now - self._names_checked >= METADATA_REFRESH_S:
            self._names_checked = now
            self.regexes.update(n for n in self.parent.topics if n not in INTERNAL_TOPICS)

    def maybe_new_target(self, group: ConsumerGroup) -> None:
        """The group epoch moved past the target assignment: compute the next one."""
        if group.group_epoch == group.assignment_epoch:
            return
        self._refresh_metadata(group, force=True)
        ids = {name: tid for name, (tid, _) in group.subscribed.items()}
        specs = {mid: assignors.MemberSpec(frozenset(ids[n] for n in names if n in ids), group.target.get(mid, {}),
                                           group.members[mid].instance_id, group.members[mid].rack_id)
                 for mid, names in group.subscriptions_by_member().items()}
        group.assignor = self._choose_assignor(group)
        counts = {tid: n for tid, n in group.subscribed.values()}
        group.target = assignors.ASSIGNORS[group.assignor](specs, counts)
        group.assignment_epoch = group.group_epoch
        log.info("group %s: target assignment at epoch %d by %s for %d members", group.group_id,
                 group.assignment_epoch, group.assignor, len(specs))

    def _choose_assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for (ties: the configured order), else the first configured."""
        votes = {}
        for m in group.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return self.assignor_names[0]
        return max(self.assignor_names, key=lambda n: (votes.get(n, 0), -self.assignor_names.index(n)))

    # ---- leaving, timers ----------------------------------------------------------------------

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self.groups.get(req.group_id)
        if group is None:
            return HeartbeatResult(GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found.")
        if req.instance_id is None:
            member = group.members.get(req.member_id)
        else:
            member = group.members.get(group.static.get(req.instance_id, ""))
            if member is not None and member.member_id != req.member_id:
                return HeartbeatResult(FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                                       f"{req.instance_id} is not the member that uses it.")
        if member is None or member.classic is not None:
            return HeartbeatResult(UNKNOWN_MEMBER_ID,
                                   f"Member {req.member_id} is not a member of group {req.group_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:  # a static member steps out; its partitions wait for it
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_epoch, member.member_epoch = member.member_epoch, STATIC_LEAVE_EPOCH
            return HeartbeatResult(NONE, None, member.member_id, STATIC_LEAVE_EPOCH, 0)  # gone: no interval
        self.remove_member(group, member, "left the group")
        return HeartbeatResult(NONE, None, member.member_id, LEAVE_EPOCH, 0)

    def remove_member(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> None:
        """Fence or drop a member: its partitions are free at once and the group moves to a new epoch."""
        if group.members.get(member.member_id) is not member:
            return
        if self._downgrade(group, member):
            return
        _cancel_timers(member)
        group.remove(member.member_id)
        group.bump_epoch()
        log.info("group %s: removing member %s (group epoch %d): %s", group.group_id, member.member_id,
                 group.group_epoch, reason)
        if group.members:
            self.maybe_new_target(group)
        else:
            group.assignment_epoch = group.group_epoch
            group.subscribed, group.regex_topics, group.regex_key = {}, {}, None
            group.empty_since_ms = now_ms()

    def touch(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        _cancel(member.session_timer)
        timeout_ms = self.session_timeout_ms if member.classic is None else member.classic.session_timeout_ms
        member.session_timer = self.call_later(timeout_ms / 1000, group, member, "session timeout expired")

    def call_later(self, delay_s: float, group: ConsumerGroup, member: ConsumerMember, reason: str):
        """A timer that fences ``member`` with ``reason`` unless cancelled."""
        return asyncio.get_running_loop().call_later(delay_s, self._expire, group, member, reason)

    def _maybe_revocation_timer(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """A member that starts revoking gets its rebalance timeout to let go (Kafka's revocation timeout)."""
        if member.state != UNREVOKED_PARTITIONS:
            _cancel(member.revocation_timer)
            member.revocation_timer = None
        elif member.revocation_timer is None and member.rebalance_timeout_ms != -1:
            member.revocation_timer = self.call_later(
                max(0, member.rebalance_timeout_ms) / 1000, group, member,
                f"did not revoke its partitions within {member.rebalance_timeout_ms} ms")

    def _expire(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> None:
        if self.groups.get(group.group_id) is group:
            self.remove_member(group, member, reason)

    # ---- offsets, admin -------------------------------------------------------------------------

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int,
                               version: int | None = None) -> int:
        """OffsetCommit/TxnOffsetCommit for a consumer group: the member, then (OffsetCommit, ``version``)
        v9+, then its current epoch (STALE_MEMBER_EPOCH otherwise, as Kafka: never FENCED_MEMBER_EPOCH)."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return NONE  # a simple commit (admin tools, manual assignment) to an Empty group
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if member.classic is not None:  # classic members commit as in a classic group, any version
            return ILLEGAL_GENERATION if member_epoch != member.member_epoch else NONE
        if version is not None and version < FIRST_CONSUMER_COMMIT_VERSION:
            return UNSUPPORTED_VERSION
        return STALE_MEMBER_EPOCH if member_epoch != member.member_epoch else NONE

    def refuses_old_commit(self, group_id: str, member_id: str, member_epoch: int, version: int) -> bool:
        """An OffsetCommit below v9 from a member of a consumer group: Kafka answers UNSUPPORTED_VERSION."""
        return group_id in self.groups and \
            self.validate_offset_commit(group_id, member_id, member_epoch, version) == UNSUPPORTED_VERSION

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+ of a consumer group: no member and a negative epoch is an admin read; else the
        member's current epoch."""
        group = self.groups.get(group_id)
        if group is None or (member_epoch < 0 and not member_id):
            return NONE
        member = group.members.get(member_id or "")
        if member is None:
            return UNKNOWN_MEMBER_ID
        return STALE_MEMBER_EPOCH if member_epoch != member.member_epoch else NONE

    def serves_classic(self, group_id: str) -> ConsumerGroup | None:
        """A classic JoinGroup for ``group_id``: the consumer group with members that takes it; an
        Empty consumer group is forgotten so a classic group can take its place (offsets stay)."""
        group = self.groups.get(group_id)
        if group is None or group.members:
            return group
        self.release(group_id)
        return None

    async def delete_group(self, group_id: str) -> int:
        group = self.groups[group_id]
        if group.members:
            return NON_EMPTY_GROUP
        error = await self.parent.store.delete(group_id)
        if error:
            return error
        if self.groups.get(group_id) is group:
            del self.groups[group_id]
        log.info("deleted consumer group %s", group_id)
        return NONE

    def emptiness(self, group_id: str):
        """(has no members, since when in ms): offsets.retention.minutes runs from then."""
        group = self.groups[group_id]
        return not group.members, group.empty_since_ms

    def maybe_drop(self, has_offsets) -> None:
        """Housekeeping: an Empty consumer group whose offsets are gone is forgotten."""
        for group_id in [g for g, group in self.groups.items() if not group.members and not has_offsets(g)]:
            self.release(group_id)

    def topic_names(self) -> dict:
        """topic id -> name, for descriptions."""
        return {t.topic_id: name for name, t in self.parent.topics.items()}


def _cancel_timers(member: ConsumerMember) -> None:
    for handle in (member.session_timer, member.revocation_timer, member.rejoin_timer):
        _cancel(handle)


def _cancel(handle) -> None:
    if handle is not None:
        handle.cancel()


def _blank(value: str | None) -> bool:
    """Kafka's empty string check: nothing but whitespace (Java's trim) counts as empty."""
    return not (value or "").strip()
