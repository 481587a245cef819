"""KIP-951: where a partition's leader is now, told to a client that asked a broker which is not it.

Produce (v10+) answers NOT_LEADER_OR_FOLLOWER with the partition's current leader id and epoch, and
the response lists those leaders' endpoints on the request's listener, so the client redirects at
once instead of waiting for a Metadata refresh. As Kafka: the hosted replica's view first, the
metadata cache's when this broker hosts no replica; (-1, -1) when neither knows; an endpoint only
for a live broker that has the request's listener. Only failing partitions pay for any of this.
"""
from typing import NamedTuple

NO_LEADER = (-1, -1)


class Endpoint(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None


def current_leader(replicas, metadata, topic: str, partition: int) -> tuple[int, int]:
    """(leader id, leader epoch) of the partition as this broker knows them: its replica's, else the cache's."""
    hosted = replicas.get(topic, partition)
    if hosted is not None:
        return hosted.leader_id, hosted.leader_epoch
    state = metadata.partition(topic, partition)
    return (state.leader, state.leader_epoch) if state is not None else NO_LEADER


class LeaderHints:
    """The current leaders named in one response, and their endpoints for its node_endpoints."""

    def __init__(self, ctx):
        self.replicas = ctx.services.replicas
        self.metadata = ctx.services.metadata
        self.listener = ctx.connection.server.listener_name
        self.endpoints: dict[int, Endpoint] = {}

    def leader_of(self, topic: str, partition: int) -> tuple[int, int]:
        leader_id, epoch = current_leader(self.replicas, self.metadata, topic, partition)
        if leader_id >= 0 and leader_id not in self.endpoints:
            node = self.metadata.brokers.get(leader_id)
            address = node.address(self.listener) if node is not None else None
            if address is not None:
                self.endpoints[leader_id] = Endpoint(leader_id, address[0], address[1], node.rack)
        return leader_id, epoch

    def sorted_endpoints(self) -> list[Endpoint]:
        return [self.endpoints[i] for i in sorted(self.endpoints)]
