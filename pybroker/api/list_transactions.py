"""ListTransactions: the transactions this broker coordinates, filtered by state names, producer
ids and (v1) a minimum running time; only ids the caller may DESCRIBE are listed."""
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    authz = ctx.authorizer
    duration = request.duration_filter if ctx.version >= 1 else -1
    error, found, unknown = ctx.transactions.list(set(request.state_filters),
                                                         set(request.producer_id_filters), duration)
    if authz is not None:
        found = [md for md in found
                 if authz.allowed_quietly(ctx, A.DESCRIBE, A.TRANSACTIONAL_ID, md.transactional_id)]
    return Response(throttle_time_ms=0, error_code=error, unknown_state_filters=unknown,
                    transaction_states=[Response.TransactionState(transactional_id=md.transactional_id,
                                                                  producer_id=md.producer_id,
                                                                  transaction_state=md.state.label)
                                        for md in found])
