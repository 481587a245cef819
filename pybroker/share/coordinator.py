"""The share coordinator: keeps every share-partition's durable state in ``__share_group_state``.

A share-partition's state belongs to partition ``abs(javaStringHashCode("group:topicId:partition")) %
partitions`` of the topic; the leader of that partition is its share coordinator (FindCoordinator key
type SHARE). The share-partition's leader reads the state when it takes the partition on and writes it
after acknowledgements (Read/Write/Initialize/DeleteShareGroupState, pybroker/api/*_share_group_state.py).
Each write carries the writer's state epoch and leader epoch: a write from a deposed leader (an older
leader epoch) or against a state that was reset since (an older state epoch) is refused, so only the
current leader's view is kept. A write is answered once the record is replicated (acks=all) and memory
changes only then, so a new coordinator replays exactly what was acknowledged.
"""
from __future__ import annotations

import asyncio
import logging
import struct

from pybroker.coordinator import state_topic
from pybroker.coordinator.records import offsets_partition
from pybroker.protocol.errors import (COORDINATOR_LOAD_IN_PROGRESS, FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH,
                                      NOT_COORDINATOR)
from pybroker.share.state_records import ShareState, StateKey, decode_key, decode_value, encode_key, encode_value

log = logging.getLogger(__name__)

TOPIC = "__share_group_state"
LOAD_YIELD_RECORDS = 2000
WRITE_TIMEOUT_MS = 30000


