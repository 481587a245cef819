"""Broker configuration under Kafka's names: ``server.properties``, environment, ``--override``.

Sources, later ones win: built-in defaults < the properties file < ``PYBROKER_CFG_*``
environment variables (``PYBROKER_CFG_LOG_DIRS=/data`` is ``log.dirs=/data``: prefix dropped,
lower-cased, ``_`` becomes ``.``) < ``--override key=value``.

The file is read as a Java Properties file (pybroker/properties.py, which also holds ``ConfigError``
and the typed value parsers). Each feature checks its own keys (TLS: security/tls.py, SASL:
security/sasl/settings.py, topic defaults: log/config.py); this module only composes them.

Listeners: ``NAME://host:port``, comma-separated; each name maps to a security protocol (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL) through ``listener.security.protocol.map`` (default: each protocol's name to
itself). TLS keys (``ssl.*``, per listener ``listener.name.<name>.ssl.*``): pybroker/security/tls.py.
An empty host binds 127.0.0.1, never every interface: ask for ``0.0.0.0`` (or ``[::]``) explicitly,
and then set ``advertised.listeners`` to an address clients can reach, as Kafka requires.

Single-node KRaft keys are accepted when harmless: ``process.roles`` must be ``broker,controller``
(combined mode), ``controller.quorum.voters`` may only name this node, ``controller.quorum.bootstrap
.servers`` only one server; listeners named in ``controller.listener.names`` are not served (the
controller runs in-process). ``zookeeper.connect`` selects the ZooKeeper metadata store (clusters);
without it the ``local`` store in the first log dir is used. Kafka's stock ``server.properties``
loads unchanged.

``schema.registry.*`` keys configure the schema registry the broker serves when
``schema.registry.listeners`` is set (checked by pybroker/registry/settings.py; see docs/schema-registry.md).
"""
import base64
import binascii
import difflib
import logging
import os
import re
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping, Sequence

from pybroker.config_catalog import BROKER as KAFKA_BROKER_KEYS
from pybroker.config_catalog import IGNORED_REASONS, check_value, ignored_reason
from pybroker.log.config import BROKER_NAMES, LogConfig
from pybroker.properties import (INT_MAX, LONG_MAX, ConfigError, parse_bool, parse_float, parse_int,
                                 read_properties_file)
from pybroker.security.sasl import settings as sasl_settings
from pybroker.security.tls import SSL_KEYS, listener_tls

log = logging.getLogger(__name__)

ENV_PREFIX = "PYBROKER_CFG_"
DEFAULT_HOST = "127.0.0.1"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
LOG_LEVELS = {"DEBUG": "DEBUG", "INFO": "INFO", "WARN": "WARNING", "WARNING": "WARNING", "ERROR": "ERROR"}

# Kafka broker keys with no meaning here: accepted (so stock configs load), type-checked, reported as ignored.
# Every other Kafka 3.8 broker key (pybroker/config_catalog.py) is accepted the same way.
IGNORED = dict(IGNORED_REASONS)

