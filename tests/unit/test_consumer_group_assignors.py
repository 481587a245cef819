"""Server-side assignors and the consumer group's reconciliation rules, as pure functions.

Invariants: every partition of a subscribed topic has exactly one owner among its subscribers;
uniform is balanced (counts within one for members that could swap) and sticky; a partition is
handed to a new member only after its previous owner revoked it.
"""
import random
import uuid

import pytest

from pybroker.coordinator.assignors_server import ASSIGNORS, MemberSpec, assignor_name, range_, uniform
from pybroker.coordinator.consumer_group import (STABLE, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS,
                                                 ConsumerGroup, ConsumerMember)

T1, T2, T3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def owners(result):
    seen = {}
    for m, a in result.items():
        for t, ps in a.items():
            for p in ps:
                assert (t, p) not in seen, f"{(t, p)} assigned twice"
                seen[(t, p)] = m
    return seen


def check_complete(members, topics, result):
    seen = owners(result)
    for t, n in topics.items():
        subs = {m for m, s in members.items() if t in s.topics}
        for p in range(n):
            if subs:
                assert seen.get((t, p)) in subs
            else:
                assert (t, p) not in seen


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_homogeneous_is_complete_and_balanced(name):
    topics = {T1: 7, T2: 5}
    members = {f"m{i}": MemberSpec(frozenset(topics)) for i in range(3)}
    result = ASSIGNORS[name](members, topics)
    check_complete(members, topics, result)
    counts = [sum(len(ps) for ps in a.values()) for a in result.values()]
    assert sum(counts) == 12
    if name == "uniform":
        assert max(counts) - min(counts) <= 1


def test_uniform_is_sticky_when_a_member_joins():
    topics = {T1: 12}
    two = {m: MemberSpec(frozenset(topics)) for m in ("a", "b")}
    first = uniform(two, topics)
    three = {m: MemberSpec(frozenset(topics), first.get(m, {})) for m in ("a", "b", "c")}
    second = uniform(three, topics)
    check_complete(three, topics, second)
    assert [len(second[m][T1]) for m in ("a", "b", "c")] == [4, 4, 4]
    assert second["a"][T1] <= first["a"][T1] and second["b"][T1] <= first["b"][T1]  # only moves to c


def test_uniform_heterogeneous_random():
    rng = random.Random(7)
    topics = {T1: 6, T2: 3, T3: 9}
    for _ in range(50):
        members = {f"m{i}": MemberSpec(frozenset(rng.sample(sorted(topics), rng.randint(1, 3))))
                   for i in range(rng.randint(1, 5))}
        result = uniform(members, topics)
        check_complete(members, topics, result)
        count = {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}
        for (t, _p), m in owners(result).items():  # no partition could move to a member two lighter
            for other, spec in members.items():
                assert not (t in spec.topics and count[m] - count[other] > 1)


def test_range_gives_contiguous_ranges_in_member_order():
    topics = {T1: 5}
    members = {m: MemberSpec(frozenset(topics)) for m in ("b", "a")}
    result = range_(members, topics)
    assert result["a"][T1] == frozenset({0, 1, 2}) and result["b"][T1] == frozenset({3, 4})


def test_assignor_names():
    assert assignor_name("uniform") == "uniform"
    assert assignor_name("org.apache.kafka.coordinator.group.assignor.RangeAssignor") == "range"
    assert assignor_name("sticky") is None


def _group_with(members: dict, target: dict, epoch: int) -> ConsumerGroup:
    g = ConsumerGroup("g", group_epoch=epoch, assignment_epoch=epoch)
    for mid in members:
        g.add(ConsumerMember(mid))
    g.target = target
    return g


def test_a_partition_moves_only_after_its_owner_revoked_it():
    g = _group_with(["a"], {"a": {T1: frozenset({0, 1})}}, 1)
    a = g.members["a"]
    g.reconcile(a, {})
    assert (a.state, a.member_epoch, a.assigned) == (STABLE, 1, {T1: frozenset({0, 1})})
    g.add(ConsumerMember("b"))
    g.group_epoch = g.assignment_epoch = 2
    g.target = {"a": {T1: frozenset({0})}, "b": {T1: frozenset({1})}}
    b = g.members["b"]
    g.reconcile(b, {})  # b first: partition 1 is still a's
    assert (b.state, b.member_epoch, b.assigned) == (UNRELEASED_PARTITIONS, 2, {})
    g.reconcile(a, {T1: frozenset({0, 1})})  # a must revoke 1 and keeps epoch 1 meanwhile
    assert (a.state, a.member_epoch, a.assigned, a.revoking) == (UNREVOKED_PARTITIONS, 1, {T1: frozenset({0})},
                                                                 {T1: frozenset({1})})
    g.reconcile(a, None)  # a heartbeat that says nothing about ownership changes nothing
    assert a.state == UNREVOKED_PARTITIONS
    g.reconcile(b, None)
    assert b.assigned == {}
    g.reconcile(a, {T1: frozenset({0})})  # revoked: a moves on, partition 1 is free
    assert (a.state, a.member_epoch, a.revoking) == (STABLE, 2, {})
    g.reconcile(b, {})
    assert (b.state, b.assigned) == (STABLE, {T1: frozenset({1})})
    assert g.owners == {(T1, 0): "a", (T1, 1): "b"}


