"""Kafka 3.8's topic and broker configs, and Kafka 4.2's share-group, streams-group and share-coordinator
broker configs: names, types, defaults, how each may change, and what each does here (the
documentation DescribeConfigs v3+ returns).

One table per resource type: ``TOPIC`` (the topic-level keys: Kafka's, ``KAFKA_TOPIC``, and
pybroker's own extension keys, ``PYBROKER_TOPIC``; their values, checks and broker-level synonyms live
in pybroker/log/config.py) and ``BROKER`` (every key a Kafka 3.8 broker takes, plus the ``group.share.*``,
``group.streams.*``, ``share.coordinator.*`` and ``share.fetch.*`` keys of Kafka 4.2, with Kafka's update
mode: read-only, per-broker or cluster-wide). A key pybroker does not act on is still accepted, as Kafka
accepts it, and its documentation says why it has no effect here. The GROUP resource's keys (KIP-848,
KIP-932) are in pybroker/coordinator/group_configs.py.
"""
from types import MappingProxyType
from typing import NamedTuple

# DescribeConfigs config_type ids
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8,
                "PASSWORD": 9}
READ_ONLY, PER_BROKER, CLUSTER_WIDE = "read-only", "per-broker", "cluster-wide"
_MODES = {"R": READ_ONLY, "B": PER_BROKER, "C": CLUSTER_WIDE}
_INT_RANGES = {"INT": (-2**31, 2**31 - 1), "SHORT": (-2**15, 2**15 - 1), "LONG": (-2**63, 2**63 - 1)}

# Kafka 3.8's topic keys -> (Kafka type, what it does here)
KAFKA_TOPIC = MappingProxyType({
    "cleanup.policy": ("LIST", "delete: drop old segments by retention; compact: keep the latest record of each "
                               "key (the log cleaner); both may be given."),
    "compression.gzip.level": ("INT", "Level of gzip used when compression.type=gzip recompresses batches "
                                      "(-1: the codec's default)."),
    "compression.lz4.level": ("INT", "Level of lz4 used when compression.type=lz4 recompresses batches."),
    "compression.type": ("STRING", "Codec the topic stores batches in; 'producer' keeps each batch as sent, "
                                   "any other value recompresses produced batches into that codec."),
    "compression.zstd.level": ("INT", "Level of zstd used when compression.type=zstd recompresses batches."),
    "delete.retention.ms": ("LONG", "How long a compacted topic keeps delete markers (tombstones) and "
                                    "transaction markers after cleaning."),
    "file.delete.delay.ms": ("LONG", "Accepted and kept; it has no effect here."),
    "flush.messages": ("LONG", "Force an fsync of the log every this many records."),
    "flush.ms": ("LONG", "Force an fsync of the log when its oldest unflushed record is this old."),
    "follower.replication.throttled.replicas": ("LIST", "Replicas (partition:broker, or *) whose follower fetches "
                                                        "count against follower.replication.throttled.rate."),
    "index.interval.bytes": ("INT", "Bytes of records between two offset index entries."),
    "leader.replication.throttled.replicas": ("LIST", "Replicas (partition:broker, or *) whose reads by followers "
                                                      "count against leader.replication.throttled.rate."),
    "local.retention.bytes": ("LONG", "Accepted and kept; there is no tiered storage here, so all data is local "
                                      "and retention.bytes decides."),
    "local.retention.ms": ("LONG", "Accepted and kept; there is no tiered storage here, so all data is local and "
                                   "retention.ms decides."),
    "max.compaction.lag.ms": ("LONG", "Longest a record may stay uncompacted on a compacted topic."),
    "max.message.bytes": ("INT", "Largest record batch the topic takes from a producer."),
    "message.downconversion.enable": ("BOOLEAN", "Accepted and kept; it has no effect here."),
    "message.format.version": ("STRING", "Deprecated; accepted and ignored as Kafka 3.x ignores it: batches "
                                         "are always stored in message format v2."),
    "message.timestamp.after.max.ms": ("LONG", "How far after the broker's clock a CreateTime record timestamp "
                                               "may be; later records are refused."),
    "message.timestamp.before.max.ms": ("LONG", "How far before the broker's clock a CreateTime record timestamp "
                                                "may be; older records are refused."),
    "message.timestamp.difference.max.ms": ("LONG", "Deprecated; stands for message.timestamp.before.max.ms and "
                                                    "message.timestamp.after.max.ms where those are left at their "
                                                    "default."),
    "message.timestamp.type": ("STRING", "CreateTime keeps the producer's timestamps; LogAppendTime stamps "
                                         "batches with the broker's clock."),
    "min.cleanable.dirty.ratio": ("DOUBLE", "Share of a compacted log not yet cleaned above which the cleaner "
                                            "picks it."),
    "min.compaction.lag.ms": ("LONG", "Shortest time a record stays uncompacted."),
    "min.insync.replicas": ("INT", "In-sync replicas an acks=all produce needs."),
    "preallocate": ("BOOLEAN", "Accepted and kept; it has no effect here."),
    "remote.storage.enable": ("BOOLEAN", "Tiered storage; only false is taken, as by a Kafka broker without a "
                                         "remote log system."),
    "retention.bytes": ("LONG", "Largest size of a partition's log before old segments are deleted (-1: none)."),
    "retention.ms": ("LONG", "Age after which old segments are deleted (-1: keep forever)."),
    "segment.bytes": ("INT", "Size at which a log rolls to a new segment."),
    "segment.index.bytes": ("INT", "Size of each segment's offset and time indexes."),
    "segment.jitter.ms": ("LONG", "Random jitter taken off segment.ms, so segments of many partitions do not "
                                  "roll together."),
    "segment.ms": ("LONG", "Age at which a log rolls to a new segment even when it is not full."),
    "unclean.leader.election.enable": ("BOOLEAN", "Whether an out-of-sync replica may become leader when no "
                                                  "in-sync replica is alive (with possible data loss)."),
})
# pybroker's own topic keys (no Kafka broker takes them; topic level only, no broker default): the topic
# as an Apache Iceberg table <iceberg.namespace>.<topic>, written by the broker leading each partition
PYBROKER_TOPIC = MappingProxyType({
    "iceberg.mode": ("STRING", "pybroker's own: whether and how the broker leading each partition writes the topic's "
                               "committed records into the Iceberg table <iceberg.namespace>.<topic>. disabled: no "
                               "table; key_value: key and value as binary columns; value_schema_id_prefix: values "
                               "framed with their schema registry id, decoded into columns of that schema; "
                               "value_schema_latest: bare values decoded with the latest schema of subject "
                               "<topic>-value. Every row also has the kafka column (partition, offset, timestamp, "
                               "headers, key)."),
    "iceberg.partition.spec": ("STRING", "pybroker's own: the partition fields the topic's Iceberg table is "
                                         "created with, comma-separated: transform(column) with identity, year, "
                                         "month, day, hour or void, bucket(N, column), truncate(W, column), or a "
                                         "bare column (identity); columns are dotted names such as "
                                         "kafka.timestamp; empty or () is unpartitioned."),
    "iceberg.target.lag.ms": ("LONG", "pybroker's own: how long a record committed to the topic may wait before "
                                      "an Iceberg commit puts it in the topic's table; smaller values make more, "
                                      "smaller data files and snapshots."),
    "iceberg.invalid.record.action": ("STRING", "pybroker's own: what becomes of a record the value_schema_* modes "
                                                "cannot decode or write: dlq_table puts its raw value and the "
                                                "reason in the table <topic>~dlq; drop skips it (counted in the "
                                                "broker's metrics)."),
})
TOPIC = MappingProxyType({**KAFKA_TOPIC, **PYBROKER_TOPIC})  # every topic key this broker takes

