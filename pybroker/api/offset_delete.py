"""OffsetDelete: remove a group's committed offsets for some partitions (``kafka-consumer-groups
--delete-offsets``).

As Kafka answers it: DELETE on the group or the whole request is GROUP_AUTHORIZATION_FAILED; topics
without READ answer TOPIC_AUTHORIZATION_FAILED and unknown topics or partitions
UNKNOWN_TOPIC_OR_PARTITION, per partition; the rest goes to the group coordinator
(pybroker/coordinator/offset_deletion.py), whose group-level error (GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP, NOT_COORDINATOR...) replaces every partition's answer.
"""
from pybroker.coordinator.offset_deletion import delete_offsets
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.DELETE, A.GROUP, request.group_id):
        return Response(error_code=GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
    coordinator = ctx.coordinator
    answers: dict[str, dict[int, int]] = {}  # topic -> partition -> error, in the order Kafka builds them
    asked = []
    for topic in request.topics:
        known = coordinator.topics.get(topic.name)
        readable = authz is None or authz.allowed(ctx, A.READ, A.TOPIC, topic.name)
        for p in topic.partitions:
            if not readable:
                answers.setdefault(topic.name, {})[p.partition_index] = TOPIC_AUTHORIZATION_FAILED
            elif known is None or not 0 <= p.partition_index < known.partitions:
                answers.setdefault(topic.name, {})[p.partition_index] = UNKNOWN_TOPIC_OR_PARTITION
            else:
                asked.append((topic.name, p.partition_index))
    error, results = await delete_offsets(coordinator, request.group_id, asked)
    if error:
        return Response(error_code=error, throttle_time_ms=0, topics=[])
    for (name, index), code in results.items():
        answers.setdefault(name, {})[index] = code
    return Response(error_code=0, throttle_time_ms=0, topics=[
        Response.OffsetDeleteResponseTopic(name=name, partitions=[
            Response.OffsetDeleteResponsePartition(partition_index=i, error_code=code) for i, code in parts.items()])
        for name, parts in answers.items()])
