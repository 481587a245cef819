"""Checks shared by the requests only a controller sends (LeaderAndIsr, UpdateMetadata, StopReplica)."""
from pybroker.protocol.errors import STALE_BROKER_EPOCH, STALE_CONTROLLER_EPOCH


def refusal(ctx, request, broker_epoch_since: int) -> int:
    """0 when the request may be applied; else Kafka's code for a stale or foreign sender.

    ``broker_epoch_since``: the first version carrying BrokerEpoch. Older versions cannot name the
    broker's incarnation, so (as Kafka skips an unknown epoch) only the controller epoch fences them.
    """
    if ctx.control.refuses_controller_request(request.broker_epoch if ctx.version >= broker_epoch_since else None):
        return STALE_BROKER_EPOCH  # another incarnation's controller (a single node: any over the wire)
    if request.controller_epoch < ctx.replicas.controller_epoch:
        return STALE_CONTROLLER_EPOCH
    return 0
