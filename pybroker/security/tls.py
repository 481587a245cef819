"""TLS for listeners (server side) and for pybroker's own clients, with Python's ``ssl`` module.

Broker keys are Kafka's; each may be set per listener as ``listener.name.<listener, lower
case>.ssl.*``, which wins over the plain ``ssl.*`` key. Key material is PEM (a file, or inline
text), or PKCS12 when the ``cryptography`` package is installed; JKS is Java-only and refused with
a hint. ``ssl.client.auth`` (none | requested | required) applies to SSL listeners; on SASL_SSL
only a listener-prefixed value counts (clients authenticate with SASL there), as in Kafka.
Every problem is a ConfigError that names the key, raised when the broker starts.
"""
import logging
import os
import re
import ssl
import tempfile
from dataclasses import dataclass

from pybroker.client.tls import client_context as client_context  # the broker's links build theirs here
from pybroker.properties import ConfigError
from pybroker.security.ssl_principal import PrincipalMapper

log = logging.getLogger(__name__)

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
# the ssl.* keys read here (also valid as listener.name.<name>.ssl.*)
SSL_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.key",
            "ssl.keystore.certificate.chain", "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
            "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols", "ssl.protocol",
            "ssl.cipher.suites", "ssl.principal.mapping.rules")
KEYS = SSL_KEYS
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_TOO_OLD = ("SSLv2", "SSLv3", "TLSv1", "TLSv1.1", "SSLv2Hello")
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_KEX = {"ECDHE_RSA": "ECDHE-RSA-", "ECDHE_ECDSA": "ECDHE-ECDSA-", "DHE_RSA": "DHE-RSA-", "RSA": ""}


@dataclass(frozen=True)
class ListenerTls:
    """What a TLS listener needs: its context, how it names certificate holders, its client auth."""
    context: ssl.SSLContext
    principal_mapper: PrincipalMapper
    client_auth: str


def listener_settings(raw, listener: str, protocol: str) -> dict[str, tuple[str, str]]:
    """ssl.* key -> (value, the key it came from) for one listener: prefixed keys win."""
    prefix = f"listener.name.{listener.lower()}."
    out = {}
    for key in KEYS:
        if prefix + key in raw:
            out[key] = (raw[prefix + key], prefix + key)
        elif key in raw and not (key == "ssl.client.auth" and protocol == "SASL_SSL"):
            out[key] = (raw[key], key)
    return out


def listener_tls(raw, listener: str, protocol: str) -> ListenerTls | None:
    """The TLS setup of a listener (None unless its protocol is SSL or SASL_SSL); ConfigError if bad."""
    if protocol not in TLS_PROTOCOLS:
        return None
    settings = listener_settings(raw, listener, protocol)
    value = lambda key, default=None: settings[key][0].strip() if key in settings else default  # noqa: E731
    where = lambda key: settings[key][1] if key in settings else key  # noqa: E731
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(ctx, value("ssl.enabled.protocols"), value("ssl.protocol", "TLSv1.3"),
                  where("ssl.enabled.protocols"), where("ssl.protocol"))
    _load_keystore(ctx, settings, where, listener)
    auth = value("ssl.client.auth", "none").lower()
    if auth not in _CLIENT_AUTH:
        raise ConfigError(f"{where('ssl.client.auth')}={auth!r}: expected none, requested or required",
                          where("ssl.client.auth"))
    trusted = _load_truststore(ctx, settings, where)
    if auth != "none" and not trusted:
        raise ConfigError(f"{where('ssl.client.auth')}={auth} needs a truststore to check client certificates: "
                          "set ssl.truststore.location or ssl.truststore.certificates", where("ssl.client.auth"))
    ctx.verify_mode = _CLIENT_AUTH[auth]
    ciphers = value("ssl.cipher.suites")
    if ciphers:
        _set_ciphers(ctx, ciphers, where("ssl.cipher.suites"))
    try:
        mapper = PrincipalMapper(value("ssl.principal.mapping.rules", "DEFAULT"))
    except ValueError as exc:
        key = where("ssl.principal.mapping.rules")
        raise ConfigError(f"{key}: {exc}", key) from None
    return ListenerTls(ctx, mapper, auth)


