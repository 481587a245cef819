"""ListOffsets: earliest (-2), latest (-1) or the first offset at or after a timestamp."""
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 5

TOPIC_AUTHORIZATION_FAILED = 29

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    replicas = ctx.broker.replicas
    committed_only = request.isolation_level == 1
    topics = []
    authz = ctx.broker.authorizer
    for topic in request.topics:
        parts = []
        if authz is not None and not authz.allowed(ctx, A.DESCRIBE, A.TOPIC, topic.name):
            topics.append(Response.ListOffsetsTopicResponse(name=topic.name, partitions=[
                Response.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                      error_code=TOPIC_AUTHORIZATION_FAILED, timestamp=-1, offset=-1,
                                                      leader_epoch=-1) for p in topic.partitions]))
            continue
        for p in topic.partitions:
            error, ts, offset, epoch = replicas.list_offset(topic.name, p.partition_index, p.timestamp,
                                                            p.current_leader_epoch, committed_only)
            parts.append(Response.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=error, timestamp=ts, offset=offset,
                leader_epoch=epoch))
        topics.append(Response.ListOffsetsTopicResponse(name=topic.name, partitions=parts))
    return Response(throttle_time_ms=0, topics=topics)
