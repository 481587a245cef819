"""Group configs (the GROUP config resource, KIP-848/KIP-932, as Kafka 4.2 has them): per-group
overrides of the broker's group.* defaults.

``GROUP_KEYS`` is Kafka 4.2's GroupConfig: every key, its type, its Kafka default, and the broker key
that gives its default here (``group.`` + the key, where the broker has one). ``new_overrides`` checks a
change as Kafka does: unknown keys (INVALID_CONFIG "Unknown group config name: ..."), types and
ConfigDef ranges, the bounds the broker's min/max keys set, and session timeout above heartbeat
interval. Values are stored as given (strings). Only the keys a request sets are checked against the
broker's bounds, and the session/heartbeat rule only when it sets or removes one of the pair: an
override stored before the broker's bounds moved stays, and is taken clamped to them (the refinement
Kafka makes after 4.2, KAFKA-20835; 4.2 re-checks every stored key and refuses unrelated changes).

The overrides live in the metadata store through the control (``Control.group_configs`` /
``alter_group_configs``); ``GroupConfigs(control, broker_config).effective(group_id)`` is what the group
coordinators read: a ``GroupSettings`` of every key's effective value, the override else the broker's.
``describe_group`` gives the DescribeConfigs rows, with Kafka's sources: GROUP_CONFIG (8) for an
override, else STATIC_BROKER_CONFIG (4) where the broker key is set, else DEFAULT_CONFIG (5).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

from pybroker.errors import InvalidConfigError

INT_MAX = 2**31 - 1
GROUP_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 8, 4, 5  # DescribeConfigs config sources
AUTO_OFFSET_RESETS = ("latest", "earliest")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
BY_DURATION = "by_duration:"
# Java's Duration.parse: PnDTnHnMn.nS, each part optionally signed, letters in either case
_DURATION = re.compile(r"([-+]?)P(?:([-+]?[0-9]+)D)?(?:T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?"
                       r"(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?", re.IGNORECASE)


class GroupKey(NamedTuple):
    type: str                 # Kafka's ConfigDef type: INT, STRING or BOOLEAN
    default: Any              # Kafka's default (used where the broker has no such key)
    minimum: int | None       # ConfigDef's atLeast(), for INT keys
    broker_key: str | None    # the broker key that gives the default here
    bounds: tuple[str | None, str | None]  # the broker keys of the lowest and highest value a group may set
    doc: str


GROUP_KEYS: Mapping[str, GroupKey] = {
    "consumer.heartbeat.interval.ms": GroupKey(
        "INT", 5000, 1, "group.consumer.heartbeat.interval.ms",
        ("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
        "Heartbeat interval given to the members of this consumer group (KIP-848 protocol)."),
    "consumer.session.timeout.ms": GroupKey(
        "INT", 45000, 1, "group.consumer.session.timeout.ms",
        ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
        "How long a member of this consumer group may go without a heartbeat before it is removed."),
    "share.auto.offset.reset": GroupKey(
        "STRING", "latest", None, None, (None, None),
        "Where this share group starts reading a partition it has no state for: latest, earliest, or "
        "by_duration:<ISO-8601 duration> (the first record at most that long ago)."),
    "share.heartbeat.interval.ms": GroupKey(
        "INT", 5000, 1, "group.share.heartbeat.interval.ms",
        ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
        "Heartbeat interval given to the members of this share group."),
    "share.isolation.level": GroupKey(
        "STRING", "read_uncommitted", None, None, (None, None),
        "read_committed: this share group gets only committed transactional records; read_uncommitted: "
        "every record, aborted ones included."),
    "share.record.lock.duration.ms": GroupKey(
        "INT", 30000, 1000, "group.share.record.lock.duration.ms",
        ("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
        "How long a member of this share group holds the records it acquired before they are handed out "
        "again."),
    "share.session.timeout.ms": GroupKey(
        "INT", 45000, 1, "group.share.session.timeout.ms",
        ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
        "How long a member of this share group may go without a heartbeat before it is removed."),
    "streams.heartbeat.interval.ms": GroupKey(
        "INT", 5000, 1, "group.streams.heartbeat.interval.ms",
        ("group.streams.min.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms"),
        "Heartbeat interval of this streams group (kept; streams groups are not served here)."),
    "streams.initial.rebalance.delay.ms": GroupKey(
        "INT", 3000, 0, "group.streams.initial.rebalance.delay.ms", (None, None),
        "How long this streams group waits for more members before its first assignment (kept; streams "
        "groups are not served here)."),
    "streams.num.standby.replicas": GroupKey(
        "INT", 0, 0, "group.streams.num.standby.replicas", (None, "group.streams.max.standby.replicas"),
        "Standby replicas of each task of this streams group (kept; streams groups are not served here)."),
    "streams.session.timeout.ms": GroupKey(
        "INT", 45000, 1, "group.streams.session.timeout.ms",
        ("group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms"),
        "Session timeout of this streams group's members (kept; streams groups are not served here)."),
}
# (session timeout, heartbeat interval) pairs: the first must be greater than the second
_SESSION_OVER_HEARTBEAT = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                           ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
                           ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"))


@dataclass(frozen=True)
class GroupSettings:
    """Every group config of one group: its override, else the broker's default."""
    consumer_heartbeat_interval_ms: int = 5000
    consumer_session_timeout_ms: int = 45000
    share_auto_offset_reset: str = "latest"        # latest | earliest | by_duration:<ISO-8601>
    share_heartbeat_interval_ms: int = 5000
    share_isolation_level: str = "read_uncommitted"
    share_record_lock_duration_ms: int = 30000
    share_session_timeout_ms: int = 45000
    streams_heartbeat_interval_ms: int = 5000
    streams_initial_rebalance_delay_ms: int = 3000
    streams_num_standby_replicas: int = 0
    streams_session_timeout_ms: int = 45000

    @property
    def share_reset_duration_ms(self) -> int | None:
        """by_duration:<d> as milliseconds; None for latest and earliest."""
        if not self.share_auto_offset_reset.lower().startswith(BY_DURATION):
            return None
        return parse_duration_ms(self.share_auto_offset_reset[len(BY_DURATION):])


