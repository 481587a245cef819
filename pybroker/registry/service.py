"""The registry's REST semantics (Confluent Schema Registry's), over a SchemaLog and an election.

Reads answer from the local state. Writes happen on the primary only: under one lock it first
applies everything the log holds (it may have just become primary), computes ids and versions,
appends records and answers once it has applied them. A registry that is not the primary sends the
request on to the primary (forward.py). Every method returns a JSON-able value (``RawText`` for the
endpoints that answer a schema's text) or raises RegistryError.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable, Callable

from pybroker.registry import errors, records
from pybroker.registry.errors import RegistryError
from pybroker.registry.forward import ForwardedAnswer, ForwardedRequest, Forwarder
from pybroker.registry.state import RegistryState, StoredSchema, VersionEntry
from pybroker.schemas import SCHEMA_TYPES, InvalidSchema, ParsedSchema, parse
from pybroker.schemas.compatibility import LEVELS, incompatibilities

log = logging.getLogger(__name__)

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
READ_ONLY_MODES = ("READONLY", "READONLY_OVERRIDE")
MAX_REFERENCE_DEPTH = 32
WRITE_ATTEMPTS = 5  # a record refused for an id conflict (two primaries for a moment) is written again
MAX_VERSION = 2**31 - 1
REGISTER_FIELDS = {"schema", "schemaType", "references", "metadata", "ruleSet", "id", "version",
                   "schemaTagsToAdd", "schemaTagsToRemove", "propagateSchemaTags"}


class RawText(str):
    """An answer that is a schema's text, sent as it is rather than as a JSON string."""


class NotPrimary(Exception):
    """This registry stopped being the primary before writing: the request goes to the new one."""


def _json_text(obj) -> str | None:
    """Metadata and rule sets take part in a schema's identity: compared as sorted compact JSON."""
    return None if obj is None else json.dumps(obj, sort_keys=True, separators=(",", ":"))


