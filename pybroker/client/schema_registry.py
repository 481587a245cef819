"""A small blocking client of a schema registry's REST API (Confluent's), on the standard library.

``RegistryClient(url, basic_auth_user_info=None, ca_location=None, timeout_s=10.0)``; ``url`` may list
several comma-separated base URLs (tried in order when one cannot be reached). Methods:

- ``get_schema(id) -> (schema_type, text, references)``: the schema with a global id (cached).
- ``get_version(subject, version="latest") -> (id, version, schema_type, text, references)``
  (a numbered version is cached, "latest" is asked each time).
- ``referenced(references) -> {name: (schema_type, text, references)}``: every schema the reference
  list names, followed recursively (imports of imports), each fetched once.
- ``parsed_schema(id)`` / ``parsed_version(subject, version)``: a ``pybroker.schemas.ParsedSchema``
  with its references resolved recursively and parsed (``parsed_version`` returns ``(id, ParsedSchema)``).
- ``subjects(deleted=False)``, ``versions(subject, deleted=False)``, ``schema_types()``,
  ``subjects_of_id(id)``, ``register(subject, schema_type, text, references=(), normalize=False) -> id``,
  ``lookup(subject, schema_type, text, references=(), normalize=False, deleted=False) -> dict``,
  ``delete_subject(subject, permanent=False) -> [versions]``, ``delete_version(subject, version, permanent=False)``,
  ``check_compatibility(subject, version, schema_type, text, references=(), verbose=False) -> dict``,
  ``get_config(subject=None, default_to_global=False) -> dict``, ``set_config(level, subject=None) -> dict``,
  ``delete_config(subject)``, ``get_mode(subject=None)``, ``set_mode(mode, subject=None, force=False)``,
  ``request(method, path, body=None, query=None)`` for anything else.

``references`` are lists of ``{"name", "subject", "version"}`` dicts as the API spells them; ``schema_type``
is "AVRO", "JSON" or "PROTOBUF" (the API leaves it out for Avro; this client always fills it in).
Errors raise ``RegistryError`` with the HTTP status, Confluent's ``error_code`` and message.
"""
from __future__ import annotations

import base64
import json
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterable, Mapping

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_MAX_REFERENCE_DEPTH = 64  # a cycle of references must not loop forever


class RegistryError(Exception):
    """The registry answered an error (``status`` HTTP code, ``error_code`` Confluent's code) or was unreachable
    (status 0)."""

    def __init__(self, status: int, error_code: int, message: str):
        super().__init__(f"{message} (HTTP {status}, error code {error_code})")
        self.status = status
        self.error_code = error_code
        self.message = message


def _quote(segment: str) -> str:
    return urllib.parse.quote(str(segment), safe="")


def _refs(references: Iterable[Mapping] | None) -> list[dict]:
    return [{"name": r["name"], "subject": r["subject"], "version": int(r["version"])} for r in references or ()]


def _schema_body(schema_type: str | None, text: str, references) -> dict:
    body: dict[str, Any] = {"schema": text}
    if schema_type and schema_type.upper() != "AVRO":
        body["schemaType"] = schema_type.upper()
    if references:
        body["references"] = _refs(references)
    return body


