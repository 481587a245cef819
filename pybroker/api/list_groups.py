"""ListGroups: every group this coordinator knows, with its protocol type, state (v4+) and type (v5+):
classic and consumer groups (pybroker/coordinator), share groups (pybroker/share: type and protocol
type "share", state Empty or Stable), as Kafka 4.2 lists them.

v4+ ``states_filter`` and v5+ ``types_filter`` keep only the groups in one of the named states or
of one of the named types; names match case-insensitively, an empty filter keeps everything.
"""
from pybroker.coordinator.group import CLASSIC
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5
FIRST_STATES_FILTER_VERSION = 4
FIRST_TYPES_FILTER_VERSION = 5

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    coordinator = ctx.coordinator
    error = coordinator.check_ready()  # the groups coordinated here, as Kafka
    groups = [] if error else coordinator.list_groups() + _share_groups(ctx)
    states = _lowered(request.states_filter) if ctx.version >= FIRST_STATES_FILTER_VERSION else set()
    types = _lowered(request.types_filter) if ctx.version >= FIRST_TYPES_FILTER_VERSION else set()
    if states:
        groups = [g for g in groups if g.state.lower() in states]
    if types:
        groups = [g for g in groups if _group_type(g) in types]
    authz = ctx.authorizer
    if authz is not None and groups and not authz.allowed_quietly(ctx, A.DESCRIBE, A.CLUSTER, A.CLUSTER_NAME):
        groups = [g for g in groups if authz.allowed_quietly(ctx, A.DESCRIBE, A.GROUP, g.group_id)]
    return Response(throttle_time_ms=0, error_code=error, groups=[
        Response.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state,
                             group_type=_group_type(g))
        for g in groups])


def _share_groups(ctx) -> list:
    share = getattr(ctx.services, "share", None)
    return list(share.groups.groups.values()) if share is not None else []


def _lowered(names) -> set[str]:
    return {n.strip().lower() for n in names or ()}


def _group_type(group) -> str:
    return getattr(group, "group_type", CLASSIC)
