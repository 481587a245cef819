"""Classic-protocol members of a consumer group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup
served by a KIP-848 group, as Kafka 4.0 does (so old and new consumers share a group while it is
upgraded or downgraded one consumer at a time).

A classic member's subscription comes from its JoinGroup metadata; the group's server assignor
assigns it like any member, and it is reconciled on each JoinGroup (the partitions it reports
still owning stand for what a heartbeat would say). The JoinGroup answer is immediate: the
generation is the member's epoch, no leader, nobody runs a client-side assignor; SyncGroup hands
the member its assigned partitions in the consumer protocol's format. A Heartbeat answers
REBALANCE_IN_PROGRESS whenever the member should join again: the group epoch moved past it, it has
partitions to give up, or partitions it waits for were released. Timers: the session timeout the
member joined with, and its rebalance timeout both to sync after a join and to rejoin when asked.
"""
import logging

from pybroker.ids import random_uuid, uuid_to_base64
from pybroker.coordinator import consumer_protocol as cp
from pybroker.coordinator.heartbeat_request import HeartbeatRequest
from pybroker.coordinator.consumer_group import (UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS, ClassicProtocol,
                                                 ConsumerMember)
from pybroker.protocol.errors import (FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, ILLEGAL_GENERATION,
                                      INCONSISTENT_GROUP_PROTOCOL, MEMBER_ID_REQUIRED, NONE, REBALANCE_IN_PROGRESS,
                                      UNKNOWN_MEMBER_ID)

log = logging.getLogger(__name__)

UNKNOWN_MEMBER = ""


