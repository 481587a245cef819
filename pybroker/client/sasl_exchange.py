"""Kafka's SASL exchange (SaslHandshake v1, then SaslAuthenticate) as a generator of requests.

``steps(security, versions, address)`` yields ``(request, version)`` pairs and is sent each
decoded response; it returns the session lifetime in milliseconds (0: no re-authentication
needed, KIP-368). Both the asyncio connection and the blocking tool client drive it, so the
protocol rules live in one place. Failures raise AuthenticationError with the broker's message.
"""
from pybroker.client.errors import AuthenticationError
from pybroker.client.sasl import SaslError
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
HANDSHAKE_VERSIONS = (1, 1)  # v0 sends raw tokens outside Kafka's framing; no current broker needs it
AUTHENTICATE_VERSIONS = (0, 2)
MAX_ROUNDS = 8  # PLAIN takes one round, SCRAM two: more means a confused server


def _version(versions: dict, api_key: int, lo: int, hi: int, address: str) -> int:
    blo, bhi = versions.get(api_key, (0, -1))
    top = min(hi, bhi)
    if max(lo, blo) > top:
        name = "SaslHandshake" if api_key == SASL_HANDSHAKE else "SaslAuthenticate"
        raise AuthenticationError(f"{address} does not offer {name} v{lo}-{hi} (it offers "
                                  f"{f'v{blo}-{bhi}' if bhi >= 0 else 'none'}): is this a SASL listener?",
                                  code=ErrorCode.ILLEGAL_SASL_STATE)
    return top


def steps(security, versions: dict, address: str):
    """Generator: yields (request, version), receives response bodies, returns the session lifetime (ms)."""
    mech = security.new_mechanism()
    handshake_v = _version(versions, SASL_HANDSHAKE, *HANDSHAKE_VERSIONS, address)
    auth_v = _version(versions, SASL_AUTHENTICATE, *AUTHENTICATE_VERSIONS, address)
    resp = yield REQUESTS[SASL_HANDSHAKE](mechanism=mech.name), handshake_v
    if resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        raise AuthenticationError(f"{address} does not enable SASL mechanism {mech.name} (enabled: "
                                  f"{', '.join(resp.mechanisms or []) or 'none'})", code=resp.error_code)
    if resp.error_code:
        raise AuthenticationError(f"SaslHandshake with {address} failed", code=resp.error_code)
    token = mech.first()
    for _ in range(MAX_ROUNDS):
        resp = yield REQUESTS[SASL_AUTHENTICATE](auth_bytes=token), auth_v
        if resp.error_code:
            detail = resp.error_message or "the broker gave no reason"
            raise AuthenticationError(f"authentication as {security.username!r} with {mech.name} at {address} "
                                      f"failed: {detail}", code=resp.error_code)
        try:
            token = mech.step(resp.auth_bytes or b"")
        except SaslError as exc:
            raise AuthenticationError(f"{mech.name} with {address} failed: {exc}") from None
        if token is None:
            return resp.session_lifetime_ms if auth_v >= 1 else 0
    raise AuthenticationError(f"{address} did not finish the {mech.name} exchange within {MAX_ROUNDS} rounds")