# key -> (field, minimum, maximum) for plain integer keys of BrokerConfig
_INTS = {
    "node.id": ("node_id", 0, INT_MAX),
    "num.partitions": ("num_partitions", 1, INT_MAX),
    "default.replication.factor": ("default_replication_factor", 1, INT_MAX),
    "min.insync.replicas": ("min_insync_replicas", 1, INT_MAX),
    "socket.request.max.bytes": ("socket_request_max_bytes", 1, INT_MAX),
    "connections.max.idle.ms": ("connections_max_idle_ms", -LONG_MAX - 1, LONG_MAX),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", 1, LONG_MAX),
    "log.writeback.bytes": ("log_writeback_bytes", 0, LONG_MAX),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", 1, INT_MAX),
    "offsets.retention.minutes": ("offsets_retention_minutes", 1, INT_MAX),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", 0, INT_MAX),
    "group.consumer.session.timeout.ms": ("group_consumer_session_timeout_ms", 1, INT_MAX),  # KIP-848 groups
    "group.consumer.heartbeat.interval.ms": ("group_consumer_heartbeat_interval_ms", 1, INT_MAX),
    "group.consumer.max.size": ("group_consumer_max_size", 1, INT_MAX),
    # the bounds of a consumer group's consumer.* group configs (pybroker/coordinator/group_configs.py)
    "group.consumer.min.session.timeout.ms": ("group_consumer_min_session_timeout_ms", 1, INT_MAX),
    "group.consumer.max.session.timeout.ms": ("group_consumer_max_session_timeout_ms", 1, INT_MAX),
    "group.consumer.min.heartbeat.interval.ms": ("group_consumer_min_heartbeat_interval_ms", 1, INT_MAX),
    "group.consumer.max.heartbeat.interval.ms": ("group_consumer_max_heartbeat_interval_ms", 1, INT_MAX),
    # share groups (KIP-932, Kafka 4.2): pybroker/share, and the defaults and bounds of the share.* group configs
    "group.share.session.timeout.ms": ("group_share_session_timeout_ms", 1, INT_MAX),
    "group.share.min.session.timeout.ms": ("group_share_min_session_timeout_ms", 1, INT_MAX),
    "group.share.max.session.timeout.ms": ("group_share_max_session_timeout_ms", 1, INT_MAX),
    "group.share.heartbeat.interval.ms": ("group_share_heartbeat_interval_ms", 1, INT_MAX),
    "group.share.min.heartbeat.interval.ms": ("group_share_min_heartbeat_interval_ms", 1, INT_MAX),
    "group.share.max.heartbeat.interval.ms": ("group_share_max_heartbeat_interval_ms", 1, INT_MAX),
    "group.share.record.lock.duration.ms": ("group_share_record_lock_duration_ms", 1000, 3600000),
    "group.share.min.record.lock.duration.ms": ("group_share_min_record_lock_duration_ms", 1000, 30000),
    "group.share.max.record.lock.duration.ms": ("group_share_max_record_lock_duration_ms", 30000, 3600000),
    "group.share.delivery.count.limit": ("group_share_delivery_count_limit", 2, 10),
    "group.share.max.size": ("group_share_max_size", 1, 1000),
    "group.share.partition.max.record.locks": ("group_share_partition_max_record_locks", 100, 10000),
    "group.share.max.share.sessions": ("group_share_max_share_sessions", 1, INT_MAX),
    # streams groups are not served; their keys are the defaults and bounds of the streams.* group configs
    "group.streams.session.timeout.ms": ("group_streams_session_timeout_ms", 1, INT_MAX),
    "group.streams.min.session.timeout.ms": ("group_streams_min_session_timeout_ms", 1, INT_MAX),
    "group.streams.max.session.timeout.ms": ("group_streams_max_session_timeout_ms", 1, INT_MAX),
    "group.streams.heartbeat.interval.ms": ("group_streams_heartbeat_interval_ms", 1, INT_MAX),
    "group.streams.min.heartbeat.interval.ms": ("group_streams_min_heartbeat_interval_ms", 1, INT_MAX),
    "group.streams.max.heartbeat.interval.ms": ("group_streams_max_heartbeat_interval_ms", 1, INT_MAX),
    "group.streams.num.standby.replicas": ("group_streams_num_standby_replicas", 0, INT_MAX),
    "group.streams.max.standby.replicas": ("group_streams_max_standby_replicas", 0, INT_MAX),
    "group.streams.initial.rebalance.delay.ms": ("group_streams_initial_rebalance_delay_ms", 0, INT_MAX),
    # the share coordinator and its state topic __share_group_state (capped at the live brokers, as
    # offsets.topic.replication.factor is: a single node starts with the defaults)
    "share.coordinator.state.topic.num.partitions": ("share_coordinator_state_topic_num_partitions", 1, INT_MAX),
    "share.coordinator.state.topic.replication.factor": ("share_coordinator_state_topic_replication_factor", 1,
                                                         32767),
    "share.coordinator.state.topic.min.isr": ("share_coordinator_state_topic_min_isr", 1, 32767),
    "share.coordinator.state.topic.segment.bytes": ("share_coordinator_state_topic_segment_bytes", 1, INT_MAX),
    "share.coordinator.snapshot.update.records.per.snapshot":
        ("share_coordinator_snapshot_update_records_per_snapshot", 0, INT_MAX),
    "share.coordinator.write.timeout.ms": ("share_coordinator_write_timeout_ms", 1, INT_MAX),
    "share.fetch.max.fetch.records": ("share_fetch_max_fetch_records", 1, INT_MAX),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", 1, 32767),
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", 1, INT_MAX),
    "transaction.state.log.replication.factor": ("transaction_state_log_replication_factor", 1, 32767),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", 1, INT_MAX),
    "transaction.state.log.segment.bytes": ("transaction_state_log_segment_bytes", 1, INT_MAX),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", 1, INT_MAX),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        ("transaction_abort_timed_out_transaction_cleanup_interval_ms", 1, INT_MAX),
    "transaction.remove.expired.transaction.cleanup.interval.ms":
        ("transaction_remove_expired_transaction_cleanup_interval_ms", 1, INT_MAX),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", 1, INT_MAX),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", 1000, INT_MAX),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", 1, LONG_MAX),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", 0, INT_MAX),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", 0, INT_MAX),
    "replica.fetch.min.bytes": ("replica_fetch_min_bytes", 1, INT_MAX),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", 0, INT_MAX),
    "num.replica.fetchers": ("num_replica_fetchers", 1, INT_MAX),
    "max.incremental.fetch.session.cache.slots": ("max_incremental_fetch_session_cache_slots", 0, INT_MAX),
    "replica.socket.timeout.ms": ("replica_socket_timeout_ms", 1, INT_MAX),
    "controller.socket.timeout.ms": ("controller_socket_timeout_ms", 1, INT_MAX),
    "controlled.shutdown.max.retries": ("controlled_shutdown_max_retries", 0, INT_MAX),
    "controlled.shutdown.retry.backoff.ms": ("controlled_shutdown_retry_backoff_ms", 0, LONG_MAX),
    "leader.imbalance.check.interval.seconds": ("leader_imbalance_check_interval_seconds", 1, LONG_MAX),
    "leader.imbalance.per.broker.percentage": ("leader_imbalance_per_broker_percentage", 0, 100),
    "replication.quota.window.num": ("replication_quota_window_num", 1, INT_MAX),
    "replication.quota.window.size.seconds": ("replication_quota_window_size_seconds", 1, INT_MAX),
    "quota.window.num": ("quota_window_num", 1, INT_MAX),
    "quota.window.size.seconds": ("quota_window_size_seconds", 1, INT_MAX),
    "max.connections": ("max_connections", 0, INT_MAX),
    "max.connections.per.ip": ("max_connections_per_ip", 0, INT_MAX),
    "log.cleaner.threads": ("log_cleaner_threads", 0, INT_MAX),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", 0, LONG_MAX),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", 0, LONG_MAX),
}
# key -> (field, minimum, maximum) for decimal keys of BrokerConfig
_FLOATS = {
    "log.cleaner.io.max.bytes.per.second": ("log_cleaner_io_max_bytes_per_second", 0.0, float("inf")),
    "log.cleaner.io.buffer.load.factor": ("log_cleaner_io_buffer_load_factor", 1e-9, 1.0),
}
_BOOLS = {"auto.create.topics.enable": "auto_create_topics_enable",
          "delete.topic.enable": "delete_topic_enable",
          "unclean.leader.election.enable": "unclean_leader_election_enable",
          "controlled.shutdown.enable": "controlled_shutdown_enable",
          "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
          "allow.everyone.if.no.acl.found": "allow_everyone_if_no_acl_found",
          "log.cleaner.enable": "log_cleaner_enable",
          "transaction.partition.verification.enable": "transaction_partition_verification_enable"}
