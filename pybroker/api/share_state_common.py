"""What the share-group state RPCs (Initialize/Read/Write/Delete/ReadShareGroupStateSummary, sent by
share-partition leaders to the share coordinator) share: their authorization and their answer's shape."""
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED
from pybroker.security import acl as A
from pybroker.share.state_records import StateKey


def denied(ctx) -> bool:
    authz = ctx.authorizer
    return authz is not None and not authz.allowed(ctx, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME)


async def answer_each(ctx, request, response_cls, result_cls, partition_result, one):
    """``one(key, partition data)`` -> a dict of the partition result's fields (error_code included)
    for each share-partition of the request; the response in the request's shape."""
    results = []
    for t in request.topics or ():
        parts = []
        for p in t.partitions:
            if denied(ctx):
                fields = {"error_code": CLUSTER_AUTHORIZATION_FAILED}
            else:
                fields = await one(StateKey(request.group_id, t.topic_id, p.partition), p)
            parts.append(partition_result(partition=p.partition, **fields))
        results.append(result_cls(topic_id=t.topic_id, partitions=parts))
    return response_cls(results=results)
