"""The records of the ``_schemas`` topic in Confluent's key/value JSON layout, so a registry can be
migrated in or out by copying the topic.

Keys are compact JSON objects with their fields in Confluent's order (compaction compares key bytes):
SCHEMA {keytype, subject, version, magic:1}; CONFIG and MODE {keytype, subject (null: global), magic:0};
DELETE_SUBJECT and CLEAR_SUBJECT {keytype, subject, magic:0}; NOOP {keytype, magic:0}. A None value
(a tombstone) removes what the key names.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

SCHEMA, CONFIG, MODE = "SCHEMA", "CONFIG", "MODE"
DELETE_SUBJECT, CLEAR_SUBJECT, NOOP = "DELETE_SUBJECT", "CLEAR_SUBJECT", "NOOP"
KEYTYPES = (SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP)


class BadRecord(ValueError):
    """A key or value that is not in the layout (skipped by the state, with a log line)."""


@dataclass(frozen=True)
class Record:
    keytype: str
    subject: str | None
    version: int | None
    value: dict | None  # None: a tombstone


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dumps({"keytype": SCHEMA, "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return _dumps({"keytype": CONFIG, "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    return _dumps({"keytype": MODE, "subject": subject, "magic": 0})


def delete_subject_key(subject: str) -> bytes:
    return _dumps({"keytype": DELETE_SUBJECT, "subject": subject, "magic": 0})


def clear_subject_key(subject: str) -> bytes:
    return _dumps({"keytype": CLEAR_SUBJECT, "subject": subject, "magic": 0})


def noop_key() -> bytes:
    return _dumps({"keytype": NOOP, "magic": 0})


def schema_value(subject: str, version: int, schema_id: int, schema: str, schema_type: str = "AVRO",
                 references: list[dict] | None = None, deleted: bool = False, metadata: dict | None = None,
                 rule_set: dict | None = None) -> bytes:
    """Confluent omits schemaType for Avro, and references, metadata and ruleSet when absent."""
    value: dict = {"subject": subject, "version": version, "id": schema_id}
    if schema_type and schema_type != "AVRO":
        value["schemaType"] = schema_type
    if references:
        value["references"] = references
    if metadata is not None:
        value["metadata"] = metadata
    if rule_set is not None:
        value["ruleSet"] = rule_set
    value["schema"] = schema
    value["deleted"] = deleted
    return _dumps(value)


def config_value(level: str) -> bytes:
    return _dumps({"compatibilityLevel": level})


def mode_value(mode: str) -> bytes:
    return _dumps({"mode": mode})


def delete_subject_value(subject: str, version: int) -> bytes:
    """Every version up to ``version`` is soft-deleted."""
    return _dumps({"subject": subject, "version": version})


def clear_subject_value(subject: str) -> bytes:
    return _dumps({"subject": subject})


def decode(key: bytes, value: bytes | None) -> Record:
    """One record of the topic; BadRecord when the key is not in the layout."""
    try:
        k = json.loads(key)
    except (ValueError, TypeError) as exc:
        raise BadRecord(f"key is not JSON: {exc}") from None
    if not isinstance(k, dict) or k.get("keytype") not in KEYTYPES:
        raise BadRecord(f"unknown key {key[:200]!r}")
    subject = k.get("subject")
    version = k.get("version")
    if subject is not None and not isinstance(subject, str):
        raise BadRecord(f"subject is not a string in key {key[:200]!r}")
    if k["keytype"] == SCHEMA and (not isinstance(version, int) or subject is None):
        raise BadRecord(f"schema key without subject or version: {key[:200]!r}")
    v = None
    if value is not None:
        try:
            v = json.loads(value)
        except (ValueError, TypeError) as exc:
            raise BadRecord(f"value is not JSON: {exc}") from None
        if v is not None and not isinstance(v, dict):
            raise BadRecord(f"value is not a JSON object: {value[:200]!r}")
    return Record(k["keytype"], subject, version if isinstance(version, int) else None, v)
