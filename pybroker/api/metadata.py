"""Metadata: this broker, the cluster id and topic partitions; creates unknown topics when allowed."""
from pybroker.errors import BrokerError
from pybroker.protocol.messages import RESPONSES

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 8
UNKNOWN_TOPIC_OR_PARTITION = 3
NO_OPERATIONS = -2147483648  # authorized operations not computed

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    broker = ctx.broker
    names = _requested(ctx.version, request)
    if names is None:
        names = sorted(broker.controller.topics)
    allow_create = broker.config.auto_create_topics_enable and (ctx.version < 4 or request.allow_auto_topic_creation)
    topics = []
    for name in names:
        error = 0
        if name not in broker.controller.topics:
            error = UNKNOWN_TOPIC_OR_PARTITION
            if allow_create:
                try:
                    broker.controller.create_topic(name)
                    error = 0
                except BrokerError as exc:
                    error = exc.code
        topics.append(_topic(broker, name, error))
    listener = broker.advertised_listener
    return Response(
        throttle_time_ms=0,
        brokers=[Response.MetadataResponseBroker(node_id=broker.node_id, host=listener.host,
                                                 port=listener.port, rack=None)],
        cluster_id=broker.cluster_id, controller_id=broker.node_id, topics=topics,
        cluster_authorized_operations=NO_OPERATIONS)


def _requested(version: int, request):
    """Topic names asked for, or None for all topics (null list; an empty list in v0)."""
    if request.topics is None or (version == 0 and not request.topics):
        return None
    return [t.name for t in request.topics]


def _topic(broker, name: str, error: int):
    record = broker.controller.topics.get(name)
    partitions = []
    if record is not None and not error:
        for index in range(record.partitions):
            p = broker.replicas.get(name, index)
            partitions.append(Response.MetadataResponsePartition(
                error_code=0, partition_index=index, leader_id=broker.node_id,
                leader_epoch=p.leader_epoch if p else 0, replica_nodes=[broker.node_id],
                isr_nodes=[broker.node_id], offline_replicas=[]))
    return Response.MetadataResponseTopic(
        error_code=error, name=name, is_internal=name.startswith("__"), partitions=partitions,
        topic_authorized_operations=NO_OPERATIONS)
