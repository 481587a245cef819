"""The ``local`` metadata store: the topic table of a single node, kept in its first log dir.

Files (in ``log_dir``):

* ``meta.properties`` -- as Kafka writes it (``version=1``, ``cluster.id``, ``node.id``,
  ``directory.id``); written once on first start, then only checked: another node id or cluster
  id is an error, never silently adopted.
* ``pybroker-metadata.json`` -- ``{"format": 1, "cluster_id", "generation", "topics": [...],
  "group_configs": {"<group id>": {"<group config key>": "<value>"}}}`` (the GROUP resource's
  overrides; a group without overrides has no entry, and a table without the key has none);
  ``generation`` counts committed changes. Every change rewrites the whole file: temp file,
  fsync, rename over the old one, fsync of the directory. A kill at any point leaves either the
  old or the new table; a leftover ``.tmp`` is discarded at start. An unreadable table is an
  error (``MetadataCorruptError``), never an empty cluster.

A change is written to disk before it becomes visible in memory, so a failed write changes
nothing. Records handed out are snapshots: changes replace them, never mutate them.
"""
import json
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

from pybroker.config import ConfigError, check_cluster_id
from pybroker.properties import parse_properties
from pybroker.errors import (InconsistentClusterIdError, InconsistentNodeIdError, InvalidConfigError,  # noqa: F401
                             InvalidPartitionsError, InvalidReplicationFactorError, InvalidTopicError,
                             MetadataCorruptError, MetadataError, TopicExistsError, UnknownTopicError)
from pybroker.ids import new_cluster_id, random_uuid, uuid_to_base64  # noqa: F401  (the store's ids)
from pybroker.log.checkpoint import fsync_dir

META_PROPERTIES = "meta.properties"
METADATA_FILE = "pybroker-metadata.json"
FORMAT = 1
MAX_TOPIC_NAME = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name) -> None:
    """Kafka's rules: 1-249 characters of [a-zA-Z0-9._-], and not '.' or '..'; refused in Kafka's words
    (tools and clients show them)."""
    if not isinstance(name, str):
        raise InvalidTopicError("Topic name is invalid: it is not a string")
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME}"
    elif not _LEGAL_NAME.fullmatch(name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if reason is not None:
        raise InvalidTopicError(f"Topic name is invalid: {reason}")


@dataclass
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)  # topic-level overrides only (Kafka names)

    def to_json(self) -> dict:
        return {"name": self.name, "topic_id": str(self.topic_id), "partitions": self.partitions,
                "replication_factor": self.replication_factor, "configs": dict(sorted(self.configs.items()))}

    @classmethod
    def from_json(cls, obj: dict) -> "TopicRecord":
        configs = obj["configs"]
        if not isinstance(configs, dict) or not all(isinstance(v, str) for v in configs.values()):
            raise ValueError(f"bad configs of topic {obj['name']!r}")
        return cls(str(obj["name"]), uuid.UUID(obj["topic_id"]), int(obj["partitions"]),
                   int(obj["replication_factor"]), dict(configs))


