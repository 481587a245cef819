"""CreateAcls: add ACL bindings (ALTER on the cluster); each creation succeeds or fails on its own."""
import logging

from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.security.acl_wire import (CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, SECURITY_DISABLED,
                                        SECURITY_DISABLED_MESSAGE, UNKNOWN_SERVER_ERROR, binding_from)

API_KEY = 30
MIN_VERSION = 0
MAX_VERSION = 3

Response = RESPONSES[API_KEY]
log = logging.getLogger(__name__)


async def handle(ctx, request):
    authz = ctx.broker.authorizer
    if authz is None:
        return _all(request, SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
    if not authz.allowed(ctx, A.ALTER, A.CLUSTER, A.CLUSTER_NAME):
        return _all(request, CLUSTER_AUTHORIZATION_FAILED, None)
    results, valid = [], []
    for c in request.creations:
        try:
            valid.append(binding_from(c, ctx.version))
            results.append((0, None))
        except A.AclError as exc:
            results.append((INVALID_REQUEST, str(exc)))
    if valid:
        try:
            await ctx.broker.acl_store.create(valid)
            log.info("ACLs created by %s: %s", ctx.session.principal,
                     ", ".join(f"{b.pattern} {b.entry}" for b in valid))
        except Exception as exc:
            log.exception("creating ACLs failed")
            results = [(UNKNOWN_SERVER_ERROR, f"storing the ACLs failed: {exc}") if code == 0 else (code, msg)
                       for code, msg in results]
    return Response(throttle_time_ms=0, results=[Response.AclCreationResult(error_code=code, error_message=msg)
                                                 for code, msg in results])


def _all(request, code: int, message):
    return Response(throttle_time_ms=0, results=[Response.AclCreationResult(error_code=code, error_message=message)
                                                 for _ in request.creations])