class RegistryClient:
    """Thread-safe; schemas by id and numbered versions are immutable, so they are cached for the client's life."""

    def __init__(self, url: str, basic_auth_user_info: str | None = None, ca_location: str | None = None,
                 timeout_s: float = 10.0):
        self.base_urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
        if not self.base_urls or any(not u.startswith(("http://", "https://")) for u in self.base_urls):
            raise ValueError(f"schema registry url must be http:// or https:// URLs, got {url!r}")
        self.timeout_s = timeout_s
        self._headers = {"Accept": CONTENT_TYPE + ", application/json", "Content-Type": CONTENT_TYPE}
        if basic_auth_user_info:
            token = base64.b64encode(basic_auth_user_info.encode()).decode()
            self._headers["Authorization"] = "Basic " + token
        self._ssl = ssl.create_default_context(cafile=ca_location) if ca_location else None
        self._lock = threading.Lock()
        self._by_id: dict[int, tuple[str, str, list[dict]]] = {}
        self._by_version: dict[tuple[str, int], tuple[int, int, str, str, list[dict]]] = {}
        self._parsed: dict[int, Any] = {}

    # -- transport ---------------------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None) -> Any:
        """One call; the decoded JSON answer. Tries each base URL until one answers (an HTTP error is an answer)."""
        if query:
            items = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in query.items() if v is not None}
            path += "?" + urllib.parse.urlencode(items)
        data = json.dumps(body).encode() if body is not None else None
        last: Exception | None = None
        for base in self.base_urls:
            req = urllib.request.Request(base + path, data=data, method=method, headers=self._headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._ssl) as resp:
                    raw = resp.read()
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as exc:
                raise self._error(exc) from None
            except (OSError, ValueError) as exc:  # unreachable, refused, TLS failure, a non-JSON answer
                last = exc
        raise RegistryError(0, 0, f"schema registry unreachable at {', '.join(self.base_urls)}: {last}")

    @staticmethod
    def _error(exc: urllib.error.HTTPError) -> RegistryError:
        try:
            payload = json.loads(exc.read() or b"{}")
        except ValueError:
            payload = {}
        if not isinstance(payload, dict):
            payload = {}
        return RegistryError(exc.code, int(payload.get("error_code", exc.code) or exc.code),
                             str(payload.get("message", exc.reason)))

    # -- schemas by id and by version ---------------------------------------------------------------------------
    def get_schema(self, schema_id: int) -> tuple[str, str, list[dict]]:
        schema_id = int(schema_id)
        cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        answer = self.request("GET", f"/schemas/ids/{schema_id}")
        result = ((answer.get("schemaType") or "AVRO").upper(), answer["schema"], _refs(answer.get("references")))
        with self._lock:
            self._by_id[schema_id] = result
        return result

    def get_version(self, subject: str, version: int | str = "latest") -> tuple[int, int, str, str, list[dict]]:
        numbered = str(version) != "latest" and int(version) > 0
        key = (subject, int(version)) if numbered else None
        if key is not None and key in self._by_version:
            return self._by_version[key]
        answer = self.request("GET", f"/subjects/{_quote(subject)}/versions/{_quote(version)}")
        result = (int(answer["id"]), int(answer["version"]), (answer.get("schemaType") or "AVRO").upper(),
                  answer["schema"], _refs(answer.get("references")))
        with self._lock:
            self._by_version[(subject, result[1])] = result
            self._by_id.setdefault(result[0], result[2:])
        return result

    def referenced(self, references: Iterable[Mapping]) -> dict[str, tuple[str, str, list[dict]]]:
        """Every schema ``references`` names, directly or through the references of those, by reference name."""
        found: dict[str, tuple[str, str, list[dict]]] = {}
        pending = [(ref, 0) for ref in _refs(references)]
        while pending:
            ref, depth = pending.pop()
            if ref["name"] in found:
                continue
            if depth > _MAX_REFERENCE_DEPTH:
                raise RegistryError(0, 0, f"schema references nest deeper than {_MAX_REFERENCE_DEPTH}")
            _, _, schema_type, text, refs = self.get_version(ref["subject"], ref["version"])
            found[ref["name"]] = (schema_type, text, refs)
            pending.extend((r, depth + 1) for r in refs)
        return found

    def _parse(self, schema_type: str, text: str, references: list[dict], depth: int = 0):
        from pybroker.schemas import parse  # the formats load their libraries lazily; a pure REST user needs none
        if depth > _MAX_REFERENCE_DEPTH:
            raise RegistryError(0, 0, f"schema references nest deeper than {_MAX_REFERENCE_DEPTH}")
        parsed_refs = {}
        for ref in references:
            ref_id, _, ref_type, ref_text, ref_refs = self.get_version(ref["subject"], ref["version"])
            if ref_id not in self._parsed:
                self._parsed[ref_id] = self._parse(ref_type, ref_text, ref_refs, depth + 1)
            parsed_refs[ref["name"]] = self._parsed[ref_id]
        return parse(schema_type, text, parsed_refs)

    def parsed_schema(self, schema_id: int):
        """The ParsedSchema of a global id, references parsed recursively; cached."""
        schema_id = int(schema_id)
        if schema_id not in self._parsed:
            self._parsed[schema_id] = self._parse(*self.get_schema(schema_id))
        return self._parsed[schema_id]

    def parsed_version(self, subject: str, version: int | str = "latest"):
        """(id, ParsedSchema) of a subject's version ("latest" or a number)."""
        schema_id, _, schema_type, text, refs = self.get_version(subject, version)
        if schema_id not in self._parsed:
            self._parsed[schema_id] = self._parse(schema_type, text, refs)
        return schema_id, self._parsed[schema_id]

    # -- the rest of the API, for tools ------------------------------------------------------------------------
    def subjects(self, deleted: bool = False) -> list[str]:
        return self.request("GET", "/subjects", query={"deleted": deleted or None})

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        return self.request("GET", f"/subjects/{_quote(subject)}/versions", query={"deleted": deleted or None})

    def schema_types(self) -> list[str]:
        return self.request("GET", "/schemas/types")

    def subjects_of_id(self, schema_id: int) -> list[str]:
        return self.request("GET", f"/schemas/ids/{int(schema_id)}/subjects")

    def register(self, subject: str, schema_type: str | None, text: str, references=(), normalize: bool = False) -> int:
        answer = self.request("POST", f"/subjects/{_quote(subject)}/versions",
                              _schema_body(schema_type, text, references), {"normalize": normalize or None})
        return int(answer["id"])

    def lookup(self, subject: str, schema_type: str | None, text: str, references=(), normalize: bool = False,
               deleted: bool = False) -> dict:
        return self.request("POST", f"/subjects/{_quote(subject)}", _schema_body(schema_type, text, references),
                            {"normalize": normalize or None, "deleted": deleted or None})

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        return self.request("DELETE", f"/subjects/{_quote(subject)}", query={"permanent": permanent or None})

    def delete_version(self, subject: str, version: int | str, permanent: bool = False) -> int:
        return self.request("DELETE", f"/subjects/{_quote(subject)}/versions/{_quote(version)}",
                            query={"permanent": permanent or None})

    def check_compatibility(self, subject: str, version: int | str, schema_type: str | None, text: str,
                            references=(), verbose: bool = False) -> dict:
        return self.request("POST", f"/compatibility/subjects/{_quote(subject)}/versions/{_quote(version)}",
                            _schema_body(schema_type, text, references), {"verbose": verbose or None})

    def get_config(self, subject: str | None = None, default_to_global: bool = False) -> dict:
        path = f"/config/{_quote(subject)}" if subject else "/config"
        return self.request("GET", path, query={"defaultToGlobal": default_to_global or None} if subject else None)

    def set_config(self, level: str, subject: str | None = None) -> dict:
        path = f"/config/{_quote(subject)}" if subject else "/config"
        return self.request("PUT", path, {"compatibility": level.upper()})

    def delete_config(self, subject: str) -> dict:
        return self.request("DELETE", f"/config/{_quote(subject)}")

    def get_mode(self, subject: str | None = None) -> dict:
        return self.request("GET", f"/mode/{_quote(subject)}" if subject else "/mode")

    def set_mode(self, mode: str, subject: str | None = None, force: bool = False) -> dict:
        path = f"/mode/{_quote(subject)}" if subject else "/mode"
        return self.request("PUT", path, {"mode": mode.upper()}, {"force": force or None})
