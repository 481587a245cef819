"""SyncGroup: the leader hands out the assignment; every member waits for and gets its own share.

v5+ requests must name the protocol type and name the member expects (KIP-559): either one
missing, or a mismatch with the group's, is INCONSISTENT_GROUP_PROTOCOL.
"""
from pybroker.coordinator.coordinator import SyncResult
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED, INCONSISTENT_GROUP_PROTOCOL
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5
FIRST_PROTOCOL_VERSION = 5

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    if ctx.version >= FIRST_PROTOCOL_VERSION and (request.protocol_type is None or request.protocol_name is None):
        return _refused(INCONSISTENT_GROUP_PROTOCOL)  # checked before the ACLs, as Kafka
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return _refused(GROUP_AUTHORIZATION_FAILED)
    result = ctx.coordinator.sync(
        request.group_id, request.generation_id, request.member_id,
        request.group_instance_id if ctx.version >= 3 else None,
        request.protocol_type if ctx.version >= 5 else None,
        request.protocol_name if ctx.version >= 5 else None, request.assignments)
    if isinstance(result, SyncResult):
        return _response(result)
    return _later(result)


def _refused(error: int):
    return Response(throttle_time_ms=0, error_code=error, protocol_type=None, protocol_name=None, assignment=b"")


async def _later(future):
    return _response(await future)


def _response(r: SyncResult):
    return Response(throttle_time_ms=0, error_code=r.error, protocol_type=r.protocol_type,
                    protocol_name=r.protocol, assignment=r.assignment)