# broker-level topic defaults: key -> (minimum, maximum); LogConfig field via BROKER_NAMES
_LOG_INTS = {
    "log.segment.bytes": (14, INT_MAX),
    "log.roll.ms": (1, LONG_MAX),
    "log.roll.hours": (1, INT_MAX),
    "log.retention.ms": (-LONG_MAX - 1, LONG_MAX),
    "log.retention.minutes": (-INT_MAX - 1, INT_MAX),
    "log.retention.hours": (-INT_MAX - 1, INT_MAX),
    "log.retention.bytes": (-LONG_MAX - 1, LONG_MAX),
    "log.flush.interval.messages": (1, LONG_MAX),
    "log.flush.interval.ms": (1, LONG_MAX),
    "log.index.interval.bytes": (0, INT_MAX),
    "log.index.size.max.bytes": (12, INT_MAX),  # Kafka allows 4; one time-index entry needs 12
    "message.max.bytes": (0, INT_MAX),
    "log.message.timestamp.before.max.ms": (0, LONG_MAX),
    "log.message.timestamp.after.max.ms": (0, LONG_MAX),
    "log.message.timestamp.difference.max.ms": (0, LONG_MAX),
    "log.roll.jitter.ms": (0, LONG_MAX),
    "log.roll.jitter.hours": (0, INT_MAX),
    "log.segment.delete.delay.ms": (0, LONG_MAX),
    "log.local.retention.ms": (-2, LONG_MAX),
    "log.local.retention.bytes": (-2, LONG_MAX),
    "compression.gzip.level": (-INT_MAX - 1, INT_MAX),  # LogConfig checks each codec's own range
    "compression.lz4.level": (-INT_MAX - 1, INT_MAX),
    "compression.zstd.level": (-INT_MAX - 1, INT_MAX),
    "min.insync.replicas": (1, INT_MAX),
    "log.cleaner.min.compaction.lag.ms": (0, LONG_MAX),
    "log.cleaner.max.compaction.lag.ms": (1, LONG_MAX),
    "log.cleaner.delete.retention.ms": (0, LONG_MAX),
}
_STRINGS = ("listeners", "advertised.listeners", "listener.security.protocol.map",
            "controller.listener.names", "process.roles", "controller.quorum.voters",
            "controller.quorum.bootstrap.servers", "zookeeper.connect", "log.dirs", "log.dir",
            "cluster.id", "log.level", "log.message.timestamp.type", "log.cleanup.policy", "broker.id",
            "compression.type", "log.message.format.version", "log.preallocate", "log.message.downconversion.enable",
            "inter.broker.listener.name", "security.inter.broker.protocol", "metrics.listener", "authorizer.class.name",
            "super.users",
            "group.consumer.assignors", "group.consumer.migration.policy", "group.share.assignors")
SUPPORTED = (frozenset(_INTS) | frozenset(_FLOATS) | frozenset(_BOOLS) | {"log.cleaner.min.cleanable.ratio"}
             | frozenset(_LOG_INTS) | frozenset(_STRINGS)
             | frozenset(SSL_KEYS) | {"max.connections.per.ip.overrides"})
_SECRET_KEYS = ("ssl.keystore.password", "ssl.key.password", "ssl.keystore.key")
SCHEMA_REGISTRY_PREFIX = "schema.registry."  # the registry's own keys: pybroker/registry/settings.py
ICEBERG_PREFIX = "iceberg."  # topics as Iceberg tables: pybroker/iceberg/settings.py
# keys that may also be set for one listener as listener.name.<listener, lower case>.<key>
LISTENER_KEYS = set(SSL_KEYS) | {k for k in IGNORED if k.startswith("ssl.")} | {"max.connections"}


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


DEFAULT_LISTENERS = (Listener("PLAINTEXT", DEFAULT_HOST, 9092),)


