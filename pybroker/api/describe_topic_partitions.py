"""DescribeTopicPartitions (KIP-966): topics and their partitions from the metadata cache, paged.

What Kafka 3.8+ tools (``kafka-topics.sh --describe``) ask instead of Metadata. Topics go in name
order (all of them when none is named); at most ``response_partition_limit`` partitions (capped at
Kafka's ``max.request.partition.size.limit``, 2000) are answered, and ``next_cursor`` says where
the next page starts. An unknown named topic gets UNKNOWN_TOPIC_OR_PARTITION (3); a cursor on a
topic that is not asked for, INVALID_REQUEST (42). pybroker has no eligible leader replicas
(KIP-966's ELR), so those lists are empty (as Kafka sends them with ELR off; its client reads them).
Each topic found carries the caller's authorized operations, as Kafka always sends them here.
"""
import uuid

from pybroker.protocol.errors import (INVALID_REQUEST, LEADER_NOT_AVAILABLE, TOPIC_AUTHORIZATION_FAILED,
                                      UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.security.acl_checks import authorized_operations

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

PARTITION_LIMIT = 2000  # Kafka's max.request.partition.size.limit
NO_OPERATIONS = -2147483648
NO_TOPIC_ID = uuid.UUID(int=0)

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    cache = ctx.metadata
    names = sorted({t.name for t in request.topics}) if request.topics else sorted(cache.topics)
    authz = ctx.authorizer
    denied = set()
    if authz is not None:  # ACLs: DESCRIBE per topic; an all-topics answer leaves the others out
        if request.topics:
            denied = {n for n in names if not authz.allowed(ctx, A.DESCRIBE, A.TOPIC, n)}
        else:
            names = [n for n in names if authz.allowed_quietly(ctx, A.DESCRIBE, A.TOPIC, n)]
    limit = max(1, min(request.response_partition_limit, PARTITION_LIMIT))
    cursor = request.cursor
    if cursor is not None:
        if cursor.topic_name not in names:
            return Response(throttle_time_ms=0, topics=[_unknown(name, INVALID_REQUEST) for name in names],
                            next_cursor=None)
        names = names[names.index(cursor.topic_name):]
    topics, left, next_cursor = [], limit, None
    for name in names:
        meta = cache.topics.get(name)
        if name in denied:
            topics.append(_unknown(name, TOPIC_AUTHORIZATION_FAILED))
            continue
        if meta is None:
            topics.append(_unknown(name, UNKNOWN_TOPIC_OR_PARTITION))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        indexes = [i for i in sorted(meta.partitions) if i >= first]
        if left == 0 and indexes:  # the page is full: the next one starts here
            next_cursor = Response.Cursor(topic_name=name, partition_index=indexes[0])
            break
        page, rest = indexes[:left], indexes[left:]
        left -= len(page)
        topics.append(_topic(name, meta, page, authorized_operations(ctx, A.TOPIC, name)))
        if rest:
            next_cursor = Response.Cursor(topic_name=name, partition_index=rest[0])
            break
    return Response(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)


def _topic(name: str, meta, indexes, operations: int):
    partitions = []
    for i in indexes:
        s = meta.partitions[i]
        partitions.append(Response.DescribeTopicPartitionsResponsePartition(
            error_code=0 if s.leader >= 0 else LEADER_NOT_AVAILABLE, partition_index=i, leader_id=s.leader,
            leader_epoch=s.leader_epoch, replica_nodes=list(s.replicas), isr_nodes=list(s.isr),
            eligible_leader_replicas=[], last_known_elr=[], offline_replicas=list(s.offline)))
    return Response.DescribeTopicPartitionsResponseTopic(
        error_code=0, name=name, topic_id=meta.topic_id or NO_TOPIC_ID, is_internal=name.startswith("__"),
        partitions=partitions, topic_authorized_operations=operations)


def _unknown(name: str, error: int):
    return Response.DescribeTopicPartitionsResponseTopic(
        error_code=error, name=name, topic_id=NO_TOPIC_ID, is_internal=False, partitions=[],
        topic_authorized_operations=NO_OPERATIONS)
