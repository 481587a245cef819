"""ControlledShutdown (brokers to the controller): move a stopping broker's leaderships away.

v2+ carry the broker epoch, so only the running incarnation of a broker can ask for its own
leaderships to move; v0 (whose request header has no client id) and v1 carry none and are passed on
with the unknown epoch -1, which the controller judges."""
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied

API_KEY = 7
MIN_VERSION = 0
MAX_VERSION = 3

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    return _handle(ctx, request)


async def _handle(ctx, request):
    if cluster_denied(ctx, 9):  # CLUSTER_ACTION
        return Response(error_code=CLUSTER_AUTHORIZATION_FAILED, remaining_partitions=[])
    error, remaining = await ctx.control.controlled_shutdown(request.broker_id, request.broker_epoch)
    return Response(error_code=error, remaining_partitions=[
        Response.RemainingPartition(topic_name=t, partition_index=p) for t, p in remaining])
