"""DescribeProducers (KIP-664): the active idempotent producers of partitions this broker hosts,
from each partition's producer state. pybroker has no transactions, so coordinator epoch and
current transaction start offset are always -1."""
from pybroker.api.kafka_wording import default_message
from pybroker.protocol.errors import NOT_LEADER_OR_FOLLOWER, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    topics = []
    authz = ctx.authorizer
    for t in request.topics:
        if authz is not None and not authz.allowed(ctx, A.READ, A.TOPIC, t.name):
            partitions = [Response.PartitionResponse(partition_index=i, error_code=TOPIC_AUTHORIZATION_FAILED,
                                                     error_message=None, active_producers=[])
                          for i in t.partition_indexes]
        else:
            partitions = [_partition(ctx.services, t.name, index) for index in t.partition_indexes]
        topics.append(Response.TopicResponse(name=t.name, partitions=partitions))
    return Response(throttle_time_ms=0, topics=topics)


def _partition(services, topic: str, index: int):
    p = services.replicas.get(topic, index)
    if p is None:
        # as Kafka: any replica answers (a follower keeps producer state too); a partition the cluster knows
        # but this broker does not host is NOT_LEADER_OR_FOLLOWER (no message), an unknown one is worded
        if services.metadata.partition(topic, index) is not None:
            return Response.PartitionResponse(partition_index=index, error_code=NOT_LEADER_OR_FOLLOWER,
                                              error_message=None, active_producers=[])
        known_topic = topic in services.metadata.topics  # Kafka words only an unknown topic's refusal
        return Response.PartitionResponse(partition_index=index, error_code=UNKNOWN_TOPIC_OR_PARTITION,
                                          error_message=None if known_topic else
                                          default_message(UNKNOWN_TOPIC_OR_PARTITION), active_producers=[])
    producers = [Response.ProducerState(
        producer_id=pid, producer_epoch=entry.epoch,
        last_sequence=entry.batches[-1][1] if entry.batches else -1, last_timestamp=entry.last_timestamp,
        coordinator_epoch=entry.coordinator_epoch, current_txn_start_offset=entry.txn_first_offset)
        for pid, entry in sorted(p.producers.producers.items())]
    return Response.PartitionResponse(partition_index=index, error_code=0, error_message=None,
                                      active_producers=producers)
