"""Record values framed for a schema registry, as typed Iceberg columns.

A framed value is Confluent's wire format: magic byte 0, the registry id of the writer's schema (4 bytes,
big-endian), then the payload (Avro binary without a container, or JSON text). ``value_struct`` turns a
registered schema into the Iceberg struct of the table's value columns, ``decoder`` turns payloads into
dicts pyarrow takes under that struct's Arrow type, ``evolution`` says whether a table takes rows of a
new schema as it is, after ``union_by_name``, or not at all, and ``RegistryClient`` fetches schemas.

Every struct field is optional, at every depth, and so are list elements and map values: a field a
later schema drops reads as null, and a union with null changes nothing. pyiceberg and fastavro are
imported inside the functions (an idle broker imports neither).
"""
from __future__ import annotations

import base64
import http.client
import io
import json
import math
import struct
import threading
import time
import urllib.error
import urllib.request
from typing import Callable
from urllib.parse import quote

MAGIC = 0
PREFIX_BYTES = 5
# Field ids value_struct gives: clear of the kafka column's and the top-level ids catalog.table_schema
# assigns, so a schema holding both never has one id twice before create_table renumbers it.
FIRST_FIELD_ID = 100_000
MAX_DECIMAL_PRECISION = 38  # Iceberg's limit (a 16-byte unscaled value)
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
Check = Callable[[object], object]  # validates (and may convert) one decoded non-null value


def split_schema_id(value: bytes | bytearray | memoryview) -> tuple[int, memoryview]:
    """(schema id, payload) of a value in Confluent's wire format."""
    view = memoryview(value)
    if view.nbytes < PREFIX_BYTES:
        raise ValueError(f"a value of {view.nbytes} bytes is shorter than the 5-byte schema registry prefix "
                         "(magic byte and schema id)")
    view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    if view[0] != MAGIC:
        raise ValueError(f"the first byte is {view[0]}, not the schema registry's magic byte 0: the value is "
                         "not framed for a schema registry")
    return struct.unpack_from(">i", view, 1)[0], view[PREFIX_BYTES:]


def _schema_kind(schema_type: str | None) -> str:
    kind = (schema_type or "AVRO").strip().upper()
    if kind not in ("AVRO", "JSON"):
        raise ValueError(f"{kind} schemas are unsupported (Avro and JSON Schema are)")
    return kind


def value_struct(schema_type: str, schema_text: str):
    """The Iceberg struct (pyiceberg StructType) of a registered schema's fields."""
    if _schema_kind(schema_type) == "AVRO":
        return _AvroWalk(_avro_json(schema_text)[0]).top()
    return _JsonWalk(_json_schema(schema_text)).top()[0]


def decoder(schema_type: str, schema_text: str) -> Callable[[bytes | memoryview], dict]:
    """``decode(payload) -> dict`` of one value (the payload without the 5-byte prefix). The dict's values
    are what pyarrow takes under ``value_struct``'s Arrow type: aware datetimes for timestamptz, naive
    ones for timestamp, Decimal, uuid.UUID, dicts for maps. A malformed payload raises ValueError.

    Avro: fastavro's schemaless reader with the schema parsed once; bytes after the value are ignored,
    as fastavro and Confluent's deserializer do. Values fastavro accepts but the columns cannot hold
    (an int beyond 32 bits, a decimal beyond its precision) raise ValueError as well, so one bad record
    never fails a whole Arrow batch. JSON: the text parsed and each property checked against its type."""
    if _schema_kind(schema_type) == "AVRO":
        return _avro_decoder(schema_text)
    check = _JsonWalk(_json_schema(schema_text)).top()[1]

    def decode_json(payload) -> dict:
        try:
            value = json.loads(bytes(payload))
        except RecursionError:
            raise ValueError("the JSON value nests too deeply") from None
        return check(value)
    return decode_json


# ---- Avro ----------------------------------------------------------------------------------------------

