"""The share-partition state machine (pybroker/share/partition.py): acquisition, acknowledgement, locks,
the start offset and durable state, called directly with explicit clocks; then a randomized run of many
members against a per-offset model of the same rules.
"""
import random

import pytest

from pybroker.protocol.errors import INVALID_RECORD_STATE, INVALID_REQUEST, NONE
from pybroker.share.partition import (ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, AckType, AcquiredRecords,
                                      SharePartition, StateBatch)

GAP, ACCEPT, RELEASE, REJECT, RENEW = (AckType.GAP, AckType.ACCEPT, AckType.RELEASE, AckType.REJECT,
                                       AckType.RENEW)
LOCK = 1000


def part(**kw):
    kw.setdefault("lock_duration_ms", LOCK)
    return SharePartition(**kw)


def batches(first, last, size):
    return [(b, min(b + size - 1, last)) for b in range(first, last + 1, size)]


def per_offset(sp):
    """The store expanded: offset -> (state, delivery count, owner)."""
    return {o: (state, count, owner) for first, last, state, count, owner, _ in sp.ranges()
            for o in range(first, last + 1)}


def frozen(sp):
    return (sp.ranges(), sp.start_offset, sp.snapshot(), sp.changes, sp.records_acquired, sp.records_released,
            sp.records_archived, sp.records_acknowledged)


# ---- acquiring ------------------------------------------------------------------------------------

def test_fresh_batches_are_acquired_whole_up_to_max_records():
    sp = part()
    assert sp.next_fetch_offset() == 0
    got = sp.acquire("a", batches(0, 14, 5), 7, now_ms=0)
    assert got == [AcquiredRecords(0, 9, 1)]  # the batch 5-9 reaches 7 records and is taken whole
    assert sp.ranges() == [(0, 9, ACQUIRED, 1, "a", LOCK)]
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (0, 9, 10)
    assert sp.acquired() == sp.in_flight() == sp.held_by("a") == sp.records_acquired == 10
    assert sp.next_lock_deadline() == LOCK
    # the next read starts at 10; batches below the window's end are not acquired twice
    assert sp.acquire("b", batches(5, 19, 5), 100, now_ms=5) == [AcquiredRecords(10, 19, 1)]
    assert sp.held_by("b") == 10


def test_max_in_flight_caps_new_records():
    sp = part(max_in_flight=8)
    assert sp.acquire("a", batches(0, 9, 5), 100, 0) == [AcquiredRecords(0, 7, 1)]  # a hard cap, mid-batch
    assert sp.next_fetch_offset() == 8 and not sp.can_acquire()
    assert sp.acquire("b", batches(5, 14, 5), 100, 0) == []
    assert sp.acknowledge("a", [(0, 3, [ACCEPT])], 1) == NONE
    assert sp.start_offset == 4 and sp.can_acquire()
    assert sp.acquire("b", batches(5, 14, 5), 100, 1) == [AcquiredRecords(8, 11, 1)]
    sp.max_in_flight = 20  # a group config change applies from the next fetch on
    assert sp.acquire("b", batches(10, 14, 5), 100, 1) == [AcquiredRecords(12, 14, 1)]


def test_offsets_below_start_are_ignored():
    sp = part(start_offset=10)
    assert sp.acquire("a", batches(0, 19, 5), 100, 0) == [AcquiredRecords(10, 19, 1)]
    assert sp.start_offset == 10


def test_all_accepted_moves_the_start_and_frees_memory():
    sp = part()
    sp.acquire("a", batches(0, 999, 100), 1000, 0)
    assert len(sp.ranges()) == 1
    assert sp.acknowledge("a", [(0, 999, [ACCEPT])], 1) == NONE
    assert sp.ranges() == [] and sp._ranges == []
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (1000, 999, 1000)
    assert sp.in_flight() == sp.acquired() == 0 and sp.records_acknowledged == 1000
    assert sp.next_lock_deadline() is None and sp.held_by("a") == 0


