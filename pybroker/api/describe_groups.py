"""DescribeGroups: one entry per asked group, always, describing classic groups only.

Before v6 a group that is not a classic group (unknown, or a consumer or share group) answers state Dead
with no error; v6 (KIP-1043, Kafka 4.0+) answers it GROUP_ID_NOT_FOUND with Kafka's message ("Group X not
found." or "Group X is not a classic group."), still Dead, as Kafka 4.2's GroupMetadataManager does.
"""
from pybroker.coordinator.group import STABLE
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6
FIRST_NOT_FOUND_VERSION = 6
NOT_REQUESTED = -2147483648  # authorized operations not asked for
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE: no ACLs here

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    ops = GROUP_OPERATIONS if ctx.version >= 3 and request.include_authorized_operations else NOT_REQUESTED
    authz = ctx.authorizer
    if authz is not None:  # ACLs: DESCRIBE on each group
        from pybroker.security.acl_checks import authorized_operations
        return Response(throttle_time_ms=0, groups=[
            _describe(ctx, name, ops if ops == NOT_REQUESTED else authorized_operations(ctx, A.GROUP, name))
            if authz.allowed(ctx, A.DESCRIBE, A.GROUP, name) else _denied(name, NOT_REQUESTED)
            for name in request.groups])
    return Response(throttle_time_ms=0, groups=[_describe(ctx, name, ops) for name in request.groups])


def _denied(name, ops):
    return Response.DescribedGroup(error_code=GROUP_AUTHORIZATION_FAILED, group_id=name, group_state="",
                                   protocol_type="", protocol_data="", members=[], authorized_operations=ops)


def _describe(ctx, name, ops):
    coordinator = ctx.coordinator
    error = coordinator.check_available(name)
    group = None if error else coordinator.describe(name)
    if group is None:
        message = None
        if not error and ctx.version >= FIRST_NOT_FOUND_VERSION:
            error, message = GROUP_ID_NOT_FOUND, _not_found(ctx, name)
        return Response.DescribedGroup(error_code=error, error_message=message, group_id=name,
                                       group_state="" if error and message is None else "Dead",
                                       protocol_type="", protocol_data="", members=[],
                                       authorized_operations=NOT_REQUESTED if error else ops)
    stable = group.state == STABLE  # as Kafka: metadata and assignments only once they are settled
    members = [Response.DescribedGroupMember(
        member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
        client_host=m.client_host, member_metadata=m.metadata(group.protocol) if stable else b"",
        member_assignment=m.assignment if stable else b"") for m in group.members.values()]
    return Response.DescribedGroup(error_code=0, group_id=name, group_state=group.state,
                                   protocol_type=group.protocol_type or "",
                                   protocol_data=(group.protocol or "") if stable else "",
                                   members=members, authorized_operations=ops)


def _not_found(ctx, name) -> str:
    """Kafka's words for a group that is not a classic group: unknown, or of another kind."""
    share = getattr(ctx.services, "share", None)
    other = name in ctx.coordinator.consumer.groups or (share is not None and share.groups.describe(name) is not None)
    return f"Group {name} is not a classic group." if other else f"Group {name} not found."
