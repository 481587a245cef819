"""FindCoordinator: a group's coordinator is the leader of its ``__consumer_offsets`` partition, a
transactional id's (key type 1) the leader of its ``__transaction_state`` partition."""
from pybroker.errors import BrokerError
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 2
INVALID_REQUEST = 42
COORDINATOR_NOT_AVAILABLE = 15
GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 30, 53

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    broker = ctx.broker
    error, message = 0, None
    if ctx.version >= 1 and request.key_type not in (0, 1):
        error, message = INVALID_REQUEST, f"unknown coordinator key type {request.key_type}"
    elif broker.authorizer is not None and not _authorized(ctx, broker.authorizer, request):
        error = TRANSACTIONAL_ID_AUTHORIZATION_FAILED if request.key_type == 1 else GROUP_AUTHORIZATION_FAILED
    elif not broker.coordinator.ready:
        error, message = COORDINATOR_NOT_AVAILABLE, "the group coordinator is not ready"
    if error:
        return _error(error, message)
    # Kafka creates __consumer_offsets / __transaction_state when a group / transactional id first asks
    store = broker.transactions.state_log if ctx.version >= 1 and request.key_type == 1 else broker.offsets
    topic = "__transaction_state" if store is not broker.offsets else "__consumer_offsets"
    try:
        await store.ensure_topic()
    except BrokerError as exc:
        return _error(COORDINATOR_NOT_AVAILABLE, f"cannot create {topic}: {exc}")
    index = store.partition_for(request.key)
    leader = broker.metadata.leader_endpoint(topic, index)
    address = leader.address(ctx.connection.server.listener_name) if leader is not None else None
    if address is None:
        return _error(COORDINATOR_NOT_AVAILABLE, f"{topic}-{index} has no leader")
    return Response(throttle_time_ms=0, error_code=0, error_message=None, node_id=leader.id,
                    host=address[0], port=address[1])


def _authorized(ctx, authz, request) -> bool:
    """DESCRIBE on the group (key type 0) or transactional id (1)."""
    if ctx.version >= 1 and request.key_type == 1:
        return authz.allowed(ctx, A.DESCRIBE, A.TRANSACTIONAL_ID, request.key)
    return authz.allowed(ctx, A.DESCRIBE, A.GROUP, request.key)


def _error(code: int, message: str):
    return Response(throttle_time_ms=0, error_code=code, error_message=message, node_id=-1, host="", port=-1)
