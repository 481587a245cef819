"""JoinGroup: enter a group's next generation; waits (parked) until the rebalance's join phase ends.

v7+ answers carry the protocol type (KIP-559), v8+ requests a reason (KIP-800, logged), v9+ answers
``skip_assignment`` to a static leader that rejoined a Stable group (KIP-814).
"""
import logging

from pybroker.coordinator.coordinator import JoinResult
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9
FIRST_KNOWN_MEMBER_ID_VERSION = 4  # v4+: an empty member id first gets MEMBER_ID_REQUIRED and its id
FIRST_NULLABLE_PROTOCOL_VERSION = 7
FIRST_REASON_VERSION = 8
FIRST_SKIP_ASSIGNMENT_VERSION = 9

log = logging.getLogger(__name__)

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return Response(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                        protocol_type=None, protocol_name=_no_protocol(ctx.version), leader="",
                        member_id=request.member_id, members=[])
    rebalance_timeout = request.rebalance_timeout_ms if ctx.version >= 1 else request.session_timeout_ms
    if ctx.version >= FIRST_REASON_VERSION and request.reason:
        log.info("group %s: member %r joins: %s", request.group_id, request.member_id, request.reason)
    result = ctx.coordinator.join(
        request.group_id, request.member_id, request.group_instance_id if ctx.version >= 5 else None,
        ctx.header.client_id or "", "/" + str(ctx.connection.peer[0]), request.session_timeout_ms,
        rebalance_timeout, request.protocol_type, request.protocols,
        require_known_member_id=ctx.version >= FIRST_KNOWN_MEMBER_ID_VERSION,
        supports_skip_assignment=ctx.version >= FIRST_SKIP_ASSIGNMENT_VERSION)
    if isinstance(result, JoinResult):
        return _response(result, ctx.version)
    return _later(result, ctx.version)


async def _later(future, version: int):
    return _response(await future, version)


def _no_protocol(version: int):
    """The protocol name of an answer without one: null where the field is nullable (v7+), else ""."""
    return None if version >= FIRST_NULLABLE_PROTOCOL_VERSION else ""


def _response(r: JoinResult, version: int):
    return Response(throttle_time_ms=0, error_code=r.error, generation_id=r.generation,
                    protocol_type=r.protocol_type, protocol_name=r.protocol or _no_protocol(version),
                    leader=r.leader or "",
                    member_id=r.member_id or "", skip_assignment=r.skip_assignment,
                    members=[Response.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                             for m, i, md in r.members])
