"""DeleteAcls: remove every ACL each filter matches (ALTER on the cluster) and list what went."""
import logging

from pybroker.api.kafka_wording import no_authorizer_wording
from pybroker.protocol.errors import UNKNOWN_SERVER_ERROR
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.security.acl_wire import cluster_refusal, describe, filter_from, parse_each

API_KEY = 31
MIN_VERSION = 0
MAX_VERSION = 3

Response = RESPONSES[API_KEY]
log = logging.getLogger(__name__)


async def handle(ctx, request):
    refused = cluster_refusal(ctx, A.ALTER)
    if refused is not None:
        return _all(request, *no_authorizer_wording(refused, "No Authorizer is configured."))
    filters, errors = parse_each(request.filters, lambda f: filter_from(f, ctx.version))
    removed = iter([])
    if filters:
        try:
            removed = iter(await ctx.services.backend.acl_store.delete(filters))
        except Exception as exc:
            log.exception("deleting ACLs failed")
            errors = [e or (UNKNOWN_SERVER_ERROR, f"deleting the ACLs failed: {exc}") for e in errors]
    results = []
    for error in errors:
        if error is not None:
            results.append(Response.DeleteAclsFilterResult(error_code=error[0], error_message=error[1],
                                                           matching_acls=[]))
            continue
        gone = next(removed, [])
        if gone:
            log.info("ACLs deleted by %s: %s", ctx.session.principal, describe(gone))
        results.append(Response.DeleteAclsFilterResult(error_code=0, error_message=None, matching_acls=[
            Response.DeleteAclsMatchingAcl(error_code=0, error_message=None, resource_type=b.pattern.resource_type,
                                           resource_name=b.pattern.name, pattern_type=b.pattern.pattern_type,
                                           principal=b.entry.principal, host=b.entry.host,
                                           operation=b.entry.operation, permission_type=b.entry.permission)
            for b in gone]))
    return Response(throttle_time_ms=0, filter_results=results)


def _all(request, code: int, message):
    return Response(throttle_time_ms=0, filter_results=[
        Response.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[])
        for _ in request.filters])
