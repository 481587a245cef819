"""Client settings with Kafka's property names, types and defaults, checked up front.

``parse(props, role, extra_keys)`` merges the common table below with the role's own table
(``{name: (type, default)}`` or ``(type, default, allowed)``, where ``allowed`` is a collection of
permitted values or, for numbers, the minimum). Types: int, float, bool, str, list. Strings are
converted ("5" -> 5, "true"/"false" -> bool, "a,b" -> ["a", "b"]). An unknown name, a missing
``bootstrap.servers`` or a bad value raises ConfigError naming the property.
"""
from collections.abc import Mapping

from pybroker.client import security as client_security
from pybroker.client.errors import ConfigError

INT_MAX = 2**31 - 1
REQUIRED = object()  # default of a property that must be given

COMMON = {
    "bootstrap.servers": (list, REQUIRED),
    "client.id": (str, ""),
    "request.timeout.ms": (int, 30000, 1),
    "default.api.timeout.ms": (int, 60000, 1),
    "retries": (int, INT_MAX, 0),
    "retry.backoff.ms": (int, 100, 0),
    "retry.backoff.max.ms": (int, 1000, 0),
    "metadata.max.age.ms": (int, 300000, 0),
    "socket.connection.setup.timeout.ms": (int, 10000, 1),
    "reconnect.backoff.ms": (int, 50, 0),
    "reconnect.backoff.max.ms": (int, 1000, 0),
    "connections.max.idle.ms": (int, 540000, -1),
    "receive.message.max.bytes": (int, 1 << 30, 1024),  # largest response frame accepted
    **client_security.SECURITY_KEYS,
}

# Kafka properties these clients recognise but do not implement: setting one is an error that says why.
UNSUPPORTED = {
    "socket.connection.setup.timeout.max.ms":
        "connection setup always uses socket.connection.setup.timeout.ms (no exponential growth)",
    "client.dns.lookup": "each address in bootstrap.servers is connected to as given",
}

ROLES = ("producer", "consumer", "admin")
_TYPE_NAMES = {int: "an integer", float: "a number", bool: "a boolean (true/false)", str: "a string",
               list: "a list (comma-separated string or sequence)"}


class Config(Mapping):
    """Parsed settings: ``cfg["linger.ms"]``; every known property has a value."""

    def __init__(self, values: dict, role: str):
        self._values = values
        self.role = role

    def __getitem__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"{name!r} is not a {self.role} setting") from None

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __repr__(self):
        shown = {k: ("[hidden]" if k in client_security.SECRET_KEYS and v is not None else v)
                 for k, v in self._values.items()}
        return f"Config({self.role}, {shown!r})"

    @property
    def security(self) -> client_security.ClientSecurity:
        """TLS and SASL settings for every connection this client opens."""
        sec = self.__dict__.get("_security")
        if sec is None:
            sec = self.__dict__["_security"] = client_security.from_values(self._values)
        return sec

    @property
    def bootstrap(self) -> list:
        """``bootstrap.servers`` as (host, port) pairs."""
        return [parse_hostport(s) for s in self._values["bootstrap.servers"]]

    @property
    def client_id(self) -> str:
        return self._values["client.id"] or f"pybroker-{self.role}"

    def seconds(self, name: str) -> float:
        """A ``*.ms`` property in seconds."""
        return self._values[name] / 1000.0

    def with_overrides(self, **values) -> "Config":
        """A copy with some values replaced (names with dots as '_': request_timeout_ms=...)."""
        new = dict(self._values)
        for key, value in values.items():
            new[key.replace("_", ".")] = value
        return Config(new, self.role)


def parse_hostport(text: str) -> tuple:
    host, sep, port = text.strip().rpartition(":")
    host = host.strip().strip("[]")
    if not sep or not host or not port.strip().isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"bootstrap.servers: bad address {text!r}, expected HOST:PORT")
    return host, int(port)


def _convert(name: str, kind, value):
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
    elif kind is str:
        if isinstance(value, str):
            return value
    elif kind is list:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return [v.strip() for v in value if v.strip()]
    else:  # a callable converter supplied by a role table
        try:
            return kind(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: invalid value {value!r}: {exc}") from None
    raise ConfigError(f"{name}: expected {_TYPE_NAMES.get(kind, kind)}, got {client_security.shown(name, value)}")


def _check_allowed(name: str, value, allowed):
    if allowed is None:
        return value
    if isinstance(allowed, (int, float)) and not isinstance(allowed, bool):
        if value < allowed:
            raise ConfigError(f"{name}: {value} is below the minimum {allowed}")
        return value
    if isinstance(value, str):
        match = {str(a).lower(): a for a in allowed}.get(value.lower())
        if match is None:
            raise ConfigError(f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}")
        return match
    if isinstance(value, list):
        bad = [v for v in value if v not in allowed]
        if bad:
            raise ConfigError(f"{name}: {bad[0]!r} is not one of {', '.join(map(str, allowed))}")
        return value
    if value not in allowed:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}")
    return value


def parse(props: dict | None, role: str, extra_keys: dict | None = None) -> Config:
    """Check and convert ``props`` for ``role`` ("producer", "consumer", "admin")."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")
    if props is None:
        props = {}
    if isinstance(props, Config):
        props = dict(props)
    if not isinstance(props, Mapping):
        raise ConfigError(f"the configuration must be a dict of property names to values, not "
                          f"{type(props).__name__}")
    table = dict(COMMON)
    table.update(extra_keys or {})
    values = {}
    for name, value in props.items():
        spec = table.get(name) if isinstance(name, str) else None
        if spec is None:
            if name in UNSUPPORTED:
                raise ConfigError(f"{name} is not supported: {UNSUPPORTED[name]}")
            raise ConfigError(f"unknown {role} configuration property {name!r}")
        kind, allowed = spec[0], spec[2] if len(spec) > 2 else None
        if value is None:
            if spec[1] is None:  # a nullable property
                values[name] = None
                continue
            raise ConfigError(f"{name}: a value is required, got None")
        values[name] = _check_allowed(name, _convert(name, kind, value), allowed)
    for name, spec in table.items():
        if name not in values:
            if spec[1] is REQUIRED:
                raise ConfigError(f"{name} is required")
            values[name] = list(spec[1]) if isinstance(spec[1], list) else spec[1]
    if not values["bootstrap.servers"]:
        raise ConfigError("bootstrap.servers is empty")
    for server in values["bootstrap.servers"]:
        parse_hostport(server)
    config = Config(values, role)
    _ = config.security  # checked now: a bad combination fails at construction, not at the first connect
    if values["retry.backoff.max.ms"] < values["retry.backoff.ms"]:
        values["retry.backoff.max.ms"] = values["retry.backoff.ms"]  # Kafka: the max never undercuts the base
    return config
