"""The server-side assignor of share groups (KIP-932's ``simple``): partitions to members, shared when
members outnumber them.

Share groups have no exclusive ownership: records are handed out one acquisition at a time, so a
partition may go to several members. The rules, as Kafka 4.2's SimpleAssignor:

* every partition of a subscribed topic goes to at least one member subscribed to it;
* while partitions are plenty, each goes to exactly one member and the counts are balanced (equal
  subscriptions: they differ by at most one);
* every member with something to consume gets at least one partition: when members outnumber the
  partitions they can reach, those partitions are shared, each by as even a number of members as can be;
* sticky where balance allows, so acquisition locks are not moved for nothing; deterministic (member
  ids, topic names and partition numbers are the only tie-breaks).

How: (1) each partition keeps one of its current holders (the least loaded) as its exclusive owner and
new partitions go to the least loaded subscriber; (2) load moves along chains "member x owns a
partition of topic t, member y subscribes to t" from a member to any reachable one with two fewer,
until no chain is left (a balanced semi-matching: the best balance the subscriptions allow, not only
the best single moves); (3) members still empty share: first a partition they already had, while it is
shared by fewer than its share of the members, then the reachable partition with the fewest holders.
Unlike Kafka, which gives every partition ceil(members / partitions) holders and so some members two
partitions, (3) keeps every sharing member at one partition and the holder counts within one.
Pure: no I/O, no clock, inputs never changed.
"""
from collections import deque

Part = tuple  # (topic name, partition)


def assign(members: dict, topics: dict, current: dict) -> dict:
    """``members``: member id -> set of subscribed topic names; ``topics``: topic name -> (topic id,
    partition count); ``current``: member id -> {topic id: set of partitions} (what they hold now).
    Returns member id -> {topic id: set of partitions} for every member of ``members`` (empty: nothing)."""
    subs = {m: sorted(t for t in names if t in topics and topics[t][1] > 0) for m, names in members.items()}
    subscribers: dict[str, list] = {}
    for m in sorted(subs):
        for t in subs[m]:
            subscribers.setdefault(t, []).append(m)
    names_by_id = {topics[t][0]: t for t in subscribers}
    held = {m: {(names_by_id[tid], p) for tid, ps in current.get(m, {}).items() if tid in names_by_id
                for p in ps if 0 <= p < topics[names_by_id[tid]][1] and names_by_id[tid] in subs[m]}
            for m in subs}
    owned = _exclusive(subs, subscribers, topics, held)
    _balance(owned, subscribers, held)
    shared = _share(subs, subscribers, topics, held, owned)
    out = {}
    for m in members:
        got: dict = {}
        for t, p in owned[m] | shared.get(m, set()):
            got.setdefault(topics[t][0], set()).add(p)
        out[m] = got
    return out


def _exclusive(subs, subscribers, topics, held) -> dict:
    """Step 1: one owner per partition, a current holder where there is one."""
    owned = {m: set() for m in subs}
    holders: dict[Part, list] = {}
    for m in sorted(held):
        for part in held[m]:
            holders.setdefault(part, []).append(m)
    fresh = []
    for t in sorted(subscribers):
        for p in range(topics[t][1]):
            cands = holders.get((t, p))
            if cands:
                owned[min(cands, key=lambda m: (len(owned[m]), m))].add((t, p))
            else:
                fresh.append((t, p))
    for t, p in fresh:
        owned[min(subscribers[t], key=lambda m: (len(owned[m]), m))].add((t, p))
    return owned


def _balance(owned: dict, subscribers: dict, held: dict) -> None:
    """Step 2: shift one partition along a chain while some member can reach one with two fewer."""
    while True:
        lowest = min((len(ps) for ps in owned.values()), default=0)
        for src in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            if len(owned[src]) < lowest + 2:
                return
            path = _chain(owned, subscribers, src)
            if path:
                for giver, taker, topic in reversed(path):  # from the far end: nobody passes on what it just got
                    part = min((tp for tp in owned[giver] if tp[0] == topic),
                               key=lambda tp: (tp not in held[taker], tp in held[giver], -tp[1]))
                    owned[giver].remove(part)
                    owned[taker].add(part)
                break
        else:
            return


def _chain(owned, subscribers, src):
    """The shortest chain of (giver, taker, topic) from ``src`` to a member with two fewer, or None."""
    limit = len(owned[src]) - 2
    parent = {src: None}
    queue = deque([src])
    while queue:
        x = queue.popleft()
        for t in sorted({t for t, _ in owned[x]}):
            for y in subscribers[t]:
                if y in parent:
                    continue
                parent[y] = (x, t)
                if len(owned[y]) <= limit:
                    path = []
                    while parent[y] is not None:
                        x2, t2 = parent[y]
                        path.append((x2, y, t2))
                        y = x2
                    return path[::-1]
                queue.append(y)
    return None


def _share(subs, subscribers, topics, held, owned) -> dict:
    """Step 3: members left with nothing share a partition: one they had while it has fewer holders than
    its even share of its component's members, else the reachable one with the fewest holders."""
    empty = [m for m in sorted(subs) if subs[m] and not owned[m]]
    if not empty:
        return {}
    component = _components(subs)
    members_in: dict = {}
    parts_in: dict = {}
    for m in subs:
        if subs[m]:
            members_in[component[subs[m][0]]] = members_in.get(component[subs[m][0]], 0) + 1
    for t in subscribers:
        parts_in[component[t]] = parts_in.get(component[t], 0) + topics[t][1]
    even = {c: divmod(members_in[c], parts_in[c]) for c in parts_in}  # (holders each, partitions with one more)
    spare = {c: extra for c, (_, extra) in even.items()}
    holders = {part: 1 for ps in owned.values() for part in ps}
    shared, waiting = {}, []
    for m in empty:
        c = component[subs[m][0]]
        for part in sorted(held[m]):
            n = holders[part]
            if n < even[c][0] or (n == even[c][0] and spare[c] > 0):
                spare[c] -= n == even[c][0]
                holders[part] += 1
                shared[m] = {part}
                break
        else:
            waiting.append(m)
    for m in waiting:
        part = min(((t, p) for t in subs[m] for p in range(topics[t][1])),
                   key=lambda tp: (holders[tp], tp not in held[m], tp))
        holders[part] += 1
        shared[m] = {part}
    return shared


def _components(subs: dict) -> dict:
    """topic -> a representative topic of the topics linked to it by members subscribing to both."""
    root: dict = {}

    def find(t):
        while root.setdefault(t, t) != t:
            root[t] = root[root[t]]
            t = root[t]
        return t

    for names in subs.values():
        for t in names[1:]:
            root[find(t)] = find(names[0])
        if names:
            find(names[0])
    return {t: find(t) for t in list(root)}
