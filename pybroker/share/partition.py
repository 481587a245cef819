"""One share-partition (KIP-932): the in-flight records of one share group on one topic partition.

It lives on the partition's leader, one per (share group, topic partition), and is a pure state machine:
no I/O, no clock (every call takes ``now_ms``), no log. The leader reads the log at ``next_fetch_offset()``
and hands the batches it read to ``acquire()``; acknowledgements, departing members and expired locks
move records on; ``snapshot()`` is the durable state the caller writes to the share coordinator
(pybroker/share/coordinator.py) and ``SharePartition.restore()`` builds a partition back from it.

The window: the records from the share-partition start offset (SPSO) to its end offset (SPEO) are in
flight, each AVAILABLE, ACQUIRED (by one member until a lock deadline), ACKNOWLEDGED or ARCHIVED, with a
delivery count. SPSO always sits on a record not yet acknowledged/archived: the settled prefix is dropped
from memory as soon as it forms.

The store: a list of ``_Range`` entries sorted by offset and contiguous from SPSO to SPEO (every offset of
the window in exactly one entry; offsets the log has no record for are ARCHIVED). An entry is one run of
records with one state, delivery count and lock; an operation splits an entry only where a sub-range
changes and merges it back into equal neighbours at once, so a fetched batch stays one entry through its
life. Lookups bisect; every operation walks only the entries it touches (list splices are memmoves).

Locks: each acquire() (and each RENEW) makes one ``_Lease`` (member, deadline, offset span) shared by the
entries it covers. A heap of leases by deadline drives expire_locks(), a member -> leases map drives
release_member(), and each walks only its lease's span.
"""
from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left, bisect_right
from enum import IntEnum
from operator import attrgetter
from typing import Iterable, NamedTuple, Sequence

from pybroker.protocol.errors import INVALID_RECORD_STATE, INVALID_REQUEST, NONE


