"""The share-partitions this broker leads: acquisition of records for ShareFetch, acknowledgements,
lock timeouts, and the durable state written to the share coordinator.

A share-partition is taken on when a member first fetches it here: its state is read from the share
coordinator (with this leader's epoch, which fences the previous leader's writes) or, for a new one,
initialized at ``share.auto.offset.reset``. Records are read from the log below the high watermark
(the last stable offset under read_committed), acquired for the fetching member and sent as the
log's batches with the acquired ranges. Acknowledgements are answered once their state is written.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from pybroker.errors import OffsetOutOfRangeError
from pybroker.protocol.errors import (COORDINATOR_NOT_AVAILABLE, FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH,
                                      NOT_LEADER_OR_FOLLOWER, UNKNOWN_SERVER_ERROR)
from pybroker.share import batches as B
from pybroker.share.partition import SharePartition
from pybroker.share.state_records import StateKey

log = logging.getLogger(__name__)

LOCK_CHECK_S = 0.1  # how often acquisition locks are checked for expiry
READ_CHUNK = 1 << 20


@dataclass(eq=False)
class Held:
    """One share-partition led here."""
    key: StateKey
    topic: str
    index: int
    leader_epoch: int
    state_epoch: int = 0
    sp: SharePartition | None = None
    error: int = 0  # the load failed with this (the next fetch tries again)
    ready: asyncio.Future | None = None
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class Fetched:
    error: int = 0
    records: bytes | None = None
    acquired: list = field(default_factory=list)  # AcquiredRecords


class SharePartitionManager:
    def __init__(self, services, persister, settings_for):
        self.services = services  # replicas, metadata
        self.persister = persister
        self.settings_for = settings_for  # group id -> ShareGroupSettings
        self.held: dict[StateKey, Held] = {}
        self._changed = asyncio.Event()  # records became available again (released, lock timed out)
        self._timer: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()

    def startup(self) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._expire_forever())

    async def shutdown(self) -> None:
        for task in [self._timer, *self._tasks]:
            if task is not None:
                task.cancel()
        self.held.clear()

    # ---- leadership --------------------------------------------------------------------------

    def on_leadership(self, key, is_leader: bool) -> None:
        """A partition moved (or this broker became its leader again): its share-partitions are read anew."""
        topic, index = key
        for k in [k for k, h in self.held.items() if (h.topic, h.index) == (topic, index)]:
            del self.held[k]

    # ---- taking a share-partition on ---------------------------------------------------------------

    async def _get(self, group_id: str, topic: str, index: int, topic_id) -> Held | int:
        partition = self.services.replicas.get_leader(topic, index)
        if partition is None:
            return NOT_LEADER_OR_FOLLOWER
        key = StateKey(group_id, topic_id, index)
        h = self.held.get(key)
        if h is not None and (h.leader_epoch != partition.leader_epoch or h.error):
            del self.held[key]
            h = None
        if h is None:
            h = self.held[key] = Held(key, topic, index, partition.leader_epoch)
            h.ready = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().create_task(self._load(h, partition))
        if not h.ready.done():
            await asyncio.shield(h.ready)
        return h.error or h

    async def _load(self, h: Held, partition) -> None:
        settings = self.settings_for(h.key.group_id)
        try:
            error, state = await self.persister.read(h.key, h.leader_epoch)
            if not error and state is None:
                start = self._initial_offset(partition, settings)
                error = await self.persister.initialize(h.key, 0, start)
                if not error:
                    error, state = await self.persister.read(h.key, h.leader_epoch)
            if not error and state is not None:
                h.state_epoch = state.state_epoch
                h.sp = SharePartition.restore(max(state.start_offset, partition.log_start_offset), state.batches,
                                              **settings.partition_settings())
            elif not error:
                error = COORDINATOR_NOT_AVAILABLE
        except Exception:
            log.exception("taking on share-partition %s failed", h.key.coordinator_key())
            error = UNKNOWN_SERVER_ERROR
        h.error = error
        h.ready.set_result(None)

    def _initial_offset(self, partition, settings) -> int:
        """Where a share group with no state starts: ``share.auto.offset.reset``."""
        if settings.auto_offset_reset == "earliest":
            return partition.log_start_offset
        if settings.auto_offset_reset == "by_duration":
            error, _, offset, _ = self.services.replicas.list_offset(
                partition.topic, partition.index, _now_ms() - settings.reset_duration_ms, -1, False)
            return offset if not error and offset >= 0 else partition.high_watermark
        return partition.high_watermark

    # ---- ShareFetch ---------------------------------------------------------------------------

    async def fetch(self, group_id: str, member_id: str, wanted: list, max_records: int, max_bytes: int,
                    max_wait_ms: int, min_bytes: int, record_limit: bool = False) -> dict:
        """``wanted``: (topic, index, topic id) triples. {(topic, index): Fetched}. Waits up to
        ``max_wait_ms`` while nothing can be acquired."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(max_wait_ms, 0) / 1000
        while True:
            results, total = await self._acquire_all(group_id, member_id, wanted, max_records, max_bytes,
                                                     record_limit)
            remaining = deadline - loop.time()
            if total >= max(min_bytes, 1) or remaining <= 0 or any(r.error for r in results.values()):
                return results
            self._changed.clear()
            waits = [loop.create_task(self.services.replicas.wait_for_change({(t, i) for t, i, _ in wanted},
                                                                             remaining)),
                     loop.create_task(self._changed.wait())]
            try:
                await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    async def _acquire_all(self, group_id, member_id, wanted, max_records, max_bytes,
                           record_limit: bool) -> tuple[dict, int]:
        results, total, acquired_on = {}, 0, []
        budget_records, budget_bytes = max_records, max_bytes
        for topic, index, topic_id in wanted:
            h = await self._get(group_id, topic, index, topic_id)
            if isinstance(h, int):
                results[(topic, index)] = Fetched(h)
                continue
            if budget_records <= 0 or budget_bytes <= 0:
                results[(topic, index)] = Fetched()
                continue
            got = self._acquire(h, member_id, budget_records, budget_bytes, record_limit)
            results[(topic, index)] = got
            if got.records:
                acquired_on.append(h)
                total += len(got.records)
                budget_bytes -= len(got.records)
                budget_records -= sum(a.last_offset - a.first_offset + 1 for a in got.acquired)
        if acquired_on:  # delivery counts are durable before the records go out: a new leader keeps them
            await asyncio.gather(*(self.persist(h) for h in acquired_on))
        return results, total

    def _acquire(self, h: Held, member_id: str, max_records: int, max_bytes: int, record_limit: bool) -> Fetched:
        partition = self.services.replicas.get_leader(h.topic, h.index)
        if partition is None or partition.leader_epoch != h.leader_epoch:
            self.held.pop(h.key, None)
            return Fetched(NOT_LEADER_OR_FOLLOWER)
        sp = h.sp
        settings = self.settings_for(h.key.group_id)
        for name, value in settings.partition_settings().items():  # group configs may have changed
            setattr(sp, name, value)
        if sp.start_offset < partition.log_start_offset:
            sp.move_start(partition.log_start_offset)
        committed_only = settings.isolation_level == "read_committed"
        upper = partition.last_stable_offset if committed_only else partition.high_watermark
        offset = sp.next_fetch_offset()
        if offset >= upper:
            return Fetched()
        try:
            data = partition.log.read(offset, min(max_bytes, READ_CHUNK), max_offset=upper,
                                      min_one_batch=True).read()
        except OffsetOutOfRangeError:
            sp.move_start(partition.log_start_offset)
            return Fetched()
        spans = [s for s in B.spans(data) if s.last < upper]
        if not spans:
            return Fetched()
        skip = B.never_delivered(spans, partition.aborted_transactions(spans[0].base) if committed_only else [],
                                 committed_only)
        ranges = [(s.base, s.last) for s in spans]
        if record_limit:  # ShareFetch v2 record_limit mode: never more than max_records, batches cut
            ranges = _at_most(ranges, offset, max_records)
        acquired = sp.acquire(member_id, ranges, max_records, _now_ms(), skip=skip, read_from=offset)
        if not acquired:
            return Fetched()
        last = max(a.last_offset for a in acquired)
        first = min(a.first_offset for a in acquired)
        begin = next(i for i, s in enumerate(spans) if s.last >= first)
        stop = next(i for i, s in enumerate(spans) if s.last >= last)
        start_byte = spans[begin - 1].end if begin > 0 else 0
        return Fetched(0, data[start_byte:spans[stop].end], acquired)

    # ---- acknowledgements ------------------------------------------------------------------------

    async def acknowledge(self, group_id: str, member_id: str, acks: dict) -> dict:
        """``acks``: {(topic, index, topic id): [(first, last, [types])]}. {(topic, index): error}."""
        errors, touched = {}, []
        for (topic, index, topic_id), batches in acks.items():
            h = await self._get(group_id, topic, index, topic_id)
            if isinstance(h, int):
                errors[(topic, index)] = h
                continue
            released = h.sp.records_released + h.sp.records_archived
            errors[(topic, index)] = h.sp.acknowledge(member_id, batches, _now_ms())
            touched.append(h)
            if h.sp.records_released + h.sp.records_archived != released:
                self._changed.set()  # released records can go to a waiting member
        for h in touched:
            error = await self.persist(h)
            if error and not errors[(h.topic, h.index)]:
                errors[(h.topic, h.index)] = error
        return errors

    async def persist(self, h: Held) -> int:
        """Write the share-partition's state when it changed; 0 or the error."""
        async with h.write_lock:
            sp = h.sp
            if sp is None or not sp.dirty:
                return 0
            version = sp.changes
            start, batches = sp.snapshot()
            error = await self.persister.write(h.key, h.state_epoch, h.leader_epoch, start,
                                               [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                                for b in batches])
            if error in (FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH):
                self.held.pop(h.key, None)  # another leader or a reset took over: read it again
                return NOT_LEADER_OR_FOLLOWER if error == FENCED_LEADER_EPOCH else error
            if not error:
                sp.mark_persisted(version)
            return error

    def release_member(self, group_id: str, member_id: str, partitions=None) -> list[Held]:
        """The member's session ended: what it holds (on ``partitions`` of (topic id, index), or all)
        goes back to the others. The share-partitions that changed."""
        changed = []
        for h in self.held.values():
            if h.sp is None or h.key.group_id != group_id:
                continue
            if partitions is not None and (h.key.topic_id, h.index) not in partitions:
                continue
            if h.sp.release_member(member_id):
                changed.append(h)
        if changed:
            self._changed.set()
        return changed

    def persist_later(self, h: Held) -> None:
        """Write the share-partition's state in the background (a release nobody waits for)."""
        if h.sp is not None and h.sp.dirty:
            task = asyncio.get_running_loop().create_task(self.persist(h))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def retire_group(self, group_id: str, unused) -> None:
        """No member of the group fetches here any more: once what it changed is written, forget its
        share-partitions (while ``unused()`` still holds), so the next member reads the durable state
        again (an operator may have reset it meanwhile)."""
        async def retire():
            for h in [h for h in self.held.values() if h.key.group_id == group_id]:
                await self.persist(h)
            if unused():
                self.forget_group(group_id)
        task = asyncio.get_running_loop().create_task(retire())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget_group(self, group_id: str) -> None:
        for k in [k for k in self.held if k.group_id == group_id]:
            del self.held[k]

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(LOCK_CHECK_S)
            now = _now_ms()
            moved = False
            for h in list(self.held.values()):
                if h.sp is not None and h.sp.expire_locks(now):
                    moved = True
                    self.persist_later(h)
            if moved:
                self._changed.set()


def _at_most(ranges: list, start: int, count: int) -> list:
    """The batch ranges cut so that at most ``count`` offsets from ``start`` on are covered."""
    out = []
    for base, last in ranges:
        first = max(base, start)
        if first > last:
            out.append((base, last))
            continue
        if last - first + 1 >= count:
            out.append((base, first + count - 1))
            break
        out.append((base, last))
        count -= last - first + 1
    return out


def _now_ms() -> int:
    import time
    return int(time.time() * 1000)
