"""DescribeAcls: the ACLs a filter matches, grouped by resource pattern (DESCRIBE on the cluster)."""
from pybroker.api.kafka_wording import no_authorizer_wording
from pybroker.protocol.errors import INVALID_REQUEST
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.security.acl_wire import cluster_refusal, filter_from

API_KEY = 29
MIN_VERSION = 0
MAX_VERSION = 3

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    refused = cluster_refusal(ctx, A.DESCRIBE)
    if refused is not None:
        return _error(*no_authorizer_wording(refused, "No Authorizer is configured on the broker"))
    try:
        filt = filter_from(request, ctx.version)
    except A.AclError as exc:
        return _error(INVALID_REQUEST, str(exc))
    resources = {}
    for b in ctx.authorizer.matching(filt):
        if ctx.version == 0 and b.pattern.pattern_type != A.LITERAL:
            continue  # v0 cannot say PREFIXED
        resources.setdefault(b.pattern, []).append(Response.AclDescription(
            principal=b.entry.principal, host=b.entry.host, operation=b.entry.operation,
            permission_type=b.entry.permission))
    return Response(throttle_time_ms=0, error_code=0, error_message=None, resources=[
        Response.DescribeAclsResource(resource_type=p.resource_type, resource_name=p.name,
                                      pattern_type=p.pattern_type, acls=acls)
        for p, acls in resources.items()])


def _error(code: int, message):
    return Response(throttle_time_ms=0, error_code=code, error_message=message, resources=[])
