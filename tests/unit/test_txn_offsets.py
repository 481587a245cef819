"""Transactional offset commits in-process: pending offsets taken by a marker, the coordinator's sequences
(against real brokers: tests/broker/test_txn_offsets.py)."""
from pybroker.coordinator.records import OffsetValue
from pybroker.coordinator.txn_offsets import CoordinatorSequences, PendingOffset, PendingTxnOffsets


def offset_value(offset: int) -> OffsetValue:
    return OffsetValue(offset, -1, "", 0, -1)


def test_a_marker_takes_only_what_was_appended_before_it():
    p = PendingTxnOffsets()
    before, after = PendingOffset(5, offset_value(1)), PendingOffset(12, offset_value(2))
    p.put("g", 7, ("t", 0), before)
    p.put("g", 7, ("t", 1), after)
    p.put("h", 8, ("t", 0), PendingOffset(6, offset_value(3)))
    taken = p.take(7, p.groups_of_producer(7), 10)
    assert taken == [("g", ("t", 0), before)]
    assert p.is_unstable("g", ("t", 0)) and p.is_unstable("g", ("t", 1))  # completing, and pending
    p.done(taken)
    assert not p.is_unstable("g", ("t", 0)) and p.is_unstable("h", ("t", 0))
    p.discard("g", 7, ("t", 1), PendingOffset(12, offset_value(2)))  # an equal entry is not this one
    assert p.is_unstable("g", ("t", 1))
    p.discard("g", 7, ("t", 1), after)
    assert not p.has_group("g") and p.groups() == ["h"]
    p.forget_groups(["h"])
    assert not p.groups() and not p.completing


def test_coordinator_sequences_follow_the_producer_state_rules():
    s = CoordinatorSequences()
    assert s.sequence_for(0, 7, 0) == 0
    s.appended(0, 7, 0, 0, 3)
    assert s.sequence_for(0, 7, 0) == 3 and s.sequence_for(1, 7, 0) == 0  # per partition
    assert s.sequence_for(0, 7, 1) == 0  # a new epoch starts at 0
    s.appended(0, 7, 1, 0, 2)
    s.appended(0, 7, 0, 3, 1)  # an older epoch (a replayed batch) does not go back
    assert s.sequence_for(0, 7, 1) == 2
    s.appended(0, 7, 1, 2 ** 31 - 1, 2)
    assert s.sequence_for(0, 7, 1) == 1  # wraps at int32 max
    s.forget(0)
    assert s.sequence_for(0, 7, 1) == 0

