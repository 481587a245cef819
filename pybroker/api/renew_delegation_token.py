"""RenewDelegationToken: refused, with no expiry (pybroker/api/delegation_tokens.py)."""
from pybroker.api import delegation_tokens
from pybroker.protocol.messages import RESPONSES

API_KEY = 39
MIN_VERSION = 0
MAX_VERSION = 2

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    return Response(error_code=delegation_tokens.error(ctx), expiry_timestamp_ms=delegation_tokens.NO_TIMESTAMP,
                    throttle_time_ms=0)
