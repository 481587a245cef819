"""Partition assignors of the classic consumer group protocol, and its subscription/assignment bytes.

The group leader decodes every member's ``ConsumerProtocolSubscription``, runs the assignor the
group agreed on and sends each member a ``ConsumerProtocolAssignment`` through SyncGroup. The
assignors follow Kafka's Java clients:

- ``range`` (RangeAssignor): per topic, members sorted (static members by group.instance.id
  first, then by member id) get consecutive ranges; the first ``partitions % members`` get one more.
- ``roundrobin`` (RoundRobinAssignor): all partitions sorted by topic and number dealt in turn to
  the sorted members, skipping members not subscribed to the partition's topic.
- ``cooperative-sticky`` (CooperativeStickyAssignor): a balanced assignment that keeps each
  member's previously owned partitions where balance allows; a partition that moves between two
  members is left out of this round (its old owner revokes it and rejoins, and the follow-up
  rebalance hands it to the new owner), which is the classic cooperative (incremental) protocol.
"""
import struct
from dataclasses import dataclass, field

from pybroker.assign_balance import balance
from pybroker.client.types import TopicPartition

EAGER, COOPERATIVE = "eager", "cooperative"
SUBSCRIPTION_VERSION = 3  # topics, user data, owned partitions, generation, rack
ASSIGNMENT_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass
class Subscription:
    """One member's ConsumerProtocolSubscription (plus its group.instance.id from JoinGroup)."""
    topics: list
    user_data: bytes | None = None
    owned_partitions: list = field(default_factory=list)  # TopicPartitions
    generation_id: int = -1
    rack_id: str | None = None
    version: int = SUBSCRIPTION_VERSION
    group_instance_id: str | None = None


@dataclass
class Assignment:
    partitions: list  # TopicPartitions
    user_data: bytes | None = None
    version: int = ASSIGNMENT_VERSION


# ---- wire format (non-flexible Kafka structs with a leading int16 version) ---------------------