AVRO_PRIMITIVES = ("string", "bytes", "int", "long", "float", "double", "boolean")
# (base type, logicalType) pairs fastavro converts (fastavro.LOGICAL_READERS); any other logical type
# reads as its base type, here and in fastavro alike.
AVRO_LOGICAL = {"int-date": "DateType", "int-time-millis": "TimeType", "long-time-micros": "TimeType",
                "long-timestamp-millis": "TimestamptzType", "long-timestamp-micros": "TimestamptzType",
                "long-local-timestamp-millis": "TimestampType", "long-local-timestamp-micros": "TimestampType",
                "string-uuid": "UUIDType"}


def _avro_json(text: str):
    """(the schema's JSON, fastavro's parsed schema)."""
    try:
        schema = json.loads(text)
    except ValueError:
        if text.strip() in AVRO_PRIMITIVES + ("null",):  # a bare primitive name is a schema too
            schema = text.strip()
        else:
            raise ValueError("the Avro schema is not JSON") from None
    try:
        from fastavro import parse_schema
        parsed = parse_schema(schema)  # what fastavro will not read is refused here already
    except Exception as exc:  # fastavro's SchemaParseException and UnknownType are not ValueErrors
        raise ValueError(f"invalid Avro schema: {type(exc).__name__}: {exc}") from None
    return schema, parsed


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


class _AvroWalk:
    """An Avro schema's Iceberg types. Named types are kept as their definitions and walked again at each
    use, so every use gets field ids of its own."""

    def __init__(self, schema):
        self.schema = schema
        self.next_id = FIRST_FIELD_ID
        self.named: dict[str, tuple[dict, str]] = {}  # full name -> (definition, namespace it was defined in)
        self.open: set[str] = set()  # records being walked: a reference to one is a recursive type

    def top(self):
        from pyiceberg.types import StructType
        result = self.type(self.schema, "")
        if not isinstance(result, StructType) or not (isinstance(self.schema, dict)
                                                      and self.schema.get("type") in ("record", "error")):
            raise ValueError("the Avro schema of a value must be a record")
        return result

    def ids(self, count: int) -> list[int]:
        first = self.next_id
        self.next_id += count
        return list(range(first, first + count))

    def type(self, schema, namespace: str):
        from pyiceberg import types as it
        if isinstance(schema, list):
            return self.union(schema, namespace)
        if isinstance(schema, str):
            return self.primitive(schema, None) if schema in AVRO_PRIMITIVES else self.reference(schema, namespace)
        if not isinstance(schema, dict):
            raise ValueError(f"not an Avro type: {schema!r}")
        kind = schema.get("type")
        if isinstance(kind, (list, dict)):
            return self.type(kind, namespace)
        if kind in ("record", "error", "enum", "fixed"):
            name = _full_name(schema["name"], schema.get("namespace", namespace))
            self.named[name] = (schema, namespace)
            inner = name.rpartition(".")[0]
            if kind == "enum":
                return it.StringType()
            if kind == "fixed":
                return self.fixed(schema, name)
            return self.record(schema, name, inner)
        if kind == "array":
            (element_id,) = self.ids(1)
            return it.ListType(element_id, self.type(schema["items"], namespace), element_required=False)
        if kind == "map":
            key_id, value_id = self.ids(2)
            return it.MapType(key_id, it.StringType(), value_id, self.type(schema["values"], namespace),
                              value_required=False)
        if kind in AVRO_PRIMITIVES:
            return self.primitive(kind, schema)
        if kind == "null":
            return self.primitive(kind, None)
        if isinstance(kind, str):
            return self.reference(kind, namespace)  # {"type": "SomeRecord"}
        raise ValueError(f"not an Avro type: {schema!r}")

    def primitive(self, kind: str, schema: dict | None):
        from pyiceberg import types as it
        logical = schema.get("logicalType") if schema else None
        if kind == "bytes" and logical == "decimal":
            return self.decimal(schema)
        if logical and f"{kind}-{logical}" in AVRO_LOGICAL:
            return getattr(it, AVRO_LOGICAL[f"{kind}-{logical}"])()
        simple = {"string": it.StringType, "bytes": it.BinaryType, "int": it.IntegerType, "long": it.LongType,
                  "float": it.FloatType, "double": it.DoubleType, "boolean": it.BooleanType}
        if kind not in simple:
            raise ValueError(f"Avro type {kind!r} outside a union with another type is unsupported")
        return simple[kind]()

    def decimal(self, schema: dict):
        from pyiceberg.types import DecimalType
        precision, scale = schema.get("precision"), schema.get("scale", 0)
        if not (isinstance(precision, int) and isinstance(scale, int) and 0 <= scale <= precision):
            raise ValueError(f"invalid Avro decimal precision/scale: {precision!r}, {scale!r}")
        if precision > MAX_DECIMAL_PRECISION:
            raise ValueError(f"decimal precision {precision} is unsupported (Iceberg's limit is 38)")
        return DecimalType(precision, scale)

    def fixed(self, schema: dict, name: str):
        from pyiceberg.types import FixedType
        if schema.get("logicalType") == "decimal":
            return self.decimal(schema)
        size = schema.get("size")
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"Avro fixed {name} of size {size!r} is unsupported")
        return FixedType(size)

    def record(self, schema: dict, name: str, namespace: str):
        from pyiceberg.types import NestedField, StructType
        fields = schema.get("fields") or []
        if not fields:
            raise ValueError(f"Avro record {name} has no fields: unsupported (Parquet has no empty group)")
        self.open.add(name)
        ids = self.ids(len(fields))  # a struct's own fields first, then what they hold (as Iceberg numbers)
        out = [NestedField(field_id, f["name"], self.type(f["type"], namespace), required=False,
                           doc=f.get("doc") if isinstance(f.get("doc"), str) else None)
               for field_id, f in zip(ids, fields)]
        self.open.discard(name)
        return StructType(*out)

    def reference(self, ref: str, namespace: str):
        for name in (_full_name(ref, namespace), ref):
            if name in self.open:
                raise ValueError(f"recursive Avro type {name} is unsupported")
            if name in self.named:
                definition, defined_in = self.named[name]
                return self.type(definition, defined_in)
        raise ValueError(f"unknown Avro type {ref!r} (schema references are unsupported)")

    def union(self, members: list, namespace: str):
        kinds = [m for m in members if m != "null" and not (isinstance(m, dict) and m.get("type") == "null")]
        if len(kinds) != 1:
            shown = json.dumps(members)[:200]
            raise ValueError(f"Avro union {shown} is unsupported (only a type or a type and null are)")
        return self.type(kinds[0], namespace)


