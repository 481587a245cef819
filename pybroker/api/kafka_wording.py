"""Error messages worded as Kafka words them, where a Kafka client or tool may show or match the text.

Kafka's answers often carry its exception's default message (``Errors.X.message()``); the ones the
handlers need are here, with the few messages Kafka builds itself for a refusal.
"""
from pybroker.protocol.errors import (INVALID_REQUEST, NOT_LEADER_OR_FOLLOWER, SECURITY_DISABLED, UNKNOWN_TOPIC_ID,
                                      UNKNOWN_TOPIC_OR_PARTITION)

DEFAULT_MESSAGES = {
    UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
    NOT_LEADER_OR_FOLLOWER: "For requests intended only for the leader, this error indicates that the broker is "
                            "not the current leader. For requests intended for any replica, this error indicates "
                            "that the broker is not a replica of the topic partition.",
    INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client library or the "
                     "message was sent to an incompatible broker. See the broker logs for more details.",
}


def default_message(code: int) -> str | None:
    return DEFAULT_MESSAGES.get(code)


def no_authorizer_wording(refused: tuple, message: str) -> tuple:
    """An ACL API's refusal with Kafka's message when it is "no authorizer" (each ACL API has its own)."""
    code, _ = refused
    return (code, message) if code == SECURITY_DISABLED else refused
