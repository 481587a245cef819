"""Topic administration rules shared by every control: CreateTopics' checks, config overrides,
and the refusals Kafka answers (deletion disabled, internal topics)."""
from pybroker import config_catalog as catalog
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
    """CreateTopics' checks, in KRaft Kafka's order and words; (partitions, replication factor, configs)
    with the defaults applied."""
    if replication_factor < -1 or replication_factor == 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0, or -1 to use the default value.")
    if partitions < -1 or partitions == 0:
        raise InvalidPartitionsError("Number of partitions was set to an invalid non-positive value.")
    partitions = config.num_partitions if partitions == -1 else partitions
    replication_factor = config.default_replication_factor if replication_factor == -1 else replication_factor
    if partitions < 1:
        raise InvalidPartitionsError(f"num.partitions must be at least 1, got {partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"default.replication.factor must be at least 1, got {replication_factor}")
    if replication_factor > live_brokers:
        raise InvalidReplicationFactorError(
            f"Unable to replicate the partition {replication_factor} time(s): The target replication factor of "
            f"{replication_factor} cannot be reached because only {live_brokers} broker(s) are registered.")
    configs = dict(configs or {})
    _check_configs(configs, configs, config.log)
    validate_topic_name(name)
    return partitions, replication_factor, configs


def _check_configs(changes: dict, new: dict, base) -> None:
    """Topic config keys and values checked as Kafka checks them, in its words (InvalidConfigError)."""
    try:
        unknown = [k for k in changes if k not in TOPIC_NAMES.values()]
        if unknown:
            raise ValueError(f"Unknown topic config name: {unknown[0]}")
        bad = [k for k, v in new.items() if not isinstance(v, str)]
        if bad:
            raise ValueError(f"Null value not supported for topic configs: {bad[0]}")
        for key, value in new.items():
            catalog.check_value(key, catalog.TOPIC.get(key, (None,))[0], value)
        LogConfig.from_properties(new, base=base)
    except ValueError as exc:
        raise InvalidConfigError(str(exc)) from None


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
    _check_configs(changes, new, base)
    return new


class InvalidReplicaAssignmentError(BrokerError):
    code = INVALID_REPLICA_ASSIGNMENT


def check_assignment(assignment: dict, live) -> tuple[int, int]:
    """An explicit replica assignment's checks, in KRaft Kafka's words; (partitions, replication factor)."""
    replication_factor = None
    for p, replicas in assignment.items():
        if not replicas:
            raise InvalidReplicaAssignmentError("The manual partition assignment includes an empty replica list.")
        for b in sorted(replicas):
            if b not in live:
                raise InvalidReplicaAssignmentError(f"The manual partition assignment includes broker {b}, but no "
                                                    "such broker is registered.")
        if len(set(replicas)) != len(replicas):
            twice = next(b for b in sorted(replicas) if replicas.count(b) > 1)
            raise InvalidReplicaAssignmentError(f"The manual partition assignment includes the broker {twice} more "
                                                "than once.")
        if replication_factor is not None and len(replicas) != replication_factor:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this is "
                f"not consistent with previous partitions, which have {replication_factor} replica(s).")
        replication_factor = len(replicas)
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")
    return len(assignment), replication_factor
