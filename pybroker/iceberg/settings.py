"""The broker-level Iceberg settings (``iceberg.*`` in server.properties) and the topic-level ones."""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping

CATALOG_TYPES = ("sql", "rest")
MODES = ("disabled", "key_value", "value_schema_id_prefix", "value_schema_latest")
INVALID_RECORD_ACTIONS = ("dlq_table", "drop")
PROGRESS_KEY = "pybroker.next-offsets"  # snapshot summary: JSON {partition: next offset} the table holds
DLQ_SUFFIX = "~dlq"


@dataclasses.dataclass(frozen=True)
class IcebergSettings:
    catalog_type: str = "sql"
    catalog_uri: str = ""
    warehouse: str = ""
    namespace: str = "kafka"
    catalog_properties: Mapping[str, str] = dataclasses.field(default_factory=dict)  # credentials, s3.*, ...
    schema_registry_url: str = ""  # "": none (value_schema_* tables wait, with a warning, until there is one)
    target_file_size_bytes: int = 128 * 1024 * 1024
    maintenance_interval_ms: int = 10 * 60 * 1000
    snapshot_max_age_ms: int = 60 * 60 * 1000  # older snapshots are expired (the newest few are kept)
    snapshots_to_keep: int = 5
    small_file_bytes: int = 16 * 1024 * 1024  # files below this are rewritten together
    small_files_to_rewrite: int = 10  # a partition with at least this many small files is rewritten
    catalog_retry_ms: int = 1000  # the first wait after a catalog or warehouse failure (doubled up to 30 s)

    def catalog_config(self) -> dict[str, str]:
        """The properties pyiceberg's ``load_catalog`` takes."""
        return {"type": self.catalog_type, "uri": self.catalog_uri, "warehouse": self.warehouse,
                **self.catalog_properties}

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"catalog_properties": dict(self.catalog_properties)}

    @classmethod
    def from_json(cls, data: dict) -> "IcebergSettings":
        return cls(**data)


_INTS = {"iceberg.target.file.size.bytes": "target_file_size_bytes",
         "iceberg.maintenance.interval.ms": "maintenance_interval_ms",
         "iceberg.snapshot.max.age.ms": "snapshot_max_age_ms",
         "iceberg.snapshots.to.keep": "snapshots_to_keep",
         "iceberg.small.file.bytes": "small_file_bytes",
         "iceberg.small.files.to.rewrite": "small_files_to_rewrite",
         "iceberg.catalog.retry.ms": "catalog_retry_ms"}
# to pyiceberg's catalog and file IO: iceberg.catalog.<key> as <key> (credential, token, ...), iceberg.s3.* as s3.*
_PASSTHROUGH = ("iceberg.catalog.", "iceberg.s3.", "iceberg.gcs.", "iceberg.adls.")
_KNOWN = {"iceberg.catalog.type", "iceberg.catalog.uri", "iceberg.warehouse", "iceberg.namespace",
          "iceberg.schema.registry.url", *_INTS}


class BrokerKeyError(ValueError):
    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


def check_broker_keys(raw: Mapping[str, str]) -> None:
    """Unknown iceberg.* keys and bad values are errors at start, as every other broker key."""
    for key in raw:
        if key.startswith("iceberg.") and key not in _KNOWN and not key.startswith(_PASSTHROUGH):
            raise BrokerKeyError(f"unknown config key {key!r} (Iceberg keys: {', '.join(sorted(_KNOWN))}, "
                                 f"and {', '.join(p + '*' for p in _PASSTHROUGH)})", key)
    try:
        from_broker_config(raw, ".")
    except ValueError as e:
        key = next((k for k in raw if k in str(e)), None)
        raise BrokerKeyError(str(e), key) from None


def from_broker_config(raw: Mapping[str, str], first_log_dir: str, registry_url: str = "") -> IcebergSettings:
    """Settings from server.properties. Defaults need no other server: a SQLite catalog and a file
    warehouse under the first log directory. ``registry_url``: this broker's own schema registry, if any."""
    base = os.path.join(os.path.abspath(first_log_dir), "iceberg")
    values: dict = {
        "catalog_type": raw.get("iceberg.catalog.type", "sql").strip(),
        "catalog_uri": raw.get("iceberg.catalog.uri", "").strip() or f"sqlite:///{base}/catalog.db",
        "warehouse": raw.get("iceberg.warehouse", "").strip() or f"file://{base}/warehouse",
        "namespace": raw.get("iceberg.namespace", "kafka").strip(),
        "schema_registry_url": raw.get("iceberg.schema.registry.url", "").strip() or registry_url,
    }
    if values["catalog_type"] not in CATALOG_TYPES:
        raise ValueError(f"iceberg.catalog.type must be one of {', '.join(CATALOG_TYPES)}, "
                         f"got {values['catalog_type']!r}")
    for key, name in _INTS.items():
        if key in raw:
            try:
                values[name] = int(raw[key])
            except ValueError:
                raise ValueError(f"{key} must be an integer, got {raw[key]!r}") from None
            if values[name] < 0:
                raise ValueError(f"{key} must be at least 0, got {values[name]}")
    props = {}
    for key, value in raw.items():
        if key.startswith(_PASSTHROUGH) and key not in _KNOWN:
            cut = len("iceberg.catalog.") if key.startswith("iceberg.catalog.") else len("iceberg.")
            props[key[cut:]] = value
    values["catalog_properties"] = props
    return IcebergSettings(**values)


@dataclasses.dataclass(frozen=True)
class TopicTable:
    """A topic's table settings (its topic configs iceberg.*)."""
    mode: str = "disabled"
    partition_spec: str = "hour(kafka.timestamp)"
    target_lag_ms: int = 60000
    invalid_record_action: str = "dlq_table"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)
