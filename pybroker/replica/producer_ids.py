"""Producer ids for idempotent producers, unique across restarts.

Ids are handed out from blocks; the end of the current block is written (fsynced) to
``producer-id-block`` in the log dir before any id from it is used, so a crash can skip
ids but never reuse one.
"""
import asyncio
import os

from pybroker.log.checkpoint import fsync_dir

FILE = "producer-id-block"
BLOCK = 1000


class ProducerIdManager:
    """Producer ids of a single node: blocks reserved in ``producer-id-block`` in its first log dir."""

    def __init__(self, log_dir: str):
        self.path = os.path.join(log_dir, FILE)
        try:
            with open(self.path, encoding="ascii") as f:
                self._next = int(f.read().strip() or 0)
        except FileNotFoundError:
            self._next = 0
        self._block_end = self._next

    async def allocate(self) -> int:
        if self._next >= self._block_end:
            self._reserve(self._next + BLOCK)
        pid = self._next
        self._next += 1
        return pid

    def _reserve(self, end: int) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(str(end))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(os.path.dirname(self.path))
        self._block_end = end


class ZkProducerIds:
    """Producer ids on a cluster: blocks reserved in ZooKeeper (``/latest_producer_id_block``), so
    no two brokers ever hand out the same id."""

    def __init__(self, zk, broker_id: int):
        self.zk = zk
        self.broker_id = broker_id
        self._next = 0
        self._end = -1  # inclusive

    async def allocate(self) -> int:
        if self._next > self._end:
            self._next, self._end = await asyncio.to_thread(self.zk.allocate_producer_id_block, self.broker_id, BLOCK)
        pid = self._next
        self._next += 1
        return pid
