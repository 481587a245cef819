"""A transaction marker to write: COMMIT or ABORT of one producer's transaction on some partitions."""
from dataclasses import dataclass, field


@dataclass
class TxnMarker:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: list = field(default_factory=list)  # of (topic, partition)
