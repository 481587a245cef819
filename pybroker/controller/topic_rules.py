"""Topic administration rules shared by every control: CreateTopics' checks, config overrides,
and the refusals Kafka answers (deletion disabled, internal topics)."""
from pybroker.controller.metadata_store import (InvalidConfigError, InvalidPartitionsError,
                                                InvalidReplicationFactorError, validate_topic_name)
from pybroker.errors import BrokerError
from pybroker.log.config import TOPIC_NAMES, LogConfig
from pybroker.protocol.errors import INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST, TOPIC_DELETION_DISABLED


class TopicDeletionDisabledError(BrokerError):
    code = TOPIC_DELETION_DISABLED


class InternalTopicError(BrokerError):
    code = INVALID_REQUEST


INTERNAL_TOPICS = ("__consumer_offsets",)


def describe_topic_configs(record, base) -> list[tuple[str, str, bool]]:
    """(Kafka name, value, overridden) for every topic-level config of a topic record."""
    effective = LogConfig.from_properties(record.configs, base=base)
    return [(prop, _as_kafka_text(getattr(effective, field)), prop in record.configs)
            for field, prop in sorted(TOPIC_NAMES.items(), key=lambda kv: kv[1])]


def _as_kafka_text(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)  # Java's spelling


def check_new_topic(config, name: str, partitions: int, replication_factor: int, configs, live_brokers: int):
    """CreateTopics' checks, as Kafka orders them; (partitions, replication factor, configs) with defaults."""
    partitions = config.num_partitions if partitions == -1 else partitions
    replication_factor = config.default_replication_factor if replication_factor == -1 else replication_factor
    if partitions < 1:
        raise InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be at least 1, got {replication_factor}")
    if replication_factor > live_brokers:
        raise InvalidReplicationFactorError(f"replication factor: {replication_factor} larger than available "
                                            f"brokers: {live_brokers}")
    configs = dict(configs or {})
    try:
        unknown = [k for k in configs if k not in TOPIC_NAMES.values()]
        if unknown:
            raise ValueError(f"unknown topic config {unknown[0]!r}")
        if any(v is None for v in configs.values()):
            raise ValueError("topic config values may not be null")
        LogConfig.from_properties(configs, base=config.log)
    except ValueError as exc:
        raise InvalidConfigError(str(exc)) from None
    validate_topic_name(name)
    return partitions, replication_factor, configs


def new_overrides(current: dict, changes: dict, replace_all: bool, base) -> dict:
    """Topic overrides after AlterConfigs (``replace_all``) or IncrementalAlterConfigs, validated."""
    if replace_all:
        new = {k: v for k, v in changes.items() if v is not None}
    else:
        new = dict(current)
        for key, value in changes.items():
            if value is None:
                new.pop(key, None)
            else:
                new[key] = value
    try:
        unknown = [k for k in changes if k not in TOPIC_NAMES.values()]
        if unknown:
            raise ValueError(f"unknown topic config {unknown[0]!r}")
        bad = [k for k, v in new.items() if not isinstance(v, str)]
        if bad:
            raise ValueError(f"the value of {bad[0]!r} must be a string")
        LogConfig.from_properties(new, base=base)
    except ValueError as exc:
        raise InvalidConfigError(str(exc)) from None
    return new


class InvalidReplicaAssignmentError(BrokerError):
    code = INVALID_REPLICA_ASSIGNMENT


def check_assignment(assignment: dict, live) -> tuple[int, int]:
    """An explicit replica assignment's checks; (partitions, replication factor) it makes."""
    partitions, replication_factor = len(assignment), len(next(iter(assignment.values())))
    for p, replicas in assignment.items():
        if len(set(replicas)) != len(replicas) or len(replicas) != replication_factor:
            raise InvalidReplicaAssignmentError(f"partition {p}: replicas {replicas} are not distinct or "
                                                "not of one replication factor")
        unknown = [b for b in replicas if b not in live]
        if unknown:
            raise InvalidReplicaAssignmentError(f"partition {p}: unknown broker ids {unknown}")
    if sorted(assignment) != list(range(partitions)):
        raise InvalidReplicaAssignmentError("partitions must be numbered 0..n-1")
    return partitions, replication_factor
