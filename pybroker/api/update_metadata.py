"""UpdateMetadata (controller only): the live brokers and partition states this broker answers Metadata from."""
from pybroker.api.controller_requests import refusal
from pybroker.controller.metadata_cache import BrokerEndpoint, PartitionState
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import CLUSTER_AUTHORIZATION_FAILED, cluster_denied

API_KEY = 6
MIN_VERSION = 7
MAX_VERSION = 7
LEADER_DURING_DELETE = -2

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    error = CLUSTER_AUTHORIZATION_FAILED if cluster_denied(ctx, 9) else refusal(ctx, request)
    if error:
        return Response(error_code=error)
    states, topic_ids, deleted = [], {}, []
    for t in request.topic_states:
        topic_ids[t.topic_name] = t.topic_id
        for p in t.partition_states:
            if p.leader == LEADER_DURING_DELETE:
                deleted.append(t.topic_name)
                continue
            states.append(PartitionState(t.topic_name, p.partition_index, p.leader, p.leader_epoch, tuple(p.isr),
                                         tuple(p.replicas), p.controller_epoch, p.zk_version,
                                         tuple(p.offline_replicas)))
    brokers = [BrokerEndpoint(b.id, {e.listener: (e.host, e.port) for e in b.endpoints}, b.rack)
               for b in request.live_brokers]
    ctx.broker.metadata.update(request.controller_id, brokers, states, topic_ids, deleted=deleted)
    return Response(error_code=0)
