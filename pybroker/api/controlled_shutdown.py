"""ControlledShutdown (brokers to the controller): move a stopping broker's leaderships away.

Versions 2+ only: they carry the broker epoch, so only the running incarnation of a broker can
ask for its own leaderships to move (Kafka's v0 needs a header of its own; v1 has no epoch)."""
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied

API_KEY = 7
MIN_VERSION = 2
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