def test_ranges_stay_compact():
    sp = part(max_in_flight=5000)
    sp.acquire("a", batches(0, 2999, 100), 3000, 0)
    assert len(sp.ranges()) == 1  # one acquisition, one entry
    # acknowledge batch by batch, each second batch rejected, leaving the first one held
    for first in range(100, 3000, 100):
        assert sp.acknowledge("a", [(first, first + 99, [ACCEPT if first % 200 else REJECT])], 1) == NONE
    assert len(sp.ranges()) <= 30 and sp.start_offset == 0
    assert sp.acknowledge("a", [(0, 99, [RELEASE])], 2) == NONE
    assert sp.ranges()[0] == (0, 99, AVAILABLE, 1, None, None)
    assert sp.acquire("b", batches(0, 99, 100), 500, 3) == [AcquiredRecords(0, 99, 2)]
    assert sp.acknowledge("b", [(0, 99, [ACCEPT])], 4) == NONE
    assert sp.ranges() == [] and sp.start_offset == 3000


# ---- releasing, rejecting, the delivery count limit ----------------------------------------------

def test_release_redelivers_with_a_higher_count():
    sp = part()
    sp.acquire("a", batches(0, 9, 10), 100, 0)
    assert sp.acknowledge("a", [(3, 5, [RELEASE])], 1) == NONE
    assert sp.next_fetch_offset() == 3 and sp.records_released == 3
    assert sp.acquire("b", batches(0, 9, 10), 100, 2) == [AcquiredRecords(3, 5, 2)]
    assert sp.ranges() == [(0, 2, ACQUIRED, 1, "a", LOCK), (3, 5, ACQUIRED, 2, "b", 2 + LOCK),
                           (6, 9, ACQUIRED, 1, "a", LOCK)]
    assert sp.next_fetch_offset() == 10


def test_redelivery_splits_at_max_records():
    sp = part()
    sp.acquire("a", batches(0, 9, 10), 100, 0)
    sp.release_member("a")
    assert sp.acquire("b", batches(0, 9, 10), 4, 1) == [AcquiredRecords(0, 3, 2)]
    assert sp.acquire("c", batches(0, 19, 10), 4, 1) == [AcquiredRecords(4, 7, 2)]
    assert sp.acquire("c", batches(0, 19, 10), 3, 1) == [AcquiredRecords(8, 9, 2), AcquiredRecords(10, 19, 1)]


def test_reject_archives():
    sp = part()
    sp.acquire("a", batches(0, 9, 10), 100, 0)
    assert sp.acknowledge("a", [(0, 1, [REJECT]), (2, 4, [ACCEPT, REJECT, ACCEPT])], 1) == NONE
    assert sp.start_offset == 5 and sp.records_archived == 3 and sp.records_acknowledged == 2
    assert sp.next_fetch_offset() == 10


def test_poison_record_is_archived_through_releases():
    sp = part(delivery_count_limit=3)
    for delivery in (1, 2, 3):
        assert sp.acquire("a", [(0, 0), (1, 4)], 1, delivery) == [AcquiredRecords(0, 0, delivery)]
        assert sp.acknowledge("a", [(0, 0, [RELEASE])], delivery) == NONE
    assert sp.records_released == 2 and sp.records_archived == 1
    assert sp.start_offset == 1 and sp.next_fetch_offset() == 1  # never delivered a fourth time


def test_poison_record_is_archived_through_lock_timeouts():
    sp = part(delivery_count_limit=2)
    now = 0
    sp.acquire("a", batches(0, 4, 5), 100, now)
    assert sp.expire_locks(now + LOCK - 1) == 0
    now += LOCK
    assert sp.expire_locks(now) == 5 and sp.next_lock_deadline() is None
    assert sp.ranges() == [(0, 4, AVAILABLE, 1, None, None)] and sp.records_released == 5
    assert sp.acknowledge("a", [(0, 4, [ACCEPT])], now) == INVALID_RECORD_STATE  # the lock is gone
    assert sp.acquire("b", batches(0, 4, 5), 100, now) == [AcquiredRecords(0, 4, 2)]
    assert sp.next_lock_deadline() == now + LOCK
    assert sp.expire_locks(now + LOCK) == 5
    assert sp.ranges() == [] and sp.start_offset == 5 and sp.records_archived == 5


