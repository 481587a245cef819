"""Share-group membership (pybroker/share/group.py) and the share assignor (pybroker/share/assignor.py),
called directly with explicit clocks and topic maps: heartbeat flows, epochs and fencing, sessions,
metadata changes; then the assignor's coverage, balance, determinism and stickiness over a grid.
"""
import random
import uuid

import pytest

from pybroker.protocol.errors import (FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED, INVALID_REQUEST, NONE,
                                      UNKNOWN_MEMBER_ID)
from pybroker.share.assignor import assign
from pybroker.share.group import EMPTY, STABLE, ShareGroup

ORDERS, AUDIT = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {"orders": (ORDERS, 6), "audit": (AUDIT, 2)}


def hb(group, member_id, epoch, names=None, now=0, topics=TOPICS, rack=None):
    return group.heartbeat(member_id, epoch, rack, names, now, topics, client_id="cli", client_host="/10.0.0.1")


def joined(group, member_id, names=("orders",), now=0, topics=TOPICS):
    res = hb(group, member_id, 0, list(names), now, topics)
    assert res.error == NONE, res
    return res


def count(assignment):
    return sum(len(ps) for ps in assignment.values())


# ---- join, heartbeat, leave ---------------------------------------------------------------------------

def test_join_heartbeat_leave_flow_with_epochs():
    g = ShareGroup("g", heartbeat_interval_ms=3000)
    assert g.state == EMPTY and g.group_epoch == 0 and g.next_deadline() is None

    a = joined(g, "A")
    assert (a.member_id, a.member_epoch, a.heartbeat_interval_ms) == ("A", 1, 3000)
    assert a.assignment == {ORDERS: [0, 1, 2, 3, 4, 5]}
    assert g.state == STABLE and g.group_epoch == g.assignment_epoch == 1

    again = hb(g, "A", 1)
    assert (again.error, again.member_epoch, again.assignment) == (NONE, 1, None)

    b = joined(g, "B")
    assert g.group_epoch == 2 and b.member_epoch == 2 and count(b.assignment) == 3
    a2 = hb(g, "A", 1)  # A learns that it gave three partitions to B
    assert a2.member_epoch == 2 and count(a2.assignment) == 3
    assert set(a2.assignment[ORDERS]).isdisjoint(b.assignment[ORDERS])
    assert hb(g, "A", 2).assignment is None

    left = hb(g, "B", -1)
    assert (left.error, left.member_id, left.member_epoch, left.assignment) == (NONE, "B", -1, None)
    assert g.group_epoch == 3 and [m.member_id for m in g.members()] == ["A"]
    a3 = hb(g, "A", 2)
    assert a3.member_epoch == 3 and a3.assignment == {ORDERS: [0, 1, 2, 3, 4, 5]}

    assert hb(g, "A", -1).error == NONE
    assert g.state == EMPTY and g.target == {} and g.topic_metadata == {}


def test_a_member_whose_partitions_did_not_change_keeps_its_epoch():
    g = ShareGroup("g")
    joined(g, "A")
    joined(g, "B")
    hb(g, "A", 1)
    c = joined(g, "C", names=("audit",))  # another topic: A and B keep theirs
    assert g.group_epoch == 3 and c.member_epoch == 3 and c.assignment == {AUDIT: [0, 1]}
    assert hb(g, "A", 2).assignment is None and hb(g, "A", 2).member_epoch == 2
    assert hb(g, "B", 2).member_epoch == 2


def test_join_answers_the_assignment_even_when_empty():
    g = ShareGroup("g")
    res = joined(g, "A", names=("missing",))
    assert res.member_epoch == 1 and res.assignment == {}
    assert g.subscribed_topics() == {"missing"}


def test_subscription_change_and_unchanged_names():
    g = ShareGroup("g")
    joined(g, "A")
    unchanged = hb(g, "A", 1, names=None)
    assert g.group_epoch == 1 and unchanged.assignment is None
    same = hb(g, "A", 1, names=["orders", "orders"])
    assert g.group_epoch == 1 and same.assignment is None
    res = hb(g, "A", 1, names=["audit", "orders"])
    assert g.group_epoch == 2 and res.member_epoch == 2
    assert res.assignment == {ORDERS: [0, 1, 2, 3, 4, 5], AUDIT: [0, 1]}
    res = hb(g, "A", 2, names=[])  # subscribed to nothing: keeps membership, loses partitions
    assert res.member_epoch == 3 and res.assignment == {} and g.subscribed_topics() == frozenset()


