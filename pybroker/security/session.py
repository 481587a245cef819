"""Who is on a connection: its listener's security protocol and, once known, its principal."""
from pybroker.security.principal import ANONYMOUS, KafkaPrincipal

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class Session:
    """Set up by the listener for each connection; TLS and SASL fill in the principal.

    ``authenticated`` is True from the start on PLAINTEXT and SSL listeners, and on SASL_* listeners
    once SaslAuthenticate succeeded.
    """
    __slots__ = ("listener", "protocol", "client_host", "principal", "authenticated", "mechanism",
                 "sasl_state", "reauth_deadline")

    def __init__(self, listener: str, protocol: str, client_host: str):
        self.listener = listener
        self.protocol = protocol
        self.client_host = client_host
        self.principal: KafkaPrincipal = ANONYMOUS
        self.authenticated = protocol not in SASL_PROTOCOLS
        self.mechanism: str | None = None
        self.sasl_state = None  # the SASL exchange in progress (mechanism-specific)
        self.reauth_deadline: float | None = None  # loop time after which the session must re-authenticate
