"""LeaderAndIsr (controller only): become leader or follower of the given partitions."""
from pybroker.api.controller_requests import refusal
from pybroker.controller.metadata_cache import PartitionState
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import CLUSTER_AUTHORIZATION_FAILED, cluster_denied

API_KEY = 4
MIN_VERSION = 5
MAX_VERSION = 5

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    states, topic_ids = [], {}
    for t in request.topic_states:
        topic_ids[t.topic_name] = t.topic_id
        for p in t.partition_states:
            states.append(PartitionState(t.topic_name, p.partition_index, p.leader, p.leader_epoch, tuple(p.isr),
                                         tuple(p.replicas), p.controller_epoch, p.partition_epoch))
    error = CLUSTER_AUTHORIZATION_FAILED if cluster_denied(ctx, 9) else refusal(ctx, request)
    if error:
        errors = {(s.topic, s.partition): error for s in states}
    else:
        leaders = {b.broker_id: (b.host_name, b.port) for b in request.live_leaders}
        errors = ctx.broker.apply_leader_and_isr(request.controller_epoch, states, topic_ids, leaders)
    topics = []
    for t in request.topic_states:
        topics.append(Response.LeaderAndIsrTopicError(topic_id=t.topic_id, partition_errors=[
            Response.LeaderAndIsrPartitionError(partition_index=p.partition_index,
                                                error_code=errors.get((t.topic_name, p.partition_index), 0))
            for p in t.partition_states]))
    return Response(error_code=error, topics=topics)
