"""How a client secures its connections: TLS settings and SASL credentials, confluent-kafka names.

``security.protocol`` PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL; TLS: ``ssl.ca.location``
(PEM CA bundle; the system's CAs when unset), ``ssl.certificate.location`` / ``ssl.key.location`` /
``ssl.key.password`` (a client certificate, for brokers that require one),
``ssl.endpoint.identification.algorithm`` (https: the broker's certificate must name the host
connected to; none: any certificate the CAs signed), ``enable.ssl.certificate.verification``;
SASL: ``sasl.mechanism`` (alias ``sasl.mechanisms``) PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512,
``sasl.username``, ``sasl.password``. The password never appears in a repr, a log line or an error.
"""
import ssl as _ssl
from dataclasses import dataclass, field

from pybroker.client import sasl
from pybroker.client.errors import ConfigError
from pybroker.client.tls import client_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password"})

# client property -> (type, default, allowed); None defaults mean "unset"
SECURITY_KEYS = {
    "security.protocol": (str, "PLAINTEXT", PROTOCOLS),
    "ssl.ca.location": (str, None),
    "ssl.certificate.location": (str, None),
    "ssl.key.location": (str, None),
    "ssl.key.password": (str, None),
    "ssl.endpoint.identification.algorithm": (str, "https", ("https", "none")),
    "enable.ssl.certificate.verification": (bool, True),
    "sasl.mechanism": (str, None, sasl.MECHANISMS),
    "sasl.mechanisms": (str, None, sasl.MECHANISMS),
    "sasl.username": (str, None),
    "sasl.password": (str, None),
}


@dataclass(frozen=True)
class ClientSecurity:
    """A client's connection security, checked once; ``ssl_context()`` is built once and shared."""
    protocol: str = "PLAINTEXT"
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    verify_certificates: bool = True
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    _context: list = field(default_factory=list, repr=False, compare=False)  # the built SSLContext, once

    def __post_init__(self):
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"security.protocol: {self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if self.sasl:
            if self.mechanism is None:
                raise ConfigError(f"security.protocol={self.protocol} needs sasl.mechanism "
                                  f"({', '.join(sasl.MECHANISMS)})")
            if self.mechanism not in sasl.MECHANISMS:
                raise ConfigError(f"sasl.mechanism: {self.mechanism!r} is not one of {', '.join(sasl.MECHANISMS)}")
            if not self.username or self.password is None:
                raise ConfigError(f"sasl.mechanism={self.mechanism} needs sasl.username and sasl.password")
        if self.key_location and not self.certificate_location:
            raise ConfigError("ssl.key.location needs ssl.certificate.location (the client certificate)")

    @property
    def ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def plaintext(self) -> bool:
        return self.protocol == "PLAINTEXT"

    def new_mechanism(self):
        """A fresh SASL client state machine for one exchange."""
        return sasl.mechanism(self.mechanism, self.username, self.password)

    def ssl_context(self) -> _ssl.SSLContext | None:
        """The TLS context for SSL and SASL_SSL (None otherwise); a bad file raises ConfigError."""
        if not self.ssl:
            return None
        if not self._context:
            self._context.append(self._build_context())
        return self._context[0]

    def _build_context(self) -> _ssl.SSLContext:
        try:
            ctx = client_context(cafile=self.ca_location, check_hostname=self.check_hostname)
        except (OSError, _ssl.SSLError) as exc:
            raise ConfigError(f"ssl.ca.location={self.ca_location}: cannot load CA certificates: {exc}") from None
        if not self.verify_certificates:
            ctx.check_hostname = False
            ctx.verify_mode = _ssl.CERT_NONE
        elif not self.check_hostname:
            ctx.check_hostname = False
        if self.certificate_location:
            try:
                ctx.load_cert_chain(self.certificate_location, self.key_location, self.key_password)
            except (OSError, _ssl.SSLError) as exc:
                where = self.certificate_location + (f" / {self.key_location}" if self.key_location else "")
                raise ConfigError(f"ssl.certificate.location / ssl.key.location ({where}): cannot load the "
                                  f"client certificate and key: {getattr(exc, 'reason', None) or exc}") from None
        return ctx


PLAINTEXT = ClientSecurity()


def from_values(values) -> ClientSecurity:
    """The security settings of a parsed client config (a mapping with SECURITY_KEYS)."""
    protocol = values.get("security.protocol") or "PLAINTEXT"
    if protocol == "PLAINTEXT" and not any(values.get(k) for k in SECURITY_KEYS if k != "security.protocol"
                                           and SECURITY_KEYS[k][1] is None):
        return PLAINTEXT
    mechanism = values.get("sasl.mechanism") or values.get("sasl.mechanisms")
    if values.get("sasl.mechanisms") and values["sasl.mechanisms"] != mechanism:
        raise ConfigError(f"sasl.mechanism={mechanism} and sasl.mechanisms={values['sasl.mechanisms']} differ; "
                          "set one of them (they are aliases)")
    return ClientSecurity(
        protocol=protocol, ca_location=values.get("ssl.ca.location"),
        certificate_location=values.get("ssl.certificate.location"), key_location=values.get("ssl.key.location"),
        key_password=values.get("ssl.key.password"),
        check_hostname=(values.get("ssl.endpoint.identification.algorithm") or "https").lower() == "https",
        verify_certificates=values.get("enable.ssl.certificate.verification", True) is not False,
        mechanism=mechanism, username=values.get("sasl.username"), password=values.get("sasl.password"))


def shown(name: str, value) -> str:
    """``value`` as it may appear in a message: secrets hidden."""
    return "[hidden]" if name in SECRET_KEYS else repr(value)