def test_lowered_limit_archives_available_records_instead_of_delivering():
    sp = SharePartition.restore(0, [StateBatch(0, 4, 0, 4), StateBatch(5, 9, 0, 1)])
    sp.delivery_count_limit = 3
    assert sp.acquire("a", batches(0, 9, 5), 100, 0) == [AcquiredRecords(5, 9, 2)]
    assert sp.start_offset == 5 and sp.records_archived == 5


def test_release_member():
    sp = part()
    sp.acquire("a", batches(0, 9, 5), 5, 0)
    sp.acquire("b", batches(5, 14, 5), 5, 0)
    sp.acquire("a", batches(10, 19, 5), 5, 0)
    assert sp.acknowledge("a", [(2, 2, [ACCEPT])], 1) == NONE
    assert sp.release_member("a") == 9 and sp.release_member("a") == 0
    assert sp.held_by("a") == 0 and sp.held_by("b") == 5
    assert sp.ranges() == [(0, 1, AVAILABLE, 1, None, None), (2, 2, ACKNOWLEDGED, 1, None, None),
                           (3, 4, AVAILABLE, 1, None, None), (5, 9, ACQUIRED, 1, "b", LOCK),
                           (10, 14, AVAILABLE, 1, None, None)]
    assert sp.next_fetch_offset() == 0


def test_two_members_never_hold_one_offset():
    sp = part()
    assert sp.acquire("a", batches(0, 9, 5), 100, 0) == [AcquiredRecords(0, 9, 1)]
    assert sp.acquire("b", batches(0, 9, 5), 100, 0) == []
    assert sp.acquire("b", batches(0, 14, 5), 100, 0) == [AcquiredRecords(10, 14, 1)]
    assert sp.acknowledge("b", [(0, 9, [ACCEPT])], 0) == INVALID_RECORD_STATE
    owners = {owner for _, _, _, _, owner, _ in sp.ranges()}
    assert owners == {"a", "b"} and sp.held_by("a") == 10 and sp.held_by("b") == 5


# ---- acknowledgement validation -------------------------------------------------------------------

def held_partition():
    sp = part()
    sp.acquire("a", batches(0, 9, 10), 100, 0)
    sp.acquire("b", batches(10, 19, 10), 100, 0)
    assert sp.acknowledge("a", [(5, 6, [ACCEPT]), (7, 7, [RELEASE])], 1) == NONE
    return sp


@pytest.mark.parametrize("acks, error", [
    ([(7, 7, [ACCEPT])], INVALID_RECORD_STATE),  # not held: released
    ([(10, 12, [ACCEPT])], INVALID_RECORD_STATE),  # held by another member
    ([(5, 6, [ACCEPT])], INVALID_RECORD_STATE),  # already acknowledged
    ([(0, 4, [ACCEPT]), (8, 9, [ACCEPT]), (9, 10, [ACCEPT])], INVALID_REQUEST),  # overlapping
    ([(8, 9, [ACCEPT]), (0, 4, [ACCEPT])], INVALID_REQUEST),  # out of order
    ([(4, 3, [ACCEPT])], INVALID_REQUEST),  # first > last
    ([(0, 4, [ACCEPT, ACCEPT])], INVALID_REQUEST),  # ack types: neither one nor one per offset
    ([(0, 4, [])], INVALID_REQUEST),
    ([(0, 4, [5])], INVALID_REQUEST),  # unknown type
    ([(0, 4, [ACCEPT]), (8, 9, [ACCEPT, 7])], INVALID_REQUEST),
    ([(0, 4, [ACCEPT]), (18, 20, [ACCEPT])], INVALID_RECORD_STATE),  # past SPEO (the first batch is fine)
    ([(0, 4, [ACCEPT]), (30, 30, [ACCEPT])], INVALID_RECORD_STATE),
    ([(0, 4, [ACCEPT]), (8, 9, [REJECT]), (4, 4, [ACCEPT])], INVALID_REQUEST),
    ([(0, 6, [ACCEPT])], INVALID_RECORD_STATE),  # partly held, partly acknowledged
])
def test_bad_acknowledgements_change_nothing(acks, error):
    sp = held_partition()
    before = frozen(sp)
    assert sp.acknowledge("a", acks, 2) == error
    assert frozen(sp) == before


