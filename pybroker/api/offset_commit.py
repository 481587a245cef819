"""OffsetCommit: store a group's positions (generation-checked; simple commits with generation -1)."""
from pybroker.coordinator.coordinator import CommitEntry
from pybroker.coordinator.group import now_ms
from pybroker.protocol.messages import RESPONSES

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 7
DEFAULT_RETENTION = -1  # v2-4 retention_time_ms: -1 = the broker's offsets.retention.minutes

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    expire = -1
    if 2 <= ctx.version <= 4 and request.retention_time_ms != DEFAULT_RETENTION:
        expire = now_ms() + request.retention_time_ms
    entries = [CommitEntry(t.name, p.partition_index, p.committed_offset,
                           p.committed_leader_epoch if ctx.version >= 6 else -1, p.committed_metadata, expire)
               for t in request.topics for p in t.partitions]
    _, errors = await ctx.broker.coordinator.commit(
        request.group_id, request.generation_id_or_member_epoch, request.member_id,
        request.group_instance_id if ctx.version >= 7 else None, entries)
    topics = []
    for t in request.topics:
        topics.append(Response.OffsetCommitResponseTopic(name=t.name, partitions=[
            Response.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                   error_code=errors[(t.name, p.partition_index)])
            for p in t.partitions]))
    return Response(throttle_time_ms=0, topics=topics)
