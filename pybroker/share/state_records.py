"""The records of ``__share_group_state``: one snapshot of a share-partition's durable state per key.

Key: (group id, topic id, partition). Value: the state epoch, the leader epoch of the last writer, the
share-partition start offset and the in-flight state batches (first, last, delivery state, delivery
count). A tombstone (no value) deletes the share-partition's state. The topic is compacted, so only the
last snapshot of each key stays.
"""
from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass, field

KEY_VERSION = 0
VALUE_VERSION = 0
_KEY_HEAD = struct.Struct(">hH")  # version, group id length
_KEY_TAIL = struct.Struct(">16si")  # topic id, partition
_VALUE_HEAD = struct.Struct(">hiiiqi")  # version, snapshot epoch, state epoch, leader epoch, start offset, batches
_BATCH = struct.Struct(">qqbh")  # first offset, last offset, delivery state, delivery count


@dataclass(frozen=True)
class StateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """The string FindCoordinator (key type SHARE) and the partition choice hash, as Kafka forms it."""
        return f"{self.group_id}:{uuid_text(self.topic_id)}:{self.partition}"


@dataclass
class ShareState:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: list = field(default_factory=list)  # (first, last, delivery state, delivery count)
    snapshot_epoch: int = 0

    def delivery_complete(self) -> int:
        """In-flight records acknowledged or archived (delivery states 2 and 4)."""
        return sum(last - first + 1 for first, last, state, _ in self.batches if state in (2, 4))


def uuid_text(topic_id: uuid.UUID) -> str:
    """Kafka's base64url form of a topic id (no padding), as in FindCoordinator share keys."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def encode_key(key: StateKey) -> bytes:
    group = key.group_id.encode()
    return _KEY_HEAD.pack(KEY_VERSION, len(group)) + group + _KEY_TAIL.pack(key.topic_id.bytes, key.partition)


def decode_key(data: bytes) -> StateKey | None:
    """None for a key of a version this broker does not know (skipped, as Kafka skips unknown record types)."""
    version, n = _KEY_HEAD.unpack_from(data, 0)
    if version != KEY_VERSION:
        return None
    group = bytes(data[4:4 + n]).decode()
    topic_id, partition = _KEY_TAIL.unpack_from(data, 4 + n)
    if 4 + n + _KEY_TAIL.size != len(data):
        raise ValueError("trailing bytes after a share state key")
    return StateKey(group, uuid.UUID(bytes=topic_id), partition)


def encode_value(state: ShareState) -> bytes:
    out = [_VALUE_HEAD.pack(VALUE_VERSION, state.snapshot_epoch, state.state_epoch, state.leader_epoch,
                            state.start_offset, len(state.batches))]
    out += [_BATCH.pack(*b) for b in state.batches]
    return b"".join(out)


def decode_value(data: bytes) -> ShareState:
    version, snapshot_epoch, state_epoch, leader_epoch, start, count = _VALUE_HEAD.unpack_from(data, 0)
    if version != VALUE_VERSION:
        raise ValueError(f"unknown share state value version {version}")
    if count < 0 or _VALUE_HEAD.size + count * _BATCH.size != len(data):
        raise ValueError(f"share state value of {len(data)} bytes cannot hold {count} batches")
    batches = [_BATCH.unpack_from(data, _VALUE_HEAD.size + i * _BATCH.size) for i in range(count)]
    return ShareState(state_epoch, leader_epoch, start, batches, snapshot_epoch)
