"""Wiring SASL into a broker: the SCRAM credential store, the authenticator, and the gate in front
of each SASL listener's dispatcher (PLAINTEXT and SSL listeners are left untouched)."""
from pybroker.net.framing import PreAuthFrameLimit
from pybroker.security.credentials import LocalCredentialStore, ZkCredentialStore
from pybroker.security.sasl.authenticator import SaslAuthenticator
from pybroker.security.sasl.settings import SASL_PROTOCOLS, SaslSettings


async def start(broker) -> None:
    """Before the listeners open: credentials loaded, SASL listeners gated."""
    from pybroker.api.dispatcher import AuthenticationGate
    cfg = broker.config
    store = ZkCredentialStore(broker.zk) if broker.zk is not None else LocalCredentialStore(cfg.log_dirs[0])
    await store.startup()
    broker.scram_credentials = store
    settings = getattr(cfg, "sasl", None) or SaslSettings()
    sasl_servers = [s for s in broker.servers if getattr(s, "security_protocol", "PLAINTEXT") in SASL_PROTOCOLS]
    if not sasl_servers:
        return
    broker.sasl = SaslAuthenticator(settings, store)
    for server in sasl_servers:
        server.handler = AuthenticationGate(server.handler, broker.sasl)
        server.max_pre_auth_bytes = PreAuthFrameLimit(settings.max_receive_bytes)