# broker keys pybroker takes and does not act on -> why (keys by name, then by prefix)
IGNORED_REASONS = MappingProxyType({
    "num.network.threads": "one asyncio event loop serves all connections",
    "num.io.threads": "requests are handled on the event loop, not a thread pool",
    "background.threads": "background tasks run on the event loop",
    "socket.send.buffer.bytes": "the OS socket buffer sizes are used",
    "socket.receive.buffer.bytes": "the OS socket buffer sizes are used",
    "replica.socket.receive.buffer.bytes": "the OS socket buffer sizes are used",
    "num.recovery.threads.per.data.dir": "log recovery is sequential",
    "zookeeper.connection.timeout.ms": "the ZooKeeper client connects within the session timeout",
    "ssl.keymanager.algorithm": "Java's TLS stack only",
    "ssl.trustmanager.algorithm": "Java's TLS stack only",
    "ssl.secure.random.implementation": "Java's TLS stack only",
    "ssl.provider": "Java's TLS stack only",
    "ssl.engine.factory.class": "Java's TLS stack only",
    "ssl.endpoint.identification.algorithm": "brokers do not check client host names",
    "ssl.truststore.password": "PEM truststores have no password",
    "ssl.allow.dn.changes": "certificates are not reloaded while running",
    "ssl.allow.san.changes": "certificates are not reloaded while running",
    "log.cleaner.io.buffer.size": "the log cleaner maps segments instead of reading them through a buffer",
    "inter.broker.protocol.version": "the broker speaks every protocol version it serves",
    "security.providers": "Java's security providers only",
    "principal.builder.class": "principals are built by the broker's own SASL and TLS code",
    "metric.reporters": "metrics are served on metrics.listener",
    "kafka.metrics.reporters": "metrics are served on metrics.listener",
    "auto.include.jmx.reporter": "there is no JMX",
    "queued.max.requests": "each connection is read one request at a time",
    "queued.max.request.bytes": "each connection is read one request at a time",
    "group.share.enable": "share groups are always served here (Kafka 4.2 turns them on with the share.version "
                          "feature)",
    "group.share.persister.class.name": "share-partition state is always kept in the __share_group_state topic",
    "share.coordinator.load.buffer.size": "the share-group state topic is replayed a batch at a time",
    "share.coordinator.state.topic.compression.codec": "the share-group state topic is written uncompressed",
    "share.coordinator.append.linger.ms": "each share-state write is appended as it comes",
    "share.coordinator.threads": "the share coordinator runs on the event loop",
    "share.fetch.purgatory.purge.interval.requests": "waiting share fetches leave their purgatory when they complete",
    "group.streams.max.size": "streams groups are not served here",
})
PREFIX_REASONS = (
    ("remote.log.", "there is no tiered storage here"),
    ("remote.fetch.", "there is no tiered storage here"),
    ("zookeeper.ssl.", "the ZooKeeper client connects without TLS"),
    ("zookeeper.metadata.migration.", "there is no KRaft migration here"),
    ("metadata.", "there is no KRaft metadata log here (the controller is in-process or in ZooKeeper)"),
    ("controller.quorum.", "there is no KRaft quorum here"),
    ("broker.heartbeat.", "there is no KRaft quorum here"),
    ("broker.session.", "there is no KRaft quorum here"),
    ("initial.broker.registration.", "there is no KRaft quorum here"),
    ("password.encoder.", "dynamic configs are stored as given"),
    ("delegation.token.", "delegation tokens are not supported"),
    ("sasl.kerberos.", "GSSAPI (Kerberos) is not supported"),
    ("sasl.oauthbearer.", "OAUTHBEARER tokens are checked by the broker's own rules"),
    ("sasl.login.", "the broker logs in to no SASL server"),
    ("metrics.", "metrics are served on metrics.listener"),
    ("kafka.metrics.", "metrics are served on metrics.listener"),
    ("", "Kafka's broker setting, kept for compatibility; it has no effect here"),
)


class BrokerKey(NamedTuple):
    type: str            # Kafka's ConfigDef type
    mode: str            # READ_ONLY, PER_BROKER or CLUSTER_WIDE (Kafka's dynamic update mode)
    default: str | None  # Kafka's default as DescribeConfigs spells it (None: no value)
    internal: bool       # Kafka's internal keys: accepted, never described


