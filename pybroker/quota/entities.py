"""Quota entities and Kafka's matching rules.

An entity is a tuple of (type, name) pairs sorted by type, types "user" and "client-id"; a name of
None is that type's default (``<default>`` in ZooKeeper, a null name on the wire). There is no
authentication yet, so every request's user is ``ANONYMOUS``.
"""
from pybroker.errors import BrokerError
from pybroker.protocol.errors import INVALID_CONFIG, INVALID_REQUEST

USER, CLIENT_ID = "user", "client-id"
ANONYMOUS = "ANONYMOUS"
KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
DEFAULT = "<default>"


class InvalidQuotaRequestError(BrokerError):
    code = INVALID_REQUEST


class InvalidQuotaConfigError(BrokerError):
    code = INVALID_CONFIG


def make_entity(pairs) -> tuple:
    """``pairs``: iterable of (type, name or None); checked as Kafka checks AlterClientQuotas entities."""
    seen = {}
    for etype, name in pairs:
        if etype not in (USER, CLIENT_ID):
            raise InvalidQuotaRequestError(f"Unhandled client quota entity type: {etype}")
        if etype in seen:
            raise InvalidQuotaRequestError(f"Duplicate {etype} entity type in the request")
        if name == "":
            raise InvalidQuotaRequestError(f"Empty {etype} name is not allowed: use null for the default")
        seen[etype] = name
    if not seen:
        raise InvalidQuotaRequestError("Invalid empty client quota entity")
    return tuple(sorted(seen.items()))


def check_value(key: str, value: float) -> float:
    if key not in KEYS:
        raise InvalidQuotaConfigError(f"Invalid configuration key {key}")
    if value != value or value <= 0:  # NaN or not positive
        raise InvalidQuotaConfigError(f"Invalid value {value} for configuration key {key}: must be positive")
    if key != "request_percentage" and value != int(value):
        raise InvalidQuotaConfigError(f"Configuration {key} must be a Long value")
    return float(value)


def candidates(user: str, client_id: str):
    """Entities that may apply to a request, most specific first (Kafka's precedence)."""
    return (((CLIENT_ID, client_id), (USER, user)),
            ((CLIENT_ID, None), (USER, user)),
            ((USER, user),),
            ((CLIENT_ID, client_id), (USER, None)),
            ((CLIENT_ID, None), (USER, None)),
            ((USER, None),),
            ((CLIENT_ID, client_id),),
            ((CLIENT_ID, None),))


def to_path(entity: tuple) -> str:
    """Kafka's ZooKeeper path below /config of an entity: users/u/clients/c, users/u, clients/c."""
    d = dict(entity)
    name = lambda n: DEFAULT if n is None else n  # noqa: E731
    if USER in d and CLIENT_ID in d:
        return f"users/{name(d[USER])}/clients/{name(d[CLIENT_ID])}"
    if USER in d:
        return f"users/{name(d[USER])}"
    return f"clients/{name(d[CLIENT_ID])}"


def from_path(path: str) -> tuple:
    parts = path.strip("/").split("/")
    name = lambda n: None if n == DEFAULT else n  # noqa: E731
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return make_entity([(USER, name(parts[1])), (CLIENT_ID, name(parts[3]))])
    if len(parts) == 2 and parts[0] in ("users", "clients"):
        return make_entity([(USER if parts[0] == "users" else CLIENT_ID, name(parts[1]))])
    raise ValueError(f"not a quota entity path: {path!r}")


def to_json(entity: tuple) -> list:
    return [[t, n] for t, n in entity]


def from_json(data) -> tuple:
    return make_entity((t, n) for t, n in data)
