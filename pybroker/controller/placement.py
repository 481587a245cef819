"""Where a new partition's replicas go: Kafka's rack-unaware placement (shared by topic creation
and ``reassign-partitions --generate``)."""
import random


def assign_replicas(brokers: list, partitions: int, replication_factor: int, first_partition: int = 0,
                    start: int | None = None, shift: int | None = None) -> dict:
    """Kafka's rack-unaware placement: partition i's first replica on broker (start + i) mod n, the
    others shifted by an offset that grows every n partitions, so replicas spread evenly."""
    brokers = sorted(brokers)
    n = len(brokers)
    start = random.randrange(n) if start is None else start
    shift = random.randrange(n) if shift is None else shift
    out = {}
    for i in range(first_partition, first_partition + partitions):
        if i > 0 and i % n == 0:
            shift += 1
        first = (start + i) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out[i] = replicas
    return out
