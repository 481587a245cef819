"""Feature flags (KIP-584) answered in ApiVersions v3+: what this broker implements, and the levels
in force. Derived from the API table, like the version ranges: ``group.version`` 1 (KIP-848's consumer
groups) exists exactly when ConsumerGroupHeartbeat is served. ``transaction.version`` stays 0: the
transaction APIs follow KIP-890 part 1 (verification), not its new EndTxn semantics. A node's
finalized levels never change while it runs, so their epoch is constant.
"""
CONSUMER_GROUP_HEARTBEAT = 68
FINALIZED_EPOCH = 0


def supported(table) -> dict[str, tuple[int, int]]:
    """{feature: (min version, max version)} this broker can run."""
    group_max = 1 if CONSUMER_GROUP_HEARTBEAT in table else 0
    return {"group.version": (0, group_max), "transaction.version": (0, 0)}


def finalized(table) -> dict[str, int]:
    """{feature: level} in force; level 0 (the feature off) is not listed, as Kafka lists it."""
    return {name: high for name, (_, high) in supported(table).items() if high > 0}
