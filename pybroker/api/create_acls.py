"""CreateAcls: add ACL bindings (ALTER on the cluster); each creation succeeds or fails on its own."""
import logging

from pybroker.api.kafka_wording import no_authorizer_wording
from pybroker.protocol.errors import UNKNOWN_SERVER_ERROR
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.security.acl_wire import binding_from, cluster_refusal, describe, parse_each

API_KEY = 30
MIN_VERSION = 0
MAX_VERSION = 3

Response = RESPONSES[API_KEY]
log = logging.getLogger(__name__)


async def handle(ctx, request):
    refused = cluster_refusal(ctx, A.ALTER)
    if refused is not None:
        return _all(request, *no_authorizer_wording(refused, "No Authorizer is configured."))
    valid, errors = parse_each(request.creations, lambda c: binding_from(c, ctx.version))
    if valid:
        try:
            await ctx.services.backend.acl_store.create(valid)
            log.info("ACLs created by %s: %s", ctx.session.principal, describe(valid))
        except Exception as exc:
            log.exception("creating ACLs failed")
            errors = [e or (UNKNOWN_SERVER_ERROR, f"storing the ACLs failed: {exc}") for e in errors]
    results = [e or (0, None) for e in errors]
    return Response(throttle_time_ms=0, results=[Response.AclCreationResult(error_code=code, error_message=msg)
                                                 for code, msg in results])


def _all(request, code: int, message):
    return Response(throttle_time_ms=0, results=[Response.AclCreationResult(error_code=code, error_message=message)
                                                 for _ in request.creations])
