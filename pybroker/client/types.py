"""Value types shared by the clients: topic-partitions, offsets, metadata, admin arguments."""
from collections import namedtuple
from dataclasses import dataclass, field
from typing import NamedTuple

EARLIEST = -2  # ListOffsets: the log start offset
LATEST = -1  # ListOffsets: the log end offset (high watermark)
MAX_TIMESTAMP = -3  # ListOffsets v7+: the record with the largest timestamp


class OffsetSpec:
    """What ``list_offsets`` looks up: EARLIEST, LATEST or a timestamp in ms (>= 0)."""
    EARLIEST = EARLIEST
    LATEST = LATEST
    MAX_TIMESTAMP = MAX_TIMESTAMP


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RawChunk(NamedTuple):
    """Record batches of one partition exactly as a Fetch returned them (``Consumer.poll_raw``): the
    first batch may begin before ``position``; consuming the chunk moves the position to ``next_offset``."""
    topic: str
    partition: int
    position: int
    data: object  # bytes-like: whole v2 record batches, control batches included
    next_offset: int


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to consume, free-form metadata, the leader epoch."""
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group membership, from ``Consumer.consumer_group_metadata()``, for
    ``Producer.send_offsets_to_transaction`` (the group coordinator fences stale members with it)."""
    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class RecordMetadata(NamedTuple):
    """Where a produced record was written; ``timestamp`` is -1 when the broker did not say."""
    topic: str
    partition: int
    offset: int
    timestamp: int


class ListOffsetsResult(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int


@dataclass
class NewTopic:
    """A topic for ``create_topics``; -1 partitions/replication factor means the broker default."""
    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    config: dict = field(default_factory=dict)


_RESOURCE_TYPES = {"topic": 2, "broker": 4}


class ConfigResource(namedtuple("ConfigResource", "type name")):
    """A config owner: ``ConfigResource("topic", "orders")`` or ``ConfigResource("broker", "1")``.
    ``type`` is normalised to "topic"/"broker" (Kafka's numeric 2/4 are accepted)."""
    __slots__ = ()

    def __new__(cls, type, name):
        if isinstance(type, int) and not isinstance(type, bool):
            names = {v: k for k, v in _RESOURCE_TYPES.items()}
            if type not in names:
                raise ValueError(f"unsupported config resource type {type}")
            type = names[type]
        elif not isinstance(type, str) or type.lower() not in _RESOURCE_TYPES:
            raise ValueError(f"config resource type must be 'topic' or 'broker', not {type!r}")
        return super().__new__(cls, type.lower(), str(name))

    @property
    def type_code(self) -> int:
        return _RESOURCE_TYPES[self.type]


class BrokerMetadata(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class PartitionMetadata(NamedTuple):
    topic: str
    partition: int
    leader: int
    replicas: list
    isr: list
    leader_epoch: int = -1
    error: int = 0  # protocol error code of this partition (0 = none)


class TopicMetadata(NamedTuple):
    name: str
    partitions: dict  # partition id -> PartitionMetadata
    internal: bool = False
    error: int = 0
    topic_id: object = None


class ClusterMetadata(NamedTuple):
    cluster_id: str | None
    controller_id: int
    brokers: dict  # node id -> BrokerMetadata
    topics: dict  # name -> TopicMetadata


class GroupListing(NamedTuple):
    group_id: str
    protocol_type: str
    state: str = ""
    group_type: str = ""  # ListGroups v5+: "classic", "consumer", "share", "streams" ("" from older brokers)


class MemberDescription(NamedTuple):
    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None
    assignment: list  # TopicPartitions (consumer groups), else []
    metadata: bytes = b""  # the member's raw protocol metadata
    raw_assignment: bytes = b""


class GroupDescription(NamedTuple):
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list  # MemberDescriptions
    coordinator: int = -1
    error: int = 0


class ShareMemberDescription(NamedTuple):
    """A member of a share group, as ShareGroupDescribe shows it."""
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    member_epoch: int
    subscribed_topics: list  # topic names
    assignment: list  # TopicPartitions (other members may have the same ones)


class ShareGroupDescription(NamedTuple):
    """A share group: state "Empty", "Stable" or "Dead", epochs, the assignor, the members."""
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list  # ShareMemberDescriptions
    coordinator: int = -1


class SharePartitionOffsetInfo(NamedTuple):
    """A share-partition's progress: the start offset (the first record not yet delivered for good;
    -1 when the group has no state for it), its leader epoch, and the lag (-1 when unknown)."""
    start_offset: int
    leader_epoch: int = -1
    lag: int = -1
