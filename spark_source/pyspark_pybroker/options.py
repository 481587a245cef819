"""Source and sink options, named and checked as Spark's built-in Kafka source does.

Everything here runs on the driver before any task: a wrong or conflicting option raises
``OptionError`` (a ``ValueError``) whose message names the option. Options reach us through a
case-insensitive map, so names are compared lower-cased. ``kafka.*`` options are client
settings with Kafka's property names; they are checked by the client configuration tables.
"""
import difflib
import json
import logging
import re
from dataclasses import dataclass, field

SOURCE_NAME = "pybroker"
log = logging.getLogger("pyspark_pybroker")


class OptionError(ValueError):
    """A source or sink option is missing, unknown, malformed or conflicts with another."""


# Offset bounds: ("earliest",), ("latest",), ("offsets", {(t, p): off}),
# ("timestamps", {(t, p): ts}), ("timestamp", ts). -2 / -1 in "offsets" mean earliest / latest.
EARLIEST = -2
LATEST = -1

# Option names as documented (matched case-insensitively).
_SOURCE_OPTIONS = [
    "subscribe", "subscribePattern", "assign", "kafka.bootstrap.servers", "bootstrapServers",
    "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
    "failOnDataLoss", "minPartitions", "maxRecordsPerPartition", "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger", "maxTriggerDelay", "includeHeaders", "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "groupIdPrefix",
    # decoding of schema-registry framed keys and values (registry_decode.py)
    "schema.registry.url", "schema.registry.basic.auth.user.info", "schema.registry.ssl.ca.location",
    "key.format", "value.format", "key.subject", "value.subject", "key.schema.version",
    "value.schema.version", "mode",
]
_SINK_OPTIONS = ["kafka.bootstrap.servers", "bootstrapServers", "topic", "includeHeaders"]
_ENDING_OPTIONS = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")

# Kafka client settings Spark's Kafka source refuses, and why.
_REFUSED_CLIENT_KEYS = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are read as bytes (cast the 'key' column, or set 'key.format' for schema-registry "
                        "framed keys)",
    "value.deserializer": "values are read as bytes (cast the 'value' column, or set 'value.format' for "
                          "schema-registry framed values)",
    "enable.auto.commit": "the source tracks offsets itself and never commits them",
    "interceptor.classes": "interceptors are not supported",
    "key.serializer": "keys are written as given (string or binary column)",
    "value.serializer": "values are written as given (string or binary column)",
}
# Java client settings that have no counterpart here, by side; passing one (as jobs written
# for Spark's Kafka source do) is accepted, logged at debug level and ignored.
_IGNORED_COMMON_KEYS = {
    "group.id",  # no consumer group: offsets live in Spark's checkpoint
    "send.buffer.bytes", "receive.buffer.bytes",  # the OS socket buffer sizes are used
    "metrics.sample.window.ms", "metrics.num.samples", "metrics.recording.level",
    "metric.reporters", "auto.include.jmx.reporter", "enable.metrics.push",
    "metadata.recovery.strategy", "metadata.recovery.rebootstrap.trigger.ms",
}
_IGNORED_CLIENT_KEYS = {
    # a read task assigns its partition itself: group membership settings do not apply
    "source": _IGNORED_COMMON_KEYS | {
        "group.instance.id", "group.protocol", "group.remote.assignor", "max.poll.records",
        "max.poll.interval.ms", "session.timeout.ms", "heartbeat.interval.ms",
        "auto.commit.interval.ms", "partition.assignment.strategy", "client.rack",
        "exclude.internal.topics", "internal.leave.group.on.close", "allow.auto.create.topics",
    },
    "sink": _IGNORED_COMMON_KEYS | {
        "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
        "partitioner.adaptive.partitioning.enable", "partitioner.availability.timeout.ms",
        "metadata.max.idle.ms", "transaction.timeout.ms",
    },
}
# Settings refused on the write side, and why.
_REFUSED_SINK_KEYS = {
    "transactional.id": "transactions are not supported (delivery is at-least-once)",
    "partitioner.class": "custom partitioners are not supported: set the 'partition' column",
}