def _field(key: str) -> str:
    return key.replace(".", "_")


def broker_value(broker_config, key: str) -> Any:
    """The broker's default of group key ``key``: its group.* broker key, else Kafka's default."""
    spec = GROUP_KEYS[key]
    if spec.broker_key is None:
        return spec.default
    return getattr(broker_config, _field(spec.broker_key), spec.default)


def _bound(broker_config, key: str | None) -> int | None:
    return None if key is None else getattr(broker_config, _field(key), None)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration (Java's Duration.parse) as milliseconds; ValueError when it is not one."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.group(i) is not None for i in (2, 3, 4, 5)) or text.strip().upper().endswith("T"):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    sign, days, hours, minutes, seconds, fraction = m.groups()
    total_ms = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60) * 1000
    secs_ms = int(seconds or 0) * 1000
    frac_ms = int((fraction or "0").ljust(9, "0")) // 1_000_000
    secs_ms += -frac_ms if (seconds or "").startswith("-") else frac_ms
    total_ms += secs_ms
    return -total_ms if sign == "-" else total_ms


def _invalid(key: str, value, reason: str) -> InvalidConfigError:
    return InvalidConfigError(f"Invalid value {value} for configuration {key}: {reason}")


def check_value(key: str, value) -> Any:
    """One group config's value, typed; InvalidConfigError in Kafka's words when it is not one."""
    spec = GROUP_KEYS.get(key)
    if spec is None:
        raise InvalidConfigError(f"Unknown group config name: {key}")
    text = str(value).strip()
    if spec.type == "INT":
        try:
            number = int(text)
        except ValueError:
            raise _invalid(key, value, "Not a number of type INT") from None
        if not -INT_MAX - 1 <= number <= INT_MAX:
            raise _invalid(key, value, "Not a number of type INT")
        if spec.minimum is not None and number < spec.minimum:
            raise _invalid(key, value, f"Value must be at least {spec.minimum}")
        return number
    if key == "share.isolation.level":
        if text not in ISOLATION_LEVELS:
            raise _invalid(key, value, f"String must be one of: {', '.join(ISOLATION_LEVELS)}")
        return text
    if key == "share.auto.offset.reset":
        if text.lower().startswith(BY_DURATION):
            try:
                duration = parse_duration_ms(text[len(BY_DURATION):])
            except ValueError as exc:
                raise _invalid(key, value, f"by_duration needs an ISO-8601 duration (PnDTnHnMn.nS): {exc}") from None
            if duration < 0:
                raise _invalid(key, value, "a negative duration is not allowed")
        elif text not in AUTO_OFFSET_RESETS:
            raise _invalid(key, value, "expected latest, earliest or by_duration:<ISO-8601 duration> "
                                       "(e.g. by_duration:PT1H)")
        return text
    return text


