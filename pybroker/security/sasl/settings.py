"""Kafka's broker SASL keys, validated once at start.

``sasl.enabled.mechanisms`` (overridden per listener by ``listener.name.<l>.sasl.enabled.mechanisms``),
one JAAS config per listener and mechanism ``listener.name.<l>.<mechanism>.sasl.jaas.config``
(``<l>`` and ``<mechanism>`` lower-cased, as Kafka); like Kafka, an unprefixed ``sasl.jaas.config``
is ignored with a warning on a broker, and JAAS files (java.security.auth.login.config) are not read.
PLAIN users are the ``user_<name>="<password>"`` options of the PlainLoginModule entry; SCRAM
users live in the credential store, so a ScramLoginModule entry is optional here (it only gives the
broker's own inter-broker username/password). ``connections.max.reauth.ms`` (0: sessions never
expire; a ``listener.name.<l>.<mechanism>.`` prefix overrides it), ``connection.failed.authentication
.delay.ms`` and ``sasl.server.max.receive.size`` (the frame limit before authentication).
"""
import logging
import re
from dataclasses import dataclass, field
from typing import Mapping

from pybroker import jaas as jaas_syntax
from pybroker.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS

log = logging.getLogger(__name__)

SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
INT_MAX, LONG_MAX = 2**31 - 1, 2**63 - 1
DEFAULT_FAILED_AUTH_DELAY_MS = 100
DEFAULT_MAX_RECEIVE = 524288
DEFAULT_INTER_BROKER_MECHANISM = "GSSAPI"  # Kafka's default; only checked when the inter-broker listener is SASL

_GLOBAL = {"sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol",
           "connection.failed.authentication.delay.ms", "connections.max.reauth.ms",
           "sasl.server.max.receive.size", "sasl.jaas.config"}
# Kafka SASL keys for what pybroker does not do (Kerberos, OAUTHBEARER, custom callbacks): accepted, ignored
_IGNORED_PREFIXES = ("sasl.kerberos.", "sasl.login.", "sasl.oauthbearer.", "sasl.server.callback.",
                     "sasl.client.callback.")
_LISTENER_KEY = re.compile(r"listener\.name\.([a-z0-9_]+)\.(?:([a-z0-9-]+)\.)?(sasl\..+|connections\.max\.reauth\.ms)")


def is_sasl_key(key: str) -> bool:
    if key in _GLOBAL or key.startswith(_IGNORED_PREFIXES):
        return True
    m = _LISTENER_KEY.fullmatch(key)
    return m is not None and (m.group(3) in _GLOBAL or m.group(3).startswith(_IGNORED_PREFIXES))


class SaslConfigError(ValueError):
    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class ListenerSasl:
    """One SASL listener: its mechanisms, JAAS entries, PLAIN users and session lifetimes."""
    name: str
    mechanisms: tuple[str, ...]
    jaas: Mapping[str, jaas_syntax.JaasEntry] = field(default_factory=dict, repr=False)  # mechanism -> entry
    plain_users: Mapping[str, str] = field(default_factory=dict, repr=False)  # name -> password
    reauth_ms: Mapping[str, int] = field(default_factory=dict)  # mechanism -> connections.max.reauth.ms

    def own_credentials(self, mechanism: str) -> tuple[str, str] | None:
        """The username/password this broker logs in with as a client over ``mechanism``."""
        entry = self.jaas.get(mechanism)
        if entry is None or "username" not in entry.options or "password" not in entry.options:
            return None
        return entry.options["username"], entry.options["password"]


@dataclass(frozen=True)
class SaslSettings:
    listeners: Mapping[str, ListenerSasl] = field(default_factory=dict)  # SASL listeners only, by name
    inter_broker_mechanism: str = DEFAULT_INTER_BROKER_MECHANISM
    failed_auth_delay_ms: int = DEFAULT_FAILED_AUTH_DELAY_MS
    max_receive_bytes: int = DEFAULT_MAX_RECEIVE

    def inter_broker_credentials(self, listener: str, mechanism: str | None = None) -> tuple[str, str] | None:
        """(username, password) from ``listener.name.<listener>.<mechanism>.sasl.jaas.config``;
        ``mechanism`` defaults to sasl.mechanism.inter.broker.protocol. None when not configured."""
        lst = self.listeners.get(listener.upper())
        return None if lst is None else lst.own_credentials(mechanism or self.inter_broker_mechanism)


def _int(key: str, value: str, lo: int, hi: int) -> int:
    text = value.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not lo <= int(text) <= hi:
        raise SaslConfigError(f"{key}={value!r}: expected an integer between {lo} and {hi}", key)
    return int(text)