def _avro_decoder(schema_text: str):
    from fastavro import schemaless_reader
    schema, parsed = _avro_json(schema_text)
    check = _checks(_AvroWalk(schema).top())

    def decode_avro(payload) -> dict:
        try:
            value = schemaless_reader(io.BytesIO(payload), parsed, None)
        except MemoryError:
            raise
        except Exception as exc:  # EOFError, IndexError (union/enum index), UnicodeDecodeError, OverflowError
            raise ValueError(f"malformed Avro value: {type(exc).__name__}: {exc}".rstrip(": ")) from None
        return check(value) if check else value
    return decode_avro


def _checks(iceberg_type) -> Check | None:
    """A check of decoded Avro values for what fastavro lets through and Arrow refuses (None: nothing to
    check below this type): ints beyond 32 bits and decimals beyond their precision."""
    from pyiceberg import types as it
    if isinstance(iceberg_type, it.IntegerType):
        return _check_int
    if isinstance(iceberg_type, it.DecimalType):
        return _decimal_check(iceberg_type.precision, iceberg_type.scale)
    if isinstance(iceberg_type, it.StructType):
        inner = [(f.name, c) for f in iceberg_type.fields if (c := _checks(f.field_type))]
        if not inner:
            return None

        def check_struct(value):
            for name, check in inner:
                if value.get(name) is not None:
                    value[name] = check(value[name])
            return value
        return check_struct
    if isinstance(iceberg_type, it.ListType):
        element = _checks(iceberg_type.element_type)
        return (lambda items: [None if x is None else element(x) for x in items]) if element else None
    if isinstance(iceberg_type, it.MapType):
        item = _checks(iceberg_type.value_type)
        return (lambda pairs: {k: None if v is None else item(v) for k, v in pairs.items()}) if item else None
    return None


def _check_int(value):
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"malformed Avro value: int {value} does not fit in 32 bits")
    return value