class ShareCoordinator:
    def __init__(self, config, services):
        self.config = config
        self.services = services  # control, replicas, metadata
        self.partitions = config.share_coordinator_state_topic_num_partitions
        self.states: dict[StateKey, ShareState] = {}
        self.owned: dict[int, int] = {}  # state partition -> its leader epoch when loaded
        self.loading: dict[int, object] = {}
        self._locks: dict[StateKey, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task] = set()

    # ---- the topic ---------------------------------------------------------------------------

    def topic_configs(self, replication_factor: int) -> dict:
        cfg = self.config
        return {"cleanup.policy": "compact",
                "min.insync.replicas": str(min(cfg.share_coordinator_state_topic_min_isr, replication_factor)),
                "segment.bytes": str(cfg.share_coordinator_state_topic_segment_bytes)}

    async def ensure_topic(self) -> None:
        record = await state_topic.ensure_topic(self.services, TOPIC, self.partitions,
                                                self.config.share_coordinator_state_topic_replication_factor,
                                                self.topic_configs)
        if record is not None and record.partitions and record.partitions != self.partitions:
            self.partitions = record.partitions  # the key -> partition map follows the real topic

    def partition_for(self, key: StateKey) -> int:
        return offsets_partition(key.coordinator_key(), self.partitions)

    def partition_for_text(self, coordinator_key: str) -> int:
        return offsets_partition(coordinator_key, self.partitions)

    # ---- leadership of __share_group_state -------------------------------------------------------

    def on_leadership(self, key, is_leader: bool) -> None:
        if key[0] != TOPIC:
            return
        record = self.services.control.topics.get(TOPIC)
        if record is not None and record.partitions:
            self.partitions = record.partitions
        index = key[1]
        self._unload(index)
        if is_leader:
            partition = self.services.replicas.get(TOPIC, index)
            token = self.loading[index] = object()
            task = asyncio.get_running_loop().create_task(
                self._load(index, partition.leader_epoch if partition is not None else 0, token))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _unload(self, index: int) -> None:
        self.loading.pop(index, None)
        if self.owned.pop(index, None) is None:
            return
        for key in [k for k in self.states if self.partition_for(k) == index]:
            del self.states[key]

    async def _load(self, index: int, epoch: int, token) -> None:
        loaded: dict[StateKey, ShareState] = {}
        try:
            for count, rec in enumerate(state_topic.replay_records(self.services.replicas, TOPIC, index), 1):
                try:
                    key = decode_key(rec.key)
                    if key is None:
                        continue
                    if rec.value is None:
                        loaded.pop(key, None)
                    else:
                        loaded[key] = decode_value(rec.value)
                except (ValueError, struct.error, UnicodeDecodeError) as exc:
                    log.warning("skipping an unreadable record at %s-%d offset %d: %s", TOPIC, index, rec.offset, exc)
                if count % LOAD_YIELD_RECORDS == 0:
                    await asyncio.sleep(0)
                    if self.loading.get(index) is not token:
                        return
        except Exception:
            log.exception("loading %s-%d failed", TOPIC, index)
            return
        if self.loading.get(index) is not token:
            return
        del self.loading[index]
        self.owned[index] = epoch
        self.states.update(loaded)
        log.info("share coordinator of %s-%d at epoch %d: loaded %d share-partitions", TOPIC, index, epoch,
                 len(loaded))

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.owned, self.loading, self.states = {}, {}, {}

    # ---- the state RPCs ----------------------------------------------------------------------------

    def check(self, key: StateKey) -> int:
        index = self.partition_for(key)
        if index in self.loading:
            return COORDINATOR_LOAD_IN_PROGRESS
        if index not in self.owned:
            return NOT_COORDINATOR
        return 0

    def _lock(self, key: StateKey) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def read(self, key: StateKey, leader_epoch: int) -> tuple[int, ShareState | None]:
        """(error, state or None when the share-partition has none). A read by a newer leader records its
        epoch, so the previous leader's later writes are refused."""
        async with self._lock(key):
            error = self.check(key)
            if error:
                return error, None
            state = self.states.get(key)
            if state is None:
                return 0, None
            if leader_epoch >= 0 and leader_epoch < state.leader_epoch:
                return FENCED_LEADER_EPOCH, None
            if leader_epoch > state.leader_epoch:
                newer = ShareState(state.state_epoch, leader_epoch, state.start_offset, list(state.batches),
                                   state.snapshot_epoch + 1)
                error = await self._append(key, newer)
                if error:
                    return error, None
                state = newer
            return 0, state

    def summary(self, key: StateKey) -> tuple[int, ShareState | None]:
        error = self.check(key)
        return (error, None) if error else (0, self.states.get(key))

    async def initialize(self, key: StateKey, state_epoch: int, start_offset: int) -> int:
        async with self._lock(key):
            error = self.check(key)
            if error:
                return error
            old = self.states.get(key)
            if old is not None and state_epoch < old.state_epoch:
                return FENCED_STATE_EPOCH
            leader_epoch = old.leader_epoch if old is not None else -1
            snapshot = old.snapshot_epoch + 1 if old is not None else 0
            return await self._append(key, ShareState(state_epoch, leader_epoch, start_offset, [], snapshot))

    async def write(self, key: StateKey, state_epoch: int, leader_epoch: int, start_offset: int, batches) -> int:
        async with self._lock(key):
            error = self.check(key)
            if error:
                return error
            old = self.states.get(key)
            if old is not None:
                if state_epoch < old.state_epoch:
                    return FENCED_STATE_EPOCH
                if 0 <= leader_epoch < old.leader_epoch:
                    return FENCED_LEADER_EPOCH
            snapshot = old.snapshot_epoch + 1 if old is not None else 0
            leader_epoch = max(leader_epoch, old.leader_epoch if old is not None else -1)
            return await self._append(key, ShareState(state_epoch, leader_epoch, start_offset, list(batches), snapshot))

    async def delete(self, key: StateKey) -> int:
        async with self._lock(key):
            error = self.check(key)
            if error:
                return error
            if key not in self.states:
                return 0
            return await self._append(key, None)

    async def _append(self, key: StateKey, state: ShareState | None) -> int:
        index = self.partition_for(key)
        epoch = self.owned[index]
        error = await state_topic.append_record(self.services.replicas, TOPIC, index, encode_key(key),
                                                None if state is None else encode_value(state), WRITE_TIMEOUT_MS)
        if error:
            log.warning("could not write share state of %s to %s-%d: error %d", key.coordinator_key(), TOPIC,
                        index, error)
            return state_topic.COORDINATOR_ERRORS.get(error, error)
        if self.owned.get(index) != epoch:
            return NOT_COORDINATOR  # the partition moved while the record was replicated
        if state is None:
            self.states.pop(key, None)
        else:
            self.states[key] = state
        return 0

    def keys_of(self, group_id: str) -> list[StateKey]:
        return [k for k in self.states if k.group_id == group_id]
