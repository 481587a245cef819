"""InitProducerId: a new producer id (epoch 0) for an idempotent producer; for a transactional one,
the transaction coordinator's producer id and epoch (pybroker/transaction/coordinator.py).

Versions: v3 adds the producer id/epoch a producer resumes with (KIP-360; both or neither set, else
INVALID_REQUEST), v4 knows PRODUCER_FENCED (older versions get INVALID_PRODUCER_EPOCH instead), v5
knows TRANSACTION_ABORTABLE (which this coordinator never answers here).
"""
from pybroker.protocol.errors import (CLUSTER_AUTHORIZATION_FAILED, INVALID_PRODUCER_EPOCH, INVALID_REQUEST,
                                      PRODUCER_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5

Response = RESPONSES[API_KEY]


def _authorized(ctx, authz, request) -> bool:
    """Transactional: WRITE on the id. Idempotent: IDEMPOTENT_WRITE on the cluster, or WRITE on any
    topic (Kafka 3.x dropped the cluster requirement for producers that may write somewhere)."""
    if request.transactional_id is not None:
        return authz.allowed(ctx, A.WRITE, A.TRANSACTIONAL_ID, request.transactional_id)
    if authz.allowed_quietly(ctx, A.IDEMPOTENT_WRITE, A.CLUSTER, A.CLUSTER_NAME):
        return True
    s = ctx.session
    if authz.authorize_any(s.principal, s.client_host, A.WRITE, A.TOPIC):
        return True
    if any(authz.allowed_quietly(ctx, A.WRITE, A.TOPIC, t) for t in ctx.metadata.topics):
        return True
    return authz.allowed(ctx, A.IDEMPOTENT_WRITE, A.CLUSTER, A.CLUSTER_NAME)


async def handle(ctx, request):
    authz = ctx.authorizer
    if authz is not None and not _authorized(ctx, authz, request):
        error = CLUSTER_AUTHORIZATION_FAILED if request.transactional_id is None \
            else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return _error(error)
    if request.transactional_id is not None:
        return await _transactional(ctx, request)
    return Response(throttle_time_ms=0, error_code=0, producer_id=await ctx.control.allocate_producer_id(),
                    producer_epoch=0)


async def _transactional(ctx, request):
    expected = None
    if ctx.version >= 3:
        pid, epoch = request.producer_id, request.producer_epoch
        if (pid == -1) != (epoch == -1):
            return _error(INVALID_REQUEST)
        if pid != -1:
            expected = (pid, epoch)
    error, pid, epoch = await ctx.transactions.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, expected)
    if error == PRODUCER_FENCED and ctx.version < 4:
        error = INVALID_PRODUCER_EPOCH
    if error:
        return _error(error)
    return Response(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=epoch)


def _error(code: int):
    return Response(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)
