"""One consumer group of the KIP-848 protocol: members, epochs, target assignment, reconciliation.

The group epoch moves when membership or subscriptions change; the assignor then computes a
target assignment stamped with that epoch (the assignment epoch). Each member walks to its target
on its own heartbeats: partitions it must give up are first revoked (the member keeps its epoch
and state UNREVOKED_PARTITIONS until a heartbeat shows it no longer owns them), and a partition
goes to its new member only once its previous owner released it (UNRELEASED_PARTITIONS meanwhile).
There is never a stop-the-world: members not involved in a move keep consuming.
This module holds the state and its pure rules; timers and the request flow live in
consumer_coordinator.py. Membership lives in memory (after a coordinator move, members rejoin).
Members that speak the classic protocol (JoinGroup/SyncGroup/Heartbeat) carry ClassicProtocol:
they are reconciled on their joins instead of on heartbeats (classic_members.py).
"""
import time
from dataclasses import dataclass, field

Assignment = dict  # topic id (UUID) -> frozenset[int]

# member states (Kafka's MemberState)
STABLE = "stable"
UNREVOKED_PARTITIONS = "unrevoked_partitions"
UNRELEASED_PARTITIONS = "unreleased_partitions"

# group states as ConsumerGroupDescribe / ListGroups name them
EMPTY, ASSIGNING, RECONCILING, GROUP_STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"
GROUP_TYPE = "consumer"
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2


@dataclass
class ClassicProtocol:
    """What a member that joined with JoinGroup told us: its session timeout and its protocols."""
    session_timeout_ms: int
    protocols: list  # (name, subscription bytes) in the member's order of preference

    @property
    def names(self) -> list:
        return [name for name, _ in self.protocols]


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    subscribed_names: tuple = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    state: str = STABLE
    member_epoch: int = 0
    previous_epoch: int = -1
    assigned: Assignment = field(default_factory=dict)   # usable now
    revoking: Assignment = field(default_factory=dict)   # still owned, being revoked
    session_timer: object = None
    revocation_timer: object = None
    classic: ClassicProtocol | None = None  # set for members using JoinGroup/SyncGroup/Heartbeat
    rejoin_timer: object = None  # classic members: the rebalance timeout to rejoin or to sync

    def owns(self) -> Assignment:
        """Partitions this member still holds: assigned plus those being revoked."""
        return merge(self.assigned, self.revoking)


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)   # member id -> target assignment
    owners: dict[tuple, str] = field(default_factory=dict)        # (topic id, partition) -> member holding it
    static: dict[str, str] = field(default_factory=dict)          # instance id -> member id
    subscribed: dict = field(default_factory=dict)                # topic name -> (topic id, partitions)
    assignor: str = ""
    metadata_checked: float = 0.0                                 # monotonic time topics were last looked at
    regex_topics: dict[str, frozenset] = field(default_factory=dict)  # regex -> topic names it matched
    regex_key: tuple | None = None  # (topic names version, regexes) regex_topics was matched for
    empty_since_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    group_type = GROUP_TYPE      # class constants that ListGroups reads, as on classic groups
    protocol_type = GROUP_TYPE

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != STABLE:
                return RECONCILING
        return GROUP_STABLE

    def bump_epoch(self) -> None:
        self.group_epoch += 1

    # ---- membership -----------------------------------------------------------------------

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.instance_id is not None and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]
        self._set_owned(member, {}, {})
        self.target.pop(member_id, None)
        return member

    def classic_only_except(self, member_id: str) -> bool:
        """Every member but ``member_id`` uses the classic protocol (and there is at least one)."""
        others = [m for mid, m in self.members.items() if mid != member_id]
        return bool(others) and all(m.classic is not None for m in others)

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Some partition of ``member``'s target is still held by another member."""
        target = self.target.get(member.member_id, {})
        return any(self.owners.get((t, p), member.member_id) != member.member_id
                   for t, ps in target.items() for p in ps - member.assigned.get(t, frozenset()))

    def subscriptions_by_member(self) -> dict[str, set]:
        """member id -> topic names it subscribes to (names and regex matches)."""
        return {m.member_id: set(m.subscribed_names) | set(self.regex_topics.get(m.subscribed_regex or "", ()))
                for m in self.members.values()}

    # ---- reconciliation ---------------------------------------------------------------------

    def reconcile(self, member: ConsumerMember, owned: Assignment | None) -> None:
        """Walk ``member`` toward its target; ``owned``: what its heartbeat says it holds (None: unsaid)."""
        epoch = member.member_epoch
        if member.state == UNREVOKED_PARTITIONS:
            if owned is None or overlaps(owned, member.revoking):
                return  # still revoking: nothing moves until it lets go
            self._set_owned(member, member.assigned, {})
            epoch += 1  # it let go: should it have to revoke again, that is under a new epoch
        elif member.state == STABLE and member.member_epoch == self.assignment_epoch:
            return
        self._next_assignment(member, owned, epoch)

    def _next_assignment(self, member: ConsumerMember, owned: Assignment | None, epoch: int) -> None:
        target = self.target.get(member.member_id, {})
        kept, revoke, gained, waiting = {}, {}, {}, False
        for t in set(member.assigned) | set(target):
            have, want = member.assigned.get(t, frozenset()), target.get(t, frozenset())
            if have & want:
                kept[t] = have & want
            if have - want:
                revoke[t] = have - want
            free = frozenset(p for p in want - have if self.owners.get((t, p), member.member_id) == member.member_id)
            if free:
                gained[t] = free
            waiting = waiting or len(free) < len(want - have)
        if revoke and (owned is None or overlaps(owned, revoke)):
            member.state = UNREVOKED_PARTITIONS  # no new epoch until the member lets go
            self._set_owned(member, kept, revoke)
            self._set_epoch(member, epoch)
            return
        self._set_owned(member, merge(kept, gained), {})
        member.state = UNRELEASED_PARTITIONS if waiting else STABLE
        self._set_epoch(member, self.assignment_epoch)

    @staticmethod
    def _set_epoch(member: ConsumerMember, epoch: int) -> None:
        if member.member_epoch != epoch:
            member.previous_epoch, member.member_epoch = member.member_epoch, epoch

    def _set_owned(self, member: ConsumerMember, assigned: Assignment, revoking: Assignment) -> None:
        for tp in pairs(member.owns()):
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]
        member.assigned = {t: ps for t, ps in assigned.items() if ps}
        member.revoking = {t: ps for t, ps in revoking.items() if ps}
        for tp in pairs(member.owns()):
            self.owners[tp] = member.member_id


def merge(a: Assignment, b: Assignment) -> Assignment:
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return out


def overlaps(a: Assignment, b: Assignment) -> bool:
    return any(a.get(t, frozenset()) & ps for t, ps in b.items())


def is_subset(a: Assignment, b: Assignment) -> bool:
    return all(ps <= b.get(t, frozenset()) for t, ps in a.items())


def same(a: Assignment, b: Assignment) -> bool:
    return {t: ps for t, ps in a.items() if ps} == {t: ps for t, ps in b.items() if ps}


def pairs(a: Assignment):
    return [(t, p) for t, ps in a.items() for p in ps]