def test_acknowledgement_below_the_start_is_invalid():
    sp = part()
    sp.acquire("a", batches(0, 9, 10), 100, 0)
    assert sp.acknowledge("a", [(0, 4, [ACCEPT])], 1) == NONE
    before = frozen(sp)
    assert sp.acknowledge("a", [(3, 6, [ACCEPT])], 1) == INVALID_RECORD_STATE
    assert sp.acknowledge("a", [(0, 4, [ACCEPT])], 1) == INVALID_RECORD_STATE
    assert frozen(sp) == before


def test_renew_extends_the_lock():
    sp = part()
    sp.acquire("a", batches(0, 9, 10), 100, 0)
    assert sp.acknowledge("a", [(0, 4, [RENEW])], 900) == NONE
    assert sp.ranges() == [(0, 4, ACQUIRED, 1, "a", 900 + LOCK), (5, 9, ACQUIRED, 1, "a", LOCK)]
    assert sp.snapshot() == (0, [StateBatch(0, 9, 0, 1)])  # a lock is not durable state
    assert sp.next_lock_deadline() == LOCK
    assert sp.expire_locks(LOCK) == 5
    assert sp.next_lock_deadline() == 900 + LOCK
    assert sp.acknowledge("a", [(0, 4, [RENEW, RENEW, ACCEPT, RENEW, RENEW])], 1500) == NONE
    assert sp.expire_locks(900 + LOCK) == 0
    assert sp.expire_locks(1500 + LOCK) == 4
    assert sp.ranges()[0] == (0, 1, AVAILABLE, 1, None, None) and sp.records_acknowledged == 1


def test_gap_archives_without_counting_a_record():
    sp = part()
    sp.acquire("a", [(0, 9)], 100, 0)  # a compacted batch: 3 and 4 are gone
    assert sp.acknowledge("a", [(0, 9, [ACCEPT] * 3 + [GAP] * 2 + [ACCEPT] * 5)], 1) == NONE
    assert sp.start_offset == 10 and sp.records_acknowledged == 8 and sp.records_archived == 0


# ---- what a read holds: skips and holes -----------------------------------------------------------

def test_skip_ranges_are_archived_undelivered():
    sp = part()
    got = sp.acquire("a", [(0, 4), (5, 5), (6, 9)], 100, 0, skip=[(5, 5)])
    assert got == [AcquiredRecords(0, 4, 1), AcquiredRecords(6, 9, 1)]
    assert sp.ranges()[1] == (5, 5, ARCHIVED, 0, None, None) and sp.records_archived == 1
    assert sp.acknowledge("a", [(5, 5, [ACCEPT])], 1) == INVALID_RECORD_STATE
    assert sp.acknowledge("a", [(0, 4, [ACCEPT]), (6, 9, [ACCEPT])], 1) == NONE
    assert sp.start_offset == 10


def test_skip_ranges_at_the_start_move_it_at_once():
    sp = part()
    got = sp.acquire("a", [(0, 2), (3, 5), (6, 8)], 100, 0, skip=[(0, 2), (6, 8)])
    assert got == [AcquiredRecords(3, 5, 1)]
    assert sp.start_offset == 3 and sp.end_offset == 8
    assert sp.acquire("a", [(9, 20)], 100, 0, skip=[(9, 20)]) == []
    assert sp.end_offset == 20 and sp.records_archived == 18 and sp.next_fetch_offset() == 21
    assert sp.acknowledge("a", [(3, 5, [ACCEPT])], 1) == NONE
    assert sp.ranges() == [] and sp.start_offset == 21


def test_skip_ranges_archive_available_records():
    sp = part()
    sp.acquire("a", batches(0, 9, 5), 100, 0)
    sp.release_member("a")
    assert sp.acquire("b", batches(0, 9, 5), 100, 1, skip=[(0, 4)]) == [AcquiredRecords(5, 9, 2)]
    assert sp.start_offset == 5


