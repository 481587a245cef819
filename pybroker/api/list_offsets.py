"""ListOffsets: earliest (-2), latest (-1) or the first offset at or after a timestamp."""
from pybroker.protocol.messages import RESPONSES

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 5

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    replicas = ctx.broker.replicas
    committed_only = request.isolation_level == 1
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            error, ts, offset, epoch = replicas.list_offset(topic.name, p.partition_index, p.timestamp,
                                                            p.current_leader_epoch, committed_only)
            parts.append(Response.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=error, timestamp=ts, offset=offset,
                leader_epoch=epoch))
        topics.append(Response.ListOffsetsTopicResponse(name=topic.name, partitions=parts))
    return Response(throttle_time_ms=0, topics=topics)
