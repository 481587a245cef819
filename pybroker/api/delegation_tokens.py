"""What CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken and DescribeDelegationToken
(KIP-48) answer: this broker issues no delegation tokens, so, as Kafka 3.8 without
``delegation.token.secret.key``, every request answers DELEGATION_TOKEN_AUTH_DISABLED, after Kafka's
own first check: a connection that could not use a token (PLAINTEXT, or SSL without a client
certificate) answers DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
"""
from pybroker.protocol.errors import DELEGATION_TOKEN_AUTH_DISABLED, DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
from pybroker.security.principal import ANONYMOUS

NO_TIMESTAMP = -1  # Kafka's timestamps in an answer that made no token


def error(ctx) -> int:
    """The error every delegation-token request on this connection answers."""
    session = ctx.session
    if session.protocol == "PLAINTEXT" or (session.protocol == "SSL" and session.principal == ANONYMOUS):
        return DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    return DELEGATION_TOKEN_AUTH_DISABLED
