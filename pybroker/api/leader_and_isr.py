"""LeaderAndIsr (controller only): become leader or follower of the given partitions.

Versions: v0-1 list partitions with their topic names, v2+ group them by topic and carry the broker
epoch, v5+ name topics by id too (and answer per topic id), v6+ carry the leader recovery state
(KIP-704), v7+ IsKRaftController (a ZooKeeper controller sends false; either way it is a controller).
"""
from pybroker.api.controller_requests import refusal
from pybroker.controller.log_configs import apply_leader_and_isr
from pybroker.controller.metadata_cache import PartitionState
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied

API_KEY = 4
MIN_VERSION = 0
MAX_VERSION = 7
BROKER_EPOCH_SINCE = 2
GROUPED_SINCE = 2
TOPIC_IDS_SINCE = 5

Response = RESPONSES[API_KEY]


def partition_states(version: int, request) -> list:
    """(topic name, partition state) of every partition, whatever the version's layout."""
    if version < GROUPED_SINCE:
        return [(p.topic_name, p) for p in request.ungrouped_partition_states]
    return [(t.topic_name, p) for t in request.topic_states for p in t.partition_states]


def handle(ctx, request):
    version = ctx.version
    pairs = partition_states(version, request)
    topic_ids = {t.topic_name: t.topic_id for t in request.topic_states} if version >= TOPIC_IDS_SINCE else {}
    states = [PartitionState(name, p.partition_index, p.leader, p.leader_epoch, tuple(p.isr), tuple(p.replicas),
                             p.controller_epoch, p.partition_epoch, leader_recovery_state=p.leader_recovery_state)
              for name, p in pairs]
    error = CLUSTER_AUTHORIZATION_FAILED if cluster_denied(ctx, 9) else refusal(ctx, request, BROKER_EPOCH_SINCE)
    if error:
        errors = {(s.topic, s.partition): error for s in states}
    else:
        leaders = {b.broker_id: (b.host_name, b.port) for b in request.live_leaders}
        errors = apply_leader_and_isr(ctx.services, request.controller_epoch, states, topic_ids, leaders)
    if version < TOPIC_IDS_SINCE:
        return Response(error_code=error, partition_errors=[Response.LeaderAndIsrPartitionError(
            topic_name=name, partition_index=p.partition_index, error_code=errors.get((name, p.partition_index), 0))
            for name, p in pairs])
    topics = []
    for t in request.topic_states:
        topics.append(Response.LeaderAndIsrTopicError(topic_id=t.topic_id, partition_errors=[
            Response.LeaderAndIsrPartitionError(partition_index=p.partition_index,
                                                error_code=errors.get((t.topic_name, p.partition_index), 0))
            for p in t.partition_states]))
    return Response(error_code=error, topics=topics)
