"""OffsetDelete on the group coordinator: drop a group's committed offsets for some partitions.

As Kafka's group coordinator: an Empty classic group loses the offsets of every partition asked
for; a classic group with members keeps them (NON_EMPTY_GROUP) unless it uses the "consumer"
protocol type, where only topics no member subscribes to lose theirs and the subscribed ones answer
GROUP_SUBSCRIBED_TO_TOPIC; a KIP-848 consumer group is treated the same at any state. The offsets
go as tombstones in ``__consumer_offsets``, so a restart's replay leaves them deleted.
"""
from pybroker.coordinator.group import DEAD, EMPTY
from pybroker.protocol.errors import GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC, NONE, NON_EMPTY_GROUP
from pybroker.protocol.messages import DATA
from pybroker.protocol.primitives import DecodeError

CONSUMER_PROTOCOL_TYPE = "consumer"
_VERSION_PREFIX = 2  # a subscription starts with its int16 version; the v0 body is every version's prefix


async def delete_offsets(coordinator, group_id: str, partitions: list) -> tuple[int, dict]:
    """(group error, {(topic, partition): error}) for ``partitions`` [(topic, partition)]; with a group
    error no partition is answered."""
    error = coordinator.check_available(group_id)
    if error:
        return error, {}
    consumer_group = coordinator.consumer.groups.get(group_id)
    if consumer_group is not None:
        subscribed = set().union(*consumer_group.subscriptions_by_member().values())
    else:
        group = coordinator.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return GROUP_ID_NOT_FOUND, {}
        if group.is_(EMPTY):
            subscribed = set()
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = classic_subscriptions(group)
        else:
            return NON_EMPTY_GROUP, {}
    results = {tp: GROUP_SUBSCRIBED_TO_TOPIC if subscribed is None or tp[0] in subscribed else NONE
               for tp in partitions}
    eligible = [tp for tp, code in results.items() if code == NONE]
    if eligible:
        error = await coordinator.store.delete(group_id, eligible)
        if error:
            return error, {}
    return NONE, results


def classic_subscriptions(group) -> set | None:
    """Topics the members of a "consumer" classic group subscribe to under the chosen protocol; None
    (every topic counts as subscribed) before a protocol is chosen or when a subscription is unreadable."""
    if group.protocol is None or not group.members:
        return None
    decode = DATA["ConsumerProtocolSubscription"].decode
    topics = set()
    try:
        for member in group.members.values():
            subscription, _ = decode(member.metadata(group.protocol), _VERSION_PREFIX, 0)
            topics.update(subscription.topics)
    except DecodeError:  # an unreadable subscription: as Kafka, no set of topics
        return None
    return topics
