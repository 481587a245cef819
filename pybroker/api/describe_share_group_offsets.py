"""DescribeShareGroupOffsets (KIP-932): the start offset of a share group's share-partitions, with their
leader epoch and (v1, KIP-1226) their lag.

As Kafka 4.2 answers it, per group: DESCRIBE on the group or GROUP_AUTHORIZATION_FAILED; served by the group's
coordinator (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE elsewhere). Named topics the caller may not describe
answer TOPIC_AUTHORIZATION_FAILED per partition; unknown topics, and share-partitions without state (or whose
state cannot be read now), answer start offset -1 with no error, as OffsetFetch does for missing offsets.
Null topics: every share-partition the group has state for, on topics the caller may describe (silently
filtered). The group itself is not looked up, as in Kafka: state outlives the in-memory membership.
"""
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, ErrorCode
from pybroker.protocol.messages import RESPONSES
from pybroker.protocol.primitives import ZERO_UUID
from pybroker.security import acl as A
from pybroker.share import admin
from pybroker.share.state_records import StateKey

API_KEY = 90
MIN_VERSION = 0
MAX_VERSION = 1
FIRST_LAG_VERSION = 1
NO_OFFSET, NO_EPOCH = -1, 0  # Kafka's uninitialized start offset and default leader epoch

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    return Response(throttle_time_ms=0, groups=[await _group(ctx, g) for g in request.groups])


async def _group(ctx, g):
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.DESCRIBE, A.GROUP, g.group_id):
        return _error(g.group_id, GROUP_AUTHORIZATION_FAILED)
    error = ctx.coordinator.check_available(g.group_id)
    if error:
        return _error(g.group_id, error)
    share = ctx.services.share
    if g.topics is None:
        return await _all_topics(ctx, share, g.group_id)
    answers, asked = [], {}
    for t in g.topics:
        if authz is not None and not authz.allowed(ctx, A.DESCRIBE, A.TOPIC, t.topic_name):
            answers.append(_topic(t.topic_name, ZERO_UUID, [_partition(p, error=TOPIC_AUTHORIZATION_FAILED)
                                                            for p in t.partitions]))
            continue
        topic_id = ctx.metadata.topic_id(t.topic_name)
        if topic_id is None:
            answers.append(_topic(t.topic_name, ZERO_UUID, [_partition(p) for p in t.partitions]))
            continue
        asked[(t.topic_name, topic_id)] = list(t.partitions)
    keys = {StateKey(g.group_id, tid, p): (name, p) for (name, tid), ps in asked.items() for p in ps}
    found = await admin.summaries(share, keys)
    lags = await _lags(ctx, share, found, keys)
    described = [_topic(name, tid, [_described(found.get(StateKey(g.group_id, tid, p)), p,
                                               lags.get(StateKey(g.group_id, tid, p), -1)) for p in ps])
                 for (name, tid), ps in asked.items()]
    return Response.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=described + answers)


async def _all_topics(ctx, share, group_id: str):
    authz = ctx.authorizer
    found, _ = await admin.states_of(share, group_id)
    names = ctx.metadata.topic_names
    by_topic: dict = {}
    for k in sorted(found, key=lambda k: (names.get(k.topic_id, ""), k.partition)):
        name = names.get(k.topic_id)
        if name is None or (authz is not None and not authz.allowed(ctx, A.DESCRIBE, A.TOPIC, name)):
            continue
        by_topic.setdefault((name, k.topic_id), []).append(k)
    keys = {k: (name, k.partition) for (name, _), ks in by_topic.items() for k in ks}
    lags = await _lags(ctx, share, found, keys)
    return Response.DescribeShareGroupOffsetsResponseGroup(group_id=group_id, topics=[
        _topic(name, tid, [_described(found[k], k.partition, lags.get(k, -1)) for k in ks])
        for (name, tid), ks in by_topic.items()])


async def _lags(ctx, share, found: dict, keys: dict) -> dict:
    """{StateKey: lag} of the share-partitions that have state (v1+ only: older answers carry no lag)."""
    if ctx.version < FIRST_LAG_VERSION:
        return {}
    with_state = [k for k in keys if found.get(k) is not None and found[k].state is not None and not found[k].error]
    if not with_state:
        return {}
    ends = await admin.end_offsets(share, {keys[k] for k in with_state})
    return {k: admin.lag(ends.get(keys[k], -1), found[k]) for k in with_state}


def _described(summary, index: int, lag: int):
    if summary is None or summary.error or summary.state is None:
        return _partition(index)
    return Response.DescribeShareGroupOffsetsResponsePartition(
        partition_index=index, start_offset=summary.state.start_offset, leader_epoch=summary.state.leader_epoch,
        lag=lag, error_code=0)


def _partition(index: int, error: int = 0):
    return Response.DescribeShareGroupOffsetsResponsePartition(
        partition_index=index, start_offset=NO_OFFSET, leader_epoch=NO_EPOCH, lag=-1, error_code=error,
        error_message=ErrorCode(error).description if error else None)


def _topic(name: str, topic_id, partitions):
    return Response.DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=topic_id, partitions=partitions)


def _error(group_id: str, error: int):
    return Response.DescribeShareGroupOffsetsResponseGroup(group_id=group_id, topics=[], error_code=error,
                                                           error_message=ErrorCode(error).description)
