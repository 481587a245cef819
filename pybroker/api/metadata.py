"""Metadata: live brokers, the controller and every partition's leader, replicas and ISR, from the
metadata cache; creates unknown topics when allowed (answering LEADER_NOT_AVAILABLE until they lead).

v10+ answers each topic's id; v12 may ask by topic id (an unknown id gets UNKNOWN_TOPIC_ID with a null
name; ids in v10-11 requests, or null names there, are an INVALID_REQUEST). The cluster's authorized
operations are answered up to v10 (v11+ asks DescribeCluster), 0 without DESCRIBE on the cluster.
"""
import asyncio
import uuid

from pybroker.api.error_response import error_response
from pybroker.errors import BrokerError
from pybroker.protocol.errors import (INVALID_REQUEST, INVALID_TOPIC_EXCEPTION, LEADER_NOT_AVAILABLE,
                                      TOPIC_ALREADY_EXISTS, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID,
                                      UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12
ZERO_UUID = uuid.UUID(int=0)
NO_OPERATIONS = -2147483648  # authorized operations not computed
UNTOLD_WAIT_S = 5.0  # the longest a Metadata request waits for a (re)starting broker to learn the live brokers

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    cache = ctx.metadata
    control = ctx.control
    if not cache.brokers:  # not yet told the cluster: an answer naming no broker makes clients drop them all
        try:
            await cache.wait_for(lambda: cache.brokers, UNTOLD_WAIT_S)
        except asyncio.TimeoutError:
            pass
    invalid = _invalid(ctx.version, request)
    if invalid:
        return error_response(API_KEY, ctx.version, request, INVALID_REQUEST, invalid)
    names = _requested(ctx.version, request)
    authz = ctx.authorizer
    by_id = ids_asked(request)
    unknown_ids = []
    if by_id:  # v12: topics named by id; the names are ours to find
        names = [cache.topic_names[i] for i in by_id if i in cache.topic_names]
        unknown_ids = [i for i in by_id if i not in cache.topic_names]
    if names is None:
        names = sorted(cache.topics)
        if authz is not None:  # ACLs: topics the caller may not describe are left out
            names = [n for n in names if authz.allowed_quietly(ctx, A.DESCRIBE, A.TOPIC, n)]
    allow_create = (ctx.config.auto_create_topics_enable and (ctx.version < 4 or request.allow_auto_topic_creation)
                    and not by_id)
    topics = [Response.MetadataResponseTopic(error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=i, partitions=[])
              for i in unknown_ids]
    for name in names:
        error = 0
        if authz is not None and not _authorized(ctx, authz, cache, name, allow_create):
            # an id is not secret, a name is: asked by id, the id comes back without the name
            topics.append(Response.MetadataResponseTopic(
                error_code=TOPIC_AUTHORIZATION_FAILED, name=None if by_id else name,
                topic_id=cache.topic_id(name) if by_id else ZERO_UUID, partitions=[]))
            continue
        if name not in cache.topics:
            error = UNKNOWN_TOPIC_OR_PARTITION
            if not _legal(name):  # as Kafka: a name no topic can have says so, auto-creation or not
                error = INVALID_TOPIC_EXCEPTION
            elif name in control.topics:
                error = LEADER_NOT_AVAILABLE  # created; its leaders are not known here yet
            elif allow_create:
                try:
                    await control.auto_create_topic(name)
                    error = 0 if name in cache.topics else LEADER_NOT_AVAILABLE
                except BrokerError as exc:
                    error = LEADER_NOT_AVAILABLE if exc.code == TOPIC_ALREADY_EXISTS else exc.code  # created meanwhile
        topics.append(_topic(cache, name, error))
    cluster_ops = NO_OPERATIONS
    if ctx.version >= 8:  # authorized operations, when asked for (Kafka's v8-v10 cluster field)
        from pybroker.security.acl_checks import authorized_operations, cluster_operations
        if request.include_topic_authorized_operations:
            for t in topics:
                if t.error_code not in (TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID):
                    t.topic_authorized_operations = authorized_operations(ctx, A.TOPIC, t.name)
        if ctx.version <= 10 and request.include_cluster_authorized_operations:
            cluster_ops = 0
            if authz is None or authz.allowed(ctx, A.DESCRIBE, A.CLUSTER, A.CLUSTER_NAME):
                cluster_ops = cluster_operations(ctx, A.SUPPORTED_OPERATIONS[A.CLUSTER])
    listener = ctx.connection.server.listener_name
    brokers = []
    for b in sorted(cache.brokers.values(), key=lambda b: b.id):
        address = b.address(listener)
        if address is not None:
            brokers.append(Response.MetadataResponseBroker(node_id=b.id, host=address[0], port=address[1],
                                                           rack=b.rack))
    return Response(throttle_time_ms=0, brokers=brokers, cluster_id=ctx.cluster_id,
                    controller_id=cache.controller_id, topics=topics, cluster_authorized_operations=cluster_ops)


def _legal(name: str) -> bool:
    from pybroker.controller.metadata_store import validate_topic_name
    try:
        validate_topic_name(name)
    except BrokerError:
        return False
    return True


def _authorized(ctx, authz, cache, name: str, allow_create: bool) -> bool:
    """DESCRIBE on the topic; auto-creating it also needs CREATE on the cluster or the topic."""
    if not authz.allowed(ctx, A.DESCRIBE, A.TOPIC, name):
        return False
    if name in cache.topics or name in ctx.control.topics or not allow_create:
        return True
    return (authz.allowed_quietly(ctx, A.CREATE, A.CLUSTER, A.CLUSTER_NAME)
            or authz.allowed(ctx, A.CREATE, A.TOPIC, name))


def _requested(version: int, request):
    """Topic names asked for, or None for all topics (null list; an empty list in v0)."""
    if request.topics is None or (version == 0 and not request.topics):
        return None
    return [t.name for t in request.topics if t.name is not None]


def ids_asked(request) -> list:
    """The distinct non-zero topic ids a request names, in request order."""
    seen = {}
    for t in request.topics or ():
        if t.topic_id != ZERO_UUID:
            seen.setdefault(t.topic_id, None)
    return list(seen)


def _invalid(version: int, request) -> str | None:
    """Why a v10-11 request is invalid (a null name, a topic id), or None."""
    if version >= 12 or request.topics is None:
        return None
    for t in request.topics:
        if t.name is None:
            return f"topic names cannot be null in Metadata v{version}"
        if t.topic_id != ZERO_UUID:
            return f"topic ids are not supported in Metadata v{version} requests"
    return None


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
        error_code=error, name=name, topic_id=(meta.topic_id or ZERO_UUID) if meta is not None and not error
        else ZERO_UUID, is_internal=name.startswith("__"), partitions=partitions,
        topic_authorized_operations=NO_OPERATIONS)
