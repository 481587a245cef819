"""The SASL service of a broker: the authenticator its SASL listeners use, over the SCRAM credential
store of the metadata backend. The broker builds it and puts a gate (``AuthenticationGate`` in
pybroker/api/dispatcher.py) in front of each SASL listener's dispatcher; PLAINTEXT and SSL
listeners are left untouched."""
from pybroker.net.framing import PreAuthFrameLimit
from pybroker.security.sasl.authenticator import SaslAuthenticator
from pybroker.security.sasl.settings import SASL_PROTOCOLS, SaslSettings


def settings_of(config) -> SaslSettings:
    return getattr(config, "sasl", None) or SaslSettings()


def speaks_sasl(security_protocol: str) -> bool:
    return security_protocol in SASL_PROTOCOLS


def pre_auth_limit(config) -> PreAuthFrameLimit:
    """The request size limit on a SASL connection until it has authenticated (sasl.server.max.receive.size)."""
    return PreAuthFrameLimit(settings_of(config).max_receive_bytes)


def new_authenticator(config, credentials) -> SaslAuthenticator | None:
    """The SASL side of the broker (``credentials``: the SCRAM credential store); None when no listener
    speaks SASL."""
    if not any(speaks_sasl(config.security_protocol(listener.name)) for listener in config.listeners):
        return None
    return SaslAuthenticator(settings_of(config), credentials)
