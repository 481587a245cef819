"""Our consumer's assignors and group protocol encoding in-process, checked against Java's
(groups on a real broker: tests/broker/test_client_groups.py)."""
import pytest

from pybroker.client import TopicPartition
from pybroker.client.assignors import (Assignment, CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor,
                                       Subscription, decode_assignment, decode_subscription, encode_assignment,
                                       encode_subscription)


def _subs(members, topics, owned=None, generation=-1):
    return {m: Subscription(topics=list(topics), owned_partitions=list((owned or {}).get(m, [])),
                            generation_id=generation) for m in members}


def test_range_assignor_matches_java():
    out = RangeAssignor().assign({"t0": 3, "t1": 3}, _subs(["c0", "c1"], ["t0", "t1"]))
    tp = TopicPartition
    assert out == {"c0": [tp("t0", 0), tp("t0", 1), tp("t1", 0), tp("t1", 1)],
                   "c1": [tp("t0", 2), tp("t1", 2)]}
    subs = _subs(["m-b", "m-a"], ["t"])
    subs["m-b"].group_instance_id = "i-1"  # static members sort first, by instance id
    assert RangeAssignor().assign({"t": 3}, subs) == {"m-b": [tp("t", 0), tp("t", 1)], "m-a": [tp("t", 2)]}


def test_roundrobin_assignor_matches_java():
    subs = {"c0": Subscription(["t0"]), "c1": Subscription(["t0", "t1"]), "c2": Subscription(["t0", "t1", "t2"])}
    out = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    tp = TopicPartition
    assert out == {"c0": [tp("t0", 0)], "c1": [tp("t1", 0)],
                   "c2": [tp("t1", 1), tp("t2", 0), tp("t2", 1), tp("t2", 2)]}


def test_cooperative_sticky_assignor_is_balanced_and_sticky():
    a = CooperativeStickyAssignor()
    tp = TopicPartition
    first = a.assign({"t": 7}, _subs(["m1"], ["t"]))
    assert len(first["m1"]) == 7
    # m2 and m3 join: m1 keeps 3 and the 4 it gives up are withheld from this round
    second = a.assign({"t": 7}, _subs(["m1", "m2", "m3"], ["t"], {"m1": first["m1"]}, 1))
    assert len(second["m1"]) == 3 and set(second["m1"]) <= set(first["m1"])
    assert second["m2"] == [] and second["m3"] == []
    # follow-up round: m1 owns its 3, the others get the rest; no partition twice
    third = a.assign({"t": 7}, _subs(["m1", "m2", "m3"], ["t"], {"m1": second["m1"]}, 2))
    assert third["m1"] == second["m1"]
    every = [p for ps in third.values() for p in ps]
    assert sorted(every) == [tp("t", p) for p in range(7)]
    assert sorted(len(ps) for ps in third.values()) == [2, 2, 3]
    # a member leaves: the survivors keep theirs and split its partitions
    fourth = a.assign({"t": 7}, _subs(["m1", "m2"], ["t"], {"m1": third["m1"], "m2": third["m2"]}, 3))
    assert set(third["m1"]) <= set(fourth["m1"]) and set(third["m2"]) <= set(fourth["m2"])
    assert sorted(p for ps in fourth.values() for p in ps) == [tp("t", p) for p in range(7)]


def test_consumer_protocol_encoding_round_trip():
    sub = Subscription(["a", "b"], b"\x00\x00\x00\x05", [TopicPartition("a", 1), TopicPartition("b", 0)], 5, "r1")
    for version in (0, 1, 2, 3):
        back = decode_subscription(encode_subscription(sub, version))
        assert back.topics == ["a", "b"] and back.user_data == sub.user_data
        assert back.owned_partitions == (sub.owned_partitions if version >= 1 else [])
        assert back.generation_id == (5 if version >= 2 else -1)
    asg = Assignment([TopicPartition("a", 2), TopicPartition("a", 0)], None)
    assert decode_assignment(encode_assignment(asg, 0)).partitions == [TopicPartition("a", 0), TopicPartition("a", 2)]
    with pytest.raises(ValueError):
        decode_subscription(b"\x00\x01\x00\x00\x7f\xff")  # truncated

