"""Writing a transaction's COMMIT/ABORT markers to each of its partitions, wherever they are led.

Partitions this broker leads get theirs through the replica manager; the others through a
WriteTxnMarkers request (API 27) to their leader over the inter-broker listener (one connection
per broker, kept). Each round sends what is still missing; partitions answered NOT_LEADER or
another retriable error are sent again (to the leader the metadata then names) after a short
back-off, partitions of deleted topics are dropped, and sending stops when the coordinator loses
the transaction (``still_valid()`` turns false) or the producer epoch is fenced.
"""
import asyncio
import logging

from pybroker.protocol.errors import (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED,
                                      UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION)
from pybroker.protocol.messages import REQUESTS
from pybroker.transaction.peers import PeerConnections

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
MARKER_TIMEOUT_MS = 30000
BACKOFF_S = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
_FENCED = {INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED}
_SKIPPED = {UNSUPPORTED_VERSION, UNSUPPORTED_FOR_MESSAGE_FORMAT}  # the partition can never take a marker
Request = REQUESTS[WRITE_TXN_MARKERS]


class MarkerSender:
    def __init__(self, services):
        self.services = services  # pybroker.services.Services: control, replicas, metadata, node_id
        self.peers = PeerConnections(services.config, services.metadata, "txn-markers")

    async def send(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                   partitions, still_valid, on_written=None) -> bool:
        """True once every partition has its marker; False when the coordinator gave the transaction up.
        ``on_written(tp)`` hears of each partition done (DescribeTransactions then leaves it out)."""
        pending = set(partitions)
        attempt = 0
        while pending:
            if not still_valid():
                return False
            for tp in [tp for tp in pending if not self._exists(*tp)]:
                pending.discard(tp)
                if on_written is not None:
                    on_written(tp)
            by_leader: dict[int, list] = {}
            for tp in pending:
                by_leader.setdefault(self._leader(*tp), []).append(tp)
            sends = [self._send_to(leader, producer_id, producer_epoch, coordinator_epoch, commit, tps)
                     for leader, tps in by_leader.items() if leader >= 0]
            for results in await asyncio.gather(*sends):
                for tp, error in results.items():
                    if error == 0 or error in _SKIPPED:
                        if error:
                            log.warning("%s-%d cannot take a transaction marker (error %d): skipped", *tp, error)
                        pending.discard(tp)
                        if on_written is not None:
                            on_written(tp)
                    elif error in _FENCED:
                        log.warning("transaction markers of producer %d fenced at %s-%d (error %d): stopped",
                                    producer_id, *tp, error)
                        return False
            if pending:
                await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1
        return True

    def _exists(self, topic: str, partition: int) -> bool:
        record = self.services.control.topics.get(topic)  # the controller's view: the metadata cache may lag
        if record is None or not 0 <= partition < record.partitions:
            log.info("%s-%d no longer exists: no transaction marker for it", topic, partition)
            return False
        return True

    def _leader(self, topic: str, partition: int) -> int:
        if self.services.replicas.get_leader(topic, partition) is not None:
            return self.services.node_id
        state = self.services.metadata.partition(topic, partition)
        return state.leader if state is not None else -1

    async def _send_to(self, leader: int, producer_id, producer_epoch, coordinator_epoch, commit, tps) -> dict:
        try:
            if leader == self.services.node_id:
                return await self._write_local(producer_id, producer_epoch, coordinator_epoch, commit, tps)
            return await self._write_remote(leader, producer_id, producer_epoch, coordinator_epoch, commit, tps)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken link or a leader gone: the next round tries again
            log.info("writing transaction markers to broker %d failed: %s; retrying", leader, exc)
            return {tp: -1 for tp in tps}

    async def _write_local(self, producer_id, producer_epoch, coordinator_epoch, commit, tps) -> dict:
        from pybroker.replica.txn_marker import TxnMarker
        marker = TxnMarker(producer_id, producer_epoch, coordinator_epoch, commit, list(tps))
        results = await self.services.replicas.write_txn_markers([marker], MARKER_TIMEOUT_MS)
        return {tp: results.get((producer_id, *tp), -1) for tp in tps}

    async def _write_remote(self, leader, producer_id, producer_epoch, coordinator_epoch, commit, tps) -> dict:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        request = Request(markers=[Request.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[Request.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()])])
        response = await self.peers.request(leader, request, WRITE_TXN_MARKERS, 0, 1)
        results = {tp: -1 for tp in tps}
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    if (topic.name, p.partition_index) in results:
                        results[(topic.name, p.partition_index)] = p.error_code
        return results

    async def close(self) -> None:
        await self.peers.close()