def _decimal_check(precision: int, scale: int) -> Check:
    integer_digits = precision - scale

    def check_decimal(value):
        if not value.is_finite() or (value and value.adjusted() >= integer_digits):
            raise ValueError(f"malformed Avro value: {value} does not fit decimal({precision}, {scale})")
        return value
    return check_decimal


# ---- JSON Schema ---------------------------------------------------------------------------------------

def _json_schema(text: str) -> dict:
    try:
        schema = json.loads(text)
    except ValueError:
        raise ValueError("the JSON schema is not JSON") from None
    if not isinstance(schema, dict):
        raise ValueError("the JSON schema of a value must be an object schema with properties")
    return schema


def _json_text(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _JsonWalk:
    """A JSON schema's Iceberg types and the checks of values against them. Properties of a type the
    columns cannot say (no type, several types, $ref cycles, oneOf, objects without properties) become
    strings holding the value's JSON text."""

    def __init__(self, root: dict):
        self.root = root
        self.next_id = FIRST_FIELD_ID
        self.following: list[str] = []  # $refs being expanded: meeting one again is a cycle

    def top(self):
        from pyiceberg.types import StructType
        schema = self.resolve(self.root)
        if schema is None or self.kind(schema) != "object" or not isinstance(schema.get("properties"), dict):
            raise ValueError("the JSON schema of a value must be an object schema with properties")
        result = self.type(schema, "")
        if not isinstance(result[0], StructType):
            raise ValueError("the JSON schema of a value must be an object schema with properties")
        return result

    def ids(self, count: int) -> list[int]:
        first = self.next_id
        self.next_id += count
        return list(range(first, first + count))

    def resolve(self, schema):
        """The schema a local $ref ("#/definitions/x", "#/$defs/x") names; None when it cannot be followed."""
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
            ref = schema["$ref"]
            if not ref.startswith("#") or ref in self.following:
                return None
            target = self.root
            for part in filter(None, ref[1:].split("/")):
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, dict) or part not in target:
                    return None
                target = target[part]
            self.following.append(ref)
            schema = target
        return schema if isinstance(schema, dict) else None

    @staticmethod
    def kind(schema: dict) -> str | None:
        kind = schema.get("type")
        if isinstance(kind, list):
            rest = [k for k in kind if k != "null"]
            kind = rest[0] if len(rest) == 1 else None
        if kind is None and isinstance(schema.get("properties"), dict) and "type" not in schema:
            kind = "object"
        return kind if isinstance(kind, str) else None

    def type(self, schema, path: str):
        from pyiceberg import types as it
        depth = len(self.following)
        try:
            schema = self.resolve(schema)
            kind = self.kind(schema) if schema is not None and not _json_combined(schema) else None
            if kind == "string":
                return it.StringType(), _json_expect(str, "a string", path)
            if kind == "integer":
                return it.LongType(), _json_long(path)
            if kind == "number":
                return it.DoubleType(), _json_double(path)
            if kind == "boolean":
                return it.BooleanType(), _json_expect(bool, "a boolean", path)
            if kind == "array" and isinstance(schema.get("items"), dict):
                (element_id,) = self.ids(1)
                element, check = self.type(schema["items"], path + "[]")
                return it.ListType(element_id, element, element_required=False), _json_list(check, path)
            if kind == "object" and isinstance(schema.get("properties"), dict) and schema["properties"]:
                return self.object(schema["properties"], path)
            return it.StringType(), _json_text
        finally:
            del self.following[depth:]

    def object(self, properties: dict, path: str):
        from pyiceberg.types import NestedField, StructType
        ids = self.ids(len(properties))
        fields, checks = [], []
        for field_id, (name, schema) in zip(ids, properties.items()):
            field_type, check = self.type(schema, f"{path}.{name}" if path else name)
            doc = schema.get("description") if isinstance(schema, dict) else None
            fields.append(NestedField(field_id, name, field_type, required=False,
                                      doc=doc if isinstance(doc, str) else None))
            checks.append((name, check))

        def check_object(value):
            if not isinstance(value, dict):
                raise ValueError(f"{path or 'the value'}: expected a JSON object, got {_json_kind(value)}")
            return {name: None if value.get(name) is None else check(value[name]) for name, check in checks}
        return StructType(*fields), check_object


