"""The share-group state RPCs sent to a share coordinator on another broker (Initialize, Read, Write,
Delete and ReadShareGroupStateSummary), one share-partition per request."""
from __future__ import annotations

from pybroker.protocol.messages import REQUESTS
from pybroker.share.state_records import ShareState, StateKey

INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
VERSIONS = (0, 1)


class RemoteStates:
    def __init__(self, peers):
        self.peers = peers  # PeerConnections over the inter-broker listener

    async def _send(self, broker_id: int, api_key: int, request):
        response = await self.peers.request(broker_id, request, api_key, *VERSIONS)
        p = response.results[0].partitions[0]
        return p

    async def read(self, broker_id: int, key: StateKey, leader_epoch: int) -> tuple[int, ShareState | None]:
        R = REQUESTS[READ]
        p = await self._send(broker_id, READ, R(group_id=key.group_id, topics=[R.ReadStateData(
            topic_id=key.topic_id, partitions=[R.PartitionData(partition=key.partition, leader_epoch=leader_epoch)])]))
        if p.error_code:
            return p.error_code, None
        if p.state_epoch < 0 and p.start_offset < 0:
            return 0, None  # no state (Kafka answers -1s)
        return 0, ShareState(p.state_epoch, leader_epoch, p.start_offset,
                             [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                              for b in p.state_batches])

    async def summary(self, broker_id: int, key: StateKey) -> tuple[int, ShareState | None]:
        R = REQUESTS[SUMMARY]
        p = await self._send(broker_id, SUMMARY, R(group_id=key.group_id, topics=[R.ReadStateSummaryData(
            topic_id=key.topic_id, partitions=[R.PartitionData(partition=key.partition, leader_epoch=-1)])]))
        if p.error_code:
            return p.error_code, None
        if p.state_epoch < 0 and p.start_offset < 0:
            return 0, None
        return 0, ShareState(p.state_epoch, getattr(p, "leader_epoch", -1), p.start_offset, [])

    async def initialize(self, broker_id: int, key: StateKey, state_epoch: int, start_offset: int) -> int:
        R = REQUESTS[INITIALIZE]
        p = await self._send(broker_id, INITIALIZE, R(group_id=key.group_id, topics=[R.InitializeStateData(
            topic_id=key.topic_id, partitions=[R.PartitionData(partition=key.partition, state_epoch=state_epoch,
                                                               start_offset=start_offset)])]))
        return p.error_code

    async def write(self, broker_id: int, key: StateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches) -> int:
        R = REQUESTS[WRITE]
        p = await self._send(broker_id, WRITE, R(group_id=key.group_id, topics=[R.WriteStateData(
            topic_id=key.topic_id, partitions=[R.PartitionData(
                partition=key.partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
                state_batches=[R.StateBatch(first_offset=f, last_offset=la, delivery_state=s, delivery_count=c)
                               for f, la, s, c in batches])])]))
        return p.error_code

    async def delete(self, broker_id: int, key: StateKey) -> int:
        R = REQUESTS[DELETE]
        p = await self._send(broker_id, DELETE, R(group_id=key.group_id, topics=[R.DeleteStateData(
            topic_id=key.topic_id, partitions=[R.PartitionData(partition=key.partition)])]))
        return p.error_code

    async def close(self) -> None:
        await self.peers.close()
