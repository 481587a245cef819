"""SaslHandshake: the client names its SASL mechanism; the answer lists the listener's enabled ones.

v1: the tokens follow in SaslAuthenticate requests; v0: as bare size-prefixed frames (raw mode).
An unsupported mechanism gets UNSUPPORTED_SASL_MECHANISM (33), after the failed-authentication
delay, and the connection closes. On a listener without SASL: ILLEGAL_SASL_STATE (34), as Kafka.
On an authenticated connection it starts a re-authentication (KIP-368).
"""
from pybroker.protocol.errors import ILLEGAL_SASL_STATE
from pybroker.protocol.messages import RESPONSES

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    sasl = ctx.sasl
    if sasl is None:
        return Response(error_code=ILLEGAL_SASL_STATE, mechanisms=[])
    code, mechanisms = sasl.handshake(ctx.connection, request.mechanism, ctx.version)
    response = Response(error_code=code, mechanisms=mechanisms)
    return sasl.delayed(response) if code and code != ILLEGAL_SASL_STATE else response