def _json_combined(schema: dict) -> bool:
    return any(key in schema for key in ("oneOf", "anyOf", "allOf", "not", "if"))


def _json_kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def _json_expect(kind: type, name: str, path: str) -> Check:
    def check(value):
        if type(value) is not kind:
            raise ValueError(f"{path}: expected {name}, got {_json_kind(value)}")
        return value
    return check


def _json_long(path: str) -> Check:
    def check_long(value):
        if type(value) is float and value.is_integer():  # JSON Schema counts 1.0 as an integer
            value = int(value)
        if type(value) is not int:
            raise ValueError(f"{path}: expected an integer, got {_json_kind(value)}")
        if not LONG_MIN <= value <= LONG_MAX:
            raise ValueError(f"{path}: integer {value} does not fit in 64 bits")
        return value
    return check_long


def _json_double(path: str) -> Check:
    def check_double(value):
        if type(value) not in (int, float):
            raise ValueError(f"{path}: expected a number, got {_json_kind(value)}")
        try:
            result = float(value)
        except OverflowError:
            raise ValueError(f"{path}: number {value} does not fit in a double") from None
        if not math.isfinite(result):
            raise ValueError(f"{path}: number {value} does not fit in a double")
        return result
    return check_double


def _json_list(element: Check, path: str) -> Check:
    def check_list(value):
        if not isinstance(value, list):
            raise ValueError(f"{path}: expected an array, got {_json_kind(value)}")
        return [None if x is None else element(x) for x in value]
    return check_list


# ---- schema evolution ----------------------------------------------------------------------------------

class _Incompatible(Exception):
    pass


def evolution(table_struct, new_struct) -> tuple[str, str]:
    """How a table whose columns are ``table_struct`` takes rows of ``new_struct``:
    ("same", "") as it is (the same fields or fewer, or narrower types the table's widen: int in long,
    float in double, decimal(p,s) in decimal(P>=p,s)); ("evolve", "") after
    ``table.update_schema().union_by_name(...)`` (new fields, optional where the table's are required, or
    wider types by Iceberg's promotions); ("incompatible", reason) otherwise. Fields the new struct lacks
    are left to the caller: value fields are optional and read as null (the ``kafka`` column is its own)."""
    try:
        changes = _struct_evolution(table_struct, new_struct, "")
    except _Incompatible as exc:
        return "incompatible", str(exc)
    return ("evolve" if changes else "same"), ""


def _struct_evolution(table, new, path: str) -> bool:
    changes = False
    for field in new.fields:
        name = f"{path}.{field.name}" if path else field.name
        existing = next((f for f in table.fields if f.name == field.name), None)
        if existing is None:
            changes = True
            continue
        changes |= field.optional and existing.required
        changes |= _type_evolution(existing.field_type, field.field_type, name)
    return changes


def _type_evolution(table, new, path: str) -> bool:
    """Whether ``new`` needs the table's type at ``path`` changed (True) or fits it (False)."""
    from pyiceberg import types as it
    if isinstance(table, it.StructType) and isinstance(new, it.StructType):
        return _struct_evolution(table, new, path)
    if isinstance(table, it.ListType) and isinstance(new, it.ListType):
        return ((new.element_field.optional and table.element_field.required)
                | _type_evolution(table.element_type, new.element_type, path + ".element"))
    if isinstance(table, it.MapType) and isinstance(new, it.MapType):
        if _type_evolution(table.key_type, new.key_type, path + ".key"):
            raise _Incompatible(f"{path}.key: the table's map keys are {table.key_type}, the schema's "
                                f"{new.key_type} (map keys cannot change)")
        return ((new.value_field.optional and table.value_field.required)
                | _type_evolution(table.value_type, new.value_type, path + ".value"))
    if table == new:
        return False
    narrower = {(it.IntegerType, it.LongType), (it.FloatType, it.DoubleType)}  # (new, table): the table widens
    if (type(new), type(table)) in narrower:
        return False
    if (type(table), type(new)) in narrower:
        return True
    if isinstance(table, it.DecimalType) and isinstance(new, it.DecimalType) and table.scale == new.scale:
        return new.precision > table.precision
    raise _Incompatible(f"{path or 'the value'}: the table has {_short(table)}, the schema has {_short(new)}")