def broker_key(name: str) -> BrokerKey | None:
    return BROKER.get(name)


def is_sensitive(kafka_type: str | None) -> bool:
    """As Kafka: password values are never shown."""
    return kafka_type == "PASSWORD"


def ignored_reason(name: str) -> str:
    """Why a Kafka broker key pybroker takes has no effect here."""
    if name in IGNORED_REASONS:
        return IGNORED_REASONS[name]
    return next(reason for prefix, reason in PREFIX_REASONS if name.startswith(prefix))


def topic_documentation(name: str) -> str | None:
    entry = TOPIC.get(name)
    return entry[1] if entry else None


def broker_documentation(name: str, applied: bool, topic_synonym: str | None = None) -> str | None:
    """What a broker key does here: the topic default it sets, applied (with what it does, where this
    catalog says), or accepted and ignored (and why)."""
    if topic_synonym is not None:
        return f"Broker default of the topic config {topic_synonym}: {topic_documentation(topic_synonym)}"
    if name not in BROKER:
        return None
    if applied:
        return BROKER_DOCS.get(name, "Applied by this broker.")
    return f"Accepted and ignored: {ignored_reason(name)}."


def check_value(name: str, kafka_type: str, value) -> None:
    """Kafka's type check of a value (ConfigDef.parseType); raises ValueError with Kafka's message."""
    text = str(value).strip()
    if kafka_type in _INT_RANGES:
        lo, hi = _INT_RANGES[kafka_type]
        try:
            ok = lo <= int(text) <= hi
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"Invalid value {value} for configuration {name}: Not a number of type {kafka_type}")
    elif kafka_type == "DOUBLE":
        try:
            float(text)
        except ValueError:
            raise ValueError(f"Invalid value {value} for configuration {name}: Not a number of type DOUBLE") from None
    elif kafka_type == "BOOLEAN" and text.lower() not in ("true", "false"):
        raise ValueError(f"Invalid value {value} for configuration {name}: Expected value to be either true or false")