def test_rack_client_and_describe():
    g = ShareGroup("g")
    hb(g, "A", 0, ["orders", "audit"], rack="r1")
    hb(g, "A", 1, rack=None)  # None: the rack stays
    (m,) = g.members()
    assert (m.member_id, m.rack_id, m.client_id, m.client_host, m.member_epoch) == ("A", "r1", "cli", "/10.0.0.1", 1)
    assert m.subscribed_topic_names == ("audit", "orders")
    assert m.assignment == {ORDERS: [0, 1, 2, 3, 4, 5], AUDIT: [0, 1]}
    assert g.group_type == g.protocol_type == "share" and g.assignor_name == "simple"


# ---- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("member_id,epoch,names,rack", [
    ("", 0, ["orders"], None),
    ("  ", 3, None, None),
    ("A", 0, None, None),
    ("A", 0, [], None),
    ("A", 0, ["orders"], ""),
    ("A", -2, None, None),
])
def test_invalid_requests(member_id, epoch, names, rack):
    g = ShareGroup("g")
    res = g.heartbeat(member_id, epoch, rack, names, 0, TOPICS)
    assert res.error == INVALID_REQUEST and res.message and res.assignment is None
    assert g.size == 0 and g.group_epoch == 0


def test_unknown_member():
    g = ShareGroup("g")
    joined(g, "A")
    for epoch in (1, 5, -1):
        res = hb(g, "nobody", epoch)
        assert res.error == UNKNOWN_MEMBER_ID and "nobody" in res.message
    assert g.group_epoch == 1 and g.size == 1


def test_fencing_future_stale_and_previous_epochs():
    g = ShareGroup("g")
    joined(g, "A")
    joined(g, "B")
    assert hb(g, "A", 1).member_epoch == 2  # A: epoch 2, previous 1

    ahead = hb(g, "A", 3)
    assert ahead.error == FENCED_MEMBER_EPOCH and ahead.member_id is None

    # A missed our last answer: its previous epoch is accepted, and the whole assignment goes out again
    missed = hb(g, "A", 1)
    assert (missed.error, missed.member_epoch) == (NONE, 2) and count(missed.assignment) == 3

    joined(g, "C")
    assert hb(g, "A", 2).member_epoch == 3  # A: epoch 3, previous 2
    stale = hb(g, "A", 1)  # no longer the previous one
    assert stale.error == FENCED_MEMBER_EPOCH
    assert hb(g, "A", 4).error == FENCED_MEMBER_EPOCH
    assert hb(g, "A", 2).error == NONE
    assert g.size == 3  # fencing answers an error but does not remove the member


def test_fenced_member_rejoins_with_epoch_zero():
    g = ShareGroup("g")
    joined(g, "A")
    joined(g, "B")
    hb(g, "A", 1)
    joined(g, "C")
    assert hb(g, "A", 2).member_epoch == 3
    assert hb(g, "A", 1).error == FENCED_MEMBER_EPOCH
    back = hb(g, "A", 0, ["orders"])
    assert back.error == NONE and back.member_epoch == 3 and count(back.assignment) == 2
    assert g.group_epoch == 3  # same member, same subscription: nothing to reassign


def test_group_max_size():
    g = ShareGroup("g", max_size=2)
    joined(g, "A")
    joined(g, "B")
    full = hb(g, "C", 0, ["orders"])
    assert full.error == GROUP_MAX_SIZE_REACHED and g.size == 2 and g.group_epoch == 2
    assert hb(g, "A", 0, ["orders"]).error == NONE  # a member already in may always rejoin
    hb(g, "B", -1)
    assert joined(g, "C").member_epoch == 4
    g.max_size = 3
    assert joined(g, "D").error == NONE


# ---- sessions ---------------------------------------------------------------------------------------

def test_session_expiry_moves_partitions():
    g = ShareGroup("g", session_timeout_ms=45000)
    joined(g, "A", now=0)
    joined(g, "B", now=100)
    hb(g, "A", 1, now=200)
    assert g.next_deadline() == 45100  # B's: its join at 100
    hb(g, "B", 2, now=30000)
    assert g.next_deadline() == 45200
    assert g.expire(45199) == [] and g.size == 2
    assert g.expire(45200) == ["A"]
    assert g.group_epoch == 3 and g.assigned(ORDERS, 0) == ["B"]
    b = hb(g, "B", 2, now=45300)
    assert b.member_epoch == 3 and b.assignment == {ORDERS: [0, 1, 2, 3, 4, 5]}
    assert hb(g, "A", 2, now=45400).error == UNKNOWN_MEMBER_ID


def test_session_timeout_is_read_at_expiry_and_failed_heartbeats_do_not_refresh():
    g = ShareGroup("g", session_timeout_ms=45000)
    joined(g, "A", now=0)
    assert hb(g, "A", 7, now=40000).error == FENCED_MEMBER_EPOCH
    g.session_timeout_ms = 10000  # a group config changed
    assert g.next_deadline() == 10000
    assert g.expire(10000) == ["A"] and g.state == EMPTY and g.next_deadline() is None


