"""The registry's state, built only by applying the ``_schemas`` records in log order.

Every registry (primary or not) holds the same state once it has applied the same records. A SCHEMA
record that would give an id already bound to a different schema is refused (two primaries for a
moment may both have picked the id: the first in the log keeps it, and the writer of the second
sees its record refused and tries again).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pybroker.registry import records
from pybroker.registry.records import Record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredSchema:
    """A schema's content: what an id stands for (the same content under two subjects has one id)."""
    schema_type: str
    text: str
    references: tuple  # of (name, subject, version)
    metadata: str | None = None  # JSON text (kept as Confluent sends it), part of the identity
    rule_set: str | None = None

    def reference_dicts(self) -> list[dict]:
        return [{"name": n, "subject": s, "version": v} for n, s, v in self.references]


@dataclass
class VersionEntry:
    subject: str
    version: int
    schema_id: int
    deleted: bool = False


@dataclass
class SubjectState:
    versions: dict[int, VersionEntry] = field(default_factory=dict)
    max_version: int = 0  # versions are never reused, even after a permanent delete


def _json_text(obj) -> str | None:
    import json
    return None if obj is None else json.dumps(obj, sort_keys=True, separators=(",", ":"))


def content_of(value: dict) -> StoredSchema:
    refs = tuple((r.get("name"), r.get("subject"), r.get("version")) for r in value.get("references") or ())
    return StoredSchema((value.get("schemaType") or "AVRO").upper(), value.get("schema") or "", refs,
                        _json_text(value.get("metadata")), _json_text(value.get("ruleSet")))


class RegistryState:
    def __init__(self):
        self.subjects: dict[str, SubjectState] = {}
        self.schemas: dict[int, StoredSchema] = {}  # ids with at least one version (deleted or not)
        self.ids_by_content: dict[StoredSchema, int] = {}
        self.uses: dict[int, set[tuple[str, int]]] = {}  # id -> (subject, version) holding it
        self.configs: dict[str | None, str] = {}  # None: the global level
        self.modes: dict[str | None, str] = {}
        self.max_id = 0  # ids are never reused
        self.applied_offset = -1
        self.refused: set[int] = set()  # offsets of SCHEMA records refused (id conflicts)

    # ---- applying records ----------------------------------------------------------------------

    def apply(self, key: bytes, value: bytes | None, offset: int) -> bool:
        """Apply one record; False when it was skipped (malformed, or a conflicting id)."""
        self.applied_offset = max(self.applied_offset, offset)
        try:
            record = records.decode(key, value)
        except records.BadRecord as exc:
            log.warning("schema log offset %d skipped: %s", offset, exc)
            return False
        handler = getattr(self, "_apply_" + record.keytype.lower())
        try:
            accepted = handler(record)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            log.warning("schema log offset %d skipped: %s", offset, exc)
            return False
        if not accepted:
            self.refused.add(offset)
        return accepted

    def _apply_schema(self, r: Record) -> bool:
        subject = self.subjects.get(r.subject)
        if r.value is None:  # permanent delete of one version
            if subject is not None and r.version in subject.versions:
                self._drop(subject.versions.pop(r.version))
                if not subject.versions and subject.max_version == 0:
                    del self.subjects[r.subject]
            return True
        schema_id = int(r.value["id"])
        content = content_of(r.value)
        bound = self.schemas.get(schema_id)
        self.max_id = max(self.max_id, schema_id)
        if bound is not None and bound != content:
            log.warning("schema id %d is already another schema's; record for %s version %d refused",
                        schema_id, r.subject, r.version)
            return False
        if subject is None:
            subject = self.subjects[r.subject] = SubjectState()
        old = subject.versions.get(r.version)
        if old is not None and old.schema_id != schema_id:
            self._drop(old)
        subject.versions[r.version] = VersionEntry(r.subject, r.version, schema_id, bool(r.value.get("deleted")))
        subject.max_version = max(subject.max_version, r.version)
        self.schemas[schema_id] = content
        self.ids_by_content.setdefault(content, schema_id)
        self.uses.setdefault(schema_id, set()).add((r.subject, r.version))
        return True

    def _drop(self, entry: VersionEntry) -> None:
        """A version is gone for good: its id goes too when no other version holds it."""
        holders = self.uses.get(entry.schema_id, set())
        holders.discard((entry.subject, entry.version))
        if not holders:
            self.uses.pop(entry.schema_id, None)
            content = self.schemas.pop(entry.schema_id, None)
            if content is not None and self.ids_by_content.get(content) == entry.schema_id:
                del self.ids_by_content[content]

    def _apply_config(self, r: Record) -> bool:
        if r.value is None:
            self.configs.pop(r.subject, None)
        elif r.value.get("compatibilityLevel"):
            self.configs[r.subject] = str(r.value["compatibilityLevel"]).upper()
        return True

    def _apply_mode(self, r: Record) -> bool:
        if r.value is None:
            self.modes.pop(r.subject, None)
        elif r.value.get("mode"):
            self.modes[r.subject] = str(r.value["mode"]).upper()
        return True

    def _apply_delete_subject(self, r: Record) -> bool:
        subject = self.subjects.get(r.subject)
        if subject is not None and r.value is not None:
            upto = r.value.get("version")
            for entry in subject.versions.values():
                if upto is None or entry.version <= upto:
                    entry.deleted = True
        return True

    def _apply_clear_subject(self, r: Record) -> bool:
        subject = self.subjects.get(r.subject)
        if subject is not None and r.value is not None:
            for version in [v for v, e in subject.versions.items() if e.deleted]:
                self._drop(subject.versions.pop(version))
        return True

    def _apply_noop(self, r: Record) -> bool:
        return True

    # ---- reading -------------------------------------------------------------------------------

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(name for name, s in self.subjects.items()
                      if any(deleted or not e.deleted for e in s.versions.values()))

    def versions(self, subject: str, deleted: bool = False) -> list[VersionEntry]:
        s = self.subjects.get(subject)
        if s is None:
            return []
        return [s.versions[v] for v in sorted(s.versions) if deleted or not s.versions[v].deleted]

    def version(self, subject: str, version: int, deleted: bool = False) -> VersionEntry | None:
        s = self.subjects.get(subject)
        entry = s.versions.get(version) if s is not None else None
        return entry if entry is not None and (deleted or not entry.deleted) else None

    def next_version(self, subject: str) -> int:
        s = self.subjects.get(subject)
        return (s.max_version if s is not None else 0) + 1

    def next_id(self) -> int:
        return self.max_id + 1

    def holders(self, schema_id: int, deleted: bool = False) -> list[VersionEntry]:
        """The versions holding an id, by subject then version."""
        out = []
        for subject, version in sorted(self.uses.get(schema_id, ())):
            entry = self.subjects[subject].versions[version]
            if deleted or not entry.deleted:
                out.append(entry)
        return out

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of live versions whose schema references ``subject`` ``version``."""
        out = set()
        for schema_id, content in self.schemas.items():
            if any(s == subject and v == version for _, s, v in content.references) and self.holders(schema_id):
                out.add(schema_id)
        return sorted(out)

    def subject_is_empty(self, subject: str) -> bool:
        return not self.versions(subject, deleted=True)
