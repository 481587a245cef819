"""SyncGroup: the leader hands out the assignment; every member waits for and gets its own share."""
from pybroker.coordinator.coordinator import SyncResult
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 3

GROUP_AUTHORIZATION_FAILED = 30

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    authz = ctx.broker.authorizer
    if authz is not None and not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return Response(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, protocol_type=None,
                        protocol_name=None, assignment=b"")
    result = ctx.broker.coordinator.sync(
        request.group_id, request.generation_id, request.member_id,
        request.group_instance_id if ctx.version >= 3 else None,
        request.protocol_type if ctx.version >= 5 else None,
        request.protocol_name if ctx.version >= 5 else None, request.assignments)
    if isinstance(result, SyncResult):
        return _response(result)
    return _later(result)


async def _later(future):
    return _response(await future)


def _response(r: SyncResult):
    return Response(throttle_time_ms=0, error_code=r.error, protocol_type=r.protocol_type,
                    protocol_name=r.protocol, assignment=r.assignment)