def test_remove_member():
    g = ShareGroup("g")
    joined(g, "A")
    joined(g, "B")
    assert count(hb(g, "A", 1).assignment) == 3
    assert g.remove_member("B") and not g.remove_member("B")
    assert g.group_epoch == 3 and hb(g, "A", 2).assignment == {ORDERS: [0, 1, 2, 3, 4, 5]}
    assert g.members()[0].member_epoch == 3


# ---- metadata changes -------------------------------------------------------------------------------

def test_partitions_added_reassign():
    g = ShareGroup("g")
    joined(g, "A")
    joined(g, "B")
    hb(g, "A", 1)
    more = {"orders": (ORDERS, 10), "audit": (AUDIT, 2)}
    a = hb(g, "A", 2, topics=more)
    assert g.group_epoch == 3 and a.member_epoch == 3
    b = hb(g, "B", 2, topics=more)
    assert b.member_epoch == 3 and count(a.assignment) == count(b.assignment) == 5
    assert sorted(a.assignment[ORDERS] + b.assignment[ORDERS]) == list(range(10))
    assert hb(g, "A", 3, topics=more).assignment is None and g.group_epoch == 3


def test_topic_created_deleted_and_recreated():
    g = ShareGroup("g")
    joined(g, "A", names=("orders", "later"))
    assert g.topic_metadata == {"orders": (ORDERS, 6)}
    later = uuid.UUID(int=9)
    created = dict(TOPICS, later=(later, 1))
    res = hb(g, "A", 1, topics=created)
    assert res.member_epoch == 2 and res.assignment == {ORDERS: [0, 1, 2, 3, 4, 5], later: [0]}
    res = hb(g, "A", 2, topics=TOPICS)  # deleted
    assert res.member_epoch == 3 and res.assignment == {ORDERS: [0, 1, 2, 3, 4, 5]}
    again = uuid.UUID(int=10)
    res = hb(g, "A", 3, topics=dict(TOPICS, later=(again, 3)))  # recreated: a new id
    assert res.member_epoch == 4 and res.assignment[again] == [0, 1, 2]
    unrelated = dict(TOPICS, later=(again, 3), other=(uuid.UUID(int=11), 4))
    assert hb(g, "A", 4, topics=unrelated).assignment is None and g.group_epoch == 4


def test_assigned_covers_target_and_what_members_were_told():
    g = ShareGroup("g")
    joined(g, "A")
    assert g.assigned(ORDERS, 5) == ["A"]
    b = joined(g, "B")
    moved = b.assignment[ORDERS][0]
    # A has not heard yet: it may still fetch what goes to B
    assert g.assigned(ORDERS, moved) == ["A", "B"]
    hb(g, "A", 1)
    assert g.assigned(ORDERS, moved) == ["B"]
    assert g.assigned(AUDIT, 0) == [] and g.assigned(ORDERS, 99) == []


def test_many_members_share_few_partitions():
    g = ShareGroup("g")
    answers = {f"m{i}": joined(g, f"m{i}", names=("audit",)) for i in range(5)}
    final = {m: hb(g, m, answers[m].member_epoch) for m in answers}
    told = {m: (res.assignment or answers[m].assignment) for m, res in final.items()}
    assert all(count(a) == 1 for a in told.values())
    holders = sorted(sum(1 for a in told.values() if p in a[AUDIT]) for p in (0, 1))
    assert holders == [2, 3]


# ---- the assignor ---------------------------------------------------------------------------------------

def topic_map(counts):
    return {name: (f"id-{name}", n) for name, n in counts.items()}


def pairs(result):
    return {(m, t, p) for m, got in result.items() for t, ps in got.items() for p in ps}


def holders_of(result):
    out = {}
    for m, t, p in pairs(result):
        out.setdefault((t, p), set()).add(m)
    return out


def check_valid(members, topics, result):
    """Coverage, subscriptions respected, nobody with something to consume left empty."""
    assert set(result) == set(members)
    by_id = {tid: (name, n) for name, (tid, n) in topics.items()}
    held = holders_of(result)
    for m, t, p in pairs(result):
        name, n = by_id[t]
        assert name in members[m] and 0 <= p < n
    for name, (tid, n) in topics.items():
        if any(name in subs for subs in members.values()):
            assert all(held.get((tid, p)) for p in range(n)), f"{name} not covered"
    for m, subs in members.items():
        if any(topics.get(t, (None, 0))[1] for t in subs):
            assert count(result[m]) >= 1, f"{m} got nothing"


