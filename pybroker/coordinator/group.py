"""One classic consumer group: its members, generation, chosen protocol, leader and state.

States as Kafka's GroupMetadata: Empty (no members; may still own committed offsets),
PreparingRebalance (waiting for members to (re)join), CompletingRebalance (joined; waiting for
the leader's SyncGroup), Stable (assignment handed out) and Dead (deleted or unloaded).
This module holds the state and its pure rules; timers and request flow live in coordinator.py.
Protocol metadata and assignments are opaque bytes: the client-side assignors own their format.
"""
import time
from collections import Counter
from dataclasses import dataclass, field

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
CLASSIC = "classic"  # the group type ListGroups v5+ names (KIP-848 groups are "consumer")

# the transitions Kafka allows (target -> allowed previous states)
_VALID_PREVIOUS = {
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    EMPTY: {PREPARING_REBALANCE},
    DEAD: {STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD},
}


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]      # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    join_future: object = None               # an asyncio Future while the member awaits JoinGroup
    sync_future: object = None               # an asyncio Future while it awaits SyncGroup
    expiry: object = None                    # the session timer (asyncio TimerHandle)
    is_new: bool = False                     # joined during this rebalance (initial-delay rule)

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def same_protocols(self, protocols) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]


class IllegalStateTransition(RuntimeError):
    pass


@dataclass
class Group:
    group_type = CLASSIC  # a class constant, not a field
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, object] = field(default_factory=dict)   # v4+ ids handed out (MEMBER_ID_REQUIRED) -> timer
    static: dict[str, str] = field(default_factory=dict)       # group.instance.id -> member id
    state_since_ms: int = field(default_factory=now_ms)
    join_timer: object = None
    new_member_added: bool = False
    initial_deadline: float = 0.0  # monotonic end of the initial-rebalance-delay extension window

    # ---- state --------------------------------------------------------------------------

    def transition(self, target: str) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state} -> {target}")
        self.state = target
        self.state_since_ms = now_ms()

    def is_(self, state: str) -> bool:
        return self.state == state

    @property
    def is_empty(self) -> bool:
        return not self.members

    # ---- members ------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static.get(member.group_instance_id) == member_id:
            del self.static[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def replace_static(self, old_id: str, new_id: str) -> Member:
        """A static member rejoined with a new member id: the old id is fenced, its state moves over."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static[member.group_instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        return member

    def is_static_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """The instance id is known here under another member id: the caller is a zombie."""
        if group_instance_id is None:
            return False
        current = self.static.get(group_instance_id)
        return current is not None and current != member_id

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_future is not None for m in self.members.values())

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ---- protocols ----------------------------------------------------------------------

    def candidate_protocols(self, excluding: str | None = None) -> list[str] | None:
        """Protocol names every member (but ``excluding``) supports, in the first member's order."""
        others = [m for m in self.members.values() if m.member_id != excluding]
        if not others:
            return None  # anything goes
        common = set(others[0].protocol_names)
        for m in others[1:]:
            common &= set(m.protocol_names)
        return [n for n in others[0].protocol_names if n in common]

    def supports(self, protocol_type: str, protocols, member_id: str | None = None) -> bool:
        if not protocol_type or not protocols:
            return False
        if self.members and protocol_type != self.protocol_type:  # as Kafka: its own member may not change it
            return False
        candidates = self.candidate_protocols(excluding=member_id)
        if candidates is None:
            return True
        if protocol_type != self.protocol_type:
            return False
        return any(name in candidates for name, _ in protocols)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred common protocol; the most votes win."""
        candidates = self.candidate_protocols()
        votes = Counter(next(n for n in m.protocol_names if n in candidates) for m in self.members.values())
        best = max(votes.values())
        return next(n for n in candidates if votes.get(n) == best)  # ties: the first candidate

    # ---- generations --------------------------------------------------------------------

    def init_next_generation(self) -> None:
        """After a rebalance's join phase: next generation, protocol, CompletingRebalance (or Empty)."""
        self.generation += 1
        if self.members:
            self.protocol = self.select_protocol()
            if self.leader not in self.members:
                self.leader = next(iter(self.members))
            self.transition(COMPLETING_REBALANCE)
        else:
            self.protocol = None
            self.leader = None
            self.transition(EMPTY)
        for m in self.members.values():
            m.is_new = False
        self.new_member_added = False