@dataclass(frozen=True)
class BrokerConfig:
    node_id: int = 0
    listeners: tuple[Listener, ...] = DEFAULT_LISTENERS
    advertised_listeners: tuple[Listener, ...] = ()     # empty: same as listeners
    log_dirs: tuple[str, ...] = ("./pybroker-data",)
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    min_insync_replicas: int = 1
    socket_request_max_bytes: int = 104857600
    connections_max_idle_ms: int = 600000
    log_retention_check_interval_ms: int = 300000
    log_writeback_bytes: int = 8 << 20  # pybroker's own: disk writes start every N new bytes of a log (0: OS decides)
    offsets_topic_num_partitions: int = 50
    offsets_retention_minutes: int = 10080
    group_initial_rebalance_delay_ms: int = 3000
    group_consumer_session_timeout_ms: int = 45000  # consumer groups (KIP-848): pybroker/coordinator/consumer_*.py
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_max_size: int = INT_MAX
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    group_consumer_migration_policy: str = "bidirectional"  # online classic <-> consumer conversion, as Kafka 4.0
    group_consumer_min_session_timeout_ms: int = 45000
    group_consumer_max_session_timeout_ms: int = 60000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    group_consumer_max_heartbeat_interval_ms: int = 15000
    group_share_session_timeout_ms: int = 45000  # share groups (KIP-932): pybroker/share
    group_share_min_session_timeout_ms: int = 45000
    group_share_max_session_timeout_ms: int = 60000
    group_share_heartbeat_interval_ms: int = 5000
    group_share_min_heartbeat_interval_ms: int = 5000
    group_share_max_heartbeat_interval_ms: int = 15000
    group_share_record_lock_duration_ms: int = 30000
    group_share_min_record_lock_duration_ms: int = 15000
    group_share_max_record_lock_duration_ms: int = 60000
    group_share_delivery_count_limit: int = 5
    group_share_max_size: int = 200
    group_share_partition_max_record_locks: int = 2000
    group_share_max_share_sessions: int = 2000
    group_share_assignors: tuple[str, ...] = ("simple",)
    group_streams_session_timeout_ms: int = 45000  # streams groups: only the group configs' defaults and bounds
    group_streams_min_session_timeout_ms: int = 45000
    group_streams_max_session_timeout_ms: int = 60000
    group_streams_heartbeat_interval_ms: int = 5000
    group_streams_min_heartbeat_interval_ms: int = 5000
    group_streams_max_heartbeat_interval_ms: int = 15000
    group_streams_num_standby_replicas: int = 0
    group_streams_max_standby_replicas: int = 2
    group_streams_initial_rebalance_delay_ms: int = 3000
    share_coordinator_state_topic_num_partitions: int = 50  # __share_group_state
    share_coordinator_state_topic_replication_factor: int = 3  # capped at the live brokers when created
    share_coordinator_state_topic_min_isr: int = 2  # capped at the topic's replication factor
    share_coordinator_state_topic_segment_bytes: int = 104857600
    share_coordinator_snapshot_update_records_per_snapshot: int = 500
    share_coordinator_write_timeout_ms: int = 5000
    share_fetch_max_fetch_records: int = INT_MAX
    offsets_topic_replication_factor: int = 3
    transaction_state_log_num_partitions: int = 50  # the transaction coordinator (pybroker/transaction)
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104857600
    transaction_max_timeout_ms: int = 900000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    transactional_id_expiration_ms: int = 604800000
    transaction_partition_verification_enable: bool = True  # KIP-890: leaders verify a transaction's first batch
    zookeeper_session_timeout_ms: int = 18000
    replica_lag_time_max_ms: int = 30000
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_backoff_ms: int = 1000
    num_replica_fetchers: int = 1
    max_incremental_fetch_session_cache_slots: int = 1000  # fetch sessions (KIP-227)
    replica_socket_timeout_ms: int = 30000
    controller_socket_timeout_ms: int = 30000
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    unclean_leader_election_enable: bool = False
    controlled_shutdown_enable: bool = True
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    quota_window_num: int = 11  # client quotas (pybroker/quota)
    quota_window_size_seconds: int = 1
    inter_broker_listener_name: str | None = None
    cluster_id: str | None = None
    log_level: str = "INFO"
    zookeeper_connect: str | None = None
    metrics_listener: tuple[str, int] | None = None  # (host, port) of /metrics and /health; None: off
    listener_protocols: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({"PLAINTEXT": "PLAINTEXT"}))
    max_connections: int = INT_MAX  # broker-wide (the inter-broker listener is exempt, as in Kafka)
    max_connections_per_ip: int = INT_MAX
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    listener_max_connections: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # by name
    authorizer_class_name: str = ""  # ACL authorization (pybroker/security/authorizer.py); empty: off
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    log_cleaner_enable: bool = True  # the log cleaner (pybroker/log/cleaner.py) compacts cleanup.policy=compact logs
    log_cleaner_threads: int = 1
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024  # shared by the cleaner threads
    log_cleaner_io_max_bytes_per_second: float = float("inf")
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_backoff_ms: int = 15000
    sasl: "sasl_settings.SaslSettings" = field(default_factory=sasl_settings.SaslSettings)  # SASL listeners, JAAS
    log: LogConfig = field(default_factory=LogConfig)
    raw: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    ignored: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.advertised_listeners:
            object.__setattr__(self, "advertised_listeners", self.listeners)

    def security_protocol(self, listener: str) -> str:
        """The security protocol of a listener name (listener.security.protocol.map)."""
        return self.listener_protocols.get(listener, "PLAINTEXT")

    @property
    def inter_broker_listener(self) -> Listener:
        """The advertised listener other brokers use (inter.broker.listener.name, else the first)."""
        for lst in self.advertised_listeners:
            if lst.name == self.inter_broker_listener_name:
                return lst
        return self.advertised_listeners[0]

    @classmethod
    def load(cls, path: str | None = None, overrides: Sequence[str] = (),
             env: Mapping[str, str] | None = None) -> "BrokerConfig":
        """Read ``path`` (optional), ``PYBROKER_CFG_*`` from ``env`` (default os.environ), then overrides."""
        raw: dict[str, str] = {}
        where: dict[str, str] = {}
        if path is not None:
            for key, value, line in read_properties_file(path):
                raw[key], where[key] = value, f"{path}:{line}"
        env = os.environ if env is None else env
        for name, value in env.items():
            if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
                key = name[len(ENV_PREFIX):].lower().replace("_", ".")
                raw[key], where[key] = value.strip(), f"environment {name}"
        for item in overrides:
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(f"--override {item!r}: expected KEY=VALUE")
            raw[key], where[key] = value.strip(), "--override"
        return cls.from_properties(raw, where)

    @classmethod
    def from_properties(cls, raw: Mapping[str, str], where: Mapping[str, str] | None = None) -> "BrokerConfig":
        """Validate Kafka broker properties into a config; ``where`` names each key's source for errors."""
        where = where or {}
        ignored = []
        for key in raw:
            suffix = _listener_key_suffix(key)
            if key in SUPPORTED or suffix in LISTENER_KEYS and suffix not in IGNORED or sasl_settings.is_sasl_key(key) \
                    or key.startswith(SCHEMA_REGISTRY_PREFIX) or key.startswith(ICEBERG_PREFIX):
                continue
            kafka_key = KAFKA_BROKER_KEYS.get(key) or KAFKA_BROKER_KEYS.get(suffix or "")
            if kafka_key is None and key not in IGNORED and suffix not in IGNORED:
                known = sorted(SUPPORTED | KAFKA_BROKER_KEYS.keys())
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                src = f"{where[key]}: " if key in where else ""
                raise ConfigError(f"{src}unknown config key {key!r}{hint}", key)
            if kafka_key is not None:
                try:
                    check_value(key, kafka_key.type, raw[key])
                except ValueError as exc:
                    raise ConfigError(f"{where[key] + ': ' if key in where else ''}{exc}", key) from None
            ignored.append(key)
            log.info("ignoring config %s=%s: %s", key, raw[key], ignored_reason(suffix if suffix in IGNORED else key))
        values = {}
        for key, (name, lo, hi) in _INTS.items():
            if key in raw:
                values[name] = parse_int(key, raw[key], lo, hi)
        for key, (name, lo, hi) in _FLOATS.items():
            if key in raw:
                values[name] = parse_float(key, raw[key], lo, hi)
        for key, name in _BOOLS.items():
            if key in raw:
                values[name] = parse_bool(key, raw[key])
        if "broker.id" in raw:
            broker_id = parse_int("broker.id", raw["broker.id"], 0, INT_MAX)
            if values.setdefault("node_id", broker_id) != broker_id:
                raise ConfigError(f"broker.id={broker_id} and node.id={values['node_id']} differ; "
                                  "set one of them (they are aliases)", "broker.id")
        node_id = values.get("node_id", 0)
        dirs = raw.get("log.dirs", raw.get("log.dir"))
        if dirs is not None:
            values["log_dirs"] = tuple(d.strip() for d in dirs.split(",") if d.strip())
            if not values["log_dirs"]:
                key = "log.dirs" if "log.dirs" in raw else "log.dir"
                raise ConfigError(f"{key}={dirs!r}: give at least one log directory", key)
        if raw.get("cluster.id"):
            values["cluster_id"] = check_cluster_id(raw["cluster.id"])
        if "log.level" in raw:
            level = LOG_LEVELS.get(raw["log.level"].upper())
            if level is None:
                raise ConfigError(f"log.level={raw['log.level']!r}: expected one of DEBUG, INFO, "
                                  "WARNING, ERROR", "log.level")
            values["log_level"] = level
        if raw.get("zookeeper.connect"):
            values["zookeeper_connect"] = raw["zookeeper.connect"]
        if raw.get("metrics.listener"):
            values["metrics_listener"] = parse_metrics_listener(raw["metrics.listener"])
        _check_kraft(raw, node_id)
        listeners, advertised, protocols = _listeners(raw)
        values.update(listeners=listeners, advertised_listeners=advertised, listener_protocols=protocols)
        values["max_connections_per_ip_overrides"] = _per_ip_overrides(raw, values)
        values["listener_max_connections"] = _listener_max_connections(raw, listeners)
        _check_tls(raw, listeners, protocols)
        if raw.get("inter.broker.listener.name") and raw.get("security.inter.broker.protocol"):
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol "
                              "should be set.", "security.inter.broker.protocol")
        # as Kafka: security.inter.broker.protocol names the listener called like the protocol
        key = ("inter.broker.listener.name" if raw.get("inter.broker.listener.name")
               else "security.inter.broker.protocol")
        if raw.get(key):
            name = raw[key].strip().upper()
            if name not in {a.name for a in advertised}:
                raise ConfigError(f"{key}={name}: no such advertised listener "
                                  f"({', '.join(a.name for a in advertised)})", key)
            values["inter_broker_listener_name"] = name
        values["log"] = _log_config(raw)
        _authorizer(raw, values)
        _consumer_groups(raw, values)
        _share_and_streams_groups(raw, values)
        values["sasl"] = _sasl(raw, listeners, values)
        _schema_registry(raw)
        _iceberg(raw)
        return cls(raw=MappingProxyType(dict(raw)), ignored=tuple(ignored), **values)

    def describe(self) -> dict[str, tuple[str | None, bool]]:
        """Kafka key -> (value as a string, or None when unset; is_default) for DescribeConfigs."""
        raw = self.raw
        out: dict[str, tuple[str | None, bool]] = {}

        def put(key, value, *keys):
            out[key] = (value, not any(k in raw for k in (keys or (key,))))

        for key, (name, _, _) in _INTS.items():
            put(key, str(getattr(self, name)), *(("node.id", "broker.id") if key == "node.id" else ()))
        for key, (name, _, _) in _FLOATS.items():
            put(key, repr(getattr(self, name)))
        for key, name in _BOOLS.items():
            put(key, "true" if getattr(self, name) else "false")
        put("broker.id", str(self.node_id), "node.id", "broker.id")
        put("listeners", ",".join(map(str, self.listeners)))
        put("advertised.listeners", ",".join(map(str, self.advertised_listeners)), "advertised.listeners",
            "listeners")
        put("listener.security.protocol.map", raw.get("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP))
        for key in ("controller.listener.names", "process.roles", "controller.quorum.voters",
                    "controller.quorum.bootstrap.servers"):
            put(key, raw.get(key, ""))
        put("zookeeper.connect", self.zookeeper_connect)
        put("metrics.listener", raw.get("metrics.listener") or None)
        put("inter.broker.listener.name", self.inter_broker_listener.name)
        put("security.inter.broker.protocol", self.security_protocol(self.inter_broker_listener.name))
        put("log.dirs", ",".join(self.log_dirs), "log.dirs", "log.dir")
        put("log.dir", raw.get("log.dir", self.log_dirs[0]), "log.dir", "log.dirs")
        put("cluster.id", self.cluster_id)
        put("log.level", self.log_level)
        for key in SSL_KEYS:  # secrets are never shown, as Kafka marks them sensitive
            put(key, None if key in _SECRET_KEYS else raw.get(key) or None)
        put("max.connections.per.ip.overrides", raw.get("max.connections.per.ip.overrides", ""))
        put("authorizer.class.name", self.authorizer_class_name)
        put("super.users", raw.get("super.users") or None)
        put("group.consumer.assignors", ",".join(self.group_consumer_assignors))
        put("group.consumer.migration.policy", self.group_consumer_migration_policy)
        put("group.share.assignors", ",".join(self.group_share_assignors))
        lc = self.log
        for name, key in _BROKER_LOG_NAMES.items():
            value = getattr(lc, name)
            group = {"log.roll.ms": ("log.roll.ms", "log.roll.hours"),
                     "log.roll.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                     "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours")}
            unset = key not in raw and key in KAFKA_BROKER_KEYS and KAFKA_BROKER_KEYS[key].default is None
            put(key, None if unset else str(value), *group.get(key, (key,)))  # as Kafka: no value until set
        put("log.roll.hours", raw.get("log.roll.hours", "168"))
        put("log.retention.minutes", raw.get("log.retention.minutes"))
        put("log.retention.hours", raw.get("log.retention.hours", "168"))
        put("log.roll.jitter.hours", raw.get("log.roll.jitter.hours", "0"))
        return out

    def describe_all(self) -> dict[str, tuple[str | None, bool]]:
        """``describe()`` and every other key a Kafka 3.8 broker describes: as set, else Kafka's default."""
        out = self.describe()
        for key, kafka in KAFKA_BROKER_KEYS.items():
            if key not in out and not kafka.internal:
                out[key] = (self.raw.get(key, kafka.default), key not in self.raw)
        return out


_BROKER_LOG_NAMES = {f.name: BROKER_NAMES[f.name] for f in fields(LogConfig) if f.name in BROKER_NAMES}  # field -> key


def check_cluster_id(value: str, key: str = "cluster.id") -> str:
    """Kafka cluster ids are a UUID in unpadded base64url: 22 characters."""
    ok = re.fullmatch(r"[A-Za-z0-9_-]{22}", value) is not None
    if ok:
        try:
            ok = len(base64.urlsafe_b64decode(value + "==")) == 16
        except (binascii.Error, ValueError):
            ok = False
    if not ok:
        raise ConfigError(f"{key}={value!r}: expected a Kafka cluster id, 16 bytes in unpadded base64url "
                          "(22 characters, e.g. from `kafka-storage random-uuid`)", key)
    return value


def parse_listener(key: str, text: str) -> Listener:
    m = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]\s]*\]|[^:/\[\]\s]*):([0-9]+)", text.strip())
    if m is None:
        raise ConfigError(f"{key}: bad listener {text!r}: expected NAME://host:port, e.g. "
                          "PLAINTEXT://127.0.0.1:9092", key)
    name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
    if port > 65535:
        raise ConfigError(f"{key}: bad listener {text!r}: port must be between 0 and 65535", key)
    return Listener(name, host or DEFAULT_HOST, port)