def test_offsets_without_records_are_archived():
    sp = part()
    assert sp.acquire("a", [(0, 2), (6, 8)], 100, 0) == [AcquiredRecords(0, 2, 1), AcquiredRecords(6, 8, 1)]
    assert sp.ranges()[1] == (3, 5, ARCHIVED, 0, None, None) and sp.records_archived == 0
    # a read at SPEO + 1 whose first batch starts later: compacted away
    assert sp.acquire("a", [(12, 14)], 100, 0) == [AcquiredRecords(12, 14, 1)]
    assert sp.ranges()[-2] == (9, 11, ARCHIVED, 0, None, None)
    # a re-delivery read from 6 finds 6-8 gone now: read_from says where the read started
    sp.release_member("a")
    assert sp.acquire("b", [(9, 14)], 100, 1, read_from=6) == [AcquiredRecords(12, 14, 2)]
    assert sp.next_fetch_offset() == 0


def test_new_partition_starting_before_the_log():
    sp = part()
    assert sp.acquire("a", [(100, 109)], 5, 0) == [AcquiredRecords(100, 109, 1)]
    assert sp.start_offset == 100


# ---- the start offset -----------------------------------------------------------------------------

def test_move_start_forgets_records_below_it():
    sp = part()
    sp.acquire("a", batches(0, 9, 10), 100, 0)
    sp.acquire("b", batches(10, 19, 10), 100, 0)
    sp.move_start(5)
    assert sp.start_offset == 5 and sp.held_by("a") == 5 and sp.acquired() == 15
    assert sp.acknowledge("a", [(0, 9, [ACCEPT])], 1) == INVALID_RECORD_STATE
    assert sp.acknowledge("a", [(5, 9, [ACCEPT])], 1) == NONE
    sp.move_start(3)  # never backwards
    assert sp.start_offset == 10
    sp.move_start(25)
    assert sp.ranges() == [] and sp.held_by("b") == 0 and sp.acquired() == 0
    assert (sp.start_offset, sp.next_fetch_offset()) == (25, 25)
    assert sp.expire_locks(10 * LOCK) == 0 and sp.next_lock_deadline() is None


def test_move_start_into_a_settled_run():
    sp = part()
    sp.acquire("a", batches(0, 9, 10), 100, 0)
    assert sp.acknowledge("a", [(4, 7, [ACCEPT])], 1) == NONE
    sp.move_start(2)
    assert sp.start_offset == 2
    sp.move_start(5)
    assert sp.start_offset == 8 and sp.held_by("a") == 2


def test_reset_sets_the_start_exactly():
    sp = part()
    sp.acquire("a", batches(0, 99, 10), 100, 0)
    sp.acknowledge("a", [(0, 49, [ACCEPT])], 1)
    sp.reset(10)
    assert (sp.start_offset, sp.ranges(), sp.next_fetch_offset(), sp.held_by("a")) == (10, [], 10, 0)
    assert sp.snapshot() == (10, []) and sp.next_lock_deadline() is None
    assert sp.acquire("a", batches(10, 19, 10), 100, 2) == [AcquiredRecords(10, 19, 1)]
    sp.reset(500)
    assert sp.start_offset == 500 and sp.lag(600) == 100


# ---- durable state --------------------------------------------------------------------------------

def test_snapshot_restore_round_trip():
    sp = part(delivery_count_limit=4)
    sp.acquire("a", batches(0, 9, 5), 100, 0)
    sp.acknowledge("a", [(0, 9, [RELEASE])], 1)
    sp.acquire("a", batches(0, 9, 5), 5, 2)  # 0-4 delivered twice, 5-9 once
    sp.acquire("b", batches(10, 29, 5), 10, 2)
    assert sp.acknowledge("b", [(10, 14, [ACCEPT]), (15, 16, [REJECT])], 3) == NONE
    start, state = sp.snapshot()
    assert (start, state) == (0, [StateBatch(0, 4, 0, 2), StateBatch(5, 9, 0, 1), StateBatch(10, 14, 2, 1),
                                  StateBatch(15, 16, 4, 1), StateBatch(17, 19, 0, 1)])
    back = SharePartition.restore(start, state, delivery_count_limit=4, lock_duration_ms=LOCK)
    assert back.snapshot() == (start, state) and not back.dirty
    assert (back.start_offset, back.end_offset, back.acquired(), back.in_flight()) == (0, 19, 0, 13)
    assert back.next_fetch_offset() == 0
    got = back.acquire("c", batches(0, 24, 5), 100, 10)
    assert got == [AcquiredRecords(0, 4, 3), AcquiredRecords(5, 9, 2), AcquiredRecords(17, 19, 2),
                   AcquiredRecords(20, 24, 1)]