def new_overrides(current: Mapping[str, str], changes: Mapping[str, str | None], replace_all: bool,
                  broker_config) -> dict[str, str]:
    """The group's overrides after ``changes`` ({key: value, or None to go back to the broker's default}),
    checked as Kafka checks them; raises InvalidConfigError."""
    new = {} if replace_all else dict(current)
    touched = set(changes) | (set(current) if replace_all else set())
    for key, value in changes.items():
        if value is None:
            new.pop(key, None)
            continue
        number = check_value(key, value)
        new[key] = str(value).strip()
        lo_key, hi_key = GROUP_KEYS[key].bounds
        lo, hi = _bound(broker_config, lo_key), _bound(broker_config, hi_key)
        if lo is not None and number < lo:
            raise InvalidConfigError(f"{key} must be greater than or equal to {lo_key} ({lo})")
        if hi is not None and number > hi:
            raise InvalidConfigError(f"{key} must be less than or equal to {hi_key} ({hi})")
    effective = settings(new, broker_config)
    for session_key, heartbeat_key in _SESSION_OVER_HEARTBEAT:
        if session_key in touched or heartbeat_key in touched:
            session, heartbeat = getattr(effective, _field(session_key)), getattr(effective, _field(heartbeat_key))
            if session <= heartbeat:
                raise InvalidConfigError(f"{session_key} ({session}) must be greater than {heartbeat_key} "
                                         f"({heartbeat})")
    return new


def settings(overrides: Mapping[str, str], broker_config) -> GroupSettings:
    """Every key's effective value: the override (clamped to the broker's current bounds), else the
    broker's default; an override that no longer parses counts as unset."""
    values = {}
    for key, spec in GROUP_KEYS.items():
        value = broker_value(broker_config, key)
        if key in overrides:
            try:
                value = check_value(key, overrides[key])
            except InvalidConfigError:
                pass
            else:
                lo, hi = (_bound(broker_config, k) for k in spec.bounds)
                if lo is not None:
                    value = max(value, lo)
                if hi is not None:
                    value = min(value, hi)
        values[_field(key)] = value
    return GroupSettings(**values)


def _as_string(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def describe_group(overrides: Mapping[str, str], broker_config) -> list[tuple[str, str, int, list]]:
    """(key, value, source, synonyms) for every group key, as Kafka 4.2 describes a GROUP resource;
    synonyms are (name, value, source), the most specific first."""
    raw = getattr(broker_config, "raw", {}) or {}
    rows = []
    for key, spec in sorted(GROUP_KEYS.items()):
        synonyms = []
        if key in overrides:
            synonyms.append((key, overrides[key], GROUP_CONFIG))
        if spec.broker_key is not None:
            if spec.broker_key in raw:
                synonyms.append((spec.broker_key, _as_string(broker_value(broker_config, key)), STATIC_BROKER_CONFIG))
            synonyms.append((spec.broker_key, _as_string(spec.default), DEFAULT_CONFIG))
        else:
            synonyms.append((key, _as_string(spec.default), DEFAULT_CONFIG))
        value, source = synonyms[0][1], synonyms[0][2]
        rows.append((key, value, source, synonyms))
    return rows


class GroupConfigs:
    """What a group coordinator reads: ``effective(group_id)``, the group's settings now (overrides as the
    control's metadata view holds them, over ``broker_config``'s defaults)."""

    def __init__(self, control, broker_config):
        self.control = control
        self.broker_config = broker_config

    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self.control.group_configs(group_id))

    def effective(self, group_id: str) -> GroupSettings:
        return settings(self.overrides(group_id), self.broker_config)
