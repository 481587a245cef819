"""DeleteGroups: forget empty groups and tombstone their committed offsets."""
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    coordinator = ctx.coordinator
    authz = ctx.authorizer
    return Response(throttle_time_ms=0, results=[
        Response.DeletableGroupResult(group_id=name, error_code=GROUP_AUTHORIZATION_FAILED
                                      if authz is not None and not authz.allowed(ctx, A.DELETE, A.GROUP, name)
                                      else await coordinator.delete_group(name))
        for name in request.groups_names])
