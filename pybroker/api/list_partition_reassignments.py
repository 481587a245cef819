"""ListPartitionReassignments (KIP-455): the moves in progress, answered by the controller."""
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED, NOT_CONTROLLER
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    if cluster_denied(ctx, 8):  # DESCRIBE
        return Response(throttle_time_ms=0, error_code=CLUSTER_AUTHORIZATION_FAILED,
                        error_message="not authorized to describe the cluster", topics=[])
    keys = None if request.topics is None else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    ongoing = await ctx.control.list_reassignments(keys)
    if ongoing == NOT_CONTROLLER:
        return Response(throttle_time_ms=0, error_code=NOT_CONTROLLER,
                        error_message="this broker is not the controller", topics=[])
    topics: dict = {}
    for (topic, partition), r in sorted(ongoing.items()):
        topics.setdefault(topic, []).append(Response.OngoingPartitionReassignment(
            partition_index=partition, replicas=list(r.replicas), adding_replicas=list(r.adding),
            removing_replicas=list(r.removing)))
    return Response(throttle_time_ms=0, error_code=0, error_message=None, topics=[
        Response.OngoingTopicReassignment(name=t, partitions=ps) for t, ps in topics.items()])