def parse_metrics_listener(text: str, key: str = "metrics.listener") -> tuple[str, int]:
    """``http://host:port`` (an empty host is 127.0.0.1; port 0 picks a free one) -> (host, port)."""
    m = re.fullmatch(r"http://(\[[^\]\s/]*\]|[^:/\[\]\s]*):([0-9]{1,5})/?", text.strip(), re.IGNORECASE)
    if m is None or int(m.group(2)) > 65535:
        raise ConfigError(f"{key}={text!r}: expected http://host:port with a port of 0-65535, e.g. "
                          "http://127.0.0.1:9644", key)
    return m.group(1).strip("[]") or DEFAULT_HOST, int(m.group(2))


def parse_listeners(key: str, text: str) -> tuple[Listener, ...]:
    result = tuple(parse_listener(key, item) for item in text.split(",") if item.strip())
    names = [lst.name for lst in result]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{key}={text!r}: listener name {name} is used more than once; "
                              "each listener needs its own name", key)
    bound = [(lst.host, lst.port) for lst in result if lst.port]
    for addr in bound:
        if bound.count(addr) > 1:
            raise ConfigError(f"{key}={text!r}: two listeners on {addr[0]}:{addr[1]}", key)
    return result


def _protocol_map(raw: Mapping[str, str]) -> dict[str, str] | None:
    text = raw.get("listener.security.protocol.map")
    if text is None:
        return None
    result = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or not name.strip() or proto not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: bad entry {item.strip()!r}: expected "
                              f"NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}",
                              "listener.security.protocol.map")
        result[name.strip().upper()] = proto
    return result