def _mechanisms(key: str, text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    for name in names:
        if name not in SUPPORTED_MECHANISMS:
            raise SaslConfigError(f"{key}: SASL mechanism {name} is not supported; pybroker offers "
                                  f"{', '.join(SUPPORTED_MECHANISMS)}", key)
    return names


def _jaas_entry(key: str, text: str, mechanism: str) -> jaas_syntax.JaasEntry:
    try:
        entry = jaas_syntax.parse_one(text)
    except ValueError as exc:
        raise SaslConfigError(f"{key}: bad JAAS config: {exc}", key) from None
    want = jaas_syntax.PLAIN_MODULE if mechanism == "PLAIN" else jaas_syntax.SCRAM_MODULE
    if entry.module != want:
        raise SaslConfigError(f"{key}: login module {entry.module} does not serve {mechanism}; expected {want}", key)
    return entry


def parse(raw: Mapping[str, str], protocols: Mapping[str, str]) -> SaslSettings:
    """``protocols``: served listener name -> security protocol. Raises SaslConfigError naming the key."""
    for key in raw:
        if key.startswith(_IGNORED_PREFIXES) or ((m := _LISTENER_KEY.fullmatch(key)) is not None
                                                 and m.group(3).startswith(_IGNORED_PREFIXES)):
            log.info("ignoring config %s: pybroker does not use it (PLAIN and SCRAM only)", key)
    if "sasl.jaas.config" in raw:
        log.warning("ignoring sasl.jaas.config: on a broker it must be prefixed with the listener and mechanism, "
                    "e.g. listener.name.sasl_plaintext.plain.sasl.jaas.config (as Kafka)")
    default_mechs = _mechanisms("sasl.enabled.mechanisms", raw["sasl.enabled.mechanisms"]) \
        if "sasl.enabled.mechanisms" in raw else ()
    default_reauth = _int("connections.max.reauth.ms", raw["connections.max.reauth.ms"], 0, LONG_MAX) \
        if "connections.max.reauth.ms" in raw else 0
    listeners = {}
    for name, protocol in protocols.items():
        if protocol not in SASL_PROTOCOLS:
            continue
        prefix = f"listener.name.{name.lower()}."
        key = prefix + "sasl.enabled.mechanisms"
        mechs = _mechanisms(key, raw[key]) if key in raw else default_mechs
        if not mechs:
            raise SaslConfigError(f"sasl.enabled.mechanisms: listener {name} ({protocol}) needs at least one of "
                                  f"{', '.join(SUPPORTED_MECHANISMS)} (Kafka's default, GSSAPI, is not supported)",
                                  "sasl.enabled.mechanisms")
        entries, users, reauth = {}, {}, {}
        for mech in mechs:
            key = f"{prefix}{mech.lower()}.sasl.jaas.config"
            if key in raw:
                entries[mech] = _jaas_entry(key, raw[key], mech)
            elif mech == "PLAIN":
                raise SaslConfigError(f"{key}: PLAIN is enabled on listener {name} but has no JAAS config with "
                                      f"its users (user_<name>=\"<password>\")", key)
            rkey = f"{prefix}{mech.lower()}.connections.max.reauth.ms"
            lkey = f"{prefix}connections.max.reauth.ms"
            reauth[mech] = (_int(rkey, raw[rkey], 0, LONG_MAX) if rkey in raw else
                            _int(lkey, raw[lkey], 0, LONG_MAX) if lkey in raw else default_reauth)
        if "PLAIN" in entries:
            users = {k[len("user_"):]: v for k, v in entries["PLAIN"].options.items() if k.startswith("user_")}
        listeners[name] = ListenerSasl(name, mechs, entries, users, reauth)
    settings = SaslSettings(
        listeners=listeners,
        inter_broker_mechanism=raw.get("sasl.mechanism.inter.broker.protocol", DEFAULT_INTER_BROKER_MECHANISM).strip(),
        failed_auth_delay_ms=_int("connection.failed.authentication.delay.ms",
                                  raw.get("connection.failed.authentication.delay.ms", "100"), 0, INT_MAX),
        max_receive_bytes=_int("sasl.server.max.receive.size",
                               raw.get("sasl.server.max.receive.size", str(DEFAULT_MAX_RECEIVE)), 1, INT_MAX))
    return settings


def check_inter_broker(settings: SaslSettings, listener: str, protocol: str) -> None:
    """A SASL inter-broker listener needs a mechanism it enables and this broker's own credentials."""
    if protocol not in SASL_PROTOCOLS:
        return
    key = "sasl.mechanism.inter.broker.protocol"
    mech = settings.inter_broker_mechanism
    lst = settings.listeners.get(listener)
    if lst is None or mech not in lst.mechanisms:
        enabled = ", ".join(lst.mechanisms) if lst else "none"
        raise SaslConfigError(f"{key}={mech}: the inter-broker listener {listener} enables {enabled}", key)
    if lst.own_credentials(mech) is None:
        jkey = f"listener.name.{listener.lower()}.{mech.lower()}.sasl.jaas.config"
        raise SaslConfigError(f"{jkey}: the inter-broker listener {listener} needs username and password "
                              f"for {mech}", jkey)
