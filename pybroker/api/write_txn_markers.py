"""WriteTxnMarkers (inter-broker): a transaction coordinator has this leader end a transaction.

Each marker (producer id and epoch, COMMIT or ABORT, coordinator epoch) becomes one control batch per
partition, appended as leader and answered once the high watermark passes it (acks=all, bounded by
``request.timeout.ms``). Errors per partition are Kafka's: UNKNOWN_TOPIC_OR_PARTITION (not hosted
here), NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED,
NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT. With an authorizer the caller needs CLUSTER_ACTION (or
ALTER) on the cluster, else every partition gets CLUSTER_AUTHORIZATION_FAILED.
"""
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.replica.txn_marker import TxnMarker
from pybroker.security import acl as A

API_KEY = 27
MIN_VERSION = 0
MAX_VERSION = 1

DEFAULT_TIMEOUT_MS = 30000  # Kafka's request.timeout.ms

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    markers = [TxnMarker(m.producer_id, m.producer_epoch, m.coordinator_epoch, bool(m.transaction_result),
                         [(t.name, i) for t in m.topics for i in t.partition_indexes]) for m in request.markers]
    if _denied(ctx):
        return _response(request, {(m.producer_id, t, p): CLUSTER_AUTHORIZATION_FAILED
                                   for m in markers for t, p in m.partitions})
    return _write(ctx, request, markers)


def _denied(ctx) -> bool:
    authz = ctx.authorizer
    if authz is None or authz.allowed_quietly(ctx, A.ALTER, A.CLUSTER, A.CLUSTER_NAME):
        return False
    return not authz.allowed(ctx, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME)


async def _write(ctx, request, markers):
    timeout_ms = getattr(ctx.config, "request_timeout_ms", DEFAULT_TIMEOUT_MS)
    errors = await ctx.replicas.write_txn_markers(markers, timeout_ms)
    return _response(request, errors)


def _response(request, errors: dict):
    results = []
    for m in request.markers:
        topics = [Response.WritableTxnMarkerTopicResult(name=t.name, partitions=[
            Response.WritableTxnMarkerPartitionResult(partition_index=i,
                                                      error_code=errors.get((m.producer_id, t.name, i), 0))
            for i in t.partition_indexes]) for t in m.topics]
        results.append(Response.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
    return Response(markers=results)
