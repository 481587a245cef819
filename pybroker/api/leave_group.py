"""LeaveGroup: one member (v0-2) or a batch of members by id or group.instance.id (v3+); v5+
members say why they leave (KIP-800, logged)."""
import logging

from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5
FIRST_BATCH_VERSION = 3
FIRST_REASON_VERSION = 5

log = logging.getLogger(__name__)

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return Response(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, members=[])
    batch = ctx.version >= FIRST_BATCH_VERSION
    if ctx.version >= FIRST_REASON_VERSION:
        for m in request.members:
            if m.reason:
                log.info("group %s: member %r leaves: %s", request.group_id, m.member_id or m.group_instance_id,
                         m.reason)
    identities = ([(m.member_id, m.group_instance_id) for m in request.members] if batch
                  else [(request.member_id, None)])
    error, errors = ctx.coordinator.leave(request.group_id, identities)
    if not batch:
        return Response(throttle_time_ms=0, error_code=error or errors[0], members=[])
    return Response(throttle_time_ms=0, error_code=error, members=[
        Response.MemberResponse(member_id=m, group_instance_id=i, error_code=e)
        for (m, i), e in zip(identities, errors)])
