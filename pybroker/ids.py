"""Kafka's UUIDs (topic ids, cluster ids, member ids) and their string form: a leaf module shared by
the controller, the coordinators, the transaction log and the APIs."""
import base64
import uuid


def random_uuid() -> uuid.UUID:
    """A random UUID as Kafka makes them: never the reserved 0/1, never '-' first in base64."""
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not uuid_to_base64(u).startswith("-"):
            return u


def uuid_to_base64(u: uuid.UUID) -> str:
    """Kafka's string form of a UUID: unpadded base64url of its 16 bytes."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def new_cluster_id() -> str:
    """A fresh Kafka cluster id: 22 characters of unpadded base64url."""
    return uuid_to_base64(random_uuid())
