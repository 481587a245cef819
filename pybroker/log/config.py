"""Per-log settings under Kafka's topic-level names (and the broker-level ``log.*`` defaults)."""
import re
from dataclasses import dataclass, fields

NO_LIMIT = -1
THROTTLED_REPLICAS = re.compile(r"\s*(\*|(\d+:\d+\s*(,\s*\d+:\d+\s*)*)?)\s*")  # "*" or "partition:broker,..."
LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024              # segment.bytes / log.segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000               # segment.ms / log.roll.ms
    segment_index_bytes: int = 10 * 1024 * 1024          # segment.index.bytes / log.index.size.max.bytes
    index_interval_bytes: int = 4096                     # index.interval.bytes / log.index.interval.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000             # retention.ms / log.retention.ms (-1: keep forever)
    retention_bytes: int = NO_LIMIT                      # retention.bytes / log.retention.bytes
    flush_messages: int = LONG_MAX                       # flush.messages / log.flush.interval.messages
    flush_ms: int = LONG_MAX                             # flush.ms / log.flush.interval.ms
    max_message_bytes: int = 1048588                     # max.message.bytes / message.max.bytes
    message_timestamp_type: str = "CreateTime"           # message.timestamp.type / log.message.timestamp.type
    # how far a CreateTime record's timestamp may lie before / after the broker's clock (KIP-937)
    message_timestamp_before_max_ms: int = LONG_MAX      # message.timestamp.before.max.ms (log. at broker level)
    message_timestamp_after_max_ms: int = LONG_MAX       # message.timestamp.after.max.ms (log. at broker level)
    message_timestamp_difference_max_ms: int = LONG_MAX  # deprecated: both bounds where they are not set
    cleanup_policy: str = "delete"                       # cleanup.policy / log.cleanup.policy: delete, compact or both
    min_cleanable_dirty_ratio: float = 0.5               # min.cleanable.dirty.ratio / log.cleaner.min.cleanable.ratio
    min_compaction_lag_ms: int = 0                       # min.compaction.lag.ms / log.cleaner.min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX                # max.compaction.lag.ms / log.cleaner.max.compaction.lag.ms
    delete_retention_ms: int = 24 * 3600 * 1000          # delete.retention.ms / log.cleaner.delete.retention.ms
    min_insync_replicas: int = 1                         # min.insync.replicas (topic and broker level)
    leader_replication_throttled_replicas: str = ""      # leader.replication.throttled.replicas (topic only)
    follower_replication_throttled_replicas: str = ""    # follower.replication.throttled.replicas (topic only)

    def __post_init__(self):
        if self.segment_bytes < 14:
            raise ValueError(f"segment.bytes must be at least 14, got {self.segment_bytes}")
        if self.segment_index_bytes < 12:
            raise ValueError(f"segment.index.bytes must be at least 12, got {self.segment_index_bytes}")
        for name in ("segment_ms", "index_interval_bytes", "max_message_bytes", "message_timestamp_before_max_ms",
                     "message_timestamp_after_max_ms", "message_timestamp_difference_max_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{TOPIC_NAMES[name]} must not be negative")
        for name in ("flush_messages", "flush_ms", "min_insync_replicas"):
            if getattr(self, name) < 1:
                raise ValueError(f"{TOPIC_NAMES[name]} must be at least 1")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError("message.timestamp.type must be CreateTime or LogAppendTime")
        for name in ("leader_replication_throttled_replicas", "follower_replication_throttled_replicas"):
            if not THROTTLED_REPLICAS.fullmatch(getattr(self, name)):
                raise ValueError(f"{TOPIC_NAMES[name]} must be \"*\" or partition:broker entries separated by "
                                 f"commas, got {getattr(self, name)!r}")
        policies = [p.strip() for p in self.cleanup_policy.split(",")]
        if not all(p in ("delete", "compact") for p in policies) or len(set(policies)) != len(policies):
            raise ValueError(f"Invalid value {self.cleanup_policy} for configuration cleanup.policy: "
                             "String must be one of: compact, delete")
        object.__setattr__(self, "cleanup_policy", ",".join(policies))
        object.__setattr__(self, "timestamp_bounds", self._timestamp_bounds())  # read on every produce
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError(f"Invalid value {self.min_cleanable_dirty_ratio} for configuration "
                             "min.cleanable.dirty.ratio: Value must be between 0 and 1")
        for name in ("min_compaction_lag_ms", "delete_retention_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{TOPIC_NAMES[name]} must not be negative")
        if self.max_compaction_lag_ms < 1:
            raise ValueError("max.compaction.lag.ms must be at least 1")
        if self.max_compaction_lag_ms < self.min_compaction_lag_ms:
            raise ValueError("conflict topic config setting max.compaction.lag.ms "
                             f"({self.max_compaction_lag_ms}) < min.compaction.lag.ms ({self.min_compaction_lag_ms})")

    def _timestamp_bounds(self) -> tuple[int, int] | None:
        """(before, after) ms a CreateTime record may be off the broker's clock; None when unbounded. As
        Kafka 3.8: a bound left at its default takes message.timestamp.difference.max.ms."""
        if self.message_timestamp_type != "CreateTime":
            return None
        before, after = self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms
        before = self.message_timestamp_difference_max_ms if before == LONG_MAX else before
        after = self.message_timestamp_difference_max_ms if after == LONG_MAX else after
        return None if before == after == LONG_MAX else (before, after)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @classmethod
    def from_properties(cls, props: dict, base: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka property names (topic-level or broker-level); unknown names are errors."""
        values = {f.name: getattr(base, f.name) for f in fields(cls)} if base else {}
        for key, raw in props.items():
            name = BY_PROPERTY.get(key)
            if name is None:
                raise ValueError(f"unknown log config {key!r}")
            if name in STRINGS:
                values[name] = str(raw).strip()
            elif name in FLOATS:
                try:
                    values[name] = float(raw)
                except ValueError:
                    raise ValueError(f"{key} must be a number, got {raw!r}") from None
            elif key == "log.retention.minutes":
                values[name] = int(raw) * 60_000
            elif key == "log.retention.hours":
                values[name] = int(raw) * 3_600_000
            else:
                try:
                    values[name] = int(raw)
                except ValueError:
                    raise ValueError(f"{key} must be an integer, got {raw!r}") from None
        return cls(**values)


TOPIC_NAMES = {
    "segment_bytes": "segment.bytes",
    "segment_ms": "segment.ms",
    "segment_index_bytes": "segment.index.bytes",
    "index_interval_bytes": "index.interval.bytes",
    "retention_ms": "retention.ms",
    "retention_bytes": "retention.bytes",
    "flush_messages": "flush.messages",
    "flush_ms": "flush.ms",
    "max_message_bytes": "max.message.bytes",
    "message_timestamp_type": "message.timestamp.type",
    "message_timestamp_before_max_ms": "message.timestamp.before.max.ms",
    "message_timestamp_after_max_ms": "message.timestamp.after.max.ms",
    "message_timestamp_difference_max_ms": "message.timestamp.difference.max.ms",
    "cleanup_policy": "cleanup.policy",
    "min_cleanable_dirty_ratio": "min.cleanable.dirty.ratio",
    "min_compaction_lag_ms": "min.compaction.lag.ms",
    "max_compaction_lag_ms": "max.compaction.lag.ms",
    "delete_retention_ms": "delete.retention.ms",
    "min_insync_replicas": "min.insync.replicas",
    "leader_replication_throttled_replicas": "leader.replication.throttled.replicas",
    "follower_replication_throttled_replicas": "follower.replication.throttled.replicas",
}
STRINGS = ("message_timestamp_type", "cleanup_policy", "leader_replication_throttled_replicas",
           "follower_replication_throttled_replicas")
BROKER_NAMES = {
    "segment_bytes": "log.segment.bytes",
    "segment_ms": "log.roll.ms",
    "segment_index_bytes": "log.index.size.max.bytes",
    "index_interval_bytes": "log.index.interval.bytes",
    "retention_ms": "log.retention.ms",
    "retention_bytes": "log.retention.bytes",
    "flush_messages": "log.flush.interval.messages",
    "flush_ms": "log.flush.interval.ms",
    "max_message_bytes": "message.max.bytes",
    "message_timestamp_type": "log.message.timestamp.type",
    "message_timestamp_before_max_ms": "log.message.timestamp.before.max.ms",
    "message_timestamp_after_max_ms": "log.message.timestamp.after.max.ms",
    "message_timestamp_difference_max_ms": "log.message.timestamp.difference.max.ms",
    "cleanup_policy": "log.cleanup.policy",
    "min_cleanable_dirty_ratio": "log.cleaner.min.cleanable.ratio",
    "min_compaction_lag_ms": "log.cleaner.min.compaction.lag.ms",
    "max_compaction_lag_ms": "log.cleaner.max.compaction.lag.ms",
    "delete_retention_ms": "log.cleaner.delete.retention.ms",
    "min_insync_replicas": "min.insync.replicas",
}
FLOATS = ("min_cleanable_dirty_ratio",)
BY_PROPERTY = {prop: name for table in (TOPIC_NAMES, BROKER_NAMES) for name, prop in table.items()}
BY_PROPERTY["log.retention.minutes"] = "retention_ms"
BY_PROPERTY["log.retention.hours"] = "retention_ms"