# Kafka 3.8's broker keys: (name, type, update mode R/B/C, plus I for Kafka's internal keys, default)
_BROKER_ROWS = (
    ('advertised.listeners', 'STRING', 'B', None),
    ('alter.config.policy.class.name', 'CLASS', 'R', None),
    ('alter.log.dirs.replication.quota.window.num', 'INT', 'R', '11'),
    ('alter.log.dirs.replication.quota.window.size.seconds', 'INT', 'R', '1'),
    ('authorizer.class.name', 'STRING', 'R', ''),
    ('auto.create.topics.enable', 'BOOLEAN', 'R', 'true'),
    ('auto.include.jmx.reporter', 'BOOLEAN', 'R', 'true'),
    ('auto.leader.rebalance.enable', 'BOOLEAN', 'R', 'true'),
    ('background.threads', 'INT', 'C', '10'),
    ('broker.heartbeat.interval.ms', 'INT', 'R', '2000'),
    ('broker.id', 'INT', 'R', '-1'),
    ('broker.id.generation.enable', 'BOOLEAN', 'R', 'true'),
    ('broker.rack', 'STRING', 'R', None),
    ('broker.session.timeout.ms', 'INT', 'R', '9000'),
    ('client.quota.callback.class', 'CLASS', 'R', None),
    ('compression.gzip.level', 'INT', 'C', '-1'),
    ('compression.lz4.level', 'INT', 'C', '9'),
    ('compression.type', 'STRING', 'C', 'producer'),
    ('compression.zstd.level', 'INT', 'C', '3'),
    ('connection.failed.authentication.delay.ms', 'INT', 'R', '100'),
    ('connections.max.idle.ms', 'LONG', 'R', '600000'),
    ('connections.max.reauth.ms', 'LONG', 'R', '0'),
    ('control.plane.listener.name', 'STRING', 'R', None),
    ('controlled.shutdown.enable', 'BOOLEAN', 'R', 'true'),
    ('controlled.shutdown.max.retries', 'INT', 'R', '3'),
    ('controlled.shutdown.retry.backoff.ms', 'LONG', 'R', '5000'),
    ('controller.listener.names', 'STRING', 'R', None),
    ('controller.quorum.append.linger.ms', 'INT', 'R', '25'),
    ('controller.quorum.bootstrap.servers', 'LIST', 'RI', ''),
    ('controller.quorum.election.backoff.max.ms', 'INT', 'R', '1000'),
    ('controller.quorum.election.timeout.ms', 'INT', 'R', '1000'),
    ('controller.quorum.fetch.timeout.ms', 'INT', 'R', '2000'),
    ('controller.quorum.request.timeout.ms', 'INT', 'R', '2000'),
    ('controller.quorum.retry.backoff.ms', 'INT', 'R', '20'),
    ('controller.quorum.voters', 'LIST', 'R', ''),
    ('controller.quota.window.num', 'INT', 'R', '11'),
    ('controller.quota.window.size.seconds', 'INT', 'R', '1'),
    ('controller.socket.timeout.ms', 'INT', 'R', '30000'),
    ('create.topic.policy.class.name', 'CLASS', 'R', None),
    ('default.replication.factor', 'INT', 'R', '1'),
    ('delegation.token.expiry.check.interval.ms', 'LONG', 'R', '3600000'),
    ('delegation.token.expiry.time.ms', 'LONG', 'R', '86400000'),
    ('delegation.token.master.key', 'PASSWORD', 'R', None),
    ('delegation.token.max.lifetime.ms', 'LONG', 'R', '604800000'),
    ('delegation.token.secret.key', 'PASSWORD', 'R', None),
    ('delete.records.purgatory.purge.interval.requests', 'INT', 'R', '1'),
    ('delete.topic.enable', 'BOOLEAN', 'R', 'true'),
    ('early.start.listeners', 'STRING', 'R', None),
    ('eligible.leader.replicas.enable', 'BOOLEAN', 'R', 'false'),
    ('fetch.max.bytes', 'INT', 'R', '57671680'),
    ('fetch.purgatory.purge.interval.requests', 'INT', 'R', '1000'),
    ('group.consumer.assignors', 'LIST', 'R',
     'org.apache.kafka.coordinator.group.assignor.UniformAssignor,'
     'org.apache.kafka.coordinator.group.assignor.RangeAssignor'),
    ('group.consumer.heartbeat.interval.ms', 'INT', 'R', '5000'),
    ('group.consumer.max.heartbeat.interval.ms', 'INT', 'R', '15000'),
    ('group.consumer.max.session.timeout.ms', 'INT', 'R', '60000'),
    ('group.consumer.max.size', 'INT', 'R', '2147483647'),
    ('group.consumer.migration.policy', 'STRING', 'R', 'disabled'),
    ('group.consumer.min.heartbeat.interval.ms', 'INT', 'R', '5000'),
    ('group.consumer.min.session.timeout.ms', 'INT', 'R', '45000'),
    ('group.consumer.session.timeout.ms', 'INT', 'R', '45000'),
    ('group.coordinator.append.linger.ms', 'INT', 'R', '10'),
    ('group.coordinator.new.enable', 'BOOLEAN', 'RI', 'false'),
    ('group.coordinator.rebalance.protocols', 'LIST', 'R', 'classic'),
    ('group.coordinator.threads', 'INT', 'R', '1'),
    ('group.initial.rebalance.delay.ms', 'INT', 'R', '3000'),
    ('group.max.session.timeout.ms', 'INT', 'R', '1800000'),
    ('group.max.size', 'INT', 'R', '2147483647'),
    ('group.min.session.timeout.ms', 'INT', 'R', '6000'),
    ('initial.broker.registration.timeout.ms', 'INT', 'R', '60000'),
    ('inter.broker.listener.name', 'STRING', 'R', None),
    ('inter.broker.protocol.version', 'STRING', 'R', '3.8-IV0'),
    ('kafka.metrics.polling.interval.secs', 'INT', 'R', '10'),
    ('kafka.metrics.reporters', 'LIST', 'R', ''),
    ('leader.imbalance.check.interval.seconds', 'LONG', 'R', '300'),
    ('leader.imbalance.per.broker.percentage', 'INT', 'R', '10'),
    ('listener.security.protocol.map', 'STRING', 'B',
     'SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT'),
    ('listeners', 'STRING', 'B', 'PLAINTEXT://:9092'),
    ('log.cleaner.backoff.ms', 'LONG', 'C', '15000'),
    ('log.cleaner.dedupe.buffer.size', 'LONG', 'C', '134217728'),
    ('log.cleaner.delete.retention.ms', 'LONG', 'C', '86400000'),
    ('log.cleaner.enable', 'BOOLEAN', 'R', 'true'),
    ('log.cleaner.io.buffer.load.factor', 'DOUBLE', 'C', '0.9'),
    ('log.cleaner.io.buffer.size', 'INT', 'C', '524288'),
    ('log.cleaner.io.max.bytes.per.second', 'DOUBLE', 'C', '1.7976931348623157E308'),
    ('log.cleaner.max.compaction.lag.ms', 'LONG', 'C', '9223372036854775807'),
    ('log.cleaner.min.cleanable.ratio', 'DOUBLE', 'C', '0.5'),
    ('log.cleaner.min.compaction.lag.ms', 'LONG', 'C', '0'),
    ('log.cleaner.threads', 'INT', 'C', '1'),
    ('log.cleanup.policy', 'LIST', 'C', 'delete'),
    ('log.dir', 'STRING', 'R', '/tmp/kafka-logs'),
    ('log.dir.failure.timeout.ms', 'LONG', 'R', '30000'),
    ('log.dirs', 'STRING', 'R', None),
    ('log.flush.interval.messages', 'LONG', 'C', '9223372036854775807'),
    ('log.flush.interval.ms', 'LONG', 'C', None),
    ('log.flush.offset.checkpoint.interval.ms', 'INT', 'R', '60000'),
    ('log.flush.scheduler.interval.ms', 'LONG', 'R', '9223372036854775807'),
    ('log.flush.start.offset.checkpoint.interval.ms', 'INT', 'R', '60000'),
    ('log.index.interval.bytes', 'INT', 'C', '4096'),
    ('log.index.size.max.bytes', 'INT', 'C', '10485760'),
    ('log.initial.task.delay.ms', 'LONG', 'RI', '30000'),
    ('log.local.retention.bytes', 'LONG', 'C', '-2'),
    ('log.local.retention.ms', 'LONG', 'C', '-2'),
    ('log.message.downconversion.enable', 'BOOLEAN', 'C', 'true'),
    ('log.message.format.version', 'STRING', 'R', '3.0-IV1'),
    ('log.message.timestamp.after.max.ms', 'LONG', 'C', '9223372036854775807'),
    ('log.message.timestamp.before.max.ms', 'LONG', 'C', '9223372036854775807'),
    ('log.message.timestamp.difference.max.ms', 'LONG', 'C', '9223372036854775807'),
    ('log.message.timestamp.type', 'STRING', 'C', 'CreateTime'),
    ('log.preallocate', 'BOOLEAN', 'C', 'false'),
    ('log.retention.bytes', 'LONG', 'C', '-1'),
    ('log.retention.check.interval.ms', 'LONG', 'R', '300000'),
    ('log.retention.hours', 'INT', 'R', '168'),
    ('log.retention.minutes', 'INT', 'R', None),
    ('log.retention.ms', 'LONG', 'C', None),
    ('log.roll.hours', 'INT', 'R', '168'),
    ('log.roll.jitter.hours', 'INT', 'R', '0'),
    ('log.roll.jitter.ms', 'LONG', 'C', None),
    ('log.roll.ms', 'LONG', 'C', None),
    ('log.segment.bytes', 'INT', 'C', '1073741824'),
    ('log.segment.delete.delay.ms', 'LONG', 'C', '60000'),
    ('max.connection.creation.rate', 'INT', 'C', '2147483647'),
    ('max.connections', 'INT', 'C', '2147483647'),
    ('max.connections.per.ip', 'INT', 'C', '2147483647'),
    ('max.connections.per.ip.overrides', 'STRING', 'C', ''),
    ('max.incremental.fetch.session.cache.slots', 'INT', 'R', '1000'),
    ('max.request.partition.size.limit', 'INT', 'R', '2000'),
    ('message.max.bytes', 'INT', 'C', '1048588'),
    ('metadata.log.dir', 'STRING', 'R', None),
    ('metadata.log.max.record.bytes.between.snapshots', 'LONG', 'R', '20971520'),
    ('metadata.log.max.snapshot.interval.ms', 'LONG', 'R', '3600000'),
    ('metadata.log.segment.bytes', 'INT', 'R', '1073741824'),
    ('metadata.log.segment.min.bytes', 'INT', 'RI', '8388608'),
    ('metadata.log.segment.ms', 'LONG', 'R', '604800000'),
    ('metadata.max.idle.interval.ms', 'INT', 'R', '500'),
    ('metadata.max.retention.bytes', 'LONG', 'R', '104857600'),
    ('metadata.max.retention.ms', 'LONG', 'R', '604800000'),
    ('metric.reporters', 'LIST', 'C', ''),
    ('metrics.num.samples', 'INT', 'R', '2'),
    ('metrics.recording.level', 'STRING', 'R', 'INFO'),
    ('metrics.sample.window.ms', 'LONG', 'R', '30000'),
    ('min.insync.replicas', 'INT', 'C', '1'),
    ('node.id', 'INT', 'R', '-1'),
    ('num.io.threads', 'INT', 'C', '8'),
    ('num.network.threads', 'INT', 'C', '3'),
    ('num.partitions', 'INT', 'R', '1'),
    ('num.recovery.threads.per.data.dir', 'INT', 'C', '1'),
    ('num.replica.alter.log.dirs.threads', 'INT', 'R', None),
    ('num.replica.fetchers', 'INT', 'C', '1'),
    ('offset.metadata.max.bytes', 'INT', 'R', '4096'),
    ('offsets.commit.required.acks', 'SHORT', 'R', '-1'),
    ('offsets.commit.timeout.ms', 'INT', 'R', '5000'),
    ('offsets.load.buffer.size', 'INT', 'R', '5242880'),
    ('offsets.retention.check.interval.ms', 'LONG', 'R', '600000'),
    ('offsets.retention.minutes', 'INT', 'R', '10080'),
    ('offsets.topic.compression.codec', 'INT', 'R', '0'),
    ('offsets.topic.num.partitions', 'INT', 'R', '50'),
    ('offsets.topic.replication.factor', 'SHORT', 'R', '3'),
    ('offsets.topic.segment.bytes', 'INT', 'R', '104857600'),
    ('password.encoder.cipher.algorithm', 'STRING', 'R', 'AES/CBC/PKCS5Padding'),
    ('password.encoder.iterations', 'INT', 'R', '4096'),
    ('password.encoder.key.length', 'INT', 'R', '128'),
    ('password.encoder.keyfactory.algorithm', 'STRING', 'R', None),
    ('password.encoder.old.secret', 'PASSWORD', 'R', None),
    ('password.encoder.secret', 'PASSWORD', 'R', None),
    ('principal.builder.class', 'CLASS', 'B',
     'org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder'),
    ('process.roles', 'LIST', 'R', ''),
    ('producer.id.expiration.check.interval.ms', 'INT', 'RI', '600000'),
    ('producer.id.expiration.ms', 'INT', 'C', '86400000'),
    ('producer.purgatory.purge.interval.requests', 'INT', 'R', '1000'),
    ('queued.max.request.bytes', 'LONG', 'R', '-1'),
    ('queued.max.requests', 'INT', 'R', '500'),
    ('quota.window.num', 'INT', 'R', '11'),
    ('quota.window.size.seconds', 'INT', 'R', '1'),
    ('remote.fetch.max.wait.ms', 'INT', 'C', '500'),
    ('remote.log.index.file.cache.total.size.bytes', 'LONG', 'C', '1073741824'),
    ('remote.log.manager.copier.thread.pool.size', 'INT', 'RI', '10'),
    ('remote.log.manager.copy.max.bytes.per.second', 'LONG', 'C', '9223372036854775807'),
    ('remote.log.manager.copy.quota.window.num', 'INT', 'R', '11'),
    ('remote.log.manager.copy.quota.window.size.seconds', 'INT', 'R', '1'),
    ('remote.log.manager.expiration.thread.pool.size', 'INT', 'RI', '10'),
    ('remote.log.manager.fetch.max.bytes.per.second', 'LONG', 'C', '9223372036854775807'),
    ('remote.log.manager.fetch.quota.window.num', 'INT', 'R', '11'),
    ('remote.log.manager.fetch.quota.window.size.seconds', 'INT', 'R', '1'),
    ('remote.log.manager.task.interval.ms', 'LONG', 'R', '30000'),
    ('remote.log.manager.task.retry.backoff.max.ms', 'LONG', 'RI', '30000'),
    ('remote.log.manager.task.retry.backoff.ms', 'LONG', 'RI', '500'),
    ('remote.log.manager.task.retry.jitter', 'DOUBLE', 'RI', '0.2'),
    ('remote.log.manager.thread.pool.size', 'INT', 'R', '10'),
    ('remote.log.metadata.custom.metadata.max.bytes', 'INT', 'R', '128'),
    ('remote.log.metadata.manager.class.name', 'STRING', 'R',
     'org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager'),
    ('remote.log.metadata.manager.class.path', 'STRING', 'R', None),
    ('remote.log.metadata.manager.impl.prefix', 'STRING', 'R', 'rlmm.config.'),
    ('remote.log.metadata.manager.listener.name', 'STRING', 'R', None),
    ('remote.log.reader.max.pending.tasks', 'INT', 'R', '100'),
    ('remote.log.reader.threads', 'INT', 'R', '10'),
    ('remote.log.storage.manager.class.name', 'STRING', 'R', None),
    ('remote.log.storage.manager.class.path', 'STRING', 'R', None),
    ('remote.log.storage.manager.impl.prefix', 'STRING', 'R', 'rsm.config.'),
    ('remote.log.storage.system.enable', 'BOOLEAN', 'R', 'false'),
    ('replica.fetch.backoff.ms', 'INT', 'R', '1000'),
    ('replica.fetch.max.bytes', 'INT', 'R', '1048576'),
    ('replica.fetch.min.bytes', 'INT', 'R', '1'),
    ('replica.fetch.response.max.bytes', 'INT', 'R', '10485760'),
    ('replica.fetch.wait.max.ms', 'INT', 'R', '500'),
    ('replica.high.watermark.checkpoint.interval.ms', 'LONG', 'R', '5000'),
    ('replica.lag.time.max.ms', 'LONG', 'R', '30000'),
    ('replica.selector.class', 'STRING', 'R', None),
    ('replica.socket.receive.buffer.bytes', 'INT', 'R', '65536'),
    ('replica.socket.timeout.ms', 'INT', 'R', '30000'),
    ('replication.quota.window.num', 'INT', 'R', '11'),
    ('replication.quota.window.size.seconds', 'INT', 'R', '1'),
    ('request.timeout.ms', 'INT', 'R', '30000'),
    ('reserved.broker.max.id', 'INT', 'R', '1000'),
    ('sasl.client.callback.handler.class', 'CLASS', 'R', None),
    ('sasl.enabled.mechanisms', 'LIST', 'B', 'GSSAPI'),
    ('sasl.jaas.config', 'PASSWORD', 'B', None),
    ('sasl.kerberos.kinit.cmd', 'STRING', 'B', '/usr/bin/kinit'),
    ('sasl.kerberos.min.time.before.relogin', 'LONG', 'B', '60000'),
    ('sasl.kerberos.principal.to.local.rules', 'LIST', 'B', 'DEFAULT'),
    ('sasl.kerberos.service.name', 'STRING', 'B', None),
    ('sasl.kerberos.ticket.renew.jitter', 'DOUBLE', 'B', '0.05'),
    ('sasl.kerberos.ticket.renew.window.factor', 'DOUBLE', 'B', '0.8'),
    ('sasl.login.callback.handler.class', 'CLASS', 'R', None),
    ('sasl.login.class', 'CLASS', 'R', None),
    ('sasl.login.connect.timeout.ms', 'INT', 'R', None),
    ('sasl.login.read.timeout.ms', 'INT', 'R', None),
    ('sasl.login.refresh.buffer.seconds', 'SHORT', 'B', '300'),
    ('sasl.login.refresh.min.period.seconds', 'SHORT', 'B', '60'),
    ('sasl.login.refresh.window.factor', 'DOUBLE', 'B', '0.8'),
    ('sasl.login.refresh.window.jitter', 'DOUBLE', 'B', '0.05'),
    ('sasl.login.retry.backoff.max.ms', 'LONG', 'R', '10000'),
    ('sasl.login.retry.backoff.ms', 'LONG', 'R', '100'),
    ('sasl.mechanism.controller.protocol', 'STRING', 'R', 'GSSAPI'),
    ('sasl.mechanism.inter.broker.protocol', 'STRING', 'B', 'GSSAPI'),
    ('sasl.oauthbearer.clock.skew.seconds', 'INT', 'R', '30'),
    ('sasl.oauthbearer.expected.audience', 'LIST', 'R', None),
    ('sasl.oauthbearer.expected.issuer', 'STRING', 'R', None),
    ('sasl.oauthbearer.jwks.endpoint.refresh.ms', 'LONG', 'R', '3600000'),
    ('sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms', 'LONG', 'R', '10000'),
    ('sasl.oauthbearer.jwks.endpoint.retry.backoff.ms', 'LONG', 'R', '100'),
    ('sasl.oauthbearer.jwks.endpoint.url', 'STRING', 'R', None),
    ('sasl.oauthbearer.scope.claim.name', 'STRING', 'R', 'scope'),
    ('sasl.oauthbearer.sub.claim.name', 'STRING', 'R', 'sub'),
    ('sasl.oauthbearer.token.endpoint.url', 'STRING', 'R', None),
    ('sasl.server.callback.handler.class', 'CLASS', 'R', None),
    ('sasl.server.max.receive.size', 'INT', 'R', '524288'),
    ('security.inter.broker.protocol', 'STRING', 'R', 'PLAINTEXT'),
    ('security.providers', 'STRING', 'R', None),
    ('server.max.startup.time.ms', 'LONG', 'RI', '9223372036854775807'),
    ('socket.connection.setup.timeout.max.ms', 'LONG', 'R', '30000'),
    ('socket.connection.setup.timeout.ms', 'LONG', 'R', '10000'),
    ('socket.listen.backlog.size', 'INT', 'R', '50'),
    ('socket.receive.buffer.bytes', 'INT', 'R', '102400'),
    ('socket.request.max.bytes', 'INT', 'R', '104857600'),
    ('socket.send.buffer.bytes', 'INT', 'R', '102400'),
    ('ssl.allow.dn.changes', 'BOOLEAN', 'R', 'false'),
    ('ssl.allow.san.changes', 'BOOLEAN', 'R', 'false'),
    ('ssl.cipher.suites', 'LIST', 'B', ''),
    ('ssl.client.auth', 'STRING', 'B', 'none'),
    ('ssl.enabled.protocols', 'LIST', 'B', 'TLSv1.2,TLSv1.3'),
    ('ssl.endpoint.identification.algorithm', 'STRING', 'B', 'https'),
    ('ssl.engine.factory.class', 'CLASS', 'B', None),
    ('ssl.key.password', 'PASSWORD', 'B', None),
    ('ssl.keymanager.algorithm', 'STRING', 'B', 'SunX509'),
    ('ssl.keystore.certificate.chain', 'PASSWORD', 'B', None),
    ('ssl.keystore.key', 'PASSWORD', 'B', None),
    ('ssl.keystore.location', 'STRING', 'B', None),
    ('ssl.keystore.password', 'PASSWORD', 'B', None),
    ('ssl.keystore.type', 'STRING', 'B', 'JKS'),
    ('ssl.principal.mapping.rules', 'STRING', 'R', 'DEFAULT'),
    ('ssl.protocol', 'STRING', 'B', 'TLSv1.3'),
    ('ssl.provider', 'STRING', 'B', None),
    ('ssl.secure.random.implementation', 'STRING', 'B', None),
    ('ssl.trustmanager.algorithm', 'STRING', 'B', 'PKIX'),
    ('ssl.truststore.certificates', 'PASSWORD', 'B', None),
    ('ssl.truststore.location', 'STRING', 'B', None),
    ('ssl.truststore.password', 'PASSWORD', 'B', None),
    ('ssl.truststore.type', 'STRING', 'B', 'JKS'),
    ('telemetry.max.bytes', 'INT', 'R', '1048576'),
    ('transaction.abort.timed.out.transaction.cleanup.interval.ms', 'INT', 'R', '10000'),
    ('transaction.max.timeout.ms', 'INT', 'R', '900000'),
    ('transaction.partition.verification.enable', 'BOOLEAN', 'C', 'true'),
    ('transaction.remove.expired.transaction.cleanup.interval.ms', 'INT', 'R', '3600000'),
    ('transaction.state.log.load.buffer.size', 'INT', 'R', '5242880'),
    ('transaction.state.log.min.isr', 'INT', 'R', '2'),
    ('transaction.state.log.num.partitions', 'INT', 'R', '50'),
    ('transaction.state.log.replication.factor', 'SHORT', 'R', '3'),
    ('transaction.state.log.segment.bytes', 'INT', 'R', '104857600'),
    ('transactional.id.expiration.ms', 'INT', 'R', '604800000'),
    ('unclean.leader.election.enable', 'BOOLEAN', 'C', 'false'),
    ('unstable.api.versions.enable', 'BOOLEAN', 'RI', 'false'),
    ('unstable.feature.versions.enable', 'BOOLEAN', 'RI', 'false'),
    ('zookeeper.clientCnxnSocket', 'STRING', 'R', None),
    ('zookeeper.connect', 'STRING', 'R', None),
    ('zookeeper.connection.timeout.ms', 'INT', 'R', None),
    ('zookeeper.max.in.flight.requests', 'INT', 'R', '10'),
    ('zookeeper.metadata.migration.enable', 'BOOLEAN', 'R', 'false'),
    ('zookeeper.metadata.migration.min.batch.size', 'INT', 'RI', '200'),
    ('zookeeper.session.timeout.ms', 'INT', 'R', '18000'),
    ('zookeeper.set.acl', 'BOOLEAN', 'R', 'false'),
    ('zookeeper.ssl.cipher.suites', 'LIST', 'R', None),
    ('zookeeper.ssl.client.enable', 'BOOLEAN', 'R', 'false'),
    ('zookeeper.ssl.crl.enable', 'BOOLEAN', 'R', 'false'),
    ('zookeeper.ssl.enabled.protocols', 'LIST', 'R', None),
    ('zookeeper.ssl.endpoint.identification.algorithm', 'STRING', 'R', 'HTTPS'),
    ('zookeeper.ssl.keystore.location', 'STRING', 'R', None),
    ('zookeeper.ssl.keystore.password', 'PASSWORD', 'R', None),
    ('zookeeper.ssl.keystore.type', 'STRING', 'R', None),
    ('zookeeper.ssl.ocsp.enable', 'BOOLEAN', 'R', 'false'),
    ('zookeeper.ssl.protocol', 'STRING', 'R', 'TLSv1.2'),
    ('zookeeper.ssl.truststore.location', 'STRING', 'R', None),
    ('zookeeper.ssl.truststore.password', 'PASSWORD', 'R', None),
    ('zookeeper.ssl.truststore.type', 'STRING', 'R', None),
)
# Kafka 4.2's share-group (KIP-932), streams-group (KIP-1071) and share-coordinator broker keys, same shape;
# the group.share.* and group.streams.* keys are also the defaults and bounds of the group configs
_KAFKA_42_ROWS = (
    ('group.share.assignors', 'LIST', 'R', 'simple'),
    ('group.share.delivery.count.limit', 'INT', 'R', '5'),
    ('group.share.enable', 'BOOLEAN', 'RI', 'false'),
    ('group.share.heartbeat.interval.ms', 'INT', 'R', '5000'),
    ('group.share.max.heartbeat.interval.ms', 'INT', 'R', '15000'),
    ('group.share.max.record.lock.duration.ms', 'INT', 'R', '60000'),
    ('group.share.max.session.timeout.ms', 'INT', 'R', '60000'),
    ('group.share.max.share.sessions', 'INT', 'R', '2000'),
    ('group.share.max.size', 'INT', 'R', '200'),
    ('group.share.min.heartbeat.interval.ms', 'INT', 'R', '5000'),
    ('group.share.min.record.lock.duration.ms', 'INT', 'R', '15000'),
    ('group.share.min.session.timeout.ms', 'INT', 'R', '45000'),
    ('group.share.partition.max.record.locks', 'INT', 'R', '2000'),
    ('group.share.persister.class.name', 'STRING', 'RI',
     'org.apache.kafka.server.share.persister.DefaultStatePersister'),
    ('group.share.record.lock.duration.ms', 'INT', 'R', '30000'),
    ('group.share.session.timeout.ms', 'INT', 'R', '45000'),
    ('group.streams.heartbeat.interval.ms', 'INT', 'R', '5000'),
    ('group.streams.initial.rebalance.delay.ms', 'INT', 'R', '3000'),
    ('group.streams.max.heartbeat.interval.ms', 'INT', 'R', '15000'),
    ('group.streams.max.session.timeout.ms', 'INT', 'R', '60000'),
    ('group.streams.max.size', 'INT', 'R', '2147483647'),
    ('group.streams.max.standby.replicas', 'INT', 'R', '2'),
    ('group.streams.min.heartbeat.interval.ms', 'INT', 'R', '5000'),
    ('group.streams.min.session.timeout.ms', 'INT', 'R', '45000'),
    ('group.streams.num.standby.replicas', 'INT', 'R', '0'),
    ('group.streams.session.timeout.ms', 'INT', 'R', '45000'),
    ('share.coordinator.append.linger.ms', 'INT', 'R', '-1'),
    ('share.coordinator.load.buffer.size', 'INT', 'R', '5242880'),
    ('share.coordinator.snapshot.update.records.per.snapshot', 'INT', 'R', '500'),
    ('share.coordinator.state.topic.compression.codec', 'INT', 'R', '0'),
    ('share.coordinator.state.topic.min.isr', 'SHORT', 'R', '2'),
    ('share.coordinator.state.topic.num.partitions', 'INT', 'R', '50'),
    ('share.coordinator.state.topic.replication.factor', 'SHORT', 'R', '3'),
    ('share.coordinator.state.topic.segment.bytes', 'INT', 'R', '104857600'),
    ('share.coordinator.threads', 'INT', 'R', '1'),
    ('share.coordinator.write.timeout.ms', 'INT', 'R', '5000'),
    ('share.fetch.max.fetch.records', 'INT', 'RI', '2147483647'),
    ('share.fetch.purgatory.purge.interval.requests', 'INT', 'R', '1000'),
)
KAFKA_42_KEYS = frozenset(row[0] for row in _KAFKA_42_ROWS)
BROKER = MappingProxyType({name: BrokerKey(kind, _MODES[mode[0]], default, mode.endswith("I"))
                           for name, kind, mode, default in _BROKER_ROWS + _KAFKA_42_ROWS})
