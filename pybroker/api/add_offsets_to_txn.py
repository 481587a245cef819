"""AddOffsetsToTxn: put the group's ``__consumer_offsets`` partition into the producer's transaction,
so that its TxnOffsetCommit becomes part of it. WRITE on the transactional id and READ on the group
are required; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2; v4 (TRANSACTION_ABORTABLE) has
the same semantics here, as this coordinator never answers that error.
"""
from pybroker.coordinator.offsets import TOPIC as OFFSETS_TOPIC
from pybroker.protocol.errors import (GROUP_AUTHORIZATION_FAILED, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED,
                                      TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    services = ctx.services
    authz = services.authorizer
    if authz is not None and not authz.allowed(ctx, A.WRITE, A.TRANSACTIONAL_ID, request.transactional_id):
        return Response(throttle_time_ms=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if authz is not None and not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return Response(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED)
    partition = (OFFSETS_TOPIC, services.offsets.partition_for(request.group_id))
    error = await services.transactions.add_partitions(request.transactional_id, request.producer_id,
                                                     request.producer_epoch, [partition])
    if error == PRODUCER_FENCED and ctx.version < 2:
        error = INVALID_PRODUCER_EPOCH
    return Response(throttle_time_ms=0, error_code=error)