def _listener_key_suffix(key: str) -> str | None:
    """``listener.name.internal.ssl.keystore.location`` -> ``ssl.keystore.location``; else None."""
    if not key.startswith("listener.name."):
        return None
    parts = key.split(".", 3)
    return parts[3] if len(parts) == 4 and parts[2] else None


def _per_ip_overrides(raw: Mapping[str, str], values: dict) -> Mapping[str, int]:
    """max.connections.per.ip.overrides: ``host:count,host:count`` (host names or addresses)."""
    key = "max.connections.per.ip.overrides"
    out = {}
    for item in raw.get(key, "").split(","):
        if not item.strip():
            continue
        host, sep, count = item.strip().rpartition(":")
        if not sep or not host:
            raise ConfigError(f"{key}: bad entry {item.strip()!r}: expected host:count", key)
        out[host.strip("[]")] = parse_int(key, count, 0, INT_MAX)
    if values.get("max_connections_per_ip") == 0 and not out:
        raise ConfigError("max.connections.per.ip=0 needs max.connections.per.ip.overrides (the hosts that may "
                          "connect)", "max.connections.per.ip")
    return MappingProxyType(out)


def _listener_max_connections(raw: Mapping[str, str], listeners) -> Mapping[str, int]:
    """listener.name.<listener>.max.connections: a limit for one listener (upper-case name -> count)."""
    names = {lst.name for lst in listeners}
    out = {}
    for key, value in raw.items():
        if _listener_key_suffix(key) != "max.connections":
            continue
        name = key.split(".", 3)[2].upper()
        if name not in names:
            raise ConfigError(f"{key}: no listener named {name} ({', '.join(sorted(names))})", key)
        out[name] = parse_int(key, value, 0, INT_MAX)
    return MappingProxyType(out)


def _check_tls(raw: Mapping[str, str], listeners, protocols: Mapping[str, str]) -> None:
    """Build each TLS listener's context once now: bad files or passwords fail the start, naming the key."""
    for lst in listeners:
        listener_tls(raw, lst.name, protocols[lst.name])


