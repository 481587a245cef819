"""ListGroups: every group this coordinator knows, with its protocol type."""
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 2

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    coordinator = ctx.broker.coordinator
    error = coordinator.check_ready()  # the groups coordinated here, as Kafka
    groups = [] if error else coordinator.list_groups()
    authz = ctx.broker.authorizer
    if authz is not None and groups and not authz.allowed_quietly(ctx, A.DESCRIBE, A.CLUSTER, A.CLUSTER_NAME):
        groups = [g for g in groups if authz.allowed_quietly(ctx, A.DESCRIBE, A.GROUP, g.group_id)]
    return Response(throttle_time_ms=0, error_code=error, groups=[
        Response.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state)
        for g in groups])
