"""FindCoordinator: this broker coordinates every group (key type 0) and transaction id (1)."""
from pybroker.errors import BrokerError
from pybroker.protocol.messages import RESPONSES

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 2
INVALID_REQUEST = 42
COORDINATOR_NOT_AVAILABLE = 15

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    broker = ctx.broker
    error, message = 0, None
    if ctx.version >= 1 and request.key_type not in (0, 1):
        error, message = INVALID_REQUEST, f"unknown coordinator key type {request.key_type}"
    elif not broker.coordinator.ready:
        error, message = COORDINATOR_NOT_AVAILABLE, "the group coordinator is not ready"
    if not error and (ctx.version == 0 or request.key_type == 0):
        try:
            broker.offsets.ensure_topic()  # Kafka creates __consumer_offsets when a group first asks
        except BrokerError as exc:
            error, message = COORDINATOR_NOT_AVAILABLE, f"cannot create __consumer_offsets: {exc}"
    if error:
        return Response(throttle_time_ms=0, error_code=error, error_message=message, node_id=-1, host="", port=-1)
    listener = broker.advertised_listener
    return Response(throttle_time_ms=0, error_code=0, error_message=None, node_id=broker.node_id,
                    host=listener.host, port=listener.port)