class RecordState(IntEnum):
    """Kafka's delivery states (their ids are persisted in ``__share_group_state``)."""
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """AcknowledgeTypes of ShareFetch/ShareAcknowledge (RENEW: KIP-1222, Kafka 4.2)."""
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class AcquiredRecords(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class StateBatch(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED,
                                               RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_SETTLED = (ACKNOWLEDGED, ARCHIVED)
_ACK_TYPES = frozenset(int(t) for t in AckType)
_RECORD, _SKIP, _HOLE = "record", "skip", "hole"  # what the log read has at an offset
_FIRST = attrgetter("first")


class _Lease:
    """One acquisition lock: the records of one acquire() (or one RENEW) share it."""
    __slots__ = ("member", "deadline", "lo", "hi", "held")

    def __init__(self, member: str, deadline: int, lo: int):
        self.member, self.deadline, self.lo, self.hi, self.held = member, deadline, lo, lo, 0


class _Range:
    __slots__ = ("first", "last", "state", "count", "lease")

    def __init__(self, first: int, last: int, state: RecordState, count: int, lease: _Lease | None):
        self.first, self.last, self.state, self.count, self.lease = first, last, state, count, lease


class _Grant:
    """The running result of one acquire(): its lease (made at the first record taken) and what it took."""
    __slots__ = ("member", "deadline", "limit", "taken", "lease", "limit_batch", "out")

    def __init__(self, member: str, deadline: int, limit: int):
        self.member, self.deadline, self.limit = member, deadline, limit
        self.taken, self.lease, self.limit_batch = 0, None, None
        self.out: list[AcquiredRecords] = []

    def add(self, lo: int, hi: int, count: int) -> None:
        out = self.out
        if out and out[-1].last_offset + 1 == lo and out[-1].delivery_count == count:
            out[-1] = out[-1]._replace(last_offset=hi)
        else:
            out.append(AcquiredRecords(lo, hi, count))
        self.taken += hi - lo + 1


def _persisted(state: RecordState) -> RecordState:
    return AVAILABLE if state == ACQUIRED else state  # a new leader hands acquired records out again


def _same(a: _Range, b: _Range) -> bool:
    return a.state == b.state and a.count == b.count and a.lease is b.lease


class SharePartition:
    """The in-flight records of one share-partition; see the module docstring for the store."""

    def __init__(self, start_offset: int = 0, *, delivery_count_limit: int = 5, lock_duration_ms: int = 30000,
                 max_in_flight: int = 2000):
        # group configs may change these at any time; they apply from the next operation on
        self.delivery_count_limit = delivery_count_limit
        self.lock_duration_ms = lock_duration_ms
        self.max_in_flight = max_in_flight
        self.start_offset = start_offset
        self._ranges: list[_Range] = []
        self._records = [0] * 5  # records in the window per state id
        self._heap: list[tuple[int, int, _Lease]] = []  # (deadline, seq, lease); dead leases dropped lazily
        self._leases: dict[str, set[_Lease]] = {}  # member -> leases still holding records
        self._seq = itertools.count()
        self._available_from = start_offset  # no AVAILABLE record below this offset
        self.changes = 0  # bumped whenever snapshot() would answer differently
        self._persisted_changes = 0
        self.records_acquired = 0
        self.records_released = 0  # by RELEASE, a departing member or a lock timeout
        self.records_archived = 0  # by REJECT, the delivery count limit or a skip range
        self.records_acknowledged = 0

    # ---- reading ------------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """SPEO: the last in-flight offset (start_offset - 1 when nothing is in flight)."""
        return self._ranges[-1].last if self._ranges else self.start_offset - 1

    def next_fetch_offset(self) -> int:
        """Where the leader reads the log next: the first AVAILABLE record, else past the window."""
        if not self._records[AVAILABLE]:
            return self.end_offset + 1
        rs = self._ranges
        i = self._index(max(self._available_from, self.start_offset))
        while rs[i].state != AVAILABLE:
            i += 1
        self._available_from = rs[i].first
        return rs[i].first

    def can_acquire(self) -> bool:
        """Whether a fetch could acquire anything: a record to re-deliver or room in the window."""
        return bool(self._records[AVAILABLE]) or self.end_offset - self.start_offset + 1 < self.max_in_flight

    def in_flight(self) -> int:
        """Records between SPSO and SPEO not yet acknowledged or archived."""
        return self._records[AVAILABLE] + self._records[ACQUIRED]

    def acquired(self) -> int:
        return self._records[ACQUIRED]

    def held_by(self, member_id: str) -> int:
        return sum(lease.held for lease in self._leases.get(member_id, ()))

    def lag(self, end_offset: int) -> int:
        """Records from SPSO up to ``end_offset`` (exclusive: the high watermark) not yet settled."""
        if end_offset <= self.start_offset:
            return 0
        if end_offset > self.end_offset:
            settled = self._records[ACKNOWLEDGED] + self._records[ARCHIVED]
            return end_offset - self.start_offset - settled
        lag = 0
        for r in self._ranges:
            if r.first >= end_offset:
                break
            if r.state not in _SETTLED:
                lag += min(r.last, end_offset - 1) - r.first + 1
        return lag

    def next_lock_deadline(self) -> int | None:
        heap = self._heap
        while heap and not heap[0][2].held:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def ranges(self) -> list[tuple[int, int, RecordState, int, str | None, int | None]]:
        """The store as (first, last, state, delivery count, owner, lock deadline) rows."""
        return [(r.first, r.last, r.state, r.count, r.lease.member if r.lease else None,
                 r.lease.deadline if r.lease else None) for r in self._ranges]

    # ---- acquiring ----------------------------------------------------------------------------

    def acquire(self, member_id: str, batches: Sequence[tuple[int, int]], max_records: int, now_ms: int, *,
                skip: Iterable[tuple[int, int]] = (), read_from: int | None = None) -> list[AcquiredRecords]:
        """Acquire for ``member_id`` what the leader just read: the record batches ``(base, last)`` in
        order. AVAILABLE in-flight records are re-delivered (split at ``max_records``); new records past
        SPEO are taken a whole batch at a time until ``max_records`` is reached, and never past
        ``max_in_flight`` records in the window. ``skip`` ranges (control batches, aborted data) are
        archived undelivered. Offsets the read shows have no record (between batches; before the first
        one from ``read_from``, the offset the read started at, else from SPEO + 1) are archived too:
        batches must come from a read at ``next_fetch_offset()`` made after the last ``reset()``.
        """
        if not batches:
            return []
        end = self.end_offset
        hole_from = end + 1 if read_from is None else min(read_from, end + 1)
        grant = _Grant(member_id, now_ms + self.lock_duration_ms, max_records)
        settled_window = False
        for lo, hi, kind, batch in _read_segments(batches, skip, hole_from, self.start_offset):
            if lo <= end:
                if not self._redeliver(lo, min(hi, end), kind, grant):
                    break
                lo = end + 1
                if lo > hi:
                    continue
            if not settled_window:
                self._settle()  # the window's settled head no longer counts against max_in_flight
                settled_window = True
            if not self._append(lo, hi, kind, batch, grant):
                break
        self._settle()
        self.records_acquired += grant.taken
        return grant.out

    def _redeliver(self, lo: int, hi: int, kind: str, grant: _Grant) -> bool:
        """Within the window: acquire or archive the AVAILABLE records of [lo, hi]. False: stop."""
        rs = self._ranges
        pos = lo
        while pos <= hi:
            if grant.taken >= grant.limit:
                return False
            r = rs[self._index(pos)]
            if r.state != AVAILABLE:
                pos = r.last + 1
                continue
            piece = min(r.last, hi)
            if kind == _RECORD and r.count < self.delivery_count_limit:
                piece = min(piece, pos + grant.limit - grant.taken - 1)
                i = self._carve(pos, piece)
                self._set(rs[i], ACQUIRED, rs[i].count + 1, self._lease_for(grant, pos, piece))
                grant.add(pos, piece, rs[i].count)
            else:  # no record, never to be delivered, or delivered too often already
                i = self._carve(pos, piece)
                self._set(rs[i], ARCHIVED, rs[i].count, None)
                if kind != _HOLE:
                    self.records_archived += piece - pos + 1
            self._coalesce(i)
            pos = piece + 1
        return True

    def _append(self, lo: int, hi: int, kind: str, batch: int | None, grant: _Grant) -> bool:
        """Past the window: add [lo, hi] (starting at SPEO + 1) to it. False: stop."""
        if grant.taken >= grant.limit and (grant.limit_batch is None or batch != grant.limit_batch):
            return False
        if kind != _RECORD and not self._ranges:
            self.start_offset = hi + 1  # settled as soon as it comes in: nothing to keep
            self.changes += 1
            if kind == _SKIP:
                self.records_archived += hi - lo + 1
            return True
        last = min(hi, self.start_offset + self.max_in_flight - 1)
        if last < lo:
            return False
        if kind != _RECORD:
            self._push(lo, last, ARCHIVED, 0, None)
            if kind == _SKIP:
                self.records_archived += last - lo + 1
        else:
            if grant.limit_batch is None and grant.taken + last - lo + 1 >= grant.limit:
                grant.limit_batch = batch  # the batch that reaches max_records is taken whole
            self._push(lo, last, ACQUIRED, 1, self._lease_for(grant, lo, last))
            grant.add(lo, last, 1)
        return last == hi

    def _lease_for(self, grant: _Grant, lo: int, hi: int) -> _Lease:
        lease = grant.lease
        if lease is None:
            lease = grant.lease = _Lease(grant.member, grant.deadline, lo)
            heapq.heappush(self._heap, (lease.deadline, next(self._seq), lease))
            self._leases.setdefault(lease.member, set()).add(lease)
        lease.hi = hi
        return lease

    # ---- acknowledging ------------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Sequence[tuple[int, int, Sequence[int]]], now_ms: int) -> int:
        """Apply one ShareFetch/ShareAcknowledge's acknowledgements for this partition, all or nothing:
        ``(first, last, ack_types)`` with one type for the range or one per offset. The error code:
        INVALID_REQUEST for malformed batches, INVALID_RECORD_STATE unless every offset is in flight,
        ACQUIRED and held by ``member_id``, else NONE. A lock past its deadline holds until
        expire_locks() runs (the caller's timer), as a Kafka lock holds until its timer task runs."""
        prev = None
        for first, last, types in batches:
            if (first > last or (prev is not None and first <= prev) or len(types) not in (1, last - first + 1)
                    or any(t not in _ACK_TYPES for t in types)):
                return INVALID_REQUEST
            prev = last
        rs = self._ranges
        for first, last, _ in batches:
            if first < self.start_offset or last > self.end_offset:
                return INVALID_RECORD_STATE
            i = self._index(first)
            while i < len(rs) and rs[i].first <= last:
                if rs[i].state != ACQUIRED or rs[i].lease.member != member_id:
                    return INVALID_RECORD_STATE
                i += 1
        renewal = _Grant(member_id, now_ms + self.lock_duration_ms, 0)  # one new lease for all RENEWs
        for first, last, types in batches:
            for lo, hi, ack in _runs(first, last, types):
                self._apply_ack(lo, hi, ack, renewal)
        self._settle()
        return NONE

    def _apply_ack(self, lo: int, hi: int, ack: int, renewal: _Grant) -> None:
        rs = self._ranges
        pos = lo
        while pos <= hi:
            piece = min(rs[self._index(pos)].last, hi)
            i = self._carve(pos, piece)
            r, n = rs[i], piece - pos + 1
            if ack == AckType.ACCEPT:
                self._set(r, ACKNOWLEDGED, r.count, None)
                self.records_acknowledged += n
            elif ack == AckType.RELEASE:
                self._release(r, n)
            elif ack == AckType.RENEW:
                self._set(r, ACQUIRED, r.count, self._lease_for(renewal, pos, piece))
            else:  # REJECT, or GAP: no record at these offsets
                self._set(r, ARCHIVED, r.count, None)
                if ack == AckType.REJECT:
                    self.records_archived += n
            self._coalesce(i)
            pos = piece + 1

    def _release(self, r: _Range, n: int) -> None:
        if r.count >= self.delivery_count_limit:
            self._set(r, ARCHIVED, r.count, None)
            self.records_archived += n
        else:
            self._set(r, AVAILABLE, r.count, None)
            self.records_released += n

    # ---- locks and members --------------------------------------------------------------------

    def release_member(self, member_id: str) -> int:
        """Everything ``member_id`` holds goes back (a member that left or was fenced): how many records."""
        n = 0
        for lease in sorted(self._leases.pop(member_id, ()), key=attrgetter("lo")):
            n += self._release_lease(lease)
        self._settle()
        return n

    def expire_locks(self, now_ms: int) -> int:
        """Release the records whose lock deadline is at or before ``now_ms``: how many records."""
        n = 0
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            lease = heapq.heappop(heap)[2]
            if lease.held:
                n += self._release_lease(lease)
        if n:
            self._settle()
        return n

    def _release_lease(self, lease: _Lease) -> int:
        rs = self._ranges
        pos, hi = max(lease.lo, self.start_offset), min(lease.hi, self.end_offset)
        n = 0
        while pos <= hi and lease.held:
            i = self._index(pos)
            r = rs[i]
            if r.lease is lease:
                size = r.last - r.first + 1
                self._release(r, size)
                n += size
                i = self._coalesce(i)
            pos = rs[i].last + 1
        return n

    # ---- the start offset ---------------------------------------------------------------------

    def move_start(self, offset: int) -> None:
        """The log start moved (retention, DeleteRecords): records below ``offset`` are forgotten, held
        ones too, and SPSO becomes max(SPSO, offset)."""
        if offset <= self.start_offset:
            return
        rs = self._ranges
        k = len(rs)
        if rs and offset <= rs[-1].last:
            k = self._index(offset)
            if rs[k].first < offset:
                self._split(k, offset)
                k += 1
        for r in rs[:k]:
            self._drop(r)
        del rs[:k]
        self.start_offset = offset
        self.changes += 1
        self._settle()

    def reset(self, offset: int) -> None:
        """An operator reset the share group's offsets: SPSO = ``offset`` exactly, nothing in flight."""
        self._ranges.clear()
        self._records = [0] * 5
        self._heap.clear()
        self._leases.clear()
        self.start_offset = self._available_from = offset
        self.changes += 1

    # ---- durable state ------------------------------------------------------------------------

    def snapshot(self) -> tuple[int, list[StateBatch]]:
        """(SPSO, state batches) for the share coordinator; ACQUIRED is written as AVAILABLE."""
        out: list[StateBatch] = []
        for r in self._ranges:
            state = _persisted(r.state)
            if out and out[-1].delivery_state == state and out[-1].delivery_count == r.count:
                out[-1] = out[-1]._replace(last_offset=r.last)
            else:
                out.append(StateBatch(r.first, r.last, int(state), r.count))
        return self.start_offset, out

    @classmethod
    def restore(cls, start_offset: int, state_batches: Iterable[Sequence[int]], **settings) -> SharePartition:
        """A partition from its durable state: SPEO is the last batch's last offset; offsets between the
        batches were never delivered (AVAILABLE, count 0); ACQUIRED is taken as AVAILABLE."""
        sp = cls(start_offset, **settings)
        pos = start_offset
        for first, last, state, count in sorted(state_batches, key=lambda b: b[0]):
            state = _persisted(RecordState(state))
            first = max(first, pos)
            if last < first:
                continue
            if first > pos:
                sp._push(pos, first - 1, AVAILABLE, 0, None)
            sp._push(first, last, state, count, None)
            pos = last + 1
        sp.changes = 0
        sp._settle()
        return sp

    @property
    def dirty(self) -> bool:
        """Whether snapshot() changed since the last mark_persisted()."""
        return self.changes != self._persisted_changes

    def mark_persisted(self, changes: int | None = None) -> None:
        """The snapshot taken when ``changes`` had this value (default: now) is durable."""
        self._persisted_changes = self.changes if changes is None else changes

    # ---- the store ----------------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """The entry holding ``offset`` (which must be in the window)."""
        return bisect_right(self._ranges, offset, key=_FIRST) - 1

    def _split(self, i: int, at: int) -> None:
        r = self._ranges[i]
        self._ranges.insert(i + 1, _Range(at, r.last, r.state, r.count, r.lease))
        r.last = at - 1

    def _carve(self, lo: int, hi: int) -> int:
        """Split so one entry is exactly [lo, hi] (inside one entry now); its index."""
        i = self._index(lo)
        if self._ranges[i].first < lo:
            self._split(i, lo)
            i += 1
        if self._ranges[i].last > hi:
            self._split(i, hi + 1)
        return i

    def _coalesce(self, i: int) -> int:
        """Merge entry i into equal neighbours; the index of the merged entry."""
        rs = self._ranges
        r = rs[i]
        if i + 1 < len(rs) and _same(r, rs[i + 1]):
            r.last = rs[i + 1].last
            del rs[i + 1]
        if i > 0 and _same(rs[i - 1], r):
            rs[i - 1].last = r.last
            del rs[i]
            i -= 1
        return i

    def _set(self, r: _Range, state: RecordState, count: int, lease: _Lease | None) -> None:
        n = r.last - r.first + 1
        self._records[r.state] -= n
        self._records[state] += n
        if r.lease is not None:
            self._unhold(r.lease, n)
        if lease is not None:
            lease.held += n
        if _persisted(r.state) != _persisted(state) or r.count != count:
            self.changes += 1
        if state == AVAILABLE and r.first < self._available_from:
            self._available_from = r.first
        r.state, r.count, r.lease = state, count, lease

    def _push(self, first: int, last: int, state: RecordState, count: int, lease: _Lease | None) -> None:
        """Append [first, last] at SPEO + 1."""
        n = last - first + 1
        self._ranges.append(_Range(first, last, state, count, lease))
        self._records[state] += n
        if lease is not None:
            lease.held += n
        if state == AVAILABLE and first < self._available_from:
            self._available_from = first
        self.changes += 1
        self._coalesce(len(self._ranges) - 1)

    def _drop(self, r: _Range) -> None:
        n = r.last - r.first + 1
        self._records[r.state] -= n
        if r.lease is not None:
            self._unhold(r.lease, n)

    def _unhold(self, lease: _Lease, n: int) -> None:
        lease.held -= n
        if not lease.held:
            held = self._leases.get(lease.member)
            if held is not None:
                held.discard(lease)
                if not held:
                    del self._leases[lease.member]

    def _settle(self) -> None:
        """Move SPSO past the acknowledged/archived prefix and forget it."""
        rs = self._ranges
        k = 0
        while k < len(rs) and rs[k].state in _SETTLED:
            self._drop(rs[k])
            k += 1
        if k:
            self.start_offset = rs[k - 1].last + 1
            del rs[:k]
            self.changes += 1


def _runs(first: int, last: int, types: Sequence[int]) -> Iterable[tuple[int, int, int]]:
    """An acknowledgement batch as runs of one type."""
    if len(types) == 1:
        yield first, last, types[0]
        return
    lo = first
    for k in range(1, len(types) + 1):
        if k == len(types) or types[k] != types[k - 1]:
            yield lo, first + k - 1, types[k - 1]
            lo = first + k


def _read_segments(batches: Sequence[tuple[int, int]], skip: Iterable[tuple[int, int]], hole_from: int,
                   floor: int) -> list[tuple[int, int, str, int | None]]:
    """What a log read holds, from ``hole_from`` (or the first batch) to the last batch, as contiguous
    (lo, hi, kind, batch index) segments at or above ``floor``: records, skipped offsets, and holes."""
    skips: list[list[int]] = []
    for a, z in sorted(skip):
        if skips and a <= skips[-1][1] + 1:
            skips[-1][1] = max(skips[-1][1], z)
        else:
            skips.append([a, z])
    skip_ends = [z for _, z in skips]
    out: list[tuple[int, int, str, int | None]] = []

    def add(lo: int, hi: int, kind: str, batch: int | None) -> None:
        lo = max(lo, floor)
        if lo > hi:
            return
        k = bisect_left(skip_ends, lo)  # the first skip range ending at or after lo
        while lo <= hi:
            if k < len(skips) and skips[k][0] <= lo:
                z = min(skips[k][1], hi)
                out.append((lo, z, _SKIP, batch))
                k += 1
            else:
                z = min(skips[k][0] - 1, hi) if k < len(skips) else hi
                out.append((lo, z, kind, batch))
            lo = z + 1

    prev = min(hole_from, batches[0][0]) - 1
    for index, (base, last) in enumerate(batches):
        if base > last or base <= prev:
            raise ValueError(f"record batches out of order: {list(batches)}")
        if base > prev + 1:
            add(prev + 1, base - 1, _HOLE, None)
        add(base, last, _RECORD, index)
        prev = last
    return out
