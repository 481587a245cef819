"""DeleteRecords: move partitions' log start offsets forward (offset -1: to the high watermark)."""
from pybroker.protocol.messages import RESPONSES

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 1

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            error, low = ctx.broker.replicas.delete_records(topic.name, p.partition_index, p.offset)
            parts.append(Response.DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                                               low_watermark=low, error_code=error))
        topics.append(Response.DeleteRecordsTopicResult(name=topic.name, partitions=parts))
    return Response(throttle_time_ms=0, topics=topics)