def check_homogeneous(members, partitions, result):
    loads = [count(a) for a in result.values()]
    held = holders_of(result)
    if len(members) <= partitions:
        assert all(len(h) == 1 for h in held.values())  # exclusive
        assert max(loads) - min(loads) <= 1
    else:
        assert loads == [1] * len(members)
        sharing = [len(h) for h in held.values()]
        assert len(sharing) == partitions and max(sharing) - min(sharing) <= 1


def lost(before, after):
    """(member, topic, partition) pairs that members present in both lost."""
    common = set(before) & set(after)
    return {x for x in pairs(before) - pairs(after) if x[0] in common}


def names(n):
    return [f"m{i:02}" for i in range(n)]


def test_grid_balance_and_stickiness_one_topic():
    for partitions in range(1, 13):
        topics = topic_map({"t": partitions})
        for n in range(1, 21):
            members = {m: {"t"} for m in names(n)}
            result = assign(members, topics, {})
            check_valid(members, topics, result)
            check_homogeneous(members, partitions, result)
            assert assign(members, topics, result) == result  # stable: nothing moves without a change

            grown = dict(members, newcomer={"t"})  # one joins: old members only give up what it takes
            after = assign(grown, topics, result)
            check_homogeneous(grown, partitions, after)
            taken = lost(result, after)
            assert len(taken) == (count(after["newcomer"]) if n + 1 <= partitions else 0)

            if n > 1:  # one leaves: the others keep theirs (sharing: at most one moves to even the holders)
                shrunk = {m: s for m, s in members.items() if m != "m00"}
                after = assign(shrunk, topics, result)
                check_homogeneous(shrunk, partitions, after)
                assert len(lost(result, after)) <= (0 if n <= partitions else 1)


def test_grid_several_topics_same_subscription_balance_over_all():
    for a, b in ((1, 1), (1, 4), (3, 5), (6, 6)):
        topics = topic_map({"a": a, "b": b})
        for n in range(1, 21):
            members = {m: {"a", "b"} for m in names(n)}
            result = assign(members, topics, {})
            check_valid(members, topics, result)
            check_homogeneous(members, a + b, result)


def test_mixed_subscriptions():
    rng = random.Random(932)
    for _ in range(300):
        topics = topic_map({name: rng.randint(0, 7) for name in ("a", "b", "c", "d")})
        members = {m: set(rng.sample(["a", "b", "c", "d", "gone"], rng.randint(1, 3)))
                   for m in names(rng.randint(1, 20))}
        current = assign({m: s for m, s in members.items() if rng.random() < 0.7}, topics, {})
        result = assign(members, topics, current)
        check_valid(members, topics, result)
        loads = {m: count(got) for m, got in result.items()}
        by_id = {tid: name for name, (tid, _) in topics.items()}
        for (t, p), hs in holders_of(result).items():
            assert sum(loads[h] > 1 for h in hs) <= 1  # only members with a single partition share
            for h in hs:  # nobody subscribed could take one off a member with two more
                assert all(loads[o] >= loads[h] - 1 for o in members if by_id[t] in members[o])
        # deterministic: the same input in another order gives the same answer
        shuffled = dict(sorted(members.items(), key=lambda _: rng.random()))
        assert assign(shuffled, dict(reversed(list(topics.items()))), current) == result


def test_chains_balance_what_single_moves_cannot():
    topics = topic_map({"t1": 4, "t2": 2})
    members = {"A": {"t1"}, "B": {"t1", "t2"}, "C": {"t2"}}
    current = {"A": {"id-t1": {0, 1, 2}}, "B": {"id-t1": {3}, "id-t2": {0}}, "C": {"id-t2": {1}}}
    result = assign(members, topics, current)
    assert {m: count(a) for m, a in result.items()} == {"A": 2, "B": 2, "C": 2}
    assert len(lost(current, result)) == 2  # A hands one to B, B one to C


def test_unknown_topics_ids_and_partitions_are_ignored():
    topics = topic_map({"t": 2, "empty": 0})
    current = {"A": {"id-t": {0, 1, 7}, "id-deleted": {0}}, "gone": {"id-t": {0}}}
    result = assign({"A": {"t", "empty"}, "B": {"nope"}}, topics, current)
    assert result == {"A": {"id-t": {0, 1}}, "B": {}}
    assert assign({}, topics, current) == {}


def test_determinism_from_scratch():
    topics = topic_map({"x": 5, "y": 3})
    members = {m: ({"x"} if i % 3 else {"x", "y"}) for i, m in enumerate(names(7))}
    first = assign(members, topics, {})
    for seed in range(5):
        order = list(members)
        random.Random(seed).shuffle(order)
        assert assign({m: members[m] for m in order}, topics, {}) == first
