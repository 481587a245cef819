"""Heartbeat: keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
from pybroker.protocol.messages import RESPONSES

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 3

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    error = ctx.broker.coordinator.heartbeat(request.group_id, request.member_id,
                                             request.group_instance_id if ctx.version >= 3 else None,
                                             request.generation_id)
    return Response(throttle_time_ms=0, error_code=error)
