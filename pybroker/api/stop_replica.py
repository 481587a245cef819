"""StopReplica (controller only): stop fetching or leading partitions, and delete them when asked.

Versions: v0 lists partitions with their topic names and one delete flag, v1-2 group them by topic
and carry the broker epoch, v3+ carry a leader epoch and a delete flag per partition (an epoch older
than the replica's is refused with FENCED_LEADER_EPOCH), v4+ IsKRaftController (any controller).
"""
from pybroker.api.controller_requests import refusal
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED, FENCED_LEADER_EPOCH
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied

API_KEY = 5
MIN_VERSION = 0
MAX_VERSION = 4
BROKER_EPOCH_SINCE = 1
NO_EPOCH = -1  # versions before 3, and a controller that does not know it: never fenced

Response = RESPONSES[API_KEY]


def partitions(version: int, request) -> list:
    """(topic, partition, leader epoch, delete) of every partition, whatever the version's layout."""
    if version == 0:
        return [(p.topic_name, p.partition_index, NO_EPOCH, request.delete_partitions)
                for p in request.ungrouped_partitions]
    if version < 3:
        return [(t.name, i, NO_EPOCH, request.delete_partitions) for t in request.topics for i in t.partition_indexes]
    return [(t.topic_name, p.partition_index, p.leader_epoch, p.delete_partition)
            for t in request.topic_states for p in t.partition_states]


def stop_one(replicas, topic: str, index: int, leader_epoch: int, delete: bool) -> int:
    """Kafka's rule: the deletion sentinel (-2), no epoch (-1) or an epoch not older than ours stops it."""
    hosted = replicas.partitions.get((topic, index))
    if hosted is not None and 0 <= leader_epoch < hosted.leader_epoch:
        return FENCED_LEADER_EPOCH
    replicas.stop_replica(topic, index, delete)
    return 0


def handle(ctx, request):
    error = CLUSTER_AUTHORIZATION_FAILED if cluster_denied(ctx, 9) else refusal(ctx, request, BROKER_EPOCH_SINCE)
    errors = []
    for topic, index, leader_epoch, delete in partitions(ctx.version, request):
        code = error or stop_one(ctx.replicas, topic, index, leader_epoch, delete)
        errors.append(Response.StopReplicaPartitionError(topic_name=topic, partition_index=index, error_code=code))
    return Response(error_code=error, partition_errors=errors)
