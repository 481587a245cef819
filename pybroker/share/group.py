"""One share group (KIP-932) on its coordinator: members, epochs and the assignment, as ShareGroupHeartbeat
and ShareGroupDescribe see them. Pure: the caller passes the clock (``now_ms``) and the cluster's topics.

The group epoch moves on every change of membership, of subscriptions or of the subscribed topics
(created, deleted, more partitions); the assignor (assignor.py) then computes the target at once, stamped
with that epoch (the assignment epoch). Unlike a consumer group there is nothing to revoke: records are
acquired one delivery at a time under locks, so a member simply takes its target on its next heartbeat,
and only a member whose partitions changed moves to the new epoch, answered with its whole assignment
(Kafka moves every member to it, with partitions only when they changed: here epoch and partitions go together).
Member ids are the client's own (v1: librdkafka and Kafka's clients send a UUID string). Epoch rules as
Kafka's: 0 joins (or rejoins: an existing member may always come back with 0, KAFKA-19233), -1 leaves,
otherwise the member's epoch or its previous one (it missed our last answer); anything else is fenced.
Membership lives in memory: after a coordinator move members hear UNKNOWN_MEMBER_ID and join again.
"""
from dataclasses import dataclass, field

from pybroker.coordinator.consumer_coordinator import HeartbeatResult  # the answer KIP-848 heartbeats get
from pybroker.protocol.errors import (FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED, INVALID_REQUEST, NONE,
                                      UNKNOWN_MEMBER_ID)
from pybroker.share.assignor import assign

EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"  # Kafka's ShareGroupState names
GROUP_TYPE = "share"
ASSIGNOR = "simple"
JOIN_EPOCH, LEAVE_EPOCH = 0, -1


@dataclass(frozen=True)
class MemberDescription:
    """One member as ShareGroupDescribe shows it."""
    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    subscribed_topic_names: tuple
    assignment: dict  # topic id -> sorted list of partitions


@dataclass
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: tuple = ()  # sorted, no duplicates
    member_epoch: int = 0
    previous_epoch: int = -1
    assignment: dict = field(default_factory=dict)  # topic id -> frozenset: what the member was last told
    last_heartbeat_ms: int = 0


