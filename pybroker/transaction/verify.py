"""KIP-890 verification for transactional ids coordinated by another broker: an AddPartitionsToTxn
v4-5 request with verify_only set, sent to the leader of the id's ``__transaction_state`` partition."""
import logging

from pybroker.protocol.errors import (CLUSTER_AUTHORIZATION_FAILED, COORDINATOR_NOT_AVAILABLE, INVALID_TXN_STATE,
                                      NETWORK_EXCEPTION)
from pybroker.protocol.messages import REQUESTS
from pybroker.transaction.peers import PeerConnections
from pybroker.transaction.state_log import TOPIC

log = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN = 24
VERIFY_VERSIONS = (4, 5)  # the brokers' batched form; v5 as Kafka's brokers send it
Request = REQUESTS[ADD_PARTITIONS_TO_TXN]


class Verifier:
    def __init__(self, coordinator):
        self.coordinator = coordinator
        self.peers = PeerConnections(coordinator.services.config, coordinator.services.metadata, "txn-verify")

    async def remote(self, tid: str, producer_id: int, epoch: int, partitions) -> dict:
        partitions = list(partitions)
        services = self.coordinator.services
        state = services.metadata.partition(TOPIC, self.coordinator.partition_for(tid))
        if state is None or state.leader < 0 or state.leader == services.node_id:
            return {tp: COORDINATOR_NOT_AVAILABLE for tp in partitions}
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = Request(transactions=[Request.AddPartitionsToTxnTransaction(
            transactional_id=tid, producer_id=producer_id, producer_epoch=epoch, verify_only=True,
            topics=[Request.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])])
        try:
            response = await self.peers.request(state.leader, request, ADD_PARTITIONS_TO_TXN,
                                                *VERIFY_VERSIONS)
        except Exception as exc:  # retriable for the producer, as Kafka's network errors are
            log.info("verifying %s with broker %d failed: %s", tid, state.leader, exc)
            return {tp: NETWORK_EXCEPTION for tp in partitions}
        if response.error_code:  # a refusal of the whole request is no answer about the transaction
            error = INVALID_TXN_STATE if response.error_code == CLUSTER_AUTHORIZATION_FAILED else response.error_code
            return {tp: error for tp in partitions}
        results = {tp: INVALID_TXN_STATE for tp in partitions}  # a partition left out of the answer
        for txn in response.results_by_transaction:
            if txn.transactional_id != tid:
                continue
            for topic in txn.topic_results:
                for p in topic.results_by_partition:
                    if (topic.name, p.partition_index) in results:
                        results[(topic.name, p.partition_index)] = p.partition_error_code
        return results

    async def close(self) -> None:
        await self.peers.close()
