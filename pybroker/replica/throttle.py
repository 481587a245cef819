"""Replication throttles (Kafka's replication quotas, used while partitions are reassigned).

A leader caps the bytes it sends to out-of-sync followers of throttled partitions at
``leader.replication.throttled.rate``; a follower caps what it fetches for throttled partitions at
``follower.replication.throttled.rate``. Which partitions are throttled on which broker comes from
the topic configs ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``
("partition:broker,..." or "*"). In-sync replicas are never throttled.
"""
import functools
import time

UNLIMITED = 2**63 - 1


@functools.lru_cache(maxsize=256)
def throttled_replicas(value: str) -> frozenset | None:
    """The (partition, broker) pairs of a ``*.replication.throttled.replicas`` value; None means all."""
    value = value.strip()
    if value == "*":
        return None
    pairs = set()
    for item in value.split(","):
        if item.strip():
            partition, _, broker = item.strip().partition(":")
            pairs.add((int(partition), int(broker)))
    return frozenset(pairs)


def check_throttled_replicas(value: str) -> None:
    """Raise ValueError unless ``value`` is "*" or "partition:broker" entries separated by commas."""
    try:
        throttled_replicas(value)
    except ValueError:
        raise ValueError(f"expected \"*\" or partition:broker entries separated by commas, got {value!r}") from None


def is_throttled(value: str, partition: int, broker: int) -> bool:
    if not value:
        return False
    pairs = throttled_replicas(value)
    return pairs is None or (partition, broker) in pairs


class ReplicationQuota:
    """Bytes per second over a sliding window of ``samples`` buckets of ``sample_s`` seconds, measured
    as Kafka does (the window counts as at least samples - 1 buckets long, so a short burst passes)."""

    def __init__(self, rate: int = UNLIMITED, samples: int = 11, sample_s: float = 1.0):
        self.rate = rate
        self.samples = max(samples, 2)
        self.sample_s = sample_s
        self._buckets: dict[int, int] = {}  # bucket number -> bytes

    @property
    def limited(self) -> bool:
        return self.rate < UNLIMITED

    def record(self, nbytes: int, now: float | None = None) -> None:
        if not self.limited or nbytes <= 0:
            return
        bucket = int((time.monotonic() if now is None else now) / self.sample_s)
        self._buckets[bucket] = self._buckets.get(bucket, 0) + nbytes
        for old in [b for b in self._buckets if b <= bucket - self.samples]:
            del self._buckets[old]

    def measure(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        bucket = int(now / self.sample_s)
        live = {b: n for b, n in self._buckets.items() if b > bucket - self.samples}
        if not live:
            return 0.0
        elapsed = now - min(live) * self.sample_s
        return sum(live.values()) / max(elapsed, (self.samples - 1) * self.sample_s)

    def exceeded(self, now: float | None = None) -> bool:
        return self.limited and self.measure(now) > self.rate