_TIME_UNITS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
               "d": 86_400_000}


def _lower_map(options) -> dict:
    """The options as a plain dict with lower-cased names (values are strings)."""
    out = {}
    for key, value in dict(options or {}).items():
        out[str(key).lower()] = value if value is None else str(value)
    return out


def _documented(names) -> dict:
    return {n.lower(): n for n in names}


# Options Spark itself adds for a streaming sink.
_ENGINE_OPTIONS = {"checkpointlocation"}


def _check_known(opts: dict, known: dict, what: str, other: dict) -> None:
    for key in opts:
        if key.startswith("kafka.") or key in known or key in _ENGINE_OPTIONS:
            continue
        if key == "path":
            raise OptionError(f"the {SOURCE_NAME} {what} takes no path: name topics with options "
                              f"({'subscribe' if what == 'source' else 'topic'})")
        hint = ""
        if key in other:
            hint = f" ('{other[key]}' is a {'sink' if what == 'source' else 'source'} option)"
        else:
            close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
            if close:
                hint = f" (did you mean '{known[close[0]]}'?)"
        raise OptionError(f"unknown {SOURCE_NAME} {what} option '{key}'{hint}")


def _bool(opts: dict, name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option '{name}' must be 'true' or 'false', got '{raw}'")
    return value == "true"


def _int(opts: dict, name: str, minimum: int | None = 1, default=None):
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got '{raw}'") from None
    if minimum is not None and value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise OptionError(f"option '{name}' must be {what}, got '{raw}'")
    return value


def parse_duration_ms(name: str, raw: str) -> int:
    """Spark's time strings: '15m', '30s', '500ms', '2h', '1d'; a bare number is milliseconds."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", raw or "")
    unit = m.group(2).lower() if m else ""
    if not m or (unit and unit not in _TIME_UNITS):
        raise OptionError(f"option '{name}' must be a duration such as '15m', '30s' or '500ms', "
                          f"got '{raw}'")
    return int(m.group(1)) * _TIME_UNITS.get(unit or "ms")


def _json_object(name: str, raw: str) -> dict:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise OptionError(f"option '{name}' is not valid JSON ({exc}): {raw!r}") from None
    if not isinstance(value, dict):
        raise OptionError(f"option '{name}' must be a JSON object, got {raw!r}")
    return value


def _partition_map(name: str, raw: str, what: str) -> dict:
    """'{"topic": {"0": 23, "1": -1}}' -> {("topic", 0): 23, ("topic", 1): -1}."""
    out = {}
    for topic, parts in _json_object(name, raw).items():
        if not isinstance(parts, dict):
            raise OptionError(f"option '{name}': topic '{topic}' must map partition numbers to "
                              f"{what}, e.g. {{\"{topic}\": {{\"0\": 23}}}}")
        for part, value in parts.items():
            try:
                pid = int(part)
            except (TypeError, ValueError):
                pid = -1
            if pid < 0 or str(pid) != str(part).strip():
                raise OptionError(f"option '{name}': '{part}' of topic '{topic}' is not a "
                                  f"partition number")
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"option '{name}': {what} of {topic}-{pid} must be an integer, "
                                  f"got {value!r}")
            out[(topic, pid)] = value
    return out


def parse_assign(raw: str) -> list:
    """'{"topicA": [0, 1]}' -> [("topicA", 0), ("topicA", 1)]."""
    value = _json_object("assign", raw)
    out = []
    for topic, parts in value.items():
        if not isinstance(parts, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise OptionError(f"option 'assign': topic '{topic}' must map to a list of partition "
                              f"numbers, e.g. {{\"{topic}\": [0, 1]}}")
        out.extend((topic, p) for p in parts)
    if not out:
        raise OptionError(f"option 'assign' names no topic-partitions: {raw!r}")
    if len(set(out)) != len(out):
        raise OptionError(f"option 'assign' names a topic-partition twice: {raw!r}")
    return sorted(out)


def _bootstrap(opts: dict) -> str:
    long_form = opts.get("kafka.bootstrap.servers")
    short = opts.get("bootstrapservers")
    if long_form is not None and short is not None and long_form.strip() != short.strip():
        raise OptionError("options 'kafka.bootstrap.servers' and 'bootstrapServers' are both set "
                          "and differ: set only one")
    value = long_form if long_form is not None else short
    if value is None or not value.strip():
        raise OptionError("option 'kafka.bootstrap.servers' (or 'bootstrapServers') must be set "
                          "to the brokers' HOST:PORT list")
    for server in value.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise OptionError(f"option 'kafka.bootstrap.servers': '{server.strip()}' is not "
                              f"HOST:PORT")
    return ",".join(s.strip() for s in value.split(",") if s.strip())


def _client_settings(opts: dict, side: str) -> dict:
    """The kafka.* options as Kafka client properties (prefix removed) for ``side`` ("source"
    or "sink"), minus ignored ones; refused ones raise OptionError."""
    props = {}
    for key, value in opts.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        prop = key[len("kafka."):]
        if prop in _REFUSED_CLIENT_KEYS:
            raise OptionError(f"option '{key}' is not supported: {_REFUSED_CLIENT_KEYS[prop]}")
        if side == "sink" and prop in _REFUSED_SINK_KEYS:
            raise OptionError(f"option '{key}' is not supported: {_REFUSED_SINK_KEYS[prop]}")
        if prop == "security.providers":
            raise OptionError(f"option '{key}' is not supported: TLS comes from Python's ssl module")
        if prop in _IGNORED_CLIENT_KEYS[side]:
            log.debug("option '%s' does not apply to the %s %s and is ignored", key, SOURCE_NAME,
                      side)
            continue
        props[prop] = value
    return _security_settings(props)


def _security_settings(props: dict) -> dict:
    """Kafka's security properties (security.protocol, kafka.ssl.truststore.location (PEM),
    kafka.sasl.jaas.config, ...) mapped to the client's names."""
    from pybroker.client import java_props
    from pybroker.client.errors import ConfigError
    if not any(java_props.is_security_key(k) for k in props):
        return props
    try:
        return java_props.translate(props)
    except ConfigError as exc:
        raise OptionError(f"kafka.* security option: {exc.message}") from None


