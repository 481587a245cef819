"""Per-log settings under Kafka's topic-level names (and the broker-level ``log.*`` defaults)."""
import re
from dataclasses import dataclass, fields

NO_LIMIT = -1
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")  # Kafka's order
CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # a record batch's codec ids
LEVELS = {"compression_gzip_level": (1, 9), "compression_lz4_level": (1, 17),
          "compression_zstd_level": (-131072, 22)}
METADATA_VERSION = re.compile(r"\d+\.\d+(\.\d+)?(-IV\d+)?")  # Kafka's version strings: 0.10.0, 2.8-IV1, 3.0
THROTTLED_REPLICAS = re.compile(r"\s*(\*|(\d+:\d+\s*(,\s*\d+:\d+\s*)*)?)\s*")  # "*" or "partition:broker,..."
LONG_MAX = 2**63 - 1
# pybroker's own topic keys iceberg.* (pybroker/iceberg, which this layer may not import: the lists are
# kept here, and a unit test holds them equal to pybroker.iceberg.settings.MODES / INVALID_RECORD_ACTIONS)
ICEBERG_MODES = ("disabled", "key_value", "value_schema_id_prefix", "value_schema_latest")
ICEBERG_INVALID_RECORD_ACTIONS = ("dlq_table", "drop")
ICEBERG_TRANSFORMS = ("identity", "year", "month", "day", "hour", "void")  # transform(column)
ICEBERG_WIDTH_TRANSFORMS = ("bucket", "truncate")  # transform(N, column), N >= 1
ICEBERG_COLUMN = re.compile(r"\w+(\.\w+)*")  # a dotted column name: kafka.timestamp, key, order.id
_ICEBERG_CALL = re.compile(r"\s*(\w+)\s*\((.*)\)\s*", re.S)  # transform(args)
_WIDTH = re.compile(r"[0-9]+")  # a bucket count or truncate width
_WIDTH_MAX = 2**31 - 1  # an Iceberg int


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
    # accepted as Kafka 3.8 takes them; what each means here: KNOWN_AS_KAFKA's notes (DescribeConfigs shows them)
    compression_type: str = "producer"                   # compression.type (topic and broker level)
    compression_gzip_level: int = -1                     # compression.gzip.level (-1: the codec's default)
    compression_lz4_level: int = 9                       # compression.lz4.level
    compression_zstd_level: int = 3                      # compression.zstd.level
    segment_jitter_ms: int = 0                           # segment.jitter.ms / log.roll.jitter.ms
    file_delete_delay_ms: int = 60000                    # file.delete.delay.ms / log.segment.delete.delay.ms
    unclean_leader_election_enable: bool = False         # unclean.leader.election.enable (topic level)
    preallocate: bool = False                            # preallocate / log.preallocate
    message_format_version: str = "3.0-IV1"              # deprecated: message.format.version
    message_downconversion_enable: bool = True           # message.downconversion.enable
    remote_storage_enable: bool = False                  # remote.storage.enable (topic only)
    local_retention_ms: int = -2                         # local.retention.ms / log.local.retention.ms
    local_retention_bytes: int = -2                      # local.retention.bytes / log.local.retention.bytes
    # pybroker's own (topic level only): the topic as an Iceberg table, written by its partitions' leaders
    iceberg_mode: str = "disabled"                       # iceberg.mode: ICEBERG_MODES
    iceberg_partition_spec: str = "hour(kafka.timestamp)"  # iceberg.partition.spec: the table's partition fields
    iceberg_target_lag_ms: int = 60000                   # iceberg.target.lag.ms: how stale the table may get
    iceberg_invalid_record_action: str = "dlq_table"     # iceberg.invalid.record.action: dlq_table or drop

    def __post_init__(self):
        if self.segment_bytes < 14:
            raise ValueError(f"segment.bytes must be at least 14, got {self.segment_bytes}")
        if self.segment_index_bytes < 12:
            raise ValueError(f"segment.index.bytes must be at least 12, got {self.segment_index_bytes}")
        for name in ("segment_ms", "index_interval_bytes", "max_message_bytes", "message_timestamp_before_max_ms",
                     "message_timestamp_after_max_ms", "message_timestamp_difference_max_ms", "segment_jitter_ms",
                     "file_delete_delay_ms"):
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
        self._check_kafka_only_settings()
        self._check_iceberg_settings()
        object.__setattr__(self, "timestamp_bounds", self._timestamp_bounds())  # read on every produce
        object.__setattr__(self, "recompression", self._recompression())  # likewise
        # whether a produce must look into the records (recompress, bound timestamps, require keys)
        object.__setattr__(self, "produce_checks", self.recompression is not None or self.timestamp_bounds is not None
                           or self.compact)
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

    def _check_kafka_only_settings(self) -> None:
        """Kafka 3.8's checks of the settings pybroker takes but does not act on (see KNOWN_AS_KAFKA)."""
        if self.compression_type not in COMPRESSION_TYPES:
            raise ValueError(f"Invalid value {self.compression_type} for configuration compression.type: String "
                             f"must be one of: {', '.join(COMPRESSION_TYPES)}")
        for name, (lo, hi) in LEVELS.items():
            level = getattr(self, name)
            if not (lo <= level <= hi or (name == "compression_gzip_level" and level == -1)):
                raise ValueError(f"Invalid value {level} for configuration {TOPIC_NAMES[name]}: Value must be "
                                 f"between {lo} and {hi}")
        for name in ("local_retention_ms", "local_retention_bytes"):
            if getattr(self, name) < -2:
                raise ValueError(f"Invalid value {getattr(self, name)} for configuration {TOPIC_NAMES[name]}: "
                                 "Value must be at least -2")
        if not METADATA_VERSION.fullmatch(self.message_format_version):
            raise ValueError(f"Invalid value {self.message_format_version} for configuration message.format.version: "
                             "not a Kafka version")
        if self.remote_storage_enable:  # no tiered storage here, as a Kafka broker without a remote log system
            raise ValueError("Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
                             "with remote log storage.")

    def _check_iceberg_settings(self) -> None:
        """The iceberg.* keys, checked in Kafka's words (the table itself checks the columns later)."""
        for name, allowed in (("iceberg_mode", ICEBERG_MODES),
                              ("iceberg_invalid_record_action", ICEBERG_INVALID_RECORD_ACTIONS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"Invalid value {getattr(self, name)} for configuration {TOPIC_NAMES[name]}: "
                                 f"String must be one of: {', '.join(allowed)}")
        if self.iceberg_target_lag_ms < 1:
            raise ValueError(f"Invalid value {self.iceberg_target_lag_ms} for configuration iceberg.target.lag.ms: "
                             "Value must be at least 1")
        try:
            iceberg_partition_fields(self.iceberg_partition_spec)
        except ValueError as exc:
            raise ValueError(f"Invalid value {self.iceberg_partition_spec} for configuration "
                             f"iceberg.partition.spec: {exc}") from None

    def _recompression(self) -> tuple[int, int | None] | None:
        """(codec, level) every produced batch is stored in, or None to keep the producer's (compression.type)."""
        codec = CODECS.get(self.compression_type)
        if codec is None:
            return None
        levels = {1: self.compression_gzip_level, 3: self.compression_lz4_level, 4: self.compression_zstd_level}
        level = levels.get(codec)
        return codec, None if level == -1 else level

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
            elif name in BOOLS:
                text = str(raw).strip().lower()
                if text not in ("true", "false"):
                    raise ValueError(f"Invalid value {raw} for configuration {key}: Expected value to be either "
                                     "true or false")
                values[name] = text == "true"
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
    "compression_type": "compression.type",
    "compression_gzip_level": "compression.gzip.level",
    "compression_lz4_level": "compression.lz4.level",
    "compression_zstd_level": "compression.zstd.level",
    "segment_jitter_ms": "segment.jitter.ms",
    "file_delete_delay_ms": "file.delete.delay.ms",
    "unclean_leader_election_enable": "unclean.leader.election.enable",
    "preallocate": "preallocate",
    "message_format_version": "message.format.version",
    "message_downconversion_enable": "message.downconversion.enable",
    "remote_storage_enable": "remote.storage.enable",
    "local_retention_ms": "local.retention.ms",
    "local_retention_bytes": "local.retention.bytes",
    "iceberg_mode": "iceberg.mode",
    "iceberg_partition_spec": "iceberg.partition.spec",
    "iceberg_target_lag_ms": "iceberg.target.lag.ms",
    "iceberg_invalid_record_action": "iceberg.invalid.record.action",
}
STRINGS = ("message_timestamp_type", "cleanup_policy", "leader_replication_throttled_replicas",
           "follower_replication_throttled_replicas", "compression_type", "message_format_version",
           "iceberg_mode", "iceberg_partition_spec", "iceberg_invalid_record_action")
