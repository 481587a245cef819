"""StopReplica (controller only): stop fetching or leading partitions, and delete them when asked."""
from pybroker.api.controller_requests import refusal
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import CLUSTER_AUTHORIZATION_FAILED, cluster_denied

API_KEY = 5
MIN_VERSION = 3
MAX_VERSION = 3

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    error = CLUSTER_AUTHORIZATION_FAILED if cluster_denied(ctx, 9) else refusal(ctx, request)
    errors = []
    for t in request.topic_states:
        for p in t.partition_states:
            if not error:
                ctx.broker.replicas.stop_replica(t.topic_name, p.partition_index, p.delete_partition)
            errors.append(Response.StopReplicaPartitionError(topic_name=t.topic_name,
                                                             partition_index=p.partition_index, error_code=error))
    return Response(error_code=error, partition_errors=errors)