def _offset_bound(opts: dict, prefix: str):
    """The starting or ending bound; a timestamp option wins over offsets, as in Spark."""
    global_ts = opts.get(f"{prefix}timestamp")
    by_ts = opts.get(f"{prefix}offsetsbytimestamp")
    offsets = opts.get(f"{prefix}offsets")
    if global_ts is not None:
        try:
            ts = int(global_ts.strip())
        except ValueError:
            ts = -1
        if ts < 0:
            raise OptionError(f"option '{prefix}Timestamp' must be a timestamp in milliseconds "
                              f"since the epoch (>= 0), got '{global_ts}'")
        return ("timestamp", ts)
    if by_ts is not None:
        stamps = _partition_map(f"{prefix}OffsetsByTimestamp", by_ts, "timestamp")
        bad = [f"{t}-{p}" for (t, p), ts in stamps.items() if ts < 0]
        if bad:
            raise OptionError(f"option '{prefix}OffsetsByTimestamp': timestamps must be >= 0 "
                              f"(milliseconds since the epoch); bad for {', '.join(bad)}")
        if not stamps:
            raise OptionError(f"option '{prefix}OffsetsByTimestamp' names no partitions")
        return ("timestamps", stamps)
    if offsets is None:
        return None
    text = offsets.strip().lower()
    if text == "earliest":
        return ("earliest",)
    if text == "latest":
        return ("latest",)
    if not text.startswith("{"):
        raise OptionError(f"option '{prefix}Offsets' must be 'earliest', 'latest' or JSON such as "
                          f"{{\"topic\": {{\"0\": 23, \"1\": -2}}}}, got '{offsets}'")
    specific = _partition_map(f"{prefix}Offsets", offsets, "offset")
    bad = [f"{t}-{p}" for (t, p), off in specific.items() if off < EARLIEST]
    if bad:
        raise OptionError(f"option '{prefix}Offsets': offsets must be >= 0, or -2 (earliest) or "
                          f"-1 (latest); bad for {', '.join(bad)}")
    if not specific:
        raise OptionError(f"option '{prefix}Offsets' names no partitions")
    return ("offsets", specific)