def _listeners(raw: Mapping[str, str]) -> tuple[tuple[Listener, ...], tuple[Listener, ...], Mapping[str, str]]:
    """Served and advertised listeners (controller listeners dropped) and each one's security protocol."""
    protocols = _protocol_map(raw)
    controller = {n.strip().upper() for n in raw.get("controller.listener.names", "").split(",") if n.strip()}
    listeners = parse_listeners("listeners", raw["listeners"]) if "listeners" in raw else DEFAULT_LISTENERS
    listeners = tuple(lst for lst in listeners if lst.name not in controller)
    if not listeners:
        raise ConfigError(f"listeners={raw.get('listeners', '')!r}: no broker listener (controller listeners "
                          f"{', '.join(sorted(controller)) or 'none'} are not served)", "listeners")
    protocols = protocols or {p: p for p in SECURITY_PROTOCOLS}
    for lst in listeners:
        proto = protocols.get(lst.name)
        if proto is None:
            raise ConfigError(f"listeners: listener {lst} has no security protocol: name it PLAINTEXT or map "
                              f"it in listener.security.protocol.map (e.g. {lst.name}:PLAINTEXT)", "listeners")
    names = {lst.name for lst in listeners}
    if "advertised.listeners" in raw:
        advertised = tuple(a for a in parse_listeners("advertised.listeners", raw["advertised.listeners"])
                           if a.name not in controller)
        for a in advertised:
            if a.name not in names:
                raise ConfigError(f"advertised.listeners: {a} names no listener in listeners "
                                  f"({', '.join(sorted(names))})", "advertised.listeners")
        key = "advertised.listeners"
    else:
        advertised, key = listeners, "listeners"
    for a in advertised:
        if a.host in ("0.0.0.0", "::"):
            raise ConfigError(f"{key}: {a} cannot be advertised: clients cannot connect to {a.host}; set "
                              "advertised.listeners to a routable address", "advertised.listeners")
    return listeners, advertised, MappingProxyType({lst.name: protocols[lst.name] for lst in listeners})


def _check_kraft(raw: Mapping[str, str], node_id: int) -> None:
    """Accept the KRaft keys of a single combined node; anything more needs a quorum we do not run."""
    roles = raw.get("process.roles")
    if roles is not None:
        got = {r.strip() for r in roles.split(",") if r.strip()}
        if got != {"broker", "controller"}:
            raise ConfigError(f"process.roles={roles!r}: only broker,controller (a combined node) is supported; "
                              "a separate controller quorum is not", "process.roles")
        if raw.get("zookeeper.connect"):
            raise ConfigError("process.roles (KRaft) and zookeeper.connect exclude each other; set one",
                              "zookeeper.connect")
    voters = raw.get("controller.quorum.voters")
    if voters:
        items = [v.strip() for v in voters.split(",") if v.strip()]
        m = re.fullmatch(r"([0-9]+)@(\[[^\]]*\]|[^:]+):([0-9]+)", items[0]) if items else None
        if m is None or len(items) != 1 or int(m.group(1)) != node_id:
            raise ConfigError(f"controller.quorum.voters={voters!r}: only a single voter that is this node "
                              f"({node_id}@host:port) is supported", "controller.quorum.voters")
    servers = raw.get("controller.quorum.bootstrap.servers")
    if servers and len([s for s in servers.split(",") if s.strip()]) != 1:
        raise ConfigError(f"controller.quorum.bootstrap.servers={servers!r}: only one server (this node) "
                          "is supported", "controller.quorum.bootstrap.servers")


def _sasl(raw: Mapping[str, str], listeners, values: dict):
    """SASL keys (pybroker/security/sasl/settings.py); a cluster's SASL inter-broker listener needs credentials."""
    protocols = {lst.name: values["listener_protocols"].get(lst.name, "PLAINTEXT") for lst in listeners}
    try:
        settings = sasl_settings.parse(raw, protocols)
        if values.get("zookeeper_connect"):
            name = values.get("inter_broker_listener_name") or listeners[0].name
            sasl_settings.check_inter_broker(settings, name, protocols.get(name, "PLAINTEXT"))
    except sasl_settings.SaslConfigError as exc:
        raise ConfigError(str(exc), exc.key) from None
    return settings


def _schema_registry(raw: Mapping[str, str]) -> None:
    """schema.registry.* keys: checked by the registry's settings, so a bad one stops the broker at start."""
    if not any(key.startswith(SCHEMA_REGISTRY_PREFIX) for key in raw):
        return
    from pybroker.registry.settings import RegistrySettings
    RegistrySettings.from_raw(raw)  # raises ConfigError naming the key


def _iceberg(raw: Mapping[str, str]) -> None:
    """iceberg.* keys: checked by the Iceberg settings, so a bad one stops the broker at start."""
    if not any(key.startswith(ICEBERG_PREFIX) for key in raw):
        return
    from pybroker.iceberg.settings import check_broker_keys
    try:
        check_broker_keys(raw)
    except ValueError as e:
        raise ConfigError(str(e), getattr(e, "key", None)) from None


def _authorizer(raw: Mapping[str, str], values: dict) -> None:
    """authorizer.class.name: Kafka's built-in authorizers select ours; super.users: Type:name;Type:name."""
    from pybroker.security.authorizer import AUTHORIZER_CLASSES
    name = raw.get("authorizer.class.name", "").strip()
    if name and name not in AUTHORIZER_CLASSES:
        raise ConfigError(f"authorizer.class.name={name!r}: expected empty (no authorization) or one of "
                          f"{', '.join(AUTHORIZER_CLASSES)}", "authorizer.class.name")
    values["authorizer_class_name"] = name
    users = tuple(u.strip() for u in raw.get("super.users", "").split(";") if u.strip())
    for user in users:
        kind, sep, rest = user.partition(":")
        if not sep or not kind or not rest:
            raise ConfigError(f"super.users: bad principal {user!r}: expected Type:name, e.g. User:admin",
                              "super.users")
    values["super_users"] = users


