"""OffsetCommit: store a group's positions (generation-checked; simple commits with generation -1).

v9+ (KIP-848) answers GROUP_ID_NOT_FOUND where older versions answer ILLEGAL_GENERATION: a member
commit (generation >= 0) for a group that does not exist.
A member of a consumer group (KIP-848) must commit with v9+: older versions get UNSUPPORTED_VERSION.
v0 (no generation: a simple commit) and v1 (a per-partition commit timestamp, not used: the broker's
retention decides) commit to the group coordinator like the others. Kafka 3.8 writes v0 commits to
ZooKeeper without looking at the group; here a v0 commit into a group with members is refused as
any simple commit is (UNKNOWN_MEMBER_ID), and v0 and v1+ share one set of offsets.
"""
from pybroker.coordinator.coordinator import CommitEntry
from pybroker.coordinator.group import now_ms
from pybroker.protocol.errors import (GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND, ILLEGAL_GENERATION,
                                      TOPIC_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 8
MIN_VERSION = 0
MAX_VERSION = 9
FIRST_GROUP_ID_NOT_FOUND_VERSION = 9
DEFAULT_RETENTION = -1  # v2-4 retention_time_ms: -1 = the broker's offsets.retention.minutes

Response = RESPONSES[API_KEY]


def _denied(ctx, authz, request, entries) -> dict:
    """{(topic, partition): error} for what this caller may not commit."""
    if not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return {(e.topic, e.partition): GROUP_AUTHORIZATION_FAILED for e in entries}
    topics = {e.topic for e in entries}
    refused = {t for t in topics if not authz.allowed(ctx, A.READ, A.TOPIC, t)}
    return {(e.topic, e.partition): TOPIC_AUTHORIZATION_FAILED for e in entries if e.topic in refused}


async def handle(ctx, request):
    expire = -1
    if 2 <= ctx.version <= 4 and request.retention_time_ms != DEFAULT_RETENTION:
        expire = now_ms() + request.retention_time_ms
    entries = [CommitEntry(t.name, p.partition_index, p.committed_offset,
                           p.committed_leader_epoch if ctx.version >= 6 else -1, p.committed_metadata, expire)
               for t in request.topics for p in t.partitions]
    authz = ctx.authorizer
    denied = _denied(ctx, authz, request, entries) if authz is not None else None
    if denied:  # ACLs: READ on the group, then on each topic
        entries = [e for e in entries if (e.topic, e.partition) not in denied]
    errors = dict(denied) if denied else {}
    if ctx.coordinator.consumer.refuses_old_commit(
            request.group_id, request.member_id, request.generation_id_or_member_epoch, ctx.version):
        errors.update({(e.topic, e.partition): UNSUPPORTED_VERSION for e in entries})  # KIP-848 members: v9+
    elif entries or not denied:  # a request whose every partition was refused commits nothing
        _, committed = await ctx.coordinator.commit(
            request.group_id, request.generation_id_or_member_epoch, request.member_id,
            request.group_instance_id if ctx.version >= 7 else None, entries,
            unknown_group_error=GROUP_ID_NOT_FOUND if ctx.version >= FIRST_GROUP_ID_NOT_FOUND_VERSION
            else ILLEGAL_GENERATION)
        errors.update(committed)
    topics = []
    for t in request.topics:
        topics.append(Response.OffsetCommitResponseTopic(name=t.name, partitions=[
            Response.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                   error_code=errors[(t.name, p.partition_index)])
            for p in t.partitions]))
    return Response(throttle_time_ms=0, topics=topics)