@dataclass(frozen=True)
class Subscription:
    """What to read: one of a topic list, a topic-name regex, or fixed topic-partitions."""
    kind: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple = ()
    pattern: str = ""
    partitions: tuple = ()  # ((topic, partition), ...) for assign

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + ",".join(f"{t}-{p}" for t, p in self.partitions)


def _subscription(opts: dict) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k) is not None]
    names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
    if not given:
        raise OptionError("one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
                          "set to say which topics to read")
    if len(given) > 1:
        raise OptionError("only one of the options 'subscribe', 'subscribePattern' and 'assign' may "
                          f"be set, got {', '.join(repr(names[k]) for k in given)}")
    kind = given[0]
    raw = opts[kind]
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise OptionError(f"option 'subscribe' names no topics: '{raw}'")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        if not raw.strip():
            raise OptionError("option 'subscribePattern' is empty")
        try:
            re.compile(raw.strip())
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regex ({exc}): "
                              f"'{raw}'") from None
        return Subscription("subscribePattern", pattern=raw.strip())
    return Subscription("assign", partitions=tuple(parse_assign(raw)))


@dataclass(frozen=True)
class ReadOptions:
    """The checked source options of one batch or streaming read."""
    bootstrap: str
    subscription: Subscription
    streaming: bool
    starting: tuple
    ending: tuple | None
    by_timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    offset_retries: int = 3
    offset_retry_interval_ms: int = 10
    registry: "RegistryOptions | None" = field(default=None, repr=False)  # None: keys and values stay bytes
    client: dict = field(default_factory=dict, repr=False)  # kafka.* client properties (may hold a password)

    def client_config(self) -> dict:
        """Properties for the clients: the bootstrap list plus the kafka.* settings."""
        return {"bootstrap.servers": self.bootstrap, **self.client}


def include_headers(options) -> bool:
    return _bool(_lower_map(options), "includeHeaders", False)