BOOLS = ("unclean_leader_election_enable", "preallocate", "message_downconversion_enable", "remote_storage_enable")
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
    "compression_type": "compression.type",
    "compression_gzip_level": "compression.gzip.level",
    "compression_lz4_level": "compression.lz4.level",
    "compression_zstd_level": "compression.zstd.level",
    "segment_jitter_ms": "log.roll.jitter.ms",
    "file_delete_delay_ms": "log.segment.delete.delay.ms",
    "preallocate": "log.preallocate",
    "message_format_version": "log.message.format.version",
    "message_downconversion_enable": "log.message.downconversion.enable",
    "local_retention_ms": "log.local.retention.ms",
    "local_retention_bytes": "log.local.retention.bytes",
}
FLOATS = ("min_cleanable_dirty_ratio",)
BY_PROPERTY = {prop: name for table in (TOPIC_NAMES, BROKER_NAMES) for name, prop in table.items()}
BY_PROPERTY["log.retention.minutes"] = "retention_ms"
BY_PROPERTY["log.retention.hours"] = "retention_ms"


def iceberg_partition_fields(spec: str) -> list[tuple[str, int | None, str]]:
    """(transform, width or None, column) of each field of an ``iceberg.partition.spec``, in order;
    [] for "" or "()" (unpartitioned). A bare column is identity. Raises ValueError saying what is
    wrong with the syntax; whether the columns exist is the table's business."""
    body = spec.strip()
    if body.startswith("(") and body.endswith(")"):  # the whole list may be wrapped once
        body = body[1:-1]
    if not body.strip():
        return []
    return [_iceberg_partition_field(part.strip()) for part in _top_level_parts(body)]


