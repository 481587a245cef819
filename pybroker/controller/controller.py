"""The controller role on a single node: topics and partitions over the local metadata store.

Every change is written to the store first and then applied to the replica manager, so a
restart replays exactly what was acknowledged.
"""
import logging

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
    def __init__(self, config, store, replicas):
        self.config = config
        self.store = store
        self.replicas = replicas

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
        cfg = self.log_config(record)
        for index in range(first, end):
            self.replicas.make_leader(record.name, index, record.topic_id, cfg)

    # ---- topics ---------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict | None = None, validate_only: bool = False):
        partitions = self.config.num_partitions if partitions == -1 else partitions
        replication_factor = self.config.default_replication_factor if replication_factor == -1 else replication_factor
        if partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
        if replication_factor != 1:
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the 1 available broker"
                if replication_factor > 1 else f"replication factor must be at least 1, got {replication_factor}")
        configs = dict(configs or {})
        try:
            unknown = [k for k in configs if k not in TOPIC_NAMES.values()]
            if unknown:
                raise ValueError(f"unknown topic config {unknown[0]!r}")
            if any(v is None for v in configs.values()):
                raise ValueError("topic config values may not be null")
            LogConfig.from_properties(configs, base=self.config.log)
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None
        validate_topic_name(name)
        if name in self.store.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if validate_only:
            return None
        record = self.store.create_topic(name, partitions, replication_factor, configs)
        self._open_partitions(record, 0, partitions)
        log.info("created topic %s with %d partitions", name, partitions)
        return record

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
            self.replicas.delete_partition(name, index)
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
        if replace_all:
            new = {k: v for k, v in changes.items() if v is not None}
        else:
            new = dict(record.configs)
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
            LogConfig.from_properties(new, base=self.config.log)
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None
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
        effective = self.log_config(record)
        return [(prop, str(getattr(effective, field)), prop in record.configs)
                for field, prop in sorted(TOPIC_NAMES.items(), key=lambda kv: kv[1])]
