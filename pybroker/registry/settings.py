"""The registry's ``schema.registry.*`` settings, checked when the broker starts.

| key | default | meaning |
|---|---|---|
| schema.registry.listeners | unset (no registry) | comma-separated ``http://host:port`` / ``https://host:port`` |
| schema.registry.topic | _schemas | the compacted topic holding the registry |
| schema.registry.topic.replication.factor | as many brokers as there are, up to 3 | its replication factor |
| schema.registry.max.request.bytes | 16777216 | the largest request body (413 above) |
| schema.registry.compatibility | BACKWARD | the global level until one is set through /config |
| schema.registry.request.timeout.ms | 30000 | a write waiting for the log, or a forwarded request |
| schema.registry.idle.timeout.ms | 30000 | a connection sending nothing (or half a request) is closed |
| schema.registry.authentication | the broker decides (basic with SASL users) | none or basic |
| schema.registry.ssl.* | | ``https`` listeners: the broker's ``ssl.*`` keys (keystore PEM or PKCS12, ...) |
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Mapping
from urllib.parse import urlsplit

from pybroker.properties import ConfigError, parse_int
from pybroker.schemas.compatibility import DEFAULT_LEVEL, LEVELS

PREFIX = "schema.registry."
DEFAULT_TOPIC = "_schemas"
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT_MS = 30000
DEFAULT_IDLE_TIMEOUT_MS = 30000
KNOWN = ("listeners", "topic", "topic.replication.factor", "max.request.bytes", "compatibility",
         "request.timeout.ms", "idle.timeout.ms", "authentication")
AUTHENTICATION = ("none", "basic")


@dataclass
class RegistrySettings:
    listeners: list[str]
    topic: str = DEFAULT_TOPIC
    replication_factor: int | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    compatibility: str = DEFAULT_LEVEL
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_MS / 1000
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_MS / 1000
    authentication: str | None = None  # None: the broker decides
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    client_ssl_context: ssl.SSLContext | None = field(default=None, repr=False)  # forwarding to an https primary

    @classmethod
    def from_raw(cls, raw: Mapping[str, str]) -> "RegistrySettings | None":
        """The settings in ``raw`` (broker properties); None when ``schema.registry.listeners`` is unset.
        ConfigError names the bad key."""
        get = lambda name: (raw.get(PREFIX + name) or "").strip()  # noqa: E731
        for key in raw:
            if key.startswith(PREFIX) and key[len(PREFIX):] not in KNOWN and not key.startswith(PREFIX + "ssl."):
                raise ConfigError(f"{key}: unknown schema registry setting; known: "
                                  f"{', '.join(PREFIX + k for k in KNOWN)}, {PREFIX}ssl.*", key)
        if not get("listeners"):
            return None
        listeners = [_listener(u.strip()) for u in get("listeners").split(",") if u.strip()]
        settings = cls(listeners)
        if get("topic"):
            settings.topic = get("topic")
        if get("topic.replication.factor"):
            settings.replication_factor = parse_int(PREFIX + "topic.replication.factor",
                                                    get("topic.replication.factor"), 1, 32767)
        if get("max.request.bytes"):
            settings.max_request_bytes = parse_int(PREFIX + "max.request.bytes", get("max.request.bytes"),
                                                   1024, 2**31 - 1)
        if get("compatibility"):
            level = get("compatibility").upper()
            if level not in LEVELS:
                raise ConfigError(f"{PREFIX}compatibility={get('compatibility')!r}: expected one of "
                                  f"{', '.join(LEVELS)}", PREFIX + "compatibility")
            settings.compatibility = level
        if get("request.timeout.ms"):
            settings.request_timeout_s = parse_int(PREFIX + "request.timeout.ms", get("request.timeout.ms"),
                                                   1, 3_600_000) / 1000
        if get("idle.timeout.ms"):
            settings.idle_timeout_s = parse_int(PREFIX + "idle.timeout.ms", get("idle.timeout.ms"),
                                                1, 3_600_000) / 1000
        if get("authentication"):
            auth = get("authentication").lower()
            if auth not in AUTHENTICATION:
                raise ConfigError(f"{PREFIX}authentication={get('authentication')!r}: expected none or basic",
                                  PREFIX + "authentication")
            settings.authentication = auth
        if any(u.startswith("https://") for u in listeners):
            settings.ssl_context, settings.client_ssl_context = _ssl_contexts(raw)
        return settings


def _listener(url: str) -> str:
    key = PREFIX + "listeners"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise ConfigError(f"{key}: {url!r} is not http://host:port or https://host:port", key)
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{key}: {url!r} has a bad port", key) from None
    if port is None:
        raise ConfigError(f"{key}: {url!r} has no port", key)
    return f"{parts.scheme}://{parts.netloc}"


def _ssl_contexts(raw: Mapping[str, str]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """The broker's own TLS loader over the ``schema.registry.ssl.*`` keys (named as the broker's ssl.*):
    the listener's context, and a client one (its truststore) for forwarding to another registry."""
    from pybroker.security import tls
    mapped = {key[len(PREFIX):]: value for key, value in raw.items() if key.startswith(PREFIX + "ssl.")}
    try:
        return (tls.listener_tls(mapped, "registry", "SSL").context,
                tls.listener_client_context(mapped, "registry", "SSL"))
    except ConfigError as exc:
        key = PREFIX + exc.key if exc.key and exc.key.startswith("ssl.") else exc.key
        raise ConfigError(f"schema registry TLS: {exc}", key) from None
