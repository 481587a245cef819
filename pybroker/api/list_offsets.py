"""ListOffsets: earliest (-2), latest (-1) or the first offset at or after a timestamp.

v0 (still served by Kafka 3.8, for old clients) answers a list of up to ``max_num_offsets`` segment
boundaries instead (``old_style_offsets``, see pybroker.replica.legacy_offsets).

v7+ also asks for the record with the largest timestamp (-3), v8+ the earliest local offset (-4:
the log start offset, as there is no tiered storage), v9+ the last tiered offset (-5: -1, nothing is
tiered). v10's timeout bounds remote lookups, which never happen here.

A new leader whose high watermark has not reached the start of its epoch answers OFFSET_NOT_AVAILABLE
(KIP-207) from v5; older versions, whose clients do not know that code, get LEADER_NOT_AVAILABLE, as
from Kafka. A partition named twice in one request (v1+) is refused INVALID_REQUEST each time; one the cluster
has but this broker hosts no replica of is NOT_LEADER_OR_FOLLOWER.
"""
from collections import Counter

from pybroker.api.hosting import not_hosted
from pybroker.protocol.errors import (INVALID_REQUEST, LEADER_NOT_AVAILABLE, OFFSET_NOT_AVAILABLE,
                                      TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.protocol.messages import RESPONSES
from pybroker.replica.max_timestamp import max_timestamp_offset
from pybroker.security import acl as A

API_KEY = 2
MIN_VERSION = 0
MAX_VERSION = 10

EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -3, -4, -5

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    replicas = ctx.replicas
    committed_only = request.isolation_level == 1
    topics = []
    authz = ctx.authorizer
    version = ctx.version
    named = Counter((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    for topic in request.topics:
        parts = []
        if authz is not None and not authz.allowed(ctx, A.DESCRIBE, A.TOPIC, topic.name):
            topics.append(Response.ListOffsetsTopicResponse(name=topic.name, partitions=[
                Response.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                      error_code=TOPIC_AUTHORIZATION_FAILED, timestamp=-1, offset=-1,
                                                      leader_epoch=-1) for p in topic.partitions]))
            continue
        if version == 0:
            topics.append(Response.ListOffsetsTopicResponse(name=topic.name, partitions=[
                _legacy(ctx, topic.name, p, request.replica_id) for p in topic.partitions]))
            continue
        for p in topic.partitions:
            if named[(topic.name, p.partition_index)] > 1:
                error, ts, offset, epoch = INVALID_REQUEST, -1, -1, -1
            else:
                error, ts, offset, epoch = _lookup(replicas, topic.name, p, committed_only)
            if error == OFFSET_NOT_AVAILABLE and version < 5:
                error = LEADER_NOT_AVAILABLE
            elif error == UNKNOWN_TOPIC_OR_PARTITION:
                error = not_hosted(ctx, topic.name, p.partition_index)
            parts.append(Response.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=error, timestamp=ts, offset=offset,
                leader_epoch=epoch))
        topics.append(Response.ListOffsetsTopicResponse(name=topic.name, partitions=parts))
    return Response(throttle_time_ms=0, topics=topics)


def _legacy(ctx, name: str, p, replica_id: int):
    """One partition's v0 answer: its old-style offset list."""
    error, offsets = ctx.replicas.legacy_list_offsets(name, p.partition_index, p.timestamp, p.max_num_offsets,
                                                      replica_id)
    if error == UNKNOWN_TOPIC_OR_PARTITION:
        error = not_hosted(ctx, name, p.partition_index)
    return Response.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=error,
                                                 old_style_offsets=offsets)


def _lookup(replicas, name: str, p, committed_only: bool) -> tuple[int, int, int, int]:
    """(error, timestamp, offset, leader epoch) of one partition."""
    timestamp = p.timestamp
    if timestamp == EARLIEST_LOCAL:
        timestamp = EARLIEST  # every offset is local
    if timestamp not in (MAX_TIMESTAMP, LATEST_TIERED):
        return replicas.list_offset(name, p.partition_index, timestamp, p.current_leader_epoch, committed_only)
    # the answers that need the leader only, then the special lookups
    error, _, _, epoch = replicas.list_offset(name, p.partition_index, EARLIEST, p.current_leader_epoch,
                                              committed_only)
    if error or timestamp == LATEST_TIERED:
        return error, -1, -1, -1
    partition = replicas.get(name, p.partition_index)
    upper = partition.last_stable_offset if committed_only else partition.high_watermark
    offset, ts, batch_epoch = max_timestamp_offset(partition.log, upper)
    if offset < 0 and partition.high_watermark_lags_epoch_start():
        return OFFSET_NOT_AVAILABLE, -1, -1, -1
    return 0, ts, offset, batch_epoch if offset >= 0 else -1