class SchemaRegistry:
    def __init__(self, log, primary, settings):
        self.log = log
        self.primary = primary
        self.settings = settings
        self.state = RegistryState()
        self._write_lock = asyncio.Lock()
        self._parsed: dict[StoredSchema, ParsedSchema] = {}
        self.forwarder = Forwarder(settings.request_timeout_s, getattr(settings, "client_ssl_context", None))

    async def start(self) -> None:
        await self.log.start(self._on_record)

    async def close(self) -> None:
        await self.forwarder.close()

    def _on_record(self, key: bytes, value: bytes | None, offset: int) -> None:
        try:
            self.state.apply(key, value, offset)
        except Exception:  # one bad record must not stop the tail
            log.exception("schema log offset %d could not be applied", offset)

    # ---- parsing -------------------------------------------------------------------------------

    def parsed(self, content: StoredSchema, depth: int = 0) -> ParsedSchema:
        """A stored schema parsed, with its references resolved through the subjects they name."""
        cached = self._parsed.get(content)
        if cached is not None:
            return cached
        if depth > MAX_REFERENCE_DEPTH:
            raise InvalidSchema("schema references nest too deeply (a cycle?)")
        refs = {}
        for name, subject, version in content.references:
            entry = self.state.version(subject, version, deleted=True)
            if entry is None or entry.schema_id not in self.state.schemas:
                raise InvalidSchema(f"reference {name!r} names {subject} version {version}, which does not exist")
            refs[name] = self.parsed(self.state.schemas[entry.schema_id], depth + 1)
        result = parse(content.schema_type, content.text, refs)
        if len(self._parsed) > 10000:  # a bound on memory; parsing again is cheap enough
            self._parsed.clear()
        self._parsed[content] = result
        return result

    def _new_schema(self, body: Any, accept_unknown: bool, normalize: bool) -> tuple[ParsedSchema, StoredSchema]:
        """The schema a request carries, parsed (42201 when it is not valid), and what would be stored."""
        if not isinstance(body, dict):
            raise RegistryError(errors.UNPROCESSABLE, "The request body must be a JSON object")
        unknown = sorted(set(body) - REGISTER_FIELDS)
        if unknown and not accept_unknown:
            raise RegistryError(errors.UNPROCESSABLE, f"Unrecognized field: {unknown[0]}")
        text = body.get("schema")
        if text is None or text == "":
            raise RegistryError(errors.INVALID_SCHEMA, "Empty schema")
        if not isinstance(text, str):
            raise RegistryError(errors.BAD_REQUEST, "The field 'schema' must be a string (the schema's text)")
        schema_type = body.get("schemaType") or "AVRO"
        if not isinstance(schema_type, str) or schema_type.upper() not in SCHEMA_TYPES:
            raise RegistryError(errors.INVALID_SCHEMA, f"Invalid schema type {schema_type!r}; expected one of "
                                                       f"{', '.join(SCHEMA_TYPES)}")
        schema_type = schema_type.upper()
        refs, resolved = self._references(body.get("references"))
        try:
            parsed = parse(schema_type, text, resolved)
            stored_text = parsed.normalized() if normalize else parsed.canonical()
        except InvalidSchema as exc:
            raise RegistryError(errors.INVALID_SCHEMA, f"Invalid schema: {exc}") from None
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise RegistryError(errors.INVALID_SCHEMA, f"Invalid schema: {type(exc).__name__}: {exc}") from None
        metadata, rule_set = body.get("metadata"), body.get("ruleSet")
        content = StoredSchema(schema_type, stored_text, refs, _json_text(metadata), _json_text(rule_set))
        return parsed, content

    def _references(self, references: Any) -> tuple[tuple, dict[str, ParsedSchema]]:
        if references is None:
            return (), {}
        if not isinstance(references, list):
            raise RegistryError(errors.UNPROCESSABLE, "The field 'references' must be a list")
        refs, resolved = [], {}
        for ref in references:
            if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or \
                    not isinstance(ref.get("subject"), str) or not isinstance(ref.get("version"), int):
                raise RegistryError(errors.UNPROCESSABLE, "A reference is {\"name\": str, \"subject\": str, "
                                                          "\"version\": int}")
            name, subject, version = ref["name"], ref["subject"], ref["version"]
            if version == -1:  # the latest live version
                live = self.state.versions(subject)
                version = live[-1].version if live else version
            entry = self.state.version(subject, version)
            if entry is None:
                raise RegistryError(errors.INVALID_SCHEMA, f"Invalid schema: reference {name!r} names subject "
                                                           f"{subject!r} version {ref['version']}, which does not "
                                                           f"exist")
            try:
                resolved[name] = self.parsed(self.state.schemas[entry.schema_id])
            except InvalidSchema as exc:
                raise RegistryError(errors.INVALID_SCHEMA, f"Invalid schema: reference {name!r}: {exc}") from None
            refs.append((name, subject, version))
        return tuple(refs), resolved

    # ---- helpers -------------------------------------------------------------------------------

    def level(self, subject: str | None) -> str:
        if subject is not None and subject in self.state.configs:
            return self.state.configs[subject]
        return self.state.configs.get(None, self.settings.compatibility)

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self.state.modes:
            return self.state.modes[subject]
        return self.state.modes.get(None, "READWRITE")

    def _require_subject(self, subject: str, deleted: bool = False) -> list[VersionEntry]:
        versions = self.state.versions(subject, deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        return versions

    @staticmethod
    def _version_number(text: str | int) -> int | None:
        """A version path segment: a number from 1, or "latest"/-1 (None)."""
        if isinstance(text, int):
            value = text
        elif str(text).strip().lower() == "latest":
            return None
        else:
            try:
                value = int(str(text).strip())
            except ValueError:
                value = 0
        if value == -1:
            return None
        if not 1 <= value <= MAX_VERSION:
            raise RegistryError(errors.INVALID_VERSION, f"The specified version '{text}' is not a valid version id. "
                                                        f"Allowed values are between [1, 2^31-1] and the string "
                                                        f"\"latest\"")
        return value

    def _entry(self, subject: str, version: str | int, deleted: bool = False) -> VersionEntry:
        number = self._version_number(version)
        versions = self._require_subject(subject, deleted)
        if number is None:
            return versions[-1]
        entry = self.state.version(subject, number, deleted)
        if entry is None:
            raise errors.version_not_found(subject, number)
        return entry

    def _schema_fields(self, content: StoredSchema) -> dict:
        out: dict = {}
        if content.schema_type != "AVRO":
            out["schemaType"] = content.schema_type
        if content.references:
            out["references"] = content.reference_dicts()
        if content.metadata is not None:
            out["metadata"] = json.loads(content.metadata)
        if content.rule_set is not None:
            out["ruleSet"] = json.loads(content.rule_set)
        return out

    def _version_body(self, entry: VersionEntry, fmt: str | None = None) -> dict:
        content = self.state.schemas[entry.schema_id]
        body = {"subject": entry.subject, "version": entry.version, "id": entry.schema_id}
        body.update(self._schema_fields(content))
        body["schema"] = self._formatted(content, fmt)
        return body

    def _formatted(self, content: StoredSchema, fmt: str | None) -> str:
        """The schema's text, or under ``format=serialized`` its serialized form (a Protobuf descriptor)."""
        if fmt == "serialized":
            try:
                parsed = self.parsed(content)
            except InvalidSchema:
                return content.text
            if hasattr(parsed, "serialized"):
                return parsed.serialized()
        return content.text

    def _matching(self, subject: str, parsed: ParsedSchema, content: StoredSchema, normalize: bool,
                  deleted: bool) -> VersionEntry | None:
        """The subject's version holding this schema (normalized when asked), if any."""
        for entry in self.state.versions(subject, deleted):
            held = self.state.schemas[entry.schema_id]
            if held == content:
                return entry
            if normalize and (held.schema_type, held.references, held.metadata, held.rule_set) == \
                    (content.schema_type, content.references, content.metadata, content.rule_set):
                try:
                    if self.parsed(held).normalized() == content.text:
                        return entry
                except InvalidSchema:
                    continue
        return None

    def _incompatibilities(self, level: str, parsed: ParsedSchema, against: list[VersionEntry]) -> list[str]:
        if level == "NONE":
            return []
        previous = []
        for entry in against:
            held = self.state.schemas[entry.schema_id]
            if held.schema_type != parsed.schema_type:
                return [f"the schema type {parsed.schema_type} differs from version {entry.version}'s "
                        f"{held.schema_type}"]
            try:
                previous.append(self.parsed(held))
            except InvalidSchema as exc:
                return [f"version {entry.version} cannot be read: {exc}"]
        return incompatibilities(level, parsed, previous)

    # ---- reads ---------------------------------------------------------------------------------

    def root(self) -> dict:
        return {}

    def schema_types(self) -> list[str]:
        return ["JSON", "PROTOBUF", "AVRO"]

    def contexts(self) -> list[str]:
        return ["."]

    def subjects(self, deleted: bool = False, prefix: str | None = None, deleted_only: bool = False) -> list[str]:
        names = self.state.subject_names(deleted or deleted_only)
        if deleted_only:
            live = set(self.state.subject_names(False))
            names = [n for n in names if n not in live or
                     any(e.deleted for e in self.state.versions(n, deleted=True))]
        if prefix and prefix != ":*:":
            names = [n for n in names if n.startswith(prefix)]
        return names

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        return [e.version for e in self._require_subject(subject, deleted)]

    def get_version(self, subject: str, version: str, deleted: bool = False, fmt: str | None = None) -> dict:
        return self._version_body(self._entry(subject, version, deleted), fmt)

    def get_version_schema(self, subject: str, version: str, deleted: bool = False) -> RawText:
        return RawText(self.state.schemas[self._entry(subject, version, deleted).schema_id].text)

    def referenced_by(self, subject: str, version: str) -> list[int]:
        entry = self._entry(subject, version, deleted=True)
        return self.state.referenced_by(subject, entry.version)

    def _schema_by_id(self, schema_id: str) -> tuple[int, StoredSchema]:
        try:
            number = int(schema_id)
        except ValueError:
            number = -1
        content = self.state.schemas.get(number)
        if content is None:
            raise errors.schema_not_found(f"Schema {schema_id} not found")
        return number, content

    def get_schema(self, schema_id: str, fmt: str | None = None) -> dict:
        _, content = self._schema_by_id(schema_id)
        body = self._schema_fields(content)
        body["schema"] = self._formatted(content, fmt)
        return body

    def get_schema_text(self, schema_id: str) -> RawText:
        return RawText(self._schema_by_id(schema_id)[1].text)

    def schema_versions(self, schema_id: str, deleted: bool = False, subject: str | None = None) -> list[dict]:
        number, _ = self._schema_by_id(schema_id)
        return [{"subject": e.subject, "version": e.version} for e in self.state.holders(number, deleted)
                if subject is None or e.subject == subject]

    def schema_subjects(self, schema_id: str, deleted: bool = False, subject: str | None = None) -> list[str]:
        number, _ = self._schema_by_id(schema_id)
        return sorted({e.subject for e in self.state.holders(number, deleted)
                       if subject is None or e.subject == subject})

    def list_schemas(self, prefix: str | None = None, deleted: bool = False, latest_only: bool = False) -> list[dict]:
        out = []
        for subject in self.state.subject_names(deleted):
            if prefix and not subject.startswith(prefix):
                continue
            entries = self.state.versions(subject, deleted)
            out += [self._version_body(e) for e in (entries[-1:] if latest_only else entries)]
        return out

    def lookup(self, subject: str, body: Any, normalize: bool = False, deleted: bool = False,
               accept_unknown: bool = True) -> dict:
        self._require_subject(subject, deleted)
        parsed, content = self._new_schema(body, accept_unknown, normalize)
        entry = self._matching(subject, parsed, content, normalize, deleted)
        if entry is None:
            raise errors.schema_not_found("Schema not found")
        return self._version_body(entry)

    def check_compatibility(self, subject: str, version: str | None, body: Any, normalize: bool = False,
                            verbose: bool = False, accept_unknown: bool = True) -> dict:
        """``version`` None: against the versions the subject's level names (all of them when transitive)."""
        parsed, _ = self._new_schema(body, accept_unknown, normalize)
        level = self.level(subject)
        if version is None:
            messages = self._incompatibilities(level, parsed, self.state.versions(subject))
        else:
            entry = self._entry(subject, version)
            messages = self._incompatibilities(level.removesuffix("_TRANSITIVE"), parsed, [entry])
        answer: dict = {"is_compatible": not messages}
        if verbose:
            answer["messages"] = messages
        return answer

    def get_config(self, subject: str | None = None, default_to_global: bool = False) -> dict:
        if subject is None:
            return {"compatibilityLevel": self.level(None)}
        if subject in self.state.configs:
            return {"compatibilityLevel": self.state.configs[subject]}
        if default_to_global:
            return {"compatibilityLevel": self.level(None)}
        raise RegistryError(errors.SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
                            f"Subject '{subject}' does not have subject-level compatibility configured")

    def get_mode(self, subject: str | None = None, default_to_global: bool = False) -> dict:
        if subject is None:
            return {"mode": self.mode(None)}
        if subject in self.state.modes:
            return {"mode": self.state.modes[subject]}
        if default_to_global:
            return {"mode": self.mode(None)}
        raise RegistryError(errors.SUBJECT_MODE_NOT_CONFIGURED,
                            f"Subject '{subject}' does not have subject-level mode configured")

    # ---- writes --------------------------------------------------------------------------------

    async def write(self, request: ForwardedRequest, operation: Callable[[], Awaitable[Any]]) -> Any:
        """Run a write here when this registry is the primary, else forward ``request`` to the primary."""
        if not self.primary.is_primary and self.primary.primary_url is None:
            # an election under way (a registry starting, a primary gone): wait for its outcome
            await self.primary.wait_decided(self.settings.request_timeout_s)
        if self.primary.is_primary:
            try:
                return await operation()
            except NotPrimary:
                pass
        answer: ForwardedAnswer = await self.forwarder.forward(self.primary.primary_url, request)
        return answer

    async def _locked(self, body: Callable[[], Awaitable[Any]]) -> Any:
        """One write at a time, on a state holding everything the log holds."""
        async with self._write_lock:
            if not self.primary.is_primary:
                raise NotPrimary()
            try:
                await self.log.catch_up(self.settings.request_timeout_s)
            except (TimeoutError, asyncio.TimeoutError):
                raise RegistryError(errors.OPERATION_TIMEOUT, "Timed out reading the schema log") from None
            except Exception as exc:
                raise RegistryError(errors.STORE_ERROR, f"Error while reading the schema log: {exc}") from None
            return await body()

    async def _append(self, items: list[tuple[bytes, bytes | None]]) -> list[int]:
        """Append records in order and wait until this registry has applied them."""
        offsets = []
        try:
            for key, value in items:
                offsets.append(await self.log.append(key, value))
            if offsets:
                await self.log.wait_applied(offsets[-1], self.settings.request_timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            raise RegistryError(errors.OPERATION_TIMEOUT, "Timed out writing to the schema log") from None
        except RegistryError:
            raise
        except Exception as exc:
            raise RegistryError(errors.STORE_ERROR, f"Error while writing to the schema log: {exc}") from None
        return offsets

    def _writable(self, subject: str | None) -> None:
        mode = self.mode(subject)
        if mode in READ_ONLY_MODES:
            where = f"Subject {subject}" if subject is not None else "The registry"
            raise RegistryError(errors.OPERATION_NOT_PERMITTED, f"{where} is in read-only mode")

    async def register(self, subject: str, body: Any, normalize: bool = False, accept_unknown: bool = True) -> dict:
        return await self._locked(lambda: self._register(subject, body, normalize, accept_unknown))

    async def _register(self, subject: str, body: Any, normalize: bool, accept_unknown: bool) -> dict:
        self._writable(subject)
        mode = self.mode(subject)
        parsed, content = self._new_schema(body, accept_unknown, normalize)
        explicit_id, explicit_version = body.get("id"), body.get("version")
        explicit_id = None if explicit_id in (None, -1, 0) else explicit_id
        explicit_version = None if explicit_version in (None, -1, 0) else explicit_version
        for name, value in (("id", explicit_id), ("version", explicit_version)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise RegistryError(errors.UNPROCESSABLE, f"The field '{name}' must be a positive integer")
        if (explicit_id or explicit_version) and mode != "IMPORT":
            if explicit_id is not None and self.state.schemas.get(explicit_id) not in (None, content):
                raise RegistryError(errors.OPERATION_NOT_PERMITTED,
                                    f"Overwrite new schema with id {explicit_id} is not permitted.")
            if explicit_version is not None or explicit_id not in self.state.schemas:
                raise RegistryError(errors.OPERATION_NOT_PERMITTED, "A schema may carry its id and version only "
                                                                    "in IMPORT mode")
        existing = self._matching(subject, parsed, content, normalize, deleted=False)
        if existing is not None and explicit_id in (None, existing.schema_id) and \
                explicit_version in (None, existing.version):
            return {"id": existing.schema_id}
        if mode != "IMPORT":
            problems = self._incompatibilities(self.level(subject), parsed, self.state.versions(subject))
            if problems:
                raise RegistryError(errors.INCOMPATIBLE_SCHEMA,
                                    f"Schema being registered is incompatible with an earlier schema for subject "
                                    f"\"{subject}\", details: {json.dumps(problems)}")
        for _ in range(WRITE_ATTEMPTS):
            if explicit_id is not None:
                bound = self.state.schemas.get(explicit_id)
                if bound is not None and bound != content:
                    raise RegistryError(errors.OPERATION_NOT_PERMITTED,
                                        f"Overwrite new schema with id {explicit_id} is not permitted.")
                schema_id = explicit_id
            else:
                schema_id = self.state.ids_by_content.get(content) or self.state.next_id()
            version = explicit_version or self.state.next_version(subject)
            held = self.state.version(subject, version, deleted=True)
            if held is not None and held.schema_id != schema_id:
                raise RegistryError(errors.OPERATION_NOT_PERMITTED,
                                    f"Version {version} of subject {subject} already holds schema {held.schema_id}")
            value = records.schema_value(subject, version, schema_id, content.text, content.schema_type,
                                         content.reference_dicts() or None,
                                         metadata=body.get("metadata"), rule_set=body.get("ruleSet"))
            [offset] = await self._append([(records.schema_key(subject, version), value)])
            if offset not in self.state.refused:
                self._parsed.setdefault(content, parsed)
                return {"id": schema_id}
            await self.log.catch_up(self.settings.request_timeout_s)  # another writer took the id: again
        raise RegistryError(errors.STORE_ERROR, "Could not register the schema: its id kept being taken")

    async def delete_version(self, subject: str, version: str, permanent: bool = False) -> int:
        return await self._locked(lambda: self._delete_version(subject, version, permanent))

    async def _delete_version(self, subject: str, version: str, permanent: bool) -> int:
        number = self._version_number(version)
        self._require_subject(subject, deleted=True)
        self._writable(subject)
        if number is None:
            entries = self.state.versions(subject, deleted=permanent)
            if not entries:
                raise errors.version_not_found(subject, version)
            number = entries[-1].version
        entry = self.state.version(subject, number, deleted=True)
        if entry is None:
            raise errors.version_not_found(subject, number)
        if not permanent and entry.deleted:
            raise RegistryError(errors.VERSION_SOFT_DELETED, f"Subject '{subject}' Version {number} was soft "
                                                             f"deleted. Set permanent=true to delete permanently")
        if permanent and not entry.deleted:
            raise RegistryError(errors.VERSION_NOT_SOFT_DELETED, f"Subject '{subject}' Version {number} was not "
                                                                 f"deleted first before being permanently deleted")
        self._not_referenced(subject, [entry])
        content = self.state.schemas[entry.schema_id]
        key = records.schema_key(subject, number)
        value = None if permanent else records.schema_value(
            subject, number, entry.schema_id, content.text, content.schema_type, content.reference_dicts() or None,
            deleted=True, metadata=json.loads(content.metadata) if content.metadata else None,
            rule_set=json.loads(content.rule_set) if content.rule_set else None)
        await self._append([(key, value)])
        return number

    def _not_referenced(self, subject: str, entries: list[VersionEntry]) -> None:
        for entry in entries:
            users = [i for i in self.state.referenced_by(subject, entry.version)
                     if any(h.subject != subject or h.version not in {e.version for e in entries}
                            for h in self.state.holders(i))]
            if users:
                raise RegistryError(errors.REFERENCE_EXISTS, f"One or more references exist to the schema "
                                                             f"{{subject={subject},version={entry.version}}} "
                                                             f"(used by ids {users})")

    async def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        return await self._locked(lambda: self._delete_subject(subject, permanent))

    async def _delete_subject(self, subject: str, permanent: bool) -> list[int]:
        every = self._require_subject(subject, deleted=True)
        self._writable(subject)
        live = [e for e in every if not e.deleted]
        if not permanent:
            if not live:
                raise RegistryError(errors.SUBJECT_SOFT_DELETED, f"Subject '{subject}' was soft deleted. Set "
                                                                 f"permanent=true to delete permanently")
            self._not_referenced(subject, live)
            items = []
            for entry in live:
                content = self.state.schemas[entry.schema_id]
                items.append((records.schema_key(subject, entry.version), records.schema_value(
                    subject, entry.version, entry.schema_id, content.text, content.schema_type,
                    content.reference_dicts() or None, deleted=True,
                    metadata=json.loads(content.metadata) if content.metadata else None,
                    rule_set=json.loads(content.rule_set) if content.rule_set else None)))
            items.append((records.delete_subject_key(subject),
                          records.delete_subject_value(subject, live[-1].version)))
            await self._append(items)
            return [e.version for e in live]
        if live:
            raise RegistryError(errors.SUBJECT_NOT_SOFT_DELETED, f"Subject '{subject}' was not deleted first "
                                                                 f"before being permanently deleted")
        self._not_referenced(subject, every)
        items = [(records.schema_key(subject, e.version), None) for e in every]
        if subject in self.state.configs:
            items.append((records.config_key(subject), None))
        if subject in self.state.modes:
            items.append((records.mode_key(subject), None))
        await self._append(items)
        return [e.version for e in every]

    async def set_config(self, subject: str | None, body: Any) -> dict:
        level = body.get("compatibility") or body.get("compatibilityLevel") if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise RegistryError(errors.INVALID_COMPATIBILITY_LEVEL,
                                "Invalid compatibility level. Valid values are none, backward, forward, full, "
                                "backward_transitive, forward_transitive, and full_transitive")

        async def run():
            await self._append([(records.config_key(subject), records.config_value(level.upper()))])
            return {"compatibility": level.upper()}
        return await self._locked(run)

    async def delete_config(self, subject: str | None) -> dict:
        async def run():
            if subject is not None and subject not in self.state.configs:
                if not self.state.versions(subject, deleted=True):
                    raise errors.subject_not_found(subject)
                return {"compatibilityLevel": self.level(subject)}
            old = self.level(subject)
            if subject in self.state.configs:
                await self._append([(records.config_key(subject), None)])
            return {"compatibilityLevel": old}
        return await self._locked(run)

    async def set_mode(self, subject: str | None, body: Any, force: bool = False) -> dict:
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise RegistryError(errors.INVALID_MODE, "Invalid mode. Valid values are READWRITE, READONLY, "
                                                     "READONLY_OVERRIDE and IMPORT")
        mode = mode.upper()

        async def run():
            if mode == "IMPORT" and not force:
                holding = self.state.subject_names() if subject is None else \
                    [subject] if self.state.versions(subject) else []
                if holding:
                    raise RegistryError(errors.OPERATION_NOT_PERMITTED,
                                        f"Cannot import since found existing subjects: {', '.join(holding[:10])}")
            await self._append([(records.mode_key(subject), records.mode_value(mode))])
            return {"mode": mode}
        return await self._locked(run)

    async def delete_mode(self, subject: str | None) -> dict:
        async def run():
            if subject is not None and subject not in self.state.modes:
                raise RegistryError(errors.SUBJECT_MODE_NOT_CONFIGURED,
                                    f"Subject '{subject}' does not have subject-level mode configured")
            old = self.mode(subject)
            if subject in self.state.modes:
                await self._append([(records.mode_key(subject), None)])
            return {"mode": old}
        return await self._locked(run)
