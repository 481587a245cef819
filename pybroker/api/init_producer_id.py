"""InitProducerId: a new producer id (epoch 0) for an idempotent producer."""
from pybroker.asyncutil import settle
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 1
INVALID_REQUEST = 42

CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 31, 53

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
    if any(authz.allowed_quietly(ctx, A.WRITE, A.TOPIC, t) for t in ctx.broker.metadata.topics):
        return True
    return authz.allowed(ctx, A.IDEMPOTENT_WRITE, A.CLUSTER, A.CLUSTER_NAME)


async def handle(ctx, request):
    authz = ctx.broker.authorizer
    if authz is not None and not _authorized(ctx, authz, request):
        error = CLUSTER_AUTHORIZATION_FAILED if request.transactional_id is None \
            else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return Response(throttle_time_ms=0, error_code=error, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is not None:  # transactions are not supported
        return Response(throttle_time_ms=0, error_code=INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
    return Response(throttle_time_ms=0, error_code=0, producer_id=await settle(ctx.broker.producer_ids.allocate()),
                    producer_epoch=0)
