"""FindCoordinator: a group's coordinator is the leader of its ``__consumer_offsets`` partition, a
transactional id's (key type 1) the leader of its ``__transaction_state`` partition.

v4+ (KIP-699) batches keys: one answer per key, each with its own error. Share groups (key type 2,
v6) are not supported here: INVALID_REQUEST, as Kafka answers while they are disabled.
"""
from dataclasses import dataclass

from pybroker.api.kafka_wording import default_message
from pybroker.errors import BrokerError
from pybroker.protocol.errors import (COORDINATOR_NOT_AVAILABLE, GROUP_AUTHORIZATION_FAILED, INVALID_REQUEST,
                                      TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6
FIRST_BATCH_VERSION = 4
GROUP_KEY, TRANSACTION_KEY = 0, 1

Response = RESPONSES[API_KEY]


@dataclass
class Found:
    """One key's answer."""
    error: int = 0
    message: str | None = None
    node_id: int = -1
    host: str = ""
    port: int = -1


async def handle(ctx, request):
    key_type = request.key_type if ctx.version >= 1 else GROUP_KEY
    if ctx.version < FIRST_BATCH_VERSION:
        found = await _find(ctx, key_type, request.key)
        return Response(throttle_time_ms=0, error_code=found.error, error_message=found.message,
                        node_id=found.node_id, host=found.host, port=found.port)
    coordinators = []
    for key in request.coordinator_keys:
        found = await _find(ctx, key_type, key)
        coordinators.append(Response.Coordinator(key=key, node_id=found.node_id, host=found.host, port=found.port,
                                                  error_code=found.error,
                                                  error_message="" if found.error == 0 else found.message))
    return Response(throttle_time_ms=0, coordinators=coordinators)


async def _find(ctx, key_type: int, key: str) -> Found:
    services = ctx.services
    if key_type not in (GROUP_KEY, TRANSACTION_KEY):
        return Found(INVALID_REQUEST, default_message(INVALID_REQUEST))  # as Kafka: its generic wording
    if services.authorizer is not None and not _authorized(ctx, services.authorizer, key_type, key):
        return Found(TRANSACTIONAL_ID_AUTHORIZATION_FAILED if key_type == TRANSACTION_KEY
                     else GROUP_AUTHORIZATION_FAILED)
    if not services.coordinator.ready:
        return Found(COORDINATOR_NOT_AVAILABLE, "the group coordinator is not ready")
    # Kafka creates __consumer_offsets / __transaction_state when a group / transactional id first asks
    store = services.transactions.state_log if key_type == TRANSACTION_KEY else services.offsets
    topic = "__transaction_state" if key_type == TRANSACTION_KEY else "__consumer_offsets"
    try:
        await store.ensure_topic()
    except BrokerError as exc:
        return Found(COORDINATOR_NOT_AVAILABLE, f"cannot create {topic}: {exc}")
    index = store.partition_for(key)
    leader = services.metadata.leader_endpoint(topic, index)
    address = leader.address(ctx.connection.server.listener_name) if leader is not None else None
    if address is None:
        return Found(COORDINATOR_NOT_AVAILABLE, f"{topic}-{index} has no leader")
    return Found(0, None, leader.id, address[0], address[1])


def _authorized(ctx, authz, key_type: int, key: str) -> bool:
    """DESCRIBE on the group (key type 0) or transactional id (1)."""
    if key_type == TRANSACTION_KEY:
        return authz.allowed(ctx, A.DESCRIBE, A.TRANSACTIONAL_ID, key)
    return authz.allowed(ctx, A.DESCRIBE, A.GROUP, key)
