"""UpdateMetadata (controller only): the live brokers and partition states this broker answers Metadata from.

Versions: v0 gives each broker one PLAINTEXT host and port, v1+ endpoints (named by their security
protocol until v3 adds listener names), v2+ racks, v4+ offline replicas, v5+ the broker epoch and
partitions grouped by topic, v7+ topic ids, v8+ IsKRaftController (any controller) and a tagged Type.
"""
from pybroker.api.controller_requests import refusal
from pybroker.controller.metadata_cache import BrokerEndpoint, PartitionState
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied

API_KEY = 6
MIN_VERSION = 0
MAX_VERSION = 8
BROKER_EPOCH_SINCE = 5
GROUPED_SINCE = 5
TOPIC_IDS_SINCE = 7
LISTENER_NAMES_SINCE = 3
LEADER_DURING_DELETE = -2
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}  # Kafka's ids

Response = RESPONSES[API_KEY]


def partition_states(version: int, request) -> list:
    """(topic name, partition state) of every partition, whatever the version's layout."""
    if version < GROUPED_SINCE:
        return [(p.topic_name, p) for p in request.ungrouped_partition_states]
    return [(t.topic_name, p) for t in request.topic_states for p in t.partition_states]


def endpoints(version: int, broker) -> dict:
    """listener name -> (host, port); before v3 a listener is named after its security protocol."""
    if version == 0:
        return {"PLAINTEXT": (broker.v0_host, broker.v0_port)}
    if version < LISTENER_NAMES_SINCE:
        return {SECURITY_PROTOCOLS.get(e.security_protocol, str(e.security_protocol)): (e.host, e.port)
                for e in broker.endpoints}
    return {e.listener: (e.host, e.port) for e in broker.endpoints}


def handle(ctx, request):
    version = ctx.version
    error = CLUSTER_AUTHORIZATION_FAILED if cluster_denied(ctx, 9) else refusal(ctx, request, BROKER_EPOCH_SINCE)
    if error:
        return Response(error_code=error)
    topic_ids = {t.topic_name: t.topic_id for t in request.topic_states} if version >= TOPIC_IDS_SINCE else {}
    states, deleted = [], []
    for name, p in partition_states(version, request):
        if p.leader == LEADER_DURING_DELETE:
            deleted.append(name)
            continue
        states.append(PartitionState(name, p.partition_index, p.leader, p.leader_epoch, tuple(p.isr),
                                     tuple(p.replicas), p.controller_epoch, p.zk_version, tuple(p.offline_replicas)))
    brokers = [BrokerEndpoint(b.id, endpoints(version, b), b.rack) for b in request.live_brokers]
    ctx.metadata.update(request.controller_id, brokers, states, topic_ids, deleted=deleted)
    return Response(error_code=0)