def _string(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    b = s.encode()
    return _I16.pack(len(b)) + b


def _bytes(b: bytes | None) -> bytes:
    return _I32.pack(-1) if b is None else _I32.pack(len(b)) + bytes(b)


def _topic_partitions(tps) -> bytes:
    by_topic: dict = {}
    for tp in tps:
        by_topic.setdefault(tp[0], []).append(tp[1])
    out = [_I32.pack(len(by_topic))]
    for topic in sorted(by_topic):
        parts = sorted(by_topic[topic])
        out.append(_string(topic) + _I32.pack(len(parts)) + struct.pack(f">{len(parts)}i", *parts))
    return b"".join(out)


class _Reader:
    """Bounds-checked reads; every overrun is a ValueError naming what was being read."""

    def __init__(self, data):
        self.view = memoryview(bytes(data))
        self.pos = 0

    def remaining(self) -> int:
        return len(self.view) - self.pos

    def _take(self, n: int, what: str):
        if n < 0 or self.pos + n > len(self.view):
            raise ValueError(f"truncated consumer protocol data reading {what}")
        chunk = self.view[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def i16(self, what="int16") -> int:
        return _I16.unpack(self._take(2, what))[0]

    def i32(self, what="int32") -> int:
        return _I32.unpack(self._take(4, what))[0]

    def string(self, what="string") -> str | None:
        n = self.i16(what)
        return None if n < 0 else bytes(self._take(n, what)).decode("utf-8", "replace")

    def bytes_(self, what="bytes") -> bytes | None:
        n = self.i32(what)
        return None if n < 0 else bytes(self._take(n, what))

    def array_len(self, what: str) -> int:
        n = self.i32(what)
        if n > self.remaining():  # every element takes at least one byte
            raise ValueError(f"implausible {what} count {n}")
        return max(n, 0)

    def topic_partitions(self, what: str) -> list:
        out = []
        for _ in range(self.array_len(what)):
            topic = self.string(what)
            for _ in range(self.array_len(what)):
                out.append(TopicPartition(topic, self.i32(what)))
        return out


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    out = [_I16.pack(version), _I32.pack(len(sub.topics))]
    out += [_string(t) for t in sub.topics]
    out.append(_bytes(sub.user_data))
    if version >= 1:
        out.append(_topic_partitions(sub.owned_partitions))
    if version >= 2:
        out.append(_I32.pack(sub.generation_id))
    if version >= 3:
        out.append(_string(sub.rack_id))
    return b"".join(out)


def decode_subscription(data) -> Subscription:
    """A member's subscription; fields of newer versions than we know are ignored."""
    r = _Reader(data)
    version = r.i16("version")
    if version < 0:
        raise ValueError(f"bad subscription version {version}")
    topics = [r.string("topics") for _ in range(r.array_len("topics"))]
    sub = Subscription(topics=[t for t in topics if t], user_data=r.bytes_("user data"), version=version)
    if version >= 1 and r.remaining():
        sub.owned_partitions = r.topic_partitions("owned partitions")
    if version >= 2 and r.remaining() >= 4:
        sub.generation_id = r.i32("generation")
    if version >= 3 and r.remaining() >= 2:
        sub.rack_id = r.string("rack")
    return sub


def encode_assignment(a: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    return _I16.pack(version) + _topic_partitions(a.partitions) + _bytes(a.user_data)


def decode_assignment(data) -> Assignment:
    if not data:  # an empty assignment (e.g. a member that subscribes to nothing the leader knows)
        return Assignment([], None, 0)
    r = _Reader(data)
    version = r.i16("version")
    if version < 0:
        raise ValueError(f"bad assignment version {version}")
    partitions = r.topic_partitions("assigned partitions")
    user_data = r.bytes_("user data") if r.remaining() >= 4 else None
    return Assignment(partitions, user_data, version)


# ---- assignors ---------------------------------------------------------------------------------

def _member_order(subscriptions: dict) -> list:
    """Java's MemberInfo order: static members (by instance id) first, then by member id."""
    def key(member_id):
        instance = subscriptions[member_id].group_instance_id
        return (0, instance, member_id) if instance is not None else (1, "", member_id)
    return sorted(subscriptions, key=key)


class Assignor:
    """``assign(partitions_per_topic, subscriptions) -> {member_id: [TopicPartition]}``."""
    name = ""
    rebalance_protocols = (EAGER,)

    def subscription_user_data(self, topics, generation: int) -> bytes | None:
        return None

    def assign(self, partitions_per_topic: dict, subscriptions: dict) -> dict:
        raise NotImplementedError


class RangeAssignor(Assignor):
    name = "range"

    def assign(self, partitions_per_topic, subscriptions):
        out = {m: [] for m in subscriptions}
        members = _member_order(subscriptions)
        for topic in sorted(partitions_per_topic):
            consumers = [m for m in members if topic in subscriptions[m].topics]
            n = partitions_per_topic[topic]
            if not consumers or n <= 0:
                continue
            per, extra = divmod(n, len(consumers))
            for i, member in enumerate(consumers):
                start = per * i + min(i, extra)
                length = per + (1 if i < extra else 0)
                out[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
        return out


class RoundRobinAssignor(Assignor):
    name = "roundrobin"

    def assign(self, partitions_per_topic, subscriptions):
        out = {m: [] for m in subscriptions}
        members = _member_order(subscriptions)
        if not members:
            return out
        i = 0
        for topic in sorted(partitions_per_topic):
            if not any(topic in subscriptions[m].topics for m in members):
                continue
            for p in range(partitions_per_topic[topic]):
                while topic not in subscriptions[members[i % len(members)]].topics:
                    i += 1
                out[members[i % len(members)]].append(TopicPartition(topic, p))
                i += 1
        return out


class CooperativeStickyAssignor(Assignor):
    name = "cooperative-sticky"
    rebalance_protocols = (COOPERATIVE, EAGER)

    def subscription_user_data(self, topics, generation):
        return _I32.pack(generation)  # as Java's: the generation, for members on subscription v0/v1

    def assign(self, partitions_per_topic, subscriptions):
        previous = _previous_owners(partitions_per_topic, subscriptions)
        target = sticky_assignment(partitions_per_topic, subscriptions, previous)
        # a partition changing hands is withheld until its old owner has revoked it and rejoined
        return {m: [tp for tp in tps if previous.get(tp, m) == m] for m, tps in target.items()}


def _member_generation(sub: Subscription) -> int:
    if sub.generation_id >= 0:
        return sub.generation_id
    if sub.user_data is not None and len(sub.user_data) == 4:  # Java's CooperativeStickyAssignor data
        return _I32.unpack(sub.user_data)[0]
    return -1


def _previous_owners(partitions_per_topic: dict, subscriptions: dict) -> dict:
    """{tp: member} from owned partitions that still exist and are still subscribed; a partition
    claimed by several members goes to the claim of the highest generation (none on a tie)."""
    claims: dict = {}
    for member, sub in subscriptions.items():
        generation = _member_generation(sub)
        for tp in sub.owned_partitions:
            if tp.topic in sub.topics and 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                claims.setdefault(tp, []).append((generation, member))
    owners = {}
    for tp, cl in claims.items():
        cl.sort(reverse=True)
        if len(cl) == 1 or cl[0][0] > cl[1][0]:
            owners[tp] = cl[0][1]
    return owners


def sticky_assignment(partitions_per_topic: dict, subscriptions: dict, previous: dict) -> dict:
    """A balanced assignment moving as few previously owned partitions as possible."""
    members = _member_order(subscriptions)
    rank = {m: i for i, m in enumerate(members)}
    eligible = {}
    for topic in sorted(partitions_per_topic):
        subscribers = [m for m in members if topic in subscriptions[m].topics]
        if subscribers:
            for p in range(partitions_per_topic[topic]):
                eligible[TopicPartition(topic, p)] = subscribers
    out = {m: [] for m in members}
    unassigned = []
    for tp in eligible:
        owner = previous.get(tp)
        if owner is not None:
            out[owner].append(tp)
        else:
            unassigned.append(tp)
    # members with equal subscriptions end up with floor or ceil of the fair share; an owner keeps
    # at most the ceiling before new partitions are dealt
    if members:
        share = -(-len(eligible) // len(members))
        for m in members:
            if len(out[m]) > share:
                kept = sorted(out[m])
                out[m], surplus = kept[:share], kept[share:]
                unassigned.extend(surplus)
    # the most constrained partitions first, each to the eligible member holding the fewest
    unassigned.sort(key=lambda tp: (len(eligible[tp]), tp))
    for tp in unassigned:
        best = min(eligible[tp], key=lambda m: (len(out[m]), rank[m]))
        out[best].append(tp)
    owned = {m: set(tps) for m, tps in out.items()}
    # a donor gives away first what it did not own before (stickiness)
    balance(owned, eligible.__getitem__, rank.__getitem__, lambda donor, tp: (previous.get(tp) == donor, tp))
    return {m: sorted(tps) for m, tps in owned.items()}


ASSIGNORS = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}
_JAVA_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


def assignor_for(name) -> Assignor:
    """An assignor by Kafka name ("range", ...), Java class name, or an Assignor instance."""
    if isinstance(name, Assignor):
        return name
    key = _JAVA_NAMES.get(name, str(name).strip().lower())
    cls = ASSIGNORS.get(key)
    if cls is None:
        raise ValueError(f"unknown partition assignment strategy {name!r} "
                         f"(known: {', '.join(ASSIGNORS)})")
    return cls()


def rebalance_protocol(assignors) -> str:
    """COOPERATIVE only when every configured assignor supports it (as Java picks it)."""
    return COOPERATIVE if assignors and all(COOPERATIVE in a.rebalance_protocols for a in assignors) else EAGER
