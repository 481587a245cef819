"""Checks shared by the requests only a controller sends (LeaderAndIsr, UpdateMetadata, StopReplica)."""
STALE_CONTROLLER_EPOCH = 11
STALE_BROKER_EPOCH = 77


def refusal(ctx, request, broker_epoch_since: int) -> int:
    """0 when the request may be applied; else Kafka's code for a stale or foreign sender.

    ``broker_epoch_since``: the first version carrying BrokerEpoch. Older versions cannot name the
    broker's incarnation, so (as Kafka skips an unknown epoch) only the controller epoch fences them.
    """
    broker = ctx.broker
    if broker.zk is None:
        return STALE_BROKER_EPOCH  # no cluster at all: no controller may speak to this broker
    if ctx.version >= broker_epoch_since and request.broker_epoch != broker.broker_epoch:
        # while our registration is being recorded the controller may already have seen it and
        # write to the new epoch (as Kafka, a newer epoch is ours then); otherwise another incarnation's
        if broker.registered or request.broker_epoch < broker.broker_epoch:
            return STALE_BROKER_EPOCH
    if request.controller_epoch < broker.replicas.controller_epoch:
        return STALE_CONTROLLER_EPOCH
    return 0