class ShareGroup:
    group_type = protocol_type = GROUP_TYPE  # read by ListGroups, as on the other group types
    assignor_name = ASSIGNOR

    def __init__(self, group_id: str, *, session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 5000,
                 max_size: int = 200):
        self.group_id = group_id
        self.session_timeout_ms = session_timeout_ms  # plain attributes: group configs may change them
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.topic_metadata: dict = {}  # subscribed topic name -> (topic id, partitions) the target is for
        self.target: dict[str, dict] = {}  # member id -> topic id -> frozenset of partitions
        self._members: dict[str, ShareMember] = {}
        self._holders: dict | None = None  # (topic id, partition) -> member ids; rebuilt after changes

    @property
    def state(self) -> str:
        return STABLE if self._members else EMPTY

    @property
    def size(self) -> int:
        return len(self._members)

    def member(self, member_id: str) -> ShareMember | None:
        return self._members.get(member_id)

    # ---- ShareGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(self, member_id: str, member_epoch: int, rack_id: str | None, subscribed_topic_names,
                  now_ms: int, topics: dict, *, client_id: str = "", client_host: str = "") -> HeartbeatResult:
        """One ShareGroupHeartbeat. ``subscribed_topic_names``: None when unchanged; ``topics``: topic name
        -> (topic id, partition count) of the cluster's topics now."""
        invalid = _invalid(member_id, member_epoch, rack_id, subscribed_topic_names)
        if invalid:
            return HeartbeatResult(INVALID_REQUEST, invalid)
        if member_epoch == LEAVE_EPOCH:
            if not self.remove_member(member_id, topics):
                return HeartbeatResult(UNKNOWN_MEMBER_ID, self._unknown(member_id))
            return HeartbeatResult(NONE, None, member_id, LEAVE_EPOCH)
        member = self._members.get(member_id)
        changed = member is None
        if member is None:
            if member_epoch != JOIN_EPOCH:
                return HeartbeatResult(UNKNOWN_MEMBER_ID, self._unknown(member_id))
            if len(self._members) >= self.max_size:
                return HeartbeatResult(GROUP_MAX_SIZE_REACHED, f"Share group {self.group_id} is full: "
                                                               f"it has {self.max_size} members already.")
            member = self._members[member_id] = ShareMember(member_id)
        elif member_epoch != JOIN_EPOCH:
            fenced = _fenced(member, member_epoch)
            if fenced:
                return HeartbeatResult(FENCED_MEMBER_EPOCH, fenced)
        member.client_id, member.client_host = client_id, client_host
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed_topic_names is not None:
            names = tuple(sorted(set(subscribed_topic_names)))
            changed = changed or names != member.subscribed_names
            member.subscribed_names = names
        self._maybe_reassign(topics, changed)
        member.last_heartbeat_ms = now_ms
        moved = self._reconcile(member)
        # the whole assignment goes out on a join and whenever the epoch the member knows changes
        full = moved or member_epoch in (JOIN_EPOCH, member.previous_epoch)
        return HeartbeatResult(NONE, None, member_id, member.member_epoch, self.heartbeat_interval_ms,
                               _listed(member.assignment) if full else None)

    def _unknown(self, member_id: str) -> str:
        return f"Member {member_id} is not in share group {self.group_id}."

    def _reconcile(self, member: ShareMember) -> bool:
        """Hand ``member`` its target: True when that moved it to the assignment epoch."""
        target = self.target.get(member.member_id, {})
        if member.member_epoch != JOIN_EPOCH and member.assignment == target:
            return False
        member.previous_epoch, member.member_epoch = member.member_epoch, self.assignment_epoch
        member.assignment = target
        self._holders = None
        return True

    def _maybe_reassign(self, topics: dict | None, changed: bool) -> None:
        """Bump the group epoch and assign again when membership, subscriptions or their topics changed."""
        names = self.subscribed_topics()
        source = self.topic_metadata if topics is None else topics
        metadata = {t: tuple(source[t]) for t in sorted(names) if t in source}
        if not changed and metadata == self.topic_metadata:
            return
        self.topic_metadata = metadata
        self.group_epoch += 1
        subscriptions = {m.member_id: set(m.subscribed_names) for m in self._members.values()}
        self.target = {m: {t: frozenset(ps) for t, ps in got.items() if ps}
                       for m, got in assign(subscriptions, metadata, self.target).items()}
        self.assignment_epoch = self.group_epoch
        self._holders = None

    # ---- membership and sessions -----------------------------------------------------------

    def remove_member(self, member_id: str, topics: dict | None = None) -> bool:
        """Drop a member (it left, its session ran out, an admin removed it): its partitions go to others."""
        if self._members.pop(member_id, None) is None:
            return False
        self.target.pop(member_id, None)
        self._maybe_reassign(topics, True)
        return True

    def expire(self, now_ms: int) -> list:
        """Remove the members whose session ran out (no heartbeat for ``session_timeout_ms``); their ids."""
        gone = sorted(m.member_id for m in self._members.values()
                      if now_ms >= m.last_heartbeat_ms + self.session_timeout_ms)
        for member_id in gone:
            self.remove_member(member_id)
        return gone

    def next_deadline(self) -> int | None:
        """When the next session runs out (ms, the caller's clock), None with no members."""
        if not self._members:
            return None
        return min(m.last_heartbeat_ms for m in self._members.values()) + self.session_timeout_ms

    # ---- what others ask -------------------------------------------------------------------------

    def members(self) -> list:
        """MemberDescription of every member, by member id (ShareGroupDescribe)."""
        return [MemberDescription(m.member_id, m.rack_id, m.client_id, m.client_host, m.member_epoch,
                                  m.subscribed_names, _listed(m.assignment))
                for _, m in sorted(self._members.items())]

    def subscribed_topics(self) -> frozenset:
        """Names of the topics some member subscribes to (existing or not)."""
        return frozenset(t for m in self._members.values() for t in m.subscribed_names)

    def assigned(self, topic_id, partition: int) -> list:
        """Member ids that may fetch ``partition``: it is in their target or in what they were last told
        (so a member keeps fetching until its heartbeat tells it otherwise)."""
        if self._holders is None:
            holders: dict = {}
            for m in self._members.values():
                for got in (m.assignment, self.target.get(m.member_id, {})):
                    for t, ps in got.items():
                        for p in ps:
                            holders.setdefault((t, p), set()).add(m.member_id)
            self._holders = holders
        return sorted(self._holders.get((topic_id, partition), ()))


def _invalid(member_id, member_epoch: int, rack_id, subscribed) -> str | None:
    """Kafka's request checks: the message of an INVALID_REQUEST answer, or None."""
    if not member_id or not member_id.strip():
        return "MemberId must not be empty."
    if rack_id is not None and not rack_id.strip():
        return "RackId must not be empty when given."
    if member_epoch == JOIN_EPOCH and not subscribed:
        return "A join (MemberEpoch 0) must name the SubscribedTopicNames."
    if member_epoch < LEAVE_EPOCH:
        return f"MemberEpoch {member_epoch} is invalid."
    return None


def _fenced(member: ShareMember, epoch: int) -> str | None:
    """Kafka's member epoch rule: the current epoch, or the previous one when the member missed our answer."""
    if epoch > member.member_epoch:
        return (f"Member epoch {epoch} is ahead of the coordinator's ({member.member_epoch}): "
                f"the member must give up its partitions and join again.")
    if epoch < member.member_epoch and epoch != member.previous_epoch:
        return (f"Member epoch {epoch} is behind the coordinator's ({member.member_epoch}) and is not its "
                f"previous one: the member must give up its partitions and join again.")
    return None


def _listed(assignment: dict) -> dict:
    return {t: sorted(ps) for t, ps in assignment.items() if ps}