def test_restore_fills_gaps_and_settles_the_head():
    state = [(0, 4, 2, 1), (5, 6, 4, 3), (8, 9, 1, 2), (12, 12, 0, 1)]
    sp = SharePartition.restore(0, state)
    assert sp.start_offset == 7 and sp.dirty  # the settled head is gone: a new snapshot to write
    assert sp.snapshot() == (7, [StateBatch(7, 7, 0, 0), StateBatch(8, 9, 0, 2), StateBatch(10, 11, 0, 0),
                                 StateBatch(12, 12, 0, 1)])
    assert SharePartition.restore(5, [], max_in_flight=3).snapshot() == (5, [])
    with pytest.raises(ValueError):
        SharePartition.restore(0, [(0, 1, 3, 1)])


def test_dirty_tracks_snapshot_changes():
    sp = part()
    assert not sp.dirty
    sp.acquire("a", batches(0, 9, 10), 100, 0)
    assert sp.dirty
    taken = sp.changes
    snap = sp.snapshot()
    sp.acknowledge("a", [(0, 0, [ACCEPT])], 1)
    sp.mark_persisted(taken)  # that older snapshot is durable; the acknowledgement is not yet
    assert sp.dirty and sp.snapshot() != snap
    sp.mark_persisted()
    assert not sp.dirty
    sp.acknowledge("a", [(1, 9, [RENEW])], 2)
    assert not sp.dirty  # a lock is not durable state
    sp.expire_locks(2 + LOCK)
    assert not sp.dirty  # acquired is written as available: same snapshot
    sp.acquire("b", batches(0, 9, 10), 100, 3)
    assert sp.dirty  # delivery counts moved


def test_counters_and_lag():
    sp = part()
    sp.acquire("a", batches(0, 9, 10), 100, 0)
    assert sp.acknowledge("a", [(2, 3, [ACCEPT]), (4, 4, [REJECT]), (5, 5, [RELEASE])], 1) == NONE
    assert (sp.in_flight(), sp.acquired()) == (7, 6)
    assert sp.lag(20) == 20 - 3 and sp.lag(10) == 7 and sp.lag(4) == 2 and sp.lag(0) == 0
    assert (sp.records_acquired, sp.records_acknowledged, sp.records_archived, sp.records_released) == (10, 2, 1, 1)


def test_bad_record_batches_are_refused():
    with pytest.raises(ValueError):
        part().acquire("a", [(5, 9), (0, 4)], 100, 0)
    with pytest.raises(ValueError):
        part().acquire("a", [(5, 4)], 100, 0)
    assert part().acquire("a", [], 100, 0) == []


# ---- randomized: many members against a per-offset model ------------------------------------------

