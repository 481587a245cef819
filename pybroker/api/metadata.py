"""Metadata: live brokers, the controller and every partition's leader, replicas and ISR, from the
metadata cache; creates unknown topics when allowed (answering LEADER_NOT_AVAILABLE until they lead)."""
from pybroker.asyncutil import settle
from pybroker.errors import BrokerError
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 8
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_AUTHORIZATION_FAILED = 29
LEADER_NOT_AVAILABLE = 5
NO_OPERATIONS = -2147483648  # authorized operations not computed

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    broker = ctx.broker
    cache = broker.metadata
    names = _requested(ctx.version, request)
    authz = broker.authorizer
    if names is None:
        names = sorted(cache.topics)
        if authz is not None:  # ACLs: topics the caller may not describe are left out
            names = [n for n in names if authz.allowed_quietly(ctx, A.DESCRIBE, A.TOPIC, n)]
    allow_create = broker.config.auto_create_topics_enable and (ctx.version < 4 or request.allow_auto_topic_creation)
    topics = []
    for name in names:
        error = 0
        if authz is not None and not _authorized(ctx, authz, cache, broker, name, allow_create):
            topics.append(_topic(cache, name, TOPIC_AUTHORIZATION_FAILED))
            continue
        if name not in cache.topics:
            error = UNKNOWN_TOPIC_OR_PARTITION
            if name in broker.controller.topics:
                error = LEADER_NOT_AVAILABLE  # created; its leaders are not known here yet
            elif allow_create:
                try:
                    await settle(broker.controller.auto_create_topic(name))
                    error = 0 if name in cache.topics else LEADER_NOT_AVAILABLE
                except BrokerError as exc:
                    error = LEADER_NOT_AVAILABLE if exc.code == 36 else exc.code  # created meanwhile
        topics.append(_topic(cache, name, error))
    cluster_ops = NO_OPERATIONS
    if ctx.version >= 8:  # authorized operations, when asked for (Kafka's v8-v10 cluster field)
        from pybroker.security.acl_checks import authorized_operations, cluster_operations
        if request.include_topic_authorized_operations:
            for t in topics:
                if t.error_code != TOPIC_AUTHORIZATION_FAILED:
                    t.topic_authorized_operations = authorized_operations(ctx, A.TOPIC, t.name)
        if request.include_cluster_authorized_operations:
            cluster_ops = cluster_operations(ctx, A.SUPPORTED_OPERATIONS[A.CLUSTER])
    listener = ctx.connection.server.listener_name
    brokers = []
    for b in sorted(cache.brokers.values(), key=lambda b: b.id):
        address = b.address(listener)
        if address is not None:
            brokers.append(Response.MetadataResponseBroker(node_id=b.id, host=address[0], port=address[1],
                                                           rack=b.rack))
    return Response(throttle_time_ms=0, brokers=brokers, cluster_id=broker.cluster_id,
                    controller_id=cache.controller_id, topics=topics, cluster_authorized_operations=cluster_ops)


def _authorized(ctx, authz, cache, broker, name: str, allow_create: bool) -> bool:
    """DESCRIBE on the topic; auto-creating it also needs CREATE on the cluster or the topic."""
    if not authz.allowed(ctx, A.DESCRIBE, A.TOPIC, name):
        return False
    if name in cache.topics or name in broker.controller.topics or not allow_create:
        return True
    return (authz.allowed_quietly(ctx, A.CREATE, A.CLUSTER, A.CLUSTER_NAME)
            or authz.allowed(ctx, A.CREATE, A.TOPIC, name))


def _requested(version: int, request):
    """Topic names asked for, or None for all topics (null list; an empty list in v0)."""
    if request.topics is None or (version == 0 and not request.topics):
        return None
    return [t.name for t in request.topics]


def _topic(cache, name: str, error: int):
    meta = cache.topics.get(name)
    partitions = []
    if meta is not None and not error:
        for index, s in sorted(meta.partitions.items()):
            partitions.append(Response.MetadataResponsePartition(
                error_code=0 if s.leader >= 0 else LEADER_NOT_AVAILABLE, partition_index=index,
                leader_id=s.leader, leader_epoch=s.leader_epoch, replica_nodes=list(s.replicas),
                isr_nodes=list(s.isr), offline_replicas=list(s.offline)))
    return Response.MetadataResponseTopic(
        error_code=error, name=name, is_internal=name.startswith("__"), partitions=partitions,
        topic_authorized_operations=NO_OPERATIONS)
