"""SaslAuthenticate: one SASL token each way; v1+ tells the session lifetime (KIP-368).

Wrong credentials: SASL_AUTHENTICATION_FAILED (58) with Kafka's message, sent after
``connection.failed.authentication.delay.ms``; then the connection closes. Without a SaslHandshake
before it: ILLEGAL_SASL_STATE (34).
"""
from pybroker.protocol.errors import ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security.sasl.authenticator import Exchange

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    sasl = ctx.sasl
    if sasl is None or type(ctx.session.sasl_state) is not Exchange or ctx.session.sasl_state.raw:
        return Response(error_code=ILLEGAL_SASL_STATE, auth_bytes=b"", session_lifetime_ms=0,
                        error_message="SaslAuthenticate request received after successful authentication"
                        if ctx.session.authenticated else "SaslAuthenticate request without a SaslHandshake")
    outcome = sasl.authenticate(ctx.connection, bytes(request.auth_bytes))
    if outcome.error is not None:
        return sasl.delayed(Response(error_code=SASL_AUTHENTICATION_FAILED, error_message=outcome.error,
                                     auth_bytes=b"", session_lifetime_ms=0))
    return Response(error_code=0, error_message=None, auth_bytes=outcome.token,
                    session_lifetime_ms=outcome.lifetime_ms)
