"""Heartbeat: keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return Response(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED)
    error = ctx.coordinator.heartbeat(request.group_id, request.member_id,
                                             request.group_instance_id if ctx.version >= 3 else None,
                                             request.generation_id)
    return Response(throttle_time_ms=0, error_code=error)
