"""Checks shared by the requests only a controller sends (LeaderAndIsr, UpdateMetadata, StopReplica)."""
STALE_CONTROLLER_EPOCH = 11
STALE_BROKER_EPOCH = 77


def refusal(ctx, request) -> int:
    """0 when the request may be applied; else Kafka's code for a stale or foreign sender."""
    broker = ctx.broker
    if broker.zk is None or request.broker_epoch != broker.broker_epoch:
        return STALE_BROKER_EPOCH  # not for this incarnation of this broker (or no cluster at all)
    if request.controller_epoch < broker.replicas.controller_epoch:
        return STALE_CONTROLLER_EPOCH
    return 0
