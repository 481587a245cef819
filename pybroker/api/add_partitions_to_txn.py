"""AddPartitionsToTxn: put partitions into a producer's ongoing transaction.

v0-3 come from producers (one transactional id); v4-5 are the brokers' batched form (several ids,
CLUSTER_ACTION required) whose ``verify_only`` entries only check that the partitions are already
in the transaction (KIP-890 part 1): a partition that is not gets TRANSACTION_ABORTABLE, which v5's
spec names and which Kafka 3.8 answers to v4 as well (the asking broker maps it for older producers).
As Kafka: a topic that is unknown gets UNKNOWN_TOPIC_OR_PARTITION, one not authorized
TOPIC_AUTHORIZATION_FAILED, and then every other partition of that id OPERATION_NOT_ATTEMPTED;
otherwise the coordinator's one answer goes to every partition (PRODUCER_FENCED as
INVALID_PRODUCER_EPOCH below v2).
"""
from pybroker.protocol.errors import (CLUSTER_AUTHORIZATION_FAILED, INVALID_PRODUCER_EPOCH, OPERATION_NOT_ATTEMPTED,
                                      PRODUCER_FENCED, TOPIC_AUTHORIZATION_FAILED,
                                      TRANSACTIONAL_ID_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    authz = ctx.authorizer
    if ctx.version < 4:
        errors = await _one(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                            request.v3_and_below_producer_epoch, request.v3_and_below_topics, verify_only=False)
        return Response(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(errors))
    if authz is not None and not authz.allowed(ctx, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME):
        return Response(throttle_time_ms=0, error_code=CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    results = []
    for txn in request.transactions:
        errors = await _one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                            verify_only=txn.verify_only)
        results.append(Response.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                                         topic_results=_topic_results(errors)))
    return Response(throttle_time_ms=0, error_code=0, results_by_transaction=results)


async def _one(ctx, tid, producer_id, epoch, topics, verify_only: bool) -> dict:
    services = ctx.services
    authz = services.authorizer
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    if authz is not None and ctx.version < 4 and not authz.allowed(ctx, A.WRITE, A.TRANSACTIONAL_ID, tid):
        return {tp: TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in partitions}
    refused = {}
    for t in {t for t, _ in partitions}:
        if authz is not None and not authz.allowed(ctx, A.WRITE, A.TOPIC, t):
            refused.update({tp: TOPIC_AUTHORIZATION_FAILED for tp in partitions if tp[0] == t})
    for tp in partitions:
        if tp not in refused and services.metadata.partition(*tp) is None:
            refused[tp] = UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        return {tp: refused.get(tp, OPERATION_NOT_ATTEMPTED) for tp in partitions}
    coordinator = services.transactions
    if verify_only:
        return coordinator.verify_local(tid, producer_id, epoch, partitions)
    error = await coordinator.add_partitions(tid, producer_id, epoch, partitions)
    if error == PRODUCER_FENCED and ctx.version < 2:
        error = INVALID_PRODUCER_EPOCH
    return {tp: error for tp in partitions}


def _topic_results(errors: dict) -> list:
    by_topic: dict[str, list] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(
            Response.AddPartitionsToTxnPartitionResult(partition_index=partition, partition_error_code=error))
    return [Response.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()]
