"""The partitions this broker hosts: appends with acks, fetches with long polling, offsets.

Interface kept narrow (dicts keyed by (topic, partition) in, typed results out) so the
partitions can later be sharded over worker processes behind the same calls.
"""
import asyncio
import logging
import time
from dataclasses import dataclass

from pybroker.errors import BrokerError, OffsetOutOfRangeError
from pybroker.replica.partition import Partition, ProduceResult

log = logging.getLogger(__name__)

UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_SERVER_ERROR = -1


@dataclass
class FetchRequestPartition:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1


@dataclass
class FetchResult:
    error: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: object = None  # a FetchSlice, or None


@dataclass
class ProduceOutcome:
    error: int
    result: ProduceResult | None = None
    message: str | None = None


def error_code(exc: Exception) -> int:
    return exc.code if isinstance(exc, BrokerError) else UNKNOWN_SERVER_ERROR


class ReplicaManager:
    def __init__(self, node_id: int, log_manager, min_insync_replicas: int = 1):
        self.node_id = node_id
        self.log_manager = log_manager
        self.min_insync_replicas = min_insync_replicas
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._waiters: list[tuple[set, asyncio.Future]] = []  # long-polling fetches
        self._stopping = False  # shutting down: fetches answer at once instead of long polling

    # ---- partitions -----------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def make_leader(self, topic: str, partition: int, topic_id, log_config, leader_epoch: int = 0) -> Partition:
        key = (topic, partition)
        if key not in self.partitions:
            lg = self.log_manager.get_or_create_log(topic, partition, log_config)
            self.partitions[key] = Partition(topic, partition, topic_id, lg, self.node_id, leader_epoch)
        return self.partitions[key]

    def delete_partition(self, topic: str, partition: int) -> None:
        self.partitions.pop((topic, partition), None)
        self.log_manager.delete_log(topic, partition)

    def shutdown(self) -> None:
        for p in self.partitions.values():
            self.log_manager.high_watermarks[(p.topic, p.index)] = p.high_watermark
            p.close()

    # ---- produce --------------------------------------------------------------------------

    def append(self, required_acks: int, entries: dict) -> dict[tuple[str, int], ProduceOutcome]:
        """Append each partition's records; one partition's failure does not affect the others."""
        out = {}
        appended = set()
        for key, records in entries.items():
            partition = self.partitions.get(key)
            if partition is None:
                out[key] = ProduceOutcome(UNKNOWN_TOPIC_OR_PARTITION)
                continue
            try:
                result = partition.append_as_leader(records, required_acks, self.min_insync_replicas)
            except BrokerError as exc:
                out[key] = ProduceOutcome(exc.code, message=str(exc))
                continue
            except Exception as exc:  # never let one partition take the request down
                log.exception("append to %s-%d failed", *key)
                out[key] = ProduceOutcome(UNKNOWN_SERVER_ERROR, message=str(exc))
                continue
            out[key] = ProduceOutcome(0, result)
            appended.add(key)
        if appended:
            self._wake(appended)
        return out

    # ---- fetch ----------------------------------------------------------------------------

    async def fetch(self, requests: list[FetchRequestPartition], max_wait_ms: int, min_bytes: int,
                    max_bytes: int, committed_only: bool) -> list[FetchResult]:
        """Read every partition; wait up to ``max_wait_ms`` for ``min_bytes`` unless an error is due."""
        deadline = time.monotonic() + max(max_wait_ms, 0) / 1000
        keys = {(r.topic, r.partition) for r in requests}
        while True:
            results, total = self.read(requests, max_bytes, committed_only)
            remaining = deadline - time.monotonic()
            if total >= min_bytes or remaining <= 0 or self._stopping or any(r.error for r in results):
                return results
            future = asyncio.get_running_loop().create_future()
            waiter = (keys, future)
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(future, remaining)
            except asyncio.TimeoutError:
                pass
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def read(self, requests: list[FetchRequestPartition], max_bytes: int, committed_only: bool):
        """One pass over the partitions, as Kafka: the first batch found may exceed max_bytes."""
        results, total = [], 0
        for req in requests:
            partition = self.partitions.get((req.topic, req.partition))
            if partition is None:
                results.append(FetchResult(UNKNOWN_TOPIC_OR_PARTITION))
                continue
            try:
                partition.check_leader_epoch(req.current_leader_epoch)
                budget = min(req.max_bytes, max(max_bytes - total, 0))
                records = partition.read(req.fetch_offset, budget, committed_only, min_one_batch=total == 0)
            except BrokerError as exc:
                results.append(FetchResult(exc.code, partition.high_watermark, partition.last_stable_offset,
                                           partition.log_start_offset))
                continue
            total += records.length
            results.append(FetchResult(0, partition.high_watermark, partition.last_stable_offset,
                                       partition.log_start_offset, records if records.length else None))
        return results, total

    def stop_waiting(self) -> None:
        """Shutdown: answer every long-polling fetch now, so a clean stop never waits out max_wait_ms."""
        self._stopping = True
        for _, future in list(self._waiters):
            if not future.done():
                future.set_result(None)

    def _wake(self, keys: set) -> None:
        for waiting, future in list(self._waiters):
            if not future.done() and waiting & keys:
                future.set_result(None)

    # ---- offsets --------------------------------------------------------------------------

    def list_offset(self, topic: str, partition: int, timestamp: int, current_leader_epoch: int,
                    committed_only: bool) -> tuple[int, int, int, int]:
        """(error, timestamp, offset, leader_epoch) for ListOffsets."""
        p = self.partitions.get((topic, partition))
        if p is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1
        try:
            p.check_leader_epoch(current_leader_epoch)
            offset, ts = p.offset_for_timestamp(timestamp, committed_only)
        except BrokerError as exc:
            return exc.code, -1, -1, -1
        return 0, ts, offset, p.leader_epoch

    def delete_records(self, topic: str, partition: int, offset: int) -> tuple[int, int]:
        """(error, low watermark) for DeleteRecords."""
        p = self.partitions.get((topic, partition))
        if p is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1
        try:
            return 0, p.delete_records(offset)
        except OffsetOutOfRangeError as exc:
            return exc.code, p.log_start_offset
