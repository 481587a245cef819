"""The producer's settings: Kafka names, defaults and the idempotence consistency rules
(``transactional.id`` implies ``enable.idempotence``, whose conflicts are then errors)."""
from pybroker.client import config as client_config
from pybroker.client import partitioner as partitioners
from pybroker.client.errors import ConfigError
from pybroker.client.serialization import check_serde

COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def parse_acks(value):
    """Config converter for ``acks``: all (-1), 0 or 1."""
    if isinstance(value, bool):
        raise ValueError("expected all, -1, 0 or 1")
    if isinstance(value, str):
        text = value.strip().lower()
        value = -1 if text == "all" else int(text)
    if value not in (-1, 0, 1):
        raise ValueError("expected all, -1, 0 or 1")
    return int(value)


PRODUCER_KEYS = {
    "acks": (parse_acks, -1),
    "linger.ms": (int, 5, 0),
    "batch.size": (int, 16384, 0),
    "compression.type": (str, "none", tuple(COMPRESSION)),
    "enable.idempotence": (bool, True),
    "max.in.flight.requests.per.connection": (int, 5, 1),
    "buffer.memory": (int, 32 * 1024 * 1024, 1),
    "max.block.ms": (int, 60000, 0),
    "delivery.timeout.ms": (int, 120000, 1),
    "max.request.size": (int, 1048576, 1),
    "partitioner": (partitioners.convert, partitioners.MURMUR2_RANDOM),
    "partitioner.ignore.keys": (bool, False),
    "allow.auto.create.topics": (bool, True),
    "transactional.id": (str, None),
    "transaction.timeout.ms": (int, 60000, 1),
    "key.serializer": (check_serde, None),  # callables as confluent-kafka's: see serialization.py
    "value.serializer": (check_serde, None),
}


def parse_config(conf) -> tuple:
    """The producer Config plus whether idempotence is on (after Kafka's consistency rules)."""
    cfg = client_config.parse(conf, "producer", PRODUCER_KEYS)
    explicit = isinstance(conf, dict) and "enable.idempotence" in conf
    idempotent = cfg["enable.idempotence"]
    if cfg["transactional.id"] == "":
        raise ConfigError("transactional.id must not be empty")
    if cfg["transactional.id"] is not None:  # transactions are built on idempotence
        if explicit and not idempotent:
            raise ConfigError("transactional.id requires enable.idempotence=true")
        idempotent = explicit = True
    if idempotent:
        conflicts = []
        if cfg["acks"] != -1:
            conflicts.append("acks=all")
        if cfg["max.in.flight.requests.per.connection"] > 5:
            conflicts.append("max.in.flight.requests.per.connection <= 5")
        if cfg["retries"] == 0:
            conflicts.append("retries > 0")
        if conflicts:
            if explicit:
                raise ConfigError("enable.idempotence=true requires " + " and ".join(conflicts))
            idempotent = False
    if cfg["delivery.timeout.ms"] < cfg["linger.ms"] + cfg["request.timeout.ms"]:
        raise ConfigError("delivery.timeout.ms should be equal to or larger than linger.ms + request.timeout.ms")
    return cfg, idempotent