def test_removing_a_member_frees_its_partitions():
    g = _group_with(["a", "b"], {"a": {T1: frozenset({0})}, "b": {T1: frozenset({1})}}, 1)
    for m in ("a", "b"):
        g.reconcile(g.members[m], {})
    g.remove("a")
    assert g.owners == {(T1, 1): "b"}
    assert g.state == "Stable"


@pytest.mark.parametrize("seed", range(20))
def test_random_membership_never_gives_a_partition_to_two_clients(seed):
    """Members join, leave and heartbeat in random order, each client holding exactly what its last
    answer said: no two clients ever hold one partition, and quiet heartbeats converge on the target."""
    rng = random.Random(seed)
    topics = {T1: 8, T2: 4}
    g = ConsumerGroup("g")
    held: dict[str, dict] = {}  # member id -> what that client holds

    def new_target():
        g.bump_epoch()
        specs = {m: MemberSpec(frozenset(topics), g.target.get(m, {})) for m in g.members}
        g.target, g.assignment_epoch = uniform(specs, topics), g.group_epoch

    def beat(mid):
        g.reconcile(g.members[mid], held[mid])
        held[mid] = dict(g.members[mid].assigned)

    def check_disjoint():
        seen = {}
        for mid, a in held.items():
            for tp in ((t, p) for t, ps in a.items() for p in ps):
                assert tp not in seen, f"{tp} held by {seen[tp]} and {mid}"
                seen[tp] = mid

    for step in range(300):
        action = rng.random()
        if action < 0.1 and len(g.members) < 5:
            mid = f"m{step}"
            g.add(ConsumerMember(mid))
            held[mid] = {}
            new_target()
        elif action < 0.15 and g.members:
            mid = rng.choice(sorted(g.members))
            g.remove(mid)
            del held[mid]
            new_target()
        elif g.members:
            beat(rng.choice(sorted(g.members)))
        check_disjoint()
    for _ in range(4):  # quiet: everyone heartbeats a few times
        for mid in sorted(g.members):
            beat(mid)
            check_disjoint()
    for mid, m in g.members.items():
        assert (m.state, m.member_epoch, m.assigned) == (STABLE, g.assignment_epoch, g.target.get(mid, {}))
    if g.members:
        assert sum(len(ps) for a in held.values() for ps in a.values()) == 12


def test_group_consumer_configs():
    from pybroker.config import BrokerConfig, ConfigError
    c = BrokerConfig.from_properties({})
    assert (c.group_consumer_session_timeout_ms, c.group_consumer_heartbeat_interval_ms,
            c.group_consumer_assignors) == (45000, 5000, ("uniform", "range"))
    c = BrokerConfig.from_properties({"group.consumer.assignors":
                                      "org.apache.kafka.coordinator.group.assignor.RangeAssignor, uniform",
                                      "group.consumer.max.size": "3"})
    assert (c.group_consumer_assignors, c.group_consumer_max_size) == (("range", "uniform"), 3)
    assert c.describe()["group.consumer.assignors"] == ("range,uniform", False)
    with pytest.raises(ConfigError, match="group.consumer.assignors"):
        BrokerConfig.from_properties({"group.consumer.assignors": "uniform,sticky"})
    with pytest.raises(ConfigError, match="less than"):
        BrokerConfig.from_properties({"group.consumer.heartbeat.interval.ms": "45000"})
    assert c.group_consumer_migration_policy == "bidirectional"  # Kafka 4.0's default
    assert c.describe()["group.consumer.migration.policy"] == ("bidirectional", True)
    c = BrokerConfig.from_properties({"group.consumer.migration.policy": "UPGRADE"})
    assert c.group_consumer_migration_policy == "upgrade"
    with pytest.raises(ConfigError, match="group.consumer.migration.policy"):
        BrokerConfig.from_properties({"group.consumer.migration.policy": "sideways"})
