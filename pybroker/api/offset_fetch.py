"""OffsetFetch: a group's committed offsets, for the asked partitions or (topics=null, v2+) all.

v7+ ``require_stable``: a partition whose commit is under way (a transaction not ended, or a
commit not replicated yet) answers UNSTABLE_OFFSET_COMMIT instead of its last committed offset.
v8+ asks for several groups at once, each answered with its own error; v9+ member id and epoch
are those of KIP-848 consumer groups (checked there: STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID);
classic groups ignore them, as Kafka does. v0 reads the coordinator's offsets, like v1 (Kafka 3.8
reads v0's from ZooKeeper, where its v0 commits went: here v0 commits go to the coordinator too).
"""
from dataclasses import dataclass, field

from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, UNSTABLE_OFFSET_COMMIT
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 9
MIN_VERSION = 0
MAX_VERSION = 9
FIRST_ALL_TOPICS_VERSION = 2
FIRST_REQUIRE_STABLE_VERSION = 7
FIRST_MULTI_GROUP_VERSION = 8
FIRST_MEMBER_EPOCH_VERSION = 9

Response = RESPONSES[API_KEY]


@dataclass
class PartitionOffset:
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: int = 0


@dataclass
class GroupOffsets:
    """One group's answer: its error and {topic: [PartitionOffset]} in the asked (or sorted) order."""
    error: int = 0
    topics: dict[str, list[PartitionOffset]] = field(default_factory=dict)


def handle(ctx, request):
    require_stable = ctx.version >= FIRST_REQUIRE_STABLE_VERSION and request.require_stable
    if ctx.version >= FIRST_MULTI_GROUP_VERSION:
        member = ctx.version >= FIRST_MEMBER_EPOCH_VERSION
        return Response(throttle_time_ms=0, groups=[_group_response(g.group_id, _fetch(
            ctx, g.group_id, _asked(g.topics), require_stable,
            (g.member_id, g.member_epoch) if member else (None, -1))) for g in request.groups])
    asked = _asked(request.topics)
    if asked is None and ctx.version < FIRST_ALL_TOPICS_VERSION:
        asked = []  # v0-1 cannot ask for all topics
    found = _fetch(ctx, request.group_id, asked, require_stable)
    if ctx.version < FIRST_ALL_TOPICS_VERSION:  # no top-level error yet: each partition carries it
        for parts in found.topics.values():
            for p in parts:
                p.error = p.error or found.error
    return Response(throttle_time_ms=0, error_code=found.error, topics=[
        Response.OffsetFetchResponseTopic(name=name, partitions=[
            Response.OffsetFetchResponsePartition(partition_index=p.partition, committed_offset=p.offset,
                                                  committed_leader_epoch=p.leader_epoch, metadata=p.metadata,
                                                  error_code=p.error) for p in parts])
        for name, parts in found.topics.items()])


def _group_response(group_id: str, found: GroupOffsets):
    if found.error:  # a group-level error answers no partitions, as Kafka
        return Response.OffsetFetchResponseGroup(group_id=group_id, error_code=found.error, topics=[])
    return Response.OffsetFetchResponseGroup(group_id=group_id, error_code=0, topics=[
        Response.OffsetFetchResponseTopics(name=name, partitions=[
            Response.OffsetFetchResponsePartitions(partition_index=p.partition, committed_offset=p.offset,
                                                   committed_leader_epoch=p.leader_epoch, metadata=p.metadata,
                                                   error_code=p.error) for p in parts])
        for name, parts in found.topics.items()])


def _asked(topics):
    """[(topic, partition)] asked for, or None for all the group's committed partitions."""
    if topics is None:
        return None
    return [(t.name, p) for t in topics for p in t.partition_indexes]


def _fetch(ctx, group_id: str, asked, require_stable: bool, member=(None, -1)) -> GroupOffsets:
    """``member``: (member id, member epoch) of a v9+ request, else (None, -1)."""
    authz = ctx.authorizer
    coordinator = ctx.coordinator
    refused = ()
    if authz is not None and not authz.allowed(ctx, A.DESCRIBE, A.GROUP, group_id):
        error, found, unstable = GROUP_AUTHORIZATION_FAILED, {}, set()
    elif error := coordinator.consumer.validate_offset_fetch(group_id, *member):
        found, unstable = {}, set()
    else:
        error, found, unstable = coordinator.fetch_offsets(group_id, asked, require_stable)
        if authz is not None:  # ACLs: DESCRIBE on each topic; all-topics answers leave the others out
            refused = {tp[0] for tp in (asked or [*found, *unstable])
                       if not authz.allowed_quietly(ctx, A.DESCRIBE, A.TOPIC, tp[0])}
            found = {tp: v for tp, v in found.items() if tp[0] not in refused}
            unstable = {tp for tp in unstable if tp[0] not in refused}
    result = GroupOffsets(error)
    for tp in (asked if asked is not None else sorted({*found, *unstable})):
        v = found.get(tp)
        entry = PartitionOffset(tp[1], v.offset, v.leader_epoch, v.metadata) if v else PartitionOffset(tp[1])
        entry.error = (TOPIC_AUTHORIZATION_FAILED if tp[0] in refused
                       else UNSTABLE_OFFSET_COMMIT if tp in unstable else 0)
        result.topics.setdefault(tp[0], []).append(entry)
    return result
