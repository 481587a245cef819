"""Quota checks around one request (called by the dispatcher only while some quota exists).

Produce: the request's bytes against producer_byte_rate. Fetch from a consumer (not a follower):
the response's bytes against consumer_byte_rate. Every request but ApiVersions and the
inter-broker ones: its handler's time on the event loop (decode and the synchronous part of the
handler; not the time parked in purgatory) against request_percentage. The largest throttle wins:
it is written into the response's ``throttle_time_ms`` and the connection is muted for it.
"""
from pybroker.protocol.parts import Parts
from pybroker.quota.entities import ANONYMOUS

PRODUCE, FETCH = 0, 1
EXEMPT = frozenset((4, 5, 6, 7, 18))  # LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, ApiVersions


def response_bytes(parts) -> int:
    return sum(p.length if hasattr(p, "length") else len(p) for p in parts)


def apply(quotas, result, key: int, header, request, frame, conn, handler_s: float):
    """The response with its throttle time set; mutes ``conn`` when throttled."""
    session = getattr(conn, "session", None)  # the authenticated user (SASL or TLS); ANONYMOUS otherwise
    user, client_id = session.principal.name if session is not None else ANONYMOUS, header.client_id or ""
    ms = 0
    if key == PRODUCE:
        ms = quotas.record("producer_byte_rate", user, client_id, len(frame))
    elif key == FETCH and isinstance(result, Parts) and getattr(request, "replica_id", -1) < 0:
        ms = quotas.record("consumer_byte_rate", user, client_id, response_bytes(result))
    if key not in EXEMPT:
        ms = max(ms, quotas.record("request_percentage", user, client_id, handler_s * 100.0))
    if ms <= 0:
        return result
    if isinstance(result, Parts):
        if result and len(result[0]) >= 4:  # a Fetch body (v1+) starts with throttle_time_ms
            head = bytearray(result[0])
            head[0:4] = max(ms, int.from_bytes(head[0:4], "big", signed=True)).to_bytes(4, "big", signed=True)
            result[0] = bytes(head)
    elif result is not None and hasattr(result, "throttle_time_ms"):
        result.throttle_time_ms = max(ms, result.throttle_time_ms or 0)
    mute = getattr(conn, "mute", None)
    if mute is not None:
        mute(ms)
    return result
