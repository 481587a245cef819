"""CreateDelegationToken: refused (pybroker/api/delegation_tokens.py), naming the owner as Kafka does:
the one asked for, else the caller; v3+ also the requester. Renewers that are not users answer
INVALID_PRINCIPAL_TYPE, Kafka's check before it finds tokens disabled."""
from pybroker.api import delegation_tokens
from pybroker.protocol.errors import DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, INVALID_PRINCIPAL_TYPE
from pybroker.protocol.messages import RESPONSES

API_KEY = 38
MIN_VERSION = 0
MAX_VERSION = 3
USER = "User"

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    requester = ctx.session.principal
    owner_name = request.owner_principal_name if ctx.version >= 3 else None
    owner = (request.owner_principal_type, owner_name) if owner_name else (requester.type, requester.name)
    error = delegation_tokens.error(ctx)
    if error != DELEGATION_TOKEN_REQUEST_NOT_ALLOWED and any(r.principal_type != USER for r in request.renewers):
        error = INVALID_PRINCIPAL_TYPE
    none = delegation_tokens.NO_TIMESTAMP
    return Response(error_code=error, principal_type=owner[0], principal_name=owner[1],
                    token_requester_principal_type=requester.type, token_requester_principal_name=requester.name,
                    issue_timestamp_ms=none, expiry_timestamp_ms=none, max_timestamp_ms=none, token_id="",
                    hmac=b"", throttle_time_ms=0)
