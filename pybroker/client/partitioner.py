"""Which partition a record goes to.

``partitioner`` names (librdkafka's names, Java's behaviour for the default):

- ``murmur2_random`` (default): a keyed record goes to ``(murmur2(key) & 0x7fffffff) % partitions``,
  exactly as Kafka's Java client (and kafka-python) place it; a keyless record goes to the
  topic's *sticky* partition (KIP-480): the producer stays on one random available partition
  until that partition's batch is full or sent, then picks another.
- ``consistent_random``: keyed records by CRC-32 of the key (librdkafka's ``consistent``);
  keyless ones sticky.
- ``random``: keys are ignored; every record is sticky (Java's ``partitioner.ignore.keys``).

``partitioner`` may also be a callable ``fn(key: bytes, num_partitions: int) -> int`` for keyed
records (keyless ones stay sticky). An explicit ``partition`` argument always wins.

The murmur2 and sticky choices run in the native per-record path; the others go through
``python_partition``.
"""
import zlib

from pybroker.client.errors import ConfigError

MURMUR2_RANDOM = "murmur2_random"
CONSISTENT_RANDOM = "consistent_random"
RANDOM = "random"
NAMES = (MURMUR2_RANDOM, CONSISTENT_RANDOM, RANDOM)


def convert(value):
    """Config converter: a partitioner name (case-insensitive) or a callable."""
    if callable(value):
        return value
    if isinstance(value, str) and value.strip().lower() in NAMES:
        return value.strip().lower()
    raise ConfigError(f"partitioner: {value!r} is not one of {', '.join(NAMES)} or a callable "
                      "fn(key, num_partitions)")


def mode_of(partitioner, ignore_keys: bool, fast) -> int:
    """The appender's mode for keyed records: native murmur2, ask Python, or ignore keys."""
    if ignore_keys or partitioner == RANDOM:
        return fast.MODE_IGNORE_KEY
    if partitioner == MURMUR2_RANDOM:
        return fast.MODE_MURMUR2
    return fast.MODE_PYTHON


def crc32_partition(key: bytes, num_partitions: int) -> int:
    """librdkafka's ``consistent`` partitioner: CRC-32 of the key modulo the partition count."""
    return zlib.crc32(key) % num_partitions


def python_partition(partitioner, key: bytes, num_partitions: int) -> int:
    """The partition of a keyed record under a partitioner the native path does not handle."""
    if partitioner == CONSISTENT_RANDOM:
        return crc32_partition(key, num_partitions)
    p = partitioner(key, num_partitions)
    if not isinstance(p, int) or not 0 <= p < num_partitions:
        raise ValueError(f"the partitioner returned {p!r} for a topic with {num_partitions} partitions")
    return p
