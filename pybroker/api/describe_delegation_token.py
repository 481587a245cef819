"""DescribeDelegationToken: refused, with no tokens (pybroker/api/delegation_tokens.py)."""
from pybroker.api import delegation_tokens
from pybroker.protocol.messages import RESPONSES

API_KEY = 41
MIN_VERSION = 0
MAX_VERSION = 3

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    return Response(error_code=delegation_tokens.error(ctx), tokens=[], throttle_time_ms=0)