# what the Kafka 4.2 keys this broker applies do here (DescribeConfigs documentation)
BROKER_DOCS = MappingProxyType({
    "group.share.assignors": "Server-side assignor of share groups, one entry: simple (or Kafka's class name of it).",
    "group.share.delivery.count.limit": "Delivery attempts after which a share group archives a record "
                                        "instead of handing it out again.",
    "group.share.heartbeat.interval.ms": "Heartbeat interval given to share group members; the default of a "
                                         "group's share.heartbeat.interval.ms.",
    "group.share.max.heartbeat.interval.ms": "Largest share.heartbeat.interval.ms a group may set.",
    "group.share.max.record.lock.duration.ms": "Largest share.record.lock.duration.ms a group may set.",
    "group.share.max.session.timeout.ms": "Largest share.session.timeout.ms a group may set.",
    "group.share.max.share.sessions": "Share fetch sessions this broker keeps at once.",
    "group.share.max.size": "Members a share group may have at most.",
    "group.share.min.heartbeat.interval.ms": "Smallest share.heartbeat.interval.ms a group may set.",
    "group.share.min.record.lock.duration.ms": "Smallest share.record.lock.duration.ms a group may set.",
    "group.share.min.session.timeout.ms": "Smallest share.session.timeout.ms a group may set.",
    "group.share.partition.max.record.locks": "Records of one share-partition that may be acquired (locked) at "
                                              "once.",
    "group.share.record.lock.duration.ms": "How long a share group member holds the records it acquired before "
                                           "they become available again; the default of a group's "
                                           "share.record.lock.duration.ms.",
    "group.share.session.timeout.ms": "How long a share group member may go without a heartbeat before it is "
                                      "removed; the default of a group's share.session.timeout.ms.",
    "group.streams.heartbeat.interval.ms": "Default of a group's streams.heartbeat.interval.ms (kept; streams "
                                           "groups are not served here).",
    "group.streams.initial.rebalance.delay.ms": "Default of a group's streams.initial.rebalance.delay.ms (kept; "
                                                "streams groups are not served here).",
    "group.streams.max.heartbeat.interval.ms": "Largest streams.heartbeat.interval.ms a group may set.",
    "group.streams.max.session.timeout.ms": "Largest streams.session.timeout.ms a group may set.",
    "group.streams.max.standby.replicas": "Largest streams.num.standby.replicas a group may set.",
    "group.streams.min.heartbeat.interval.ms": "Smallest streams.heartbeat.interval.ms a group may set.",
    "group.streams.min.session.timeout.ms": "Smallest streams.session.timeout.ms a group may set.",
    "group.streams.num.standby.replicas": "Default of a group's streams.num.standby.replicas (kept; streams groups "
                                          "are not served here).",
    "group.streams.session.timeout.ms": "Default of a group's streams.session.timeout.ms (kept; streams groups "
                                        "are not served here).",
    "share.coordinator.snapshot.update.records.per.snapshot": "Update records the share coordinator writes for a "
                                                              "share-partition between two snapshot records.",
    "share.coordinator.state.topic.min.isr": "min.insync.replicas of __share_group_state (at most its "
                                             "replication factor).",
    "share.coordinator.state.topic.num.partitions": "Partitions of __share_group_state, the share-group state "
                                                    "topic; fixed once it exists.",
    "share.coordinator.state.topic.replication.factor": "Replication factor of __share_group_state, capped at the "
                                                        "live brokers when it is created (a single node: 1).",
    "share.coordinator.state.topic.segment.bytes": "segment.bytes of __share_group_state.",
    "share.coordinator.write.timeout.ms": "How long a share-state write waits for the state topic's replicas.",
    "share.fetch.max.fetch.records": "Records one share fetch hands out at most (Kafka's internal key).",
})
# keys that exist only as dynamic broker configs (not in server.properties): the replication throttles
DYNAMIC_ONLY = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate",
                          "replica.alter.log.dirs.io.max.bytes.per.second"})
DYNAMIC = frozenset(name for name, key in BROKER.items() if key.mode != READ_ONLY) | DYNAMIC_ONLY
