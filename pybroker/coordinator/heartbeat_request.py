"""The fields of a ConsumerGroupHeartbeat, decoded: what the consumer-group coordinator and its classic
members (a JoinGroup stands for a heartbeat) hand to the group's state machine."""
from dataclasses import dataclass


@dataclass
class HeartbeatRequest:
    """The fields of a ConsumerGroupHeartbeat, decoded (owned: topic id -> frozenset, None: unsaid)."""
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_names: list | None = None
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    owned: dict | None = None