class Model:
    """The same rules, one offset at a time: offset -> [state, count, owner, deadline] for the window."""

    def __init__(self, limit, lock, max_in_flight):
        self.limit, self.lock, self.max_in_flight = limit, lock, max_in_flight
        self.spso = 0
        self.st = {}
        self.acquired = self.released = self.archived = self.acknowledged = 0

    @property
    def end(self):
        return self.spso + len(self.st) - 1

    def settle(self):
        while self.spso in self.st and self.st[self.spso][0] in (ACKNOWLEDGED, ARCHIVED):
            del self.st[self.spso]
            self.spso += 1

    def next_fetch(self):
        avail = [o for o, s in self.st.items() if s[0] == AVAILABLE]
        return min(avail) if avail else self.end + 1

    def release(self, o):
        s = self.st[o]
        if s[1] >= self.limit:
            s[:] = [ARCHIVED, s[1], None, None]
            self.archived += 1
        else:
            s[:] = [AVAILABLE, s[1], None, None]
            self.released += 1

    def acquire(self, member, read, max_records, now, skip, read_from):
        kinds = {}
        for idx, (b, last) in enumerate(read):
            for o in range(b, last + 1):
                kinds[o] = ("rec", idx)
        last = read[-1][1]
        for a, z in skip:
            for o in range(a, min(z, last) + 1):
                kinds[o] = ("skip", kinds.get(o, (None, None))[1])
        end = self.end
        hole_from = end + 1 if read_from is None else min(read_from, end + 1)
        taken, out, limit_batch, settled = 0, [], None, False
        for o in range(max(min(hole_from, read[0][0]), self.spso), last + 1):
            kind, b = kinds.get(o, ("hole", None))
            if o <= end:
                if taken >= max_records:
                    break
                s = self.st[o]
                if s[0] != AVAILABLE:
                    continue
                if kind == "rec" and s[1] < self.limit:
                    s[:] = [ACQUIRED, s[1] + 1, member, now + self.lock]
                    taken += 1
                    out.append((o, s[1]))
                else:
                    s[:] = [ARCHIVED, s[1], None, None]
                    self.archived += kind != "hole"
                continue
            if not settled:
                self.settle()
                settled = True
            if taken >= max_records and (limit_batch is None or b != limit_batch):
                break
            if kind != "rec" and not self.st:
                self.spso = o + 1
                self.archived += kind == "skip"
                continue
            if o - self.spso + 1 > self.max_in_flight:
                break
            if kind != "rec":
                self.st[o] = [ARCHIVED, 0, None, None]
                self.archived += kind == "skip"
            else:
                self.st[o] = [ACQUIRED, 1, member, now + self.lock]
                taken += 1
                out.append((o, 1))
                if taken >= max_records and limit_batch is None:
                    limit_batch = b
        self.settle()
        self.acquired += taken
        return out

    def acknowledge(self, member, acks, now):
        prev = None
        for first, last, types in acks:
            if (first > last or (prev is not None and first <= prev) or len(types) not in (1, last - first + 1)
                    or any(t not in range(5) for t in types)):
                return INVALID_REQUEST
            prev = last
        for first, last, _ in acks:
            for o in range(first, last + 1):
                s = self.st.get(o)
                if s is None or s[0] != ACQUIRED or s[2] != member:
                    return INVALID_RECORD_STATE
        for first, last, types in acks:
            for o in range(first, last + 1):
                t = types[0] if len(types) == 1 else types[o - first]
                s = self.st[o]
                if t == ACCEPT:
                    s[:] = [ACKNOWLEDGED, s[1], None, None]
                    self.acknowledged += 1
                elif t == RELEASE:
                    self.release(o)
                elif t == RENEW:
                    s[3] = now + self.lock
                else:
                    s[:] = [ARCHIVED, s[1], None, None]
                    self.archived += t == REJECT
        self.settle()
        return NONE

    def release_where(self, held):
        n = 0
        for o, s in self.st.items():
            if s[0] == ACQUIRED and held(s):
                self.release(o)
                n += 1
        self.settle()
        return n

    def move_start(self, offset):
        if offset <= self.spso:
            return
        for o in range(self.spso, offset):
            self.st.pop(o, None)
        self.spso = offset
        self.settle()


def make_log(rng, n):
    """Record batches (base, last) with compaction gaps, and which of them are to be skipped."""
    out, skip, o = [], [], 0
    while o < n:
        o += rng.choice((0, 0, 0, 0, 1, 3))
        size = rng.randint(1, 5)
        out.append((o, o + size - 1))
        roll = rng.random()
        if roll < 0.1:
            skip.append((o, o + size - 1))
        elif roll < 0.15:  # part of a batch: the batch is still taken whole past max_records
            a = rng.randint(o, o + size - 1)
            skip.append((a, rng.randint(a, o + size - 1)))
        o += size
    return out, skip


def check(sp, model):
    assert sp.start_offset == model.spso and sp.end_offset == model.end
    assert {o: (st, c, owner) for o, (st, c, owner, _) in model.st.items()} == per_offset(sp)
    deadlines = {o: d for first, last, st, _, _, d in sp.ranges() for o in range(first, last + 1)}
    assert deadlines == {o: s[3] for o, s in model.st.items()}
    assert sp.next_fetch_offset() == model.next_fetch()
    assert (sp.records_acquired, sp.records_released, sp.records_archived, sp.records_acknowledged) == (
        model.acquired, model.released, model.archived, model.acknowledged)
    assert sp.acquired() == sum(s[0] == ACQUIRED for s in model.st.values())
    assert sp.in_flight() == sum(s[0] in (AVAILABLE, ACQUIRED) for s in model.st.values())
    live = [s[3] for s in model.st.values() if s[0] == ACQUIRED]
    assert sp.next_lock_deadline() == (min(live) if live else None)
    rows = sp.ranges()
    for a, b in zip(rows, rows[1:]):
        assert a[1] + 1 == b[0] and a[2:] != b[2:]  # contiguous, and neighbours that could merge did