def _iceberg_partition_field(part: str) -> tuple[str, int | None, str]:
    if not part:
        raise ValueError("a partition field is empty")
    call = _ICEBERG_CALL.fullmatch(part)
    if call is None:
        if not ICEBERG_COLUMN.fullmatch(part):
            raise ValueError(f"{part!r} is not a column name or a transform(column)")
        return "identity", None, part
    transform, args = call.group(1).lower(), [a.strip() for a in call.group(2).split(",")]
    if transform in ICEBERG_WIDTH_TRANSFORMS:
        if len(args) != 2:
            raise ValueError(f"{transform} takes a width and a column: {transform}(N, column), got {part!r}")
        width, column = args
        if not _WIDTH.fullmatch(width) or not 1 <= int(width) <= _WIDTH_MAX:
            raise ValueError(f"the width of {part!r} must be a whole number from 1 to {_WIDTH_MAX}")
        parsed = int(width)
    elif transform in ICEBERG_TRANSFORMS:
        if len(args) != 1:
            raise ValueError(f"{transform} takes one column: {transform}(column), got {part!r}")
        column, parsed = args[0], None
    else:
        raise ValueError(f"unknown transform {call.group(1)!r} in {part!r} (one of: "
                         f"{', '.join(ICEBERG_TRANSFORMS + ICEBERG_WIDTH_TRANSFORMS)})")
    if not ICEBERG_COLUMN.fullmatch(column):
        raise ValueError(f"{column!r} in {part!r} is not a column name")
    return transform, parsed, column


def _top_level_parts(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses; unbalanced parentheses are an error."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced parentheses")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced parentheses")
    parts.append(text[start:])
    return parts
