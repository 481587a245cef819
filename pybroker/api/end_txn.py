"""EndTxn: commit or abort the producer's transaction (two-phase: PrepareCommit/PrepareAbort is
written and replicated, which decides it; the answer waits, bounded, for the markers and the Complete
record, so the producer's next transaction finds the id free). WRITE on the
transactional id is required; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2; v4
(TRANSACTION_ABORTABLE) has v3's semantics here. v5 (KIP-890 part 2: an epoch bump per
transaction) is not offered.
"""
from pybroker.protocol.errors import INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.WRITE, A.TRANSACTIONAL_ID, request.transactional_id):
        return Response(throttle_time_ms=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    error = await ctx.transactions.end_txn(request.transactional_id, request.producer_id,
                                                  request.producer_epoch, request.committed)
    if error == PRODUCER_FENCED and ctx.version < 2:
        error = INVALID_PRODUCER_EPOCH
    return Response(throttle_time_ms=0, error_code=error)
