"""DeleteRecords: move partitions' log start offsets forward (offset -1: to the high watermark)."""
from pybroker.api.hosting import not_hosted
from pybroker.protocol.errors import TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    topics = []
    authz = ctx.authorizer
    for topic in request.topics:
        parts = []
        denied = authz is not None and not authz.allowed(ctx, A.DELETE, A.TOPIC, topic.name)
        for p in topic.partitions:
            error, low = (TOPIC_AUTHORIZATION_FAILED, -1) if denied else \
                ctx.replicas.delete_records(topic.name, p.partition_index, p.offset)
            if error == UNKNOWN_TOPIC_OR_PARTITION:
                error = not_hosted(ctx, topic.name, p.partition_index)
            if error:
                low = -1  # as Kafka: a refused partition has no low watermark to tell
            parts.append(Response.DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                                               low_watermark=low, error_code=error))
        topics.append(Response.DeleteRecordsTopicResult(name=topic.name, partitions=parts))
    return Response(throttle_time_ms=0, topics=topics)
