"""The error for a partition this broker hosts no replica of, as Kafka tells it."""
from pybroker.protocol.errors import NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION


def not_hosted(ctx, topic: str | None, partition: int) -> int:
    """NOT_LEADER_OR_FOLLOWER when the cluster has the partition elsewhere (the client looks up its
    leader again), UNKNOWN_TOPIC_OR_PARTITION when the cluster does not have it."""
    if topic is not None and ctx.metadata.partition(topic, partition) is not None:
        return NOT_LEADER_OR_FOLLOWER
    return UNKNOWN_TOPIC_OR_PARTITION