def random_acks(rng, model, member):
    """Mostly valid acknowledgements of what ``member`` holds; now and then a wrong one."""
    held = sorted(o for o, s in model.st.items() if s[0] == ACQUIRED and s[2] == member)
    roll = rng.random()
    if not held or roll < 0.1:
        first = rng.randint(max(0, model.spso - 3), model.end + 3)
        last = first + rng.randint(-1, 4)
        return [(first, last, [rng.choice((ACCEPT, RELEASE, REJECT, 7))])]
    acks, i = [], 0
    while i < len(held):
        j = i
        while j + 1 < len(held) and held[j + 1] == held[j] + 1 and rng.random() < 0.8:
            j += 1
        if rng.random() < 0.7:
            first, last = held[i], held[j]
            types = ([rng.choice((ACCEPT, ACCEPT, RELEASE, REJECT, GAP, RENEW))] if rng.random() < 0.6 else
                     [rng.choice((ACCEPT, RELEASE, REJECT, RENEW)) for _ in range(last - first + 1)])
            acks.append((first, last, types))
        i = j + 1
    if roll > 0.95 and acks:
        acks.append(acks[0])  # overlapping / out of order
    return acks


@pytest.mark.parametrize("seed", range(6))
def test_randomized_against_a_model(seed):
    rng = random.Random(seed)
    settings = dict(delivery_count_limit=rng.randint(1, 4), lock_duration_ms=LOCK,
                    max_in_flight=rng.choice((8, 20, 60)))
    sp = SharePartition(**settings)
    model = Model(settings["delivery_count_limit"], LOCK, settings["max_in_flight"])
    log, skips = make_log(rng, 2000)
    members = [f"m{k}" for k in range(5)]
    now = 0
    for _ in range(1500):
        now += rng.randint(0, 150)
        action = rng.random()
        member = rng.choice(members)
        if action < 0.4:
            start = sp.next_fetch_offset()
            k = next((i for i, (_, last) in enumerate(log) if last >= start), None)
            if k is not None:
                read = log[k:k + rng.randint(1, 8)]
                skip = [s for s in skips if s[1] >= read[0][0] and s[0] <= read[-1][1]]
                read_from = start if rng.random() < 0.5 else None
                max_records = rng.randint(0, 12)
                before = {o for o, s in model.st.items() if s[0] == ACQUIRED}
                got = sp.acquire(member, read, max_records, now, skip=skip, read_from=read_from)
                want = model.acquire(member, read, max_records, now, skip, read_from)
                assert [(o, r.delivery_count) for r in got
                        for o in range(r.first_offset, r.last_offset + 1)] == want
                assert not before & {o for o, _ in want}  # nobody else held any of it
                assert all(a.last_offset + 1 < b.first_offset or a.delivery_count != b.delivery_count
                           for a, b in zip(got, got[1:]))
        elif action < 0.8:
            acks = random_acks(rng, model, member)
            assert sp.acknowledge(member, acks, now) == model.acknowledge(member, acks, now)
        elif action < 0.88:
            assert sp.expire_locks(now) == model.release_where(lambda s: s[3] <= now)
        elif action < 0.93:
            assert sp.release_member(member) == model.release_where(lambda s: s[2] == member)
        elif action < 0.95:
            offset = sp.start_offset + rng.randint(-2, 6)
            sp.move_start(offset)
            model.move_start(offset)
        elif action < 0.97:
            limit = rng.randint(1, 4)
            sp.delivery_count_limit = model.limit = limit
        else:
            start, state = sp.snapshot()
            back = SharePartition.restore(start, state, **settings)
            assert back.snapshot() == (start, state)
            assert back.acquired() == 0 and back.in_flight() == sp.in_flight()
        check(sp, model)
