"""The controller role on a single node: topics and partitions over the local metadata store.

Every change is written to the store first and then applied to the replica manager, so a
restart replays exactly what was acknowledged.
"""
import logging
from dataclasses import replace

from pybroker.controller.metadata_cache import PartitionState
from pybroker.controller.metadata_store import (InvalidConfigError, InvalidPartitionsError,
                                                InvalidReplicationFactorError, TopicExistsError,
                                                UnknownTopicError, validate_topic_name)
from pybroker.errors import BrokerError
from pybroker.log.config import TOPIC_NAMES, LogConfig

log = logging.getLogger(__name__)


class TopicDeletionDisabledError(BrokerError):
    code = 73  # TOPIC_DELETION_DISABLED


class InternalTopicError(BrokerError):
    code = 42  # INVALID_REQUEST


INTERNAL_TOPICS = ("__consumer_offsets",)


class Controller:
    """The controller of a single node, over the local metadata store."""

    def __init__(self, broker, store):
        self.broker = broker
        self.config = broker.config
        self.store = store
        self.replicas = broker.replicas

    @property
    def topics(self):
        return self.store.topics

    def startup(self) -> None:
        """Open a partition (as leader) for every partition the store knows."""
        for record in list(self.store.topics.values()):
            self._open_partitions(record, 0, record.partitions)
            if record.configs:  # logs loaded from disk start with the broker defaults
                self._apply_log_config(record)

    def log_config(self, record) -> LogConfig:
        return LogConfig.from_properties(record.configs, base=self.config.log)

    def _open_partitions(self, record, first: int, end: int) -> None:
        """This node leads every partition: the same LeaderAndIsr and UpdateMetadata steps as a cluster."""
        me = (self.config.node_id,)
        states = [PartitionState(record.name, i, self.config.node_id, 0, me, me) for i in range(first, end)]
        errors = self.broker.apply_leader_and_isr(0, states, {record.name: record.topic_id},
                                                  self.broker.own_endpoints())
        # a refused partition (e.g. INCONSISTENT_TOPIC_ID) is offline, not led by this node
        states = [replace(s, leader=-1, offline=me) if errors.get((s.topic, s.partition)) else s for s in states]
        self.broker.metadata.update(self.config.node_id, [self.broker.own_endpoint()], states,
                                    {record.name: record.topic_id})

    # ---- topics ---------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict | None = None, validate_only: bool = False):
        partitions, replication_factor, configs = check_new_topic(
            self.config, name, partitions, replication_factor, configs, live_brokers=1)
        if name in self.store.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if validate_only:
            return None
        record = self.store.create_topic(name, partitions, replication_factor, configs)
        self._open_partitions(record, 0, partitions)
        log.info("created topic %s with %d partitions", name, partitions)
        return record

    def auto_create_topic(self, name: str):
        return self.create_topic(name)

    def delete_topic(self, name: str) -> None:
        if not self.config.delete_topic_enable:
            raise TopicDeletionDisabledError("topic deletion is disabled (delete.topic.enable=false)")
        if name in INTERNAL_TOPICS:
            raise InternalTopicError(f"internal topic {name!r} cannot be deleted")
        record = self.store.topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        self.store.delete_topic(name)
        for index in range(record.partitions):
            self.replicas.stop_replica(name, index, delete=True)
        self.broker.metadata.update(self.config.node_id, None, [], {}, deleted=[name])
        log.info("deleted topic %s", name)

    def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        record = self.store.topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        if count <= record.partitions:
            raise InvalidPartitionsError(
                f"topic {name} has {record.partitions} partitions; the new count {count} must be larger")
        if validate_only:
            return
        old = record.partitions
        self.store.set_partitions(name, count)
        self._open_partitions(self.store.topics[name], old, count)

    def alter_topic_configs(self, name: str, changes: dict, replace_all: bool = False,
                            validate_only: bool = False) -> None:
        """Change topic-level overrides: ``changes`` maps Kafka names to a value (set) or None
        (back to the default). With ``replace_all`` (legacy AlterConfigs) the overrides become
        exactly the non-None ``changes``. Validated like CreateTopics, stored durably, then
        applied to the topic's open logs."""
        record = self.store.topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        new = new_overrides(record.configs, changes, replace_all, self.config.log)
        if validate_only or new == record.configs:
            return
        self.store.set_configs(name, {**{k: None for k in record.configs if k not in new}, **new})
        self._apply_log_config(self.store.topics[name])
        log.info("altered configs of topic %s: %s", name, dict(sorted(new.items())))

    def _apply_log_config(self, record) -> None:
        """Give the topic's open logs their new LogConfig."""
        cfg = self.log_config(record)
        for index in range(record.partitions):
            lg = getattr(self.replicas.get(record.name, index), "log", None)
            if lg is not None:
                lg.update_config(cfg)

    def topic_configs(self, name: str) -> list[tuple[str, str, bool]]:
        """(Kafka name, value, overridden) for every topic-level config of ``name``."""
        record = self.store.topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return describe_topic_configs(record, self.config.log)


def describe_topic_configs(record, base) -> list[tuple[str, str, bool]]:
    """(Kafka name, value, overridden) for every topic-level config of a topic record."""
    effective = LogConfig.from_properties(record.configs, base=base)
    return [(prop, str(getattr(effective, field)), prop in record.configs)
            for field, prop in sorted(TOPIC_NAMES.items(), key=lambda kv: kv[1])]


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