def _consumer_groups(raw: Mapping[str, str], values: dict) -> None:
    """group.consumer.assignors (names or Kafka's class names), group.consumer.migration.policy and the
    heartbeat < session timeout rule."""
    from pybroker.coordinator.assignors_server import assignor_name
    if "group.consumer.assignors" in raw:
        names = [n for n in raw["group.consumer.assignors"].split(",") if n.strip()]
        found = [assignor_name(n) for n in names]
        if not names or None in found:
            raise ConfigError(f"group.consumer.assignors={raw['group.consumer.assignors']!r}: expected a list of "
                              "uniform, range", "group.consumer.assignors")
        values["group_consumer_assignors"] = tuple(dict.fromkeys(found))
    if "group.consumer.migration.policy" in raw:
        from pybroker.coordinator.group_migration import POLICIES
        policy = raw["group.consumer.migration.policy"].strip().lower()
        if policy not in POLICIES:
            raise ConfigError(f"group.consumer.migration.policy={raw['group.consumer.migration.policy']!r}: "
                              f"expected one of {', '.join(POLICIES)}", "group.consumer.migration.policy")
        values["group_consumer_migration_policy"] = policy
    heartbeat = values.get("group_consumer_heartbeat_interval_ms", 5000)
    session = values.get("group_consumer_session_timeout_ms", 45000)
    if heartbeat >= session:
        raise ConfigError(f"group.consumer.heartbeat.interval.ms ({heartbeat}) must be less than "
                          f"group.consumer.session.timeout.ms ({session})", "group.consumer.heartbeat.interval.ms")


SHARE_ASSIGNORS = ("simple", "org.apache.kafka.coordinator.group.assignor.SimpleAssignor")


def _share_and_streams_groups(raw: Mapping[str, str], values: dict) -> None:
    """group.share.assignors (one entry) and Kafka 4.2's start-up rules for the share and streams group keys:
    each default within its min/max, heartbeat below session timeout, the record lock within its bounds."""
    if "group.share.assignors" in raw:
        names = [n.strip() for n in raw["group.share.assignors"].split(",") if n.strip()]
        if len(names) != 1 or names[0] not in SHARE_ASSIGNORS:
            raise ConfigError(f"group.share.assignors={raw['group.share.assignors']!r}: expected exactly one "
                              "assignor, simple", "group.share.assignors")
        values["group_share_assignors"] = ("simple",)
    defaults = {f.name: f.default for f in fields(BrokerConfig)}

    def get(key: str) -> int:
        name = _INTS[key][0]
        return values.get(name, defaults[name])

    def at_least(key: str, bound: str) -> None:
        if get(key) < get(bound):
            raise ConfigError(f"{key} ({get(key)}) must be greater than or equal to {bound} ({get(bound)})", key)

    for kind in ("share", "streams"):
        p = f"group.{kind}."
        for what in ("session.timeout.ms", "heartbeat.interval.ms"):
            at_least(p + "max." + what, p + "min." + what)
            at_least(p + what, p + "min." + what)
            at_least(p + "max." + what, p + what)
        if get(p + "heartbeat.interval.ms") >= get(p + "session.timeout.ms"):
            raise ConfigError(f"{p}heartbeat.interval.ms ({get(p + 'heartbeat.interval.ms')}) must be less than "
                              f"{p}session.timeout.ms ({get(p + 'session.timeout.ms')})", p + "heartbeat.interval.ms")
    at_least("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms")
    at_least("group.share.max.record.lock.duration.ms", "group.share.record.lock.duration.ms")
    at_least("group.streams.max.standby.replicas", "group.streams.num.standby.replicas")


def _log_config(raw: Mapping[str, str]) -> LogConfig:
    """Broker-level topic defaults; log.roll.ms beats .hours; log.retention.ms beats .minutes beats .hours."""
    n = {key: parse_int(key, raw[key], lo, hi) for key, (lo, hi) in _LOG_INTS.items() if key in raw}
    values = {}
    for name, key in _BROKER_LOG_NAMES.items():
        if key in n:
            values[name] = n[key]
    if "log.roll.jitter.ms" not in n and "log.roll.jitter.hours" in n:
        values["segment_jitter_ms"] = n["log.roll.jitter.hours"] * 3_600_000
    if "log.roll.ms" not in n and "log.roll.hours" in n:
        values["segment_ms"] = n["log.roll.hours"] * 3_600_000
    if "log.retention.ms" in n:
        retention = n["log.retention.ms"]
    elif "log.retention.minutes" in n:
        retention = n["log.retention.minutes"] * 60_000
    elif "log.retention.hours" in n:
        retention = n["log.retention.hours"] * 3_600_000
    else:
        retention = None
    if retention is not None:
        values["retention_ms"] = -1 if retention < 0 else retention
    if "log.message.timestamp.type" in raw:
        ts = raw["log.message.timestamp.type"].strip()
        if ts not in ("CreateTime", "LogAppendTime"):
            raise ConfigError(f"log.message.timestamp.type={ts!r}: expected CreateTime or LogAppendTime",
                              "log.message.timestamp.type")
        values["message_timestamp_type"] = ts
    if "log.cleanup.policy" in raw:
        values["cleanup_policy"] = raw["log.cleanup.policy"].strip()
    for key, name in (("compression.type", "compression_type"),
                      ("log.message.format.version", "message_format_version")):
        if key in raw:
            values[name] = raw[key].strip()
    for key, name in (("log.preallocate", "preallocate"), ("log.message.downconversion.enable",
                                                          "message_downconversion_enable")):
        if key in raw:
            values[name] = parse_bool(key, raw[key])
    if "log.cleaner.min.cleanable.ratio" in raw:
        values["min_cleanable_dirty_ratio"] = parse_float("log.cleaner.min.cleanable.ratio",
                                                          raw["log.cleaner.min.cleanable.ratio"], 0.0, 1.0)
    try:
        return LogConfig(**values)
    except ValueError as exc:
        raise ConfigError(f"invalid log settings: {exc}") from None


