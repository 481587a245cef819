"""The bytes of the consumer protocol embedded in classic group requests (Kafka's ConsumerProtocol):
a member's subscription in its JoinGroup metadata and the assignment SyncGroup hands back. Each is
an INT16 version then the generated struct; a version newer than the specs is read as the newest
known one (later versions only append fields).
"""
import struct
from dataclasses import dataclass

from pybroker.protocol import DecodeError
from pybroker.protocol.messages import DATA

PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")
_SUBSCRIPTION = DATA["ConsumerProtocolSubscription"]
_ASSIGNMENT = DATA["ConsumerProtocolAssignment"]


class MalformedProtocol(ValueError):
    pass


@dataclass
class Subscription:
    topics: list
    owned: dict  # topic name -> partitions the member still holds (cooperative members)
    rack_id: str | None
    version: int


def _decode(cls, data):
    """(struct, version) of ``data``; trailing fields a client left out are tolerated, as Kafka's reader."""
    if len(data) < 2:
        raise MalformedProtocol(f"{cls._NAME}: {len(data)} byte(s), too short for a version")
    version = _I16.unpack_from(data, 0)[0]
    if version < 0:
        raise MalformedProtocol(f"{cls._NAME}: negative version {version}")
    body = memoryview(data)[2:]
    for v in range(min(version, cls.MAX_VERSION), -1, -1):
        try:
            return cls.decode(body, 0, v)[0], version
        except DecodeError as exc:
            error = exc
    raise MalformedProtocol(str(error))


def decode_subscription(data) -> Subscription:
    obj, version = _decode(_SUBSCRIPTION, data)
    owned = {}
    for tp in getattr(obj, "owned_partitions", None) or ():
        owned.setdefault(tp.topic, set()).update(tp.partitions)
    return Subscription([t for t in obj.topics if t], owned, getattr(obj, "rack_id", None), version)


def decode_assignment(data) -> dict:
    """topic name -> set of partitions; empty bytes (never synced) assign nothing."""
    if not data:
        return {}
    obj, _ = _decode(_ASSIGNMENT, data)
    out = {}
    for tp in obj.assigned_partitions:
        out.setdefault(tp.topic, set()).update(tp.partitions)
    return out


def encode_assignment(partitions: dict, version: int) -> bytes:
    """``partitions``: topic name -> partitions, written at the member's subscription version."""
    v = min(max(version, 0), _ASSIGNMENT.MAX_VERSION)
    obj = _ASSIGNMENT(assigned_partitions=[_ASSIGNMENT.TopicPartition(topic=t, partitions=sorted(ps))
                                           for t, ps in sorted(partitions.items()) if ps])
    return _I16.pack(v) + obj.to_bytes(v)
