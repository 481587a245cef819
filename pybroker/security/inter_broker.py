"""How this broker connects to the others: the inter-broker listener's security, as a ClientSecurity.

The listener is the config's inter-broker listener (``inter.broker.listener.name``, else the first
advertised one), and its protocol comes from ``listener.security.protocol.map``. SASL uses
``sasl.mechanism.inter.broker.protocol`` with the username/password of that listener's JAAS entry
for the mechanism; TLS trusts the listener's truststore (the system's CAs without one), presents
the listener's keystore as the client certificate (peers with ``ssl.client.auth=required`` ask for
it) and checks peer host names unless ``ssl.endpoint.identification.algorithm`` is empty, as
Kafka's brokers do. Used by the replica
fetchers, the controller's channel and controlled shutdown; a PLAINTEXT link gets None and pays
nothing. Built once per config object (the TLS context is shared by every link).
"""
from pybroker.client.security import ClientSecurity
from pybroker.security import tls

_cache: dict = {}  # id(config) -> (config, security): the config is kept so its id is not reused


def inter_broker_security(config) -> ClientSecurity | None:
    """The security of this broker's connections to other brokers (None: PLAINTEXT)."""
    hit = _cache.get(id(config))
    if hit is not None and hit[0] is config:
        return hit[1]
    security = _build(config)
    if len(_cache) > 8:  # configs replaced at runtime: keep only the recent ones
        _cache.clear()
    _cache[id(config)] = (config, security)
    return security


def _build(config) -> ClientSecurity | None:
    listener = config.inter_broker_listener.name  # the listener whose address the links dial
    protocol = config.security_protocol(listener)
    if protocol == "PLAINTEXT":
        return None
    mechanism = username = password = None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = config.sasl.inter_broker_mechanism
        credentials = config.sasl.inter_broker_credentials(listener, mechanism)
        if credentials is None:
            raise ValueError(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config: the "
                             f"inter-broker listener {listener} needs this broker's username and password")
        username, password = credentials
    context = []
    if protocol in ("SSL", "SASL_SSL"):
        context.append(tls.listener_client_context(config.raw, listener, protocol))
    return ClientSecurity(protocol=protocol, mechanism=mechanism, username=username, password=password,
                          _context=context)