class ClassicMembers:
    def __init__(self, consumer):
        """``consumer``: the ConsumerGroupCoordinator whose groups these members join."""
        self.consumer = consumer

    # ---- JoinGroup ------------------------------------------------------------------------

    def join(self, group, member_id, instance_id, client_id, client_host, session_ms, rebalance_ms,
             protocol_type, protocols, require_known_member_id):
        """(error, member id, member epoch, protocol name)."""
        unknown = member_id == UNKNOWN_MEMBER
        if unknown:
            member_id = uuid_to_base64(random_uuid())
        if member_id not in group.members and len(group.members) >= self.consumer.max_size:
            return GROUP_MAX_SIZE_REACHED, member_id, -1, None
        if not self._supports(group, protocol_type, protocols):
            return INCONSISTENT_GROUP_PROTOCOL, member_id, -1, None
        if require_known_member_id and unknown and instance_id is None:
            return MEMBER_ID_REQUIRED, member_id, -1, None  # v4+: the member comes back with this id
        try:
            sub = cp.decode_subscription(protocols[0][1])
        except cp.MalformedProtocol as exc:
            log.info("group %s: member %s sent an unreadable subscription: %s", group.group_id, member_id, exc)
            return INCONSISTENT_GROUP_PROTOCOL, member_id, -1, None
        member, error = self._member_for(group, member_id, instance_id, unknown)
        if error:
            return error, member_id, -1, None
        member.classic = ClassicProtocol(session_ms, protocols)
        req = HeartbeatRequest(group.group_id, member.member_id, member.member_epoch, instance_id,
                               rack_id=sub.rack_id or None, rebalance_timeout_ms=rebalance_ms,
                               subscribed_names=sub.topics)
        self.consumer.update_member(group, member, req, client_id, client_host)
        self.consumer.maybe_new_target(group)
        group.reconcile(member, self._ids(sub.owned))
        self.consumer.touch(group, member)
        self._rejoin_timer(group, member, "did not send SyncGroup within its rebalance timeout")
        return NONE, member.member_id, member.member_epoch, protocols[0][0]

    @staticmethod
    def _supports(group, protocol_type, protocols) -> bool:
        """The consumer protocol, sharing a protocol name with every classic member already in."""
        if protocol_type != cp.PROTOCOL_TYPE or not protocols:
            return False
        names = {name for name, _ in protocols}
        return all(names & set(m.classic.names) for m in group.members.values() if m.classic is not None)

    def _member_for(self, group, member_id, instance_id, unknown):
        """(member, error): the joining member, created when new; a static one replaces its old id."""
        if instance_id is not None and instance_id in group.static:
            old = group.members[group.static[instance_id]]
            if old.member_id == member_id:
                return old, NONE
            if not unknown:
                return None, FENCED_INSTANCE_ID
            return self.consumer.replace_static(group, old, member_id), NONE
        member = group.members.get(member_id)
        if member is not None:
            return (member, NONE) if member.classic is not None else (None, UNKNOWN_MEMBER_ID)
        member = ConsumerMember(member_id, instance_id)
        group.add(member)
        log.info("group %s: classic member %s joined", group.group_id, member_id)
        return member, NONE

    def _ids(self, owned: dict) -> dict:
        """topic name -> partitions, as topic id -> frozenset (unknown topics dropped)."""
        topics = self.consumer.parent.topics
        return {topics[name].topic_id: frozenset(ps) for name, ps in owned.items() if name in topics}

    # ---- SyncGroup, Heartbeat ---------------------------------------------------------------

    def sync(self, group, member_id, instance_id, generation, protocol_type, protocol_name):
        """(error, assignment bytes)."""
        member, error = self._validate(group, member_id, instance_id, generation)
        if error:
            return error, b""
        if (protocol_type is not None and protocol_type != cp.PROTOCOL_TYPE) or \
                (protocol_name is not None and protocol_name != member.classic.names[0]):
            return INCONSISTENT_GROUP_PROTOCOL, b""
        if group.group_epoch > member.member_epoch and member.state != UNREVOKED_PARTITIONS:
            self._rejoin_timer(group, member, "did not rejoin within its rebalance timeout", keep=True)
            return REBALANCE_IN_PROGRESS, b""
        self._cancel_rejoin(member)
        self.consumer.touch(group, member)
        names = self.consumer.topic_names()
        assigned = {names[t]: ps for t, ps in member.assigned.items() if t in names}
        try:
            version = cp.decode_subscription(member.classic.protocols[0][1]).version
        except cp.MalformedProtocol:
            version = 0
        return NONE, cp.encode_assignment(assigned, version)

    def heartbeat(self, group, member_id, instance_id, generation) -> int:
        member, error = self._validate(group, member_id, instance_id, generation)
        if error:
            return error
        self.consumer.touch(group, member)
        if member.member_epoch < group.group_epoch or member.state == UNREVOKED_PARTITIONS or \
                (member.state == UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member)):
            self._rejoin_timer(group, member, "did not rejoin within its rebalance timeout", keep=True)
            return REBALANCE_IN_PROGRESS
        return NONE

    def _validate(self, group, member_id, instance_id, generation):
        """(member, error): the classic member the request names, at its current epoch."""
        if instance_id is not None:
            member = group.members.get(group.static.get(instance_id, ""))
            if member is None:
                return None, UNKNOWN_MEMBER_ID
            if member.member_id != member_id:
                return None, FENCED_INSTANCE_ID
        else:
            member = group.members.get(member_id)
        if member is None or member.classic is None:
            return None, UNKNOWN_MEMBER_ID
        if generation != member.member_epoch:
            return None, ILLEGAL_GENERATION
        return member, NONE

    # ---- LeaveGroup -----------------------------------------------------------------------

    def leave(self, group, identities) -> list:
        """Per (member id, group instance id): its error."""
        errors = []
        for member_id, instance_id in identities:
            if instance_id is not None:
                member = group.members.get(group.static.get(instance_id, ""))
                if member is not None and member_id != UNKNOWN_MEMBER and member.member_id != member_id:
                    errors.append(FENCED_INSTANCE_ID)
                    continue
            else:
                member = group.members.get(member_id)
            if member is None or member.classic is None:
                errors.append(UNKNOWN_MEMBER_ID)
                continue
            self.consumer.remove_member(group, member, "left the group (LeaveGroup)")
            errors.append(NONE)
        return errors

    # ---- timers ---------------------------------------------------------------------------

    def _rejoin_timer(self, group, member, reason: str, keep: bool = False) -> None:
        """Fence ``member`` unless it syncs (after a join) or rejoins (when told) within its rebalance timeout."""
        if keep and member.rejoin_timer is not None:
            return
        self._cancel_rejoin(member)
        member.rejoin_timer = self.consumer.call_later(max(0, member.rebalance_timeout_ms) / 1000, group, member,
                                                       reason)

    @staticmethod
    def _cancel_rejoin(member) -> None:
        if member.rejoin_timer is not None:
            member.rejoin_timer.cancel()
            member.rejoin_timer = None
