"""Server-side assignors of the consumer group protocol (KIP-848): ``uniform`` and ``range``.

An assignor maps the group's members to partitions. Input: ``members`` (member id ->
``MemberSpec``: the topic ids it subscribes to and its current target assignment) and ``topics``
(topic id -> partition count, the subscribed topics that exist). Output: member id ->
``Assignment`` (topic id -> frozenset of partitions, empty topics left out). Every partition of a
subscribed topic goes to exactly one member subscribed to it; pure functions, no I/O.
"""
from dataclasses import dataclass, field
from uuid import UUID

from pybroker.assign_balance import balance

Assignment = dict  # topic id (UUID) -> frozenset[int]


@dataclass
class MemberSpec:
    topics: frozenset                                   # subscribed topic ids
    current: Assignment = field(default_factory=dict)   # the member's previous target assignment
    instance_id: str | None = None
    rack_id: str | None = None


def uniform(members: dict[str, MemberSpec], topics: dict[UUID, int]) -> dict[str, Assignment]:
    """Balanced and sticky: partition counts differ by at most one between members that could swap,
    and a member keeps what it had whenever that does not unbalance the group."""
    ids = sorted(members)
    owned: dict[str, set] = {m: set() for m in ids}
    subscribers = {t: [m for m in ids if t in members[m].topics] for t in topics}
    partitions = [(t, p) for t in sorted(topics, key=str) if subscribers[t] for p in range(topics[t])]
    if not ids or not partitions:
        return {m: {} for m in ids}
    cap = -(-len(partitions) // len(ids))  # ceil: no member keeps more than a balanced share
    taken = set()
    for m in ids:  # stickiness: keep what is still valid, up to the cap
        for t, parts in sorted(members[m].current.items(), key=lambda kv: str(kv[0])):
            if t not in topics or t not in members[m].topics:
                continue
            for p in sorted(parts):
                if p < topics[t] and (t, p) not in taken and len(owned[m]) < cap:
                    owned[m].add((t, p))
                    taken.add((t, p))
    free = [tp for tp in partitions if tp not in taken]
    free.sort(key=lambda tp: len(subscribers[tp[0]]))  # the most constrained topics first
    for tp in free:
        best = min(subscribers[tp[0]], key=lambda m: (len(owned[m]), m))
        owned[best].add(tp)
    balance(owned, lambda tp: subscribers[tp[0]], rank=lambda m: m,
            give_first=lambda _, tp: (str(tp[0]), tp[1]))
    return {m: _as_assignment(owned[m]) for m in ids}


def range_(members: dict[str, MemberSpec], topics: dict[UUID, int]) -> dict[str, Assignment]:
    """Per topic, contiguous ranges in member order (instance id, else member id): co-partitioned topics
    line up; the first ``partitions % members`` members get one more."""
    ids = sorted(members)
    owned: dict[str, set] = {m: set() for m in ids}
    order = sorted(ids, key=lambda m: (members[m].instance_id or m, m))
    for t in sorted(topics, key=str):
        subs = [m for m in order if t in members[m].topics]
        if not subs:
            continue
        share, extra = divmod(topics[t], len(subs))
        start = 0
        for i, m in enumerate(subs):
            size = share + (1 if i < extra else 0)
            owned[m].update((t, p) for p in range(start, start + size))
            start += size
    return {m: _as_assignment(owned[m]) for m in ids}


def _as_assignment(pairs) -> Assignment:
    out: dict = {}
    for t, p in pairs:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


ASSIGNORS = {"uniform": uniform, "range": range_}
# Kafka's class names for the same assignors (group.consumer.assignors accepts either)
CLASS_NAMES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
               "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


def assignor_name(text: str) -> str | None:
    """The assignor a config entry names, or None when unknown."""
    name = CLASS_NAMES.get(text.strip(), text.strip())
    return name if name in ASSIGNORS else None