def _short(iceberg_type) -> str:
    text = str(iceberg_type)
    return text if len(text) <= 80 else text[:77] + "..."


# ---- the schema registry -------------------------------------------------------------------------------

class RegistryUnavailable(Exception):
    """The registry cannot answer now (down, 5xx, refusing us): try again later."""


class SchemaNotFound(ValueError):
    """The registry has no such schema id or subject (HTTP 404): the record cannot be decoded."""


class RegistryClient:
    """Schemas from a Confluent-compatible registry over its REST API. ``url`` may list several
    registries, comma-separated (each tried in turn while one is unreachable). Schemas by id are cached
    for ever (an id's schema never changes), a subject's latest version and the ids and subjects the
    registry said it lacks for ``ttl_s`` (records with an unknown id do not each cost a request)."""

    def __init__(self, url: str, timeout_s: float = 5.0, ttl_s: float = 10.0, user_info: str = ""):
        self.urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
        if not self.urls:
            raise ValueError("no schema registry URL")
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self.headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if user_info:
            self.headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode()
        self._by_id: dict[int, tuple[str, str]] = {}
        self._latest: dict[str, tuple[float, tuple[int, str, str]]] = {}
        self._missing: dict[str, tuple[float, str]] = {}  # request path -> (expiry, the 404's message)
        self._lock = threading.Lock()

    def by_id(self, schema_id: int) -> tuple[str, str]:
        """(schema type, schema text) of a registered schema id."""
        schema_id = int(schema_id)
        found = self._by_id.get(schema_id)
        if found is None:
            body = self._get(f"/schemas/ids/{schema_id}")
            found = _schema_of(body)
            with self._lock:
                self._by_id[schema_id] = found
        return found

    def latest(self, subject: str) -> tuple[int, str, str]:
        """(schema id, schema type, schema text) of a subject's latest version."""
        now = time.monotonic()
        cached = self._latest.get(subject)
        if cached is not None and cached[0] > now:
            return cached[1]
        body = self._get(f"/subjects/{quote(subject, safe='')}/versions/latest")
        schema_type, text = _schema_of(body)
        try:
            schema_id = int(body["id"])
        except (KeyError, TypeError, ValueError):
            raise RegistryUnavailable(f"the registry's answer for subject {subject!r} has no schema id") from None
        found = (schema_id, schema_type, text)
        with self._lock:
            self._latest[subject] = (time.monotonic() + self.ttl_s, found)
            self._by_id.setdefault(schema_id, (schema_type, text))
        return found

    def _get(self, path: str) -> dict:
        missing = self._missing.get(path)
        if missing is not None and missing[0] > time.monotonic():
            raise SchemaNotFound(missing[1])
        failures = []
        for base in self.urls:
            request = urllib.request.Request(base + path, headers=self.headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                reason = _error_message(exc)
                if exc.code == 404:
                    message = f"the schema registry has no {path}: {reason}"
                    with self._lock:
                        self._missing[path] = (time.monotonic() + self.ttl_s, message)
                    raise SchemaNotFound(message) from None
                failures.append(f"{base}: HTTP {exc.code} {reason}")
                continue
            except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError, timeouts, bad URL
                failures.append(f"{base}: {getattr(exc, 'reason', None) or exc}")
                continue
            try:
                body = json.loads(raw)
            except ValueError:
                failures.append(f"{base}: the answer to {path} is not JSON")
                continue
            if not isinstance(body, dict):
                failures.append(f"{base}: the answer to {path} is not a JSON object")
                continue
            return body
        raise RegistryUnavailable("schema registry unavailable: " + "; ".join(failures))


def _schema_of(body: dict) -> tuple[str, str]:
    text = body.get("schema")
    if not isinstance(text, str):
        raise RegistryUnavailable("the registry's answer holds no schema text")
    return (body.get("schemaType") or "AVRO").upper(), text


def _error_message(exc: urllib.error.HTTPError) -> str:
    """Confluent's error body ({"error_code", "message"}) or the HTTP reason."""
    try:
        body = json.loads(exc.read() or b"{}")
        return str(body.get("message") or exc.reason)
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)