def parse_read_options(options, streaming: bool | None) -> ReadOptions:
    """Check the source options of a batch (streaming=False) or streaming read; with
    streaming=None, only the checks that hold for both."""
    opts = _lower_map(options)
    _check_known(opts, _documented(_SOURCE_OPTIONS), "source", _documented(["topic"]))
    bootstrap = _bootstrap(opts)
    subscription = _subscription(opts)
    client = _client_settings(opts, "source")

    starting = _offset_bound(opts, "starting")
    ending = _offset_bound(opts, "ending")
    if streaming is None:
        pass
    elif streaming:
        given = [n for n in _ENDING_OPTIONS if opts.get(n.lower()) is not None]
        if given:
            raise OptionError(f"option '{given[0]}' is for batch queries only: a streaming query "
                              f"has no end")
        starting = starting or ("latest",)
    else:
        starting = starting or ("earliest",)
        ending = ending or ("latest",)
        if starting == ("latest",):
            raise OptionError("option 'startingOffsets' cannot be 'latest' for a batch query "
                              "(it would read nothing)")
        if ending == ("earliest",):
            raise OptionError("option 'endingOffsets' cannot be 'earliest' for a batch query "
                              "(it would read nothing)")
        if starting[0] == "offsets":
            bad = [f"{t}-{p}" for (t, p), o in starting[1].items() if o == LATEST]
            if bad:
                raise OptionError(f"option 'startingOffsets': -1 (latest) is not allowed in a batch "
                                  f"query; found for {', '.join(bad)}")
        if ending[0] == "offsets":
            bad = [f"{t}-{p}" for (t, p), o in ending[1].items() if o == EARLIEST]
            if bad:
                raise OptionError(f"option 'endingOffsets': -2 (earliest) is not allowed in a batch "
                                  f"query; found for {', '.join(bad)}")
    if subscription.kind == "assign":
        assigned = set(subscription.partitions)
        for name, bound in (("starting", starting), ("ending", ending)):
            if bound and bound[0] in ("offsets", "timestamps"):
                opt = f"{name}Offsets" + ("ByTimestamp" if bound[0] == "timestamps" else "")
                extra = sorted(set(bound[1]) - assigned)
                missing = sorted(assigned - set(bound[1]))
                if extra or missing:
                    raise OptionError(_mismatch_message(opt, extra, missing))
    strategy = (opts.get("startingoffsetsbytimestampstrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or "
                          f"'latest', got '{opts.get('startingoffsetsbytimestampstrategy')}'")

    max_per_trigger = _int(opts, "maxOffsetsPerTrigger")
    min_per_trigger = _int(opts, "minOffsetsPerTrigger")
    if max_per_trigger is not None and min_per_trigger is not None and \
            min_per_trigger > max_per_trigger:
        raise OptionError(f"option 'minOffsetsPerTrigger' ({min_per_trigger}) cannot be larger than "
                          f"'maxOffsetsPerTrigger' ({max_per_trigger})")
    delay_raw = opts.get("maxtriggerdelay")
    delay_ms = parse_duration_ms("maxTriggerDelay", delay_raw) if delay_raw is not None else 15 * 60_000
    return ReadOptions(
        bootstrap=bootstrap,
        subscription=subscription,
        streaming=bool(streaming),
        starting=starting,
        ending=None if streaming else ending,
        by_timestamp_strategy=strategy,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_int(opts, "minPartitions"),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition"),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=delay_ms,
        include_headers=_bool(opts, "includeHeaders", False),
        poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", default=120_000),
        offset_retries=_int(opts, "fetchOffset.numRetries", minimum=0, default=3),
        offset_retry_interval_ms=_int(opts, "fetchOffset.retryIntervalMs", minimum=0, default=10),
        registry=parse_registry_options(opts, subscription),
        client=client,
    )


FORMATS = ("raw", "avro", "json", "protobuf", "confluent")  # confluent: whichever type the registry has
MODES = ("PERMISSIVE", "FAILFAST", "DROPMALFORMED")


@dataclass(frozen=True)
class PartFormat:
    """How the key or the value is decoded: the format and the subject version of the reader schema."""
    part: str  # "key" | "value"
    format: str  # one of FORMATS but "raw"
    subject: str
    version: str  # "latest" or a version number


@dataclass(frozen=True)
class RegistryOptions:
    """The checked registry options of a read that decodes its keys and/or values."""
    url: str
    mode: str
    key: PartFormat | None
    value: PartFormat | None
    user_info: str | None = field(default=None, repr=False)  # user:password
    ca_location: str | None = None

    def parts(self) -> list:
        return [p for p in (self.key, self.value) if p is not None]


def _single_topic(subscription: Subscription) -> str | None:
    topics = subscription.topics if subscription.kind == "subscribe" else \
        tuple(dict.fromkeys(t for t, _ in subscription.partitions))
    return topics[0] if len(topics) == 1 else None


def _part_format(opts: dict, part: str, subscription: Subscription) -> PartFormat | None:
    fmt = (opts.get(f"{part}.format") or "raw").strip().lower()
    if fmt not in FORMATS:
        raise OptionError(f"option '{part}.format' must be one of {', '.join(FORMATS)}, got '{opts[f'{part}.format']}'")
    subject, version = opts.get(f"{part}.subject"), opts.get(f"{part}.schema.version")
    if fmt == "raw":
        given = [n for n, v in ((f"{part}.subject", subject), (f"{part}.schema.version", version)) if v is not None]
        if given:
            raise OptionError(f"option '{given[0]}' needs '{part}.format' (avro, json, protobuf or confluent)")
        return None
    if subject is None:
        topic = _single_topic(subscription)
        if topic is None:
            raise OptionError(f"option '{part}.subject' must be set when reading several topics (or a pattern) "
                              f"with '{part}.format': the reader schema is the subject's, by default <topic>-{part}")
        subject = f"{topic}-{part}"
    elif not subject.strip():
        raise OptionError(f"option '{part}.subject' is empty")
    version = (version or "latest").strip().lower()
    if version != "latest" and (not version.isdigit() or int(version) < 1):
        raise OptionError(f"option '{part}.schema.version' must be 'latest' or a version number >= 1, "
                          f"got '{opts[f'{part}.schema.version']}'")
    return PartFormat(part, fmt, subject.strip(), version if version == "latest" else str(int(version)))


def parse_registry_options(opts: dict, subscription: Subscription) -> RegistryOptions | None:
    """The decoding options; None when neither key.format nor value.format asks for decoding."""
    key = _part_format(opts, "key", subscription)
    value = _part_format(opts, "value", subscription)
    raw_mode = opts.get("mode")
    mode = (raw_mode or "PERMISSIVE").strip().upper()
    if mode not in MODES:
        raise OptionError(f"option 'mode' must be one of {', '.join(MODES)}, got '{raw_mode}'")
    if key is None and value is None:
        return None
    url = (opts.get("schema.registry.url") or "").strip()
    if not url:
        raise OptionError("option 'schema.registry.url' must be set to decode keys or values with the "
                          "schema registry (e.g. http://127.0.0.1:8081)")
    if any(not u.strip().startswith(("http://", "https://")) for u in url.split(",")):
        raise OptionError(f"option 'schema.registry.url' must be http:// or https:// URLs, got '{url}'")
    return RegistryOptions(url=url, mode=mode, key=key, value=value,
                           user_info=opts.get("schema.registry.basic.auth.user.info"),
                           ca_location=opts.get("schema.registry.ssl.ca.location"))


def _mismatch_message(option: str, extra: list, missing: list) -> str:
    parts = []
    if missing:
        parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
    if extra:
        parts.append("not read by this query " + ", ".join(f"{t}-{p}" for t, p in extra))
    return (f"option '{option}' must give every topic-partition the query reads, and only those "
            f"(use -2 for earliest, -1 for latest): {'; '.join(parts)}")


def mismatch_error(option: str, extra, missing) -> OptionError:
    return OptionError(_mismatch_message(option, sorted(extra), sorted(missing)))


@dataclass(frozen=True)
class WriteOptions:
    """The checked sink options."""
    bootstrap: str
    topic: str | None
    client: dict = field(default_factory=dict, repr=False)  # may hold a password

    def client_config(self) -> dict:
        return {"bootstrap.servers": self.bootstrap, **self.client}


def parse_write_options(options) -> WriteOptions:
    """Check the sink options (column checks happen against the DataFrame's schema)."""
    opts = _lower_map(options)
    _check_known(opts, _documented(_SINK_OPTIONS), "sink", _documented(_SOURCE_OPTIONS))
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' is empty")
    _bool(opts, "includeHeaders", False)  # accepted as in Spark; headers come from the column
    return WriteOptions(bootstrap=_bootstrap(opts), topic=topic.strip() if topic else None,
                        client=_client_settings(opts, "sink"))
