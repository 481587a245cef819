"""JoinGroup: enter a group's next generation; waits (parked) until the rebalance's join phase ends."""
from pybroker.coordinator.coordinator import JoinResult
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 5
FIRST_KNOWN_MEMBER_ID_VERSION = 4  # v4+: an empty member id first gets MEMBER_ID_REQUIRED and its id

GROUP_AUTHORIZATION_FAILED = 30

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    authz = ctx.broker.authorizer
    if authz is not None and not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return Response(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                        protocol_type=None, protocol_name="", leader="", member_id=request.member_id, members=[])
    rebalance_timeout = request.rebalance_timeout_ms if ctx.version >= 1 else request.session_timeout_ms
    result = ctx.broker.coordinator.join(
        request.group_id, request.member_id, request.group_instance_id if ctx.version >= 5 else None,
        ctx.header.client_id or "", "/" + str(ctx.connection.peer[0]), request.session_timeout_ms,
        rebalance_timeout, request.protocol_type, request.protocols,
        require_known_member_id=ctx.version >= FIRST_KNOWN_MEMBER_ID_VERSION)
    if isinstance(result, JoinResult):
        return _response(result)
    return _later(result)


async def _later(future):
    return _response(await future)


def _response(r: JoinResult):
    return Response(throttle_time_ms=0, error_code=r.error, generation_id=r.generation,
                    protocol_type=r.protocol_type, protocol_name=r.protocol or "", leader=r.leader or "",
                    member_id=r.member_id or "",
                    members=[Response.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                             for m, i, md in r.members])