def _set_versions(ctx: ssl.SSLContext, enabled: str | None, protocol: str, enabled_key: str,
                  protocol_key: str) -> None:
    if protocol not in ("TLS", "TLSv1.2", "TLSv1.3"):
        raise ConfigError(f"{protocol_key}={protocol!r}: expected TLSv1.3, TLSv1.2 or TLS", protocol_key)
    if enabled is None:  # Kafka's default follows ssl.protocol
        names = ["TLSv1.2"] if protocol == "TLSv1.2" else ["TLSv1.2", "TLSv1.3"]
    else:
        names = [n.strip() for n in enabled.split(",") if n.strip()]
    for name in names:
        if name in _TOO_OLD:
            raise ConfigError(f"{enabled_key}: {name} is not allowed (insecure); use TLSv1.2 and/or TLSv1.3",
                              enabled_key)
        if name not in _VERSIONS:
            raise ConfigError(f"{enabled_key}: unknown protocol {name!r}; expected TLSv1.2 and/or TLSv1.3",
                              enabled_key)
    if not names:
        raise ConfigError(f"{enabled_key}: no protocol enabled; expected TLSv1.2 and/or TLSv1.3", enabled_key)
    versions = sorted(_VERSIONS[n] for n in names)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]


def _load_keystore(ctx: ssl.SSLContext, settings: dict, where, listener: str) -> None:
    get = lambda key: settings[key][0] if key in settings else None  # noqa: E731
    password = get("ssl.key.password") or get("ssl.keystore.password")
    location, key, chain = get("ssl.keystore.location"), get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    kind = _store_type(get("ssl.keystore.type"), location)
    if kind == "JKS":
        raise ConfigError(f"{where('ssl.keystore.type')}=JKS: Java keystores cannot be read here; set "
                          "ssl.keystore.type=PEM (or PKCS12) and convert it, e.g. keytool -importkeystore "
                          "-deststoretype PKCS12", where("ssl.keystore.type"))
    if kind not in ("PEM", "PKCS12"):
        raise ConfigError(f"{where('ssl.keystore.type')}={kind!r}: expected PEM or PKCS12", where("ssl.keystore.type"))
    if location:
        k = where("ssl.keystore.location")
        try:
            with open(location, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ConfigError(f"{k}={location}: cannot read it: {exc.strerror or exc}", k) from None
        pem = _pkcs12_to_pem(data, password, k) if kind == "PKCS12" else data
        _load_pem_chain(ctx, pem, password if kind == "PEM" else None, k)
    elif key or chain:
        if not (key and chain):
            missing, given = (("ssl.keystore.certificate.chain", "ssl.keystore.key") if key
                              else ("ssl.keystore.key", "ssl.keystore.certificate.chain"))
            raise ConfigError(f"{missing}: needed with {given} (the inline PEM key and certificate chain go "
                              "together)", missing)
        _load_pem_chain(ctx, (_pem_text(key) + "\n" + _pem_text(chain)).encode(), password,
                        where("ssl.keystore.key"))
    else:
        raise ConfigError(f"listener {listener} uses TLS but has no key and certificate: set ssl.keystore.location "
                          "(a PEM file with the private key and certificate chain) or ssl.keystore.key and "
                          "ssl.keystore.certificate.chain", "ssl.keystore.location")


def _load_pem_chain(ctx: ssl.SSLContext, pem: bytes, password: str | None, key: str) -> None:
    """load_cert_chain reads files only: the PEM goes through a private temporary file."""
    fd, path = tempfile.mkstemp(prefix="pybroker-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path, password=password or None)
    except ssl.SSLError as exc:
        hint = " (wrong ssl.key.password?)" if "password" in str(exc).lower() or "bad decrypt" in str(exc).lower() \
            or exc.reason in ("BAD_DECRYPT", "NO_START_LINE", "PEM_LIB") else ""
        raise ConfigError(f"{key}: cannot load the private key and certificate chain: {exc.reason or exc}{hint}",
                          key) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{key}: cannot load the private key and certificate chain: {exc}", key) from None
    finally:
        os.unlink(path)


def _load_truststore(ctx: ssl.SSLContext, settings: dict, where) -> bool:
    get = lambda key: settings[key][0] if key in settings else None  # noqa: E731
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    kind = _store_type(get("ssl.truststore.type"), location)
    if not (location or inline):
        return False
    tkey = where("ssl.truststore.location" if location else "ssl.truststore.certificates")
    if kind == "JKS":
        raise ConfigError(f"{where('ssl.truststore.type')}=JKS: Java truststores cannot be read here; set "
                          "ssl.truststore.type=PEM (or PKCS12) and convert it", where("ssl.truststore.type"))
    if kind not in ("PEM", "PKCS12"):
        raise ConfigError(f"{where('ssl.truststore.type')}={kind!r}: expected PEM or PKCS12",
                          where("ssl.truststore.type"))
    try:
        if inline:
            ctx.load_verify_locations(cadata=_pem_text(inline))
        elif kind == "PKCS12":
            with open(location, "rb") as f:
                data = f.read()
            ctx.load_verify_locations(cadata=_pkcs12_certs(data, get("ssl.truststore.password"), tkey))
        else:
            ctx.load_verify_locations(cafile=location)
    except FileNotFoundError:
        raise ConfigError(f"{tkey}={location}: no such file", tkey) from None
    except ssl.SSLError as exc:
        raise ConfigError(f"{tkey}: cannot load the trusted certificates: {exc.reason or exc}", tkey) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{tkey}: cannot load the trusted certificates: {exc}", tkey) from None
    return True


def _store_type(given: str | None, location: str | None) -> str:
    """The type set, else guessed from the file name: .jks and .p12/.pfx, anything else PEM."""
    if given and given.strip():
        return given.strip().upper()
    name = (location or "").lower()
    return "JKS" if name.endswith((".jks", ".keystore", ".truststore")) else \
        "PKCS12" if name.endswith((".p12", ".pfx")) else "PEM"


def _pem_text(value: str) -> str:
    """Inline PEM from a properties file may have lost its line breaks; put them back."""
    text = value.strip()
    if "\n" in text:
        return text
    blocks = re.findall(r"(-----BEGIN [A-Z0-9 ]+-----)(.*?)(-----END [A-Z0-9 ]+-----)", text)
    return "\n".join(f"{b}\n" + "\n".join(body.split()) + f"\n{e}" for b, body, e in blocks) or text


def _cryptography_pkcs12(key: str):
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigError(f"{key}: PKCS12 needs the 'cryptography' package (pip install cryptography), "
                          "or use PEM", key) from None
    return pkcs12


def _pkcs12_to_pem(data: bytes, password: str | None, key: str) -> bytes:
    pkcs12 = _cryptography_pkcs12(key)
    from cryptography.hazmat.primitives import serialization
    try:
        pkey, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise ConfigError(f"{key}: cannot open the PKCS12 keystore (wrong ssl.keystore.password?): {exc}",
                          key) from None
    if pkey is None or cert is None:
        raise ConfigError(f"{key}: the PKCS12 keystore holds no private key and certificate", key)
    out = pkey.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    for c in [cert, *extra]:
        out += c.public_bytes(serialization.Encoding.PEM)
    return out


def _pkcs12_certs(data: bytes, password: str | None, key: str) -> str:
    pkcs12 = _cryptography_pkcs12(key)
    from cryptography.hazmat.primitives import serialization
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as exc:
        raise ConfigError(f"{key}: cannot open the PKCS12 truststore (wrong ssl.truststore.password?): {exc}",
                          key) from None
    certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _set_ciphers(ctx: ssl.SSLContext, text: str, key: str) -> None:
    """Kafka names suites the IANA way (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); OpenSSL's names are
    accepted too. TLS 1.3 suites cannot be restricted through Python's ssl and are left as they are."""
    names = []
    for suite in (s.strip() for s in text.split(",") if s.strip()):
        if suite.startswith("TLS_") and "_WITH_" not in suite:
            continue  # a TLS 1.3 suite
        names.append(_openssl_cipher_name(suite))
    if not names:
        return
    try:
        ctx.set_ciphers(":".join(names))
    except ssl.SSLError:
        raise ConfigError(f"{key}={text!r}: none of these cipher suites is available", key) from None


def _openssl_cipher_name(suite: str) -> str:
    if not suite.startswith("TLS_") or "_WITH_" not in suite:
        return suite
    kex, _, rest = suite[4:].partition("_WITH_")
    parts = rest.split("_")
    if parts[0] in ("AES", "CAMELLIA", "ARIA") and len(parts) > 1:
        parts = [parts[0] + parts[1]] + parts[2:]
    return _KEX.get(kex, kex.replace("_", "-") + "-") + "-".join(parts)


def listener_client_context(raw, listener: str, protocol: str) -> ssl.SSLContext:
    """A client context for connecting to another broker's ``listener`` with this broker's own ssl.* settings."""
    settings = listener_settings(raw, listener, protocol)
    where = lambda key: settings[key][1] if key in settings else key  # noqa: E731
    prefixed = f"listener.name.{listener.lower()}.ssl.endpoint.identification.algorithm"
    algorithm = raw.get(prefixed, raw.get("ssl.endpoint.identification.algorithm", "https")).strip().lower()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = algorithm == "https"
    if not _load_truststore(ctx, settings, where):
        ctx.load_default_certs()
    if any(k in settings for k in ("ssl.keystore.location", "ssl.keystore.key")):
        _load_keystore(ctx, settings, where, listener)
    return ctx
