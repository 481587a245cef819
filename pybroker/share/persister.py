"""The share-partition leader's side of the share coordinator: read, initialize, write and delete a
share-partition's durable state wherever its coordinator is (this broker or another), retrying while the
coordinator moves or loads, as Kafka's persister does."""
from __future__ import annotations

import asyncio
import logging

from pybroker.protocol.errors import (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
                                      REQUEST_TIMED_OUT)
from pybroker.share.coordinator import TOPIC
from pybroker.share.state_records import ShareState, StateKey

log = logging.getLogger(__name__)

RETRIABLE = {NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT}
RETRY_S = (0.05, 0.1, 0.2, 0.5, 1.0)
DEADLINE_S = 15.0


class StatePersister:
    """``remote``: an object with the same four coroutines that sends them to another broker
    (pybroker/share/state_rpc.py); ``coordinator``: this broker's ShareCoordinator."""

    def __init__(self, services, coordinator, remote):
        self.services = services
        self.coordinator = coordinator
        self.remote = remote

    async def read(self, key: StateKey, leader_epoch: int) -> tuple[int, ShareState | None]:
        return await self._call(key, "read", leader_epoch)

    async def initialize(self, key: StateKey, state_epoch: int, start_offset: int) -> int:
        return await self._call(key, "initialize", state_epoch, start_offset)

    async def write(self, key: StateKey, state_epoch: int, leader_epoch: int, start_offset: int, batches) -> int:
        return await self._call(key, "write", state_epoch, leader_epoch, start_offset, batches)

    async def delete(self, key: StateKey) -> int:
        return await self._call(key, "delete")

    async def summary(self, key: StateKey) -> tuple[int, ShareState | None]:
        return await self._call(key, "summary")

    async def _call(self, key: StateKey, name: str, *args):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        attempt = 0
        while True:
            result = await self._once(key, name, *args)
            error = result[0] if isinstance(result, tuple) else result
            if error not in RETRIABLE or loop.time() >= deadline:
                return result
            await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
            attempt += 1

    async def _once(self, key: StateKey, name: str, *args):
        try:
            await self.coordinator.ensure_topic()
        except Exception as exc:  # too few brokers yet, the controller moving
            log.info("cannot create %s yet: %s", TOPIC, exc)
            return (COORDINATOR_NOT_AVAILABLE, None) if name in ("read", "summary") else COORDINATOR_NOT_AVAILABLE
        index = self.coordinator.partition_for(key)
        state = self.services.metadata.partition(TOPIC, index)
        leader = state.leader if state is not None else -1
        if leader < 0:
            return (COORDINATOR_NOT_AVAILABLE, None) if name in ("read", "summary") else COORDINATOR_NOT_AVAILABLE
        if leader == self.services.node_id:
            call = getattr(self.coordinator, name)
            result = call(key, *args)
            return await result if asyncio.iscoroutine(result) else result
        try:
            return await getattr(self.remote, name)(leader, key, *args)
        except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
            log.info("share coordinator %d unreachable: %s", leader, exc)
            return (COORDINATOR_NOT_AVAILABLE, None) if name in ("read", "summary") else COORDINATOR_NOT_AVAILABLE
