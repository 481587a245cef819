"""DeleteGroups: forget empty groups and tombstone their committed offsets."""
from pybroker.protocol.messages import RESPONSES

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 1

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    coordinator = ctx.broker.coordinator
    return Response(throttle_time_ms=0, results=[
        Response.DeletableGroupResult(group_id=name, error_code=await coordinator.delete_group(name))
        for name in request.groups_names])