class LocalMetadataStore:
    """The topic table of a single node (replication factor 1), persisted in ``log_dir``."""

    def __init__(self, log_dir: str, node_id: int, cluster_id: str | None = None):
        self.log_dir = log_dir
        self.node_id = node_id
        self.path = os.path.join(log_dir, METADATA_FILE)
        self._lock = threading.Lock()  # callers may run changes off the event loop
        if cluster_id is not None:
            check_cluster_id(cluster_id)  # ConfigError: a bad argument, not a bad disk
        os.makedirs(log_dir, exist_ok=True)
        self.cluster_id = self._load_meta_properties(cluster_id)
        self.generation, topics, groups = self._load_table()
        self._topics: dict[str, TopicRecord] = topics
        self.topics: Mapping[str, TopicRecord] = MappingProxyType(self._topics)
        self._group_configs: dict[str, dict[str, str]] = groups
        self.group_configs: Mapping[str, dict[str, str]] = MappingProxyType(self._group_configs)

    # -- changes ---------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: Mapping[str, str] | None = None) -> TopicRecord:
        validate_topic_name(name)
        if not isinstance(partitions, int) or partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
        if not isinstance(replication_factor, int) or replication_factor < 1:
            raise InvalidReplicationFactorError(f"replication factor must be at least 1, got {replication_factor}")
        if replication_factor > 1:
            raise InvalidReplicationFactorError(f"replication factor: {replication_factor} larger than "
                                                "available brokers: 1")
        configs = self._clean_configs(configs or {})
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            collides = _collision_key(name)
            for other in self._topics:
                if _collision_key(other) == collides:
                    raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r} "
                                            "('.' and '_' are the same in metric names)")
            record = TopicRecord(name, random_uuid(), partitions, replication_factor, configs)
            self._commit({**self._topics, name: record})
            return record

    def delete_topic(self, name: str) -> TopicRecord:
        with self._lock:
            record = self._get(name)
            self._commit({n: r for n, r in self._topics.items() if n != name})
            return record

    def set_partitions(self, name: str, count: int) -> None:
        """Grow a topic to ``count`` partitions; shrinking is impossible, as in Kafka."""
        with self._lock:
            record = self._get(name)
            if not isinstance(count, int) or count <= record.partitions:
                what = "already has" if count == record.partitions else "currently has"
                raise InvalidPartitionsError(f"topic {name!r} {what} {record.partitions} partitions; "
                                             f"it can only grow, got {count}")
            self._commit({**self._topics, name: replace(record, partitions=count)})

    def set_configs(self, name: str, configs: Mapping[str, str | None]) -> None:
        """Set topic-level overrides; a None value removes an override."""
        for key, value in configs.items():
            if not isinstance(key, str) or not key or not (value is None or isinstance(value, str)):
                raise InvalidConfigError(f"bad topic config {key!r}={value!r}: keys and values are strings")
        with self._lock:
            record = self._get(name)
            merged = dict(record.configs)
            for key, value in configs.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            self._commit({**self._topics, name: replace(record, configs=merged)})

    def set_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Replace a group's config overrides (empty: the group has none any more)."""
        if not isinstance(group_id, str) or not group_id:
            raise InvalidConfigError(f"bad group id {group_id!r}: a non-empty string")
        clean = self._clean_configs(configs)
        with self._lock:
            groups = {g: dict(c) for g, c in self._group_configs.items() if g != group_id}
            if clean:
                groups[group_id] = clean
            self._commit(self._topics, groups)

    # -- internals -------------------------------------------------------------------------
    def _get(self, name: str) -> TopicRecord:
        record = self._topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return record

    @staticmethod
    def _clean_configs(configs: Mapping[str, str]) -> dict[str, str]:
        for key, value in configs.items():
            if not isinstance(key, str) or not key or not isinstance(value, str):
                raise InvalidConfigError(f"bad topic config {key!r}={value!r}: keys and values are strings")
        return dict(configs)

    def _commit(self, topics: dict[str, TopicRecord], groups: dict[str, dict[str, str]] | None = None) -> None:
        """Write the new table durably, then make it the current one (``groups`` None: unchanged)."""
        groups = self._group_configs if groups is None else groups
        body = {"format": FORMAT, "cluster_id": self.cluster_id, "generation": self.generation + 1,
                "topics": [r.to_json() for _, r in sorted(topics.items())]}
        if groups:
            body["group_configs"] = {g: dict(sorted(c.items())) for g, c in sorted(groups.items())}
        _write_atomically(self.path, json.dumps(body, indent=1).encode("utf-8") + b"\n")
        self.generation += 1
        if topics is not self._topics:
            self._topics.clear()
            self._topics.update(topics)
        if groups is not self._group_configs:
            self._group_configs.clear()
            self._group_configs.update(groups)

    def _load_table(self) -> tuple[int, dict[str, TopicRecord], dict[str, dict[str, str]]]:
        try:
            os.unlink(self.path + ".tmp")  # an interrupted write; the old table is intact
        except FileNotFoundError:
            pass
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return 0, {}, {}
        except OSError as exc:
            raise MetadataCorruptError(f"{self.path}: cannot read: {exc}") from None
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT:
                raise ValueError(f"unknown format {body.get('format')!r}")
            generation = int(body["generation"])
            topics = {}
            for obj in body["topics"]:
                record = TopicRecord.from_json(obj)
                validate_topic_name(record.name)
                topics[record.name] = record
            groups = body.get("group_configs", {})
            if not isinstance(groups, dict) or not all(
                    isinstance(g, str) and g and isinstance(c, dict)
                    and all(isinstance(k, str) and isinstance(v, str) for k, v in c.items())
                    for g, c in groups.items()):
                raise ValueError("bad group_configs")
            groups = {g: dict(c) for g, c in groups.items() if c}
            owner = body["cluster_id"]
        except (ValueError, KeyError, TypeError, AttributeError, InvalidTopicError) as exc:
            raise MetadataCorruptError(f"{self.path}: unreadable topic table ({exc}); restore it from a "
                                       "backup or remove it to start with no topics") from None
        if owner != self.cluster_id:
            raise InconsistentClusterIdError(f"{self.path} belongs to cluster {owner}, but "
                                             f"{META_PROPERTIES} says {self.cluster_id}")
        return generation, topics, groups

    def _load_meta_properties(self, cluster_id: str | None) -> str:
        path = os.path.join(self.log_dir, META_PROPERTIES)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            cluster_id = cluster_id or new_cluster_id()
            write_meta_properties(path, cluster_id, self.node_id)
            return cluster_id
        except (OSError, UnicodeDecodeError) as exc:
            raise MetadataCorruptError(f"{path}: cannot read: {exc}") from None
        props = dict((k, v) for k, v, _ in self._check(lambda: parse_properties(text, path)))
        version = props.get("version")
        id_key = {"0": "broker.id", "1": "node.id"}.get(version)
        if id_key is None:
            raise MetadataCorruptError(f"{path}: unsupported version {version!r} (expected 0 or 1)")
        stored_node = props.get(id_key)
        stored_cluster = props.get("cluster.id")
        if stored_node is None or not stored_node.lstrip("-").isdigit() or not stored_cluster:
            raise MetadataCorruptError(f"{path}: needs {id_key} and cluster.id, found {sorted(props)}")
        if int(stored_node) != self.node_id:
            raise InconsistentNodeIdError(f"{path} was written by node {stored_node}, but this is node "
                                          f"{self.node_id} (node.id); point log.dirs elsewhere or fix node.id")
        if cluster_id is not None and cluster_id != stored_cluster:
            raise InconsistentClusterIdError(f"{path} belongs to cluster {stored_cluster}, but this broker "
                                             f"is configured for cluster {cluster_id} (cluster.id)")
        return stored_cluster

    @staticmethod
    def _check(fn):
        try:
            return fn()
        except ConfigError as exc:
            raise MetadataCorruptError(str(exc)) from None


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def write_meta_properties(path: str, cluster_id: str, node_id: int) -> None:
    """Kafka's KRaft v1 meta.properties, comment header included, written atomically."""
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    text = (f"#\n#{stamp}\nnode.id={node_id}\ndirectory.id={uuid_to_base64(random_uuid())}\n"
            f"version=1\ncluster.id={cluster_id}\n")
    _write_atomically(path, text.encode("utf-8"))


def _write_atomically(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")
