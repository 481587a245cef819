"""Avro schemas: checked with fastavro, written in canonical and normalized form, compared by the Avro
specification's schema-resolution rules, typed for Spark and decoded as Spark's from_avro would.

The parsed form used throughout is fastavro's (``parse_schema`` without write hints): every named type
carries its full name, is defined where it first appears and referenced by full name afterwards; types
defined in referenced schemas are looked up in ``named_types``.
"""
from __future__ import annotations

import datetime
import decimal
import io
import json
import re
from typing import Any, Callable, Mapping

import fastavro
from fastavro.schema import SchemaParseException, UnknownType, fingerprint as _fastavro_fingerprint

from pybroker.schemas import InvalidSchema, ParsedSchema

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
NAMED = ("record", "error", "enum", "fixed")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# what each writer type may be read as, besides itself (the specification's promotions)
_PROMOTED_FROM = {"long": {"int"}, "float": {"int", "long"}, "double": {"int", "long", "float"},
                  "string": {"bytes"}, "bytes": {"string"}}
# keys that are part of a type's definition; any other key is a custom property kept as written
_RESERVED = {"type", "name", "namespace", "doc", "aliases", "fields", "symbols", "size", "items", "values"}
_FIELD_RESERVED = {"name", "type", "doc", "default", "order", "aliases"}
_INT_RANGE = {"int": (-2 ** 31, 2 ** 31 - 1), "long": (-2 ** 63, 2 ** 63 - 1)}
_DECODED_FIELD = "value"
_ENVELOPE = "pybroker_schemas_avro_envelope"  # a record wrapping any schema: same bytes, named types resolvable


def _kind(schema) -> str:
    """A parsed schema's type: a primitive, record/enum/fixed, array, map, union or 'name' (a reference)."""
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema if schema in PRIMITIVES else "name"
    kind = schema["type"]
    return "record" if kind == "error" else kind


def _split(fullname: str) -> tuple[str | None, str]:
    space, _, name = fullname.rpartition(".")
    return space or None, name


def _full(name: str, space: str | None) -> str:
    return name if "." in name or not space else f"{space}.{name}"


def _qualified(fullname: str, space: str | None) -> str:
    """A name as Avro writes it inside namespace ``space``: short when it lives there."""
    own, short = _split(fullname)
    return short if own == space else fullname


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class AvroSchema(ParsedSchema):
    schema_type = "AVRO"

    def __init__(self, text: str, references: Mapping[str, ParsedSchema], raw, parsed,
                 named_types: dict[str, Any]):
        super().__init__(text, references)
        self.raw = raw  # the JSON as written
        self.parsed = parsed  # fastavro's parsed form (full names)
        self.named_types = named_types  # full name -> definition, this schema's and its references'
        self._canonical = _json(self._render(parsed, None, normalized=False))
        self._normalized = _json(self._render(parsed, None, normalized=True))
        self._decoders: _Decoders | None = None
        self._envelope = None

    # --- names -----------------------------------------------------------------------------------
    def _resolve(self, schema):
        return self.named_types[schema] if _kind(schema) == "name" else schema

    def _aliases(self, definition) -> set[str]:
        space, _ = _split(definition["name"])
        return {_full(a, space) for a in definition.get("aliases") or ()}

    # --- text forms ------------------------------------------------------------------------------
    def canonical(self) -> str:
        return self._canonical

    def normalized(self) -> str:
        return self._normalized

    def _render(self, schema, space: str | None, normalized: bool):
        """Avro's own JSON writing: fixed key order, names relative to the enclosing namespace (full names
        and sorted properties and aliases when ``normalized``)."""
        kind = _kind(schema)
        if kind == "union":
            return [self._render(branch, space, normalized) for branch in schema]
        if isinstance(schema, str):
            return schema if kind != "name" or normalized else _qualified(schema, space)
        props = {k: v for k, v in schema.items() if k not in _RESERVED and not (kind == "enum" and k == "default")}
        if normalized:
            props = dict(sorted(props.items()))
        if kind in PRIMITIVES:
            return {"type": kind, **props} if props else kind
        if kind in ("array", "map"):
            key = "items" if kind == "array" else "values"
            return {"type": kind, key: self._render(schema[key], space, normalized), **props}
        own_space, short = _split(schema["name"])
        out = {"type": schema["type"]}
        out["name"] = schema["name"] if normalized else short
        if own_space != space and (not normalized or own_space is None):  # "": no namespace inside one
            out["namespace"] = own_space or ""
        if "doc" in schema:
            out["doc"] = schema["doc"]
        if kind == "record":
            out["fields"] = [self._render_field(f, own_space, normalized) for f in schema["fields"]]
        elif kind == "enum":
            out["symbols"] = schema["symbols"]
            if "default" in schema:
                out["default"] = schema["default"]
        else:
            out["size"] = schema["size"]
        out.update(props)
        aliases = schema.get("aliases")
        if aliases:
            full = [_full(a, own_space) for a in aliases]
            out["aliases"] = sorted(full) if normalized else [_qualified(a, own_space) for a in full]
        return out

    def _render_field(self, field, space, normalized):
        out = {"name": field["name"], "type": self._render(field["type"], space, normalized)}
        for key in ("doc", "default"):
            if key in field:
                out[key] = field[key]
        if field.get("order", "ascending") != "ascending":
            out["order"] = field["order"]
        if field.get("aliases"):
            out["aliases"] = sorted(field["aliases"]) if normalized else field["aliases"]
        props = {k: v for k, v in field.items() if k not in _FIELD_RESERVED}
        out.update(sorted(props.items()) if normalized else props)
        return out

    def parsing_canonical_form(self) -> str:
        """The specification's Parsing Canonical Form; types of referenced schemas are written out."""
        out: list[str] = []
        self._pcf(self.parsed, set(), out)
        return "".join(out)

    def _pcf(self, schema, known: set, out: list):
        kind = _kind(schema)
        if kind == "union":
            out.append("[")
            for i, branch in enumerate(schema):
                out.append("," if i else "")
                self._pcf(branch, known, out)
            out.append("]")
        elif kind in PRIMITIVES:
            out.append(_json(kind))
        elif kind == "name" and schema in known:
            out.append(_json(schema))
        elif kind == "name":
            self._pcf(self.named_types[schema], known, out)
        elif kind in ("array", "map"):
            key = "items" if kind == "array" else "values"
            out.append(f'{{"type":"{kind}","{key}":')
            self._pcf(schema[key], known, out)
            out.append("}")
        else:
            known.add(schema["name"])
            out.append(f'{{"name":{_json(schema["name"])},"type":"{kind}"')
            if kind == "record":
                out.append(',"fields":[')
                for i, field in enumerate(schema["fields"]):
                    out.append(f'{"," if i else ""}{{"name":{_json(field["name"])},"type":')
                    self._pcf(field["type"], known, out)
                    out.append("}")
                out.append("]}")
            elif kind == "enum":
                out.append(f',"symbols":{_json(schema["symbols"])}}}')
            else:
                out.append(f',"size":{int(schema["size"])}}}')

    def fingerprint(self) -> str:
        """Rabin CRC-64 fingerprint of the Parsing Canonical Form (hex, Avro's little-endian byte order)."""
        return _fastavro_fingerprint(self.parsing_canonical_form(), "CRC-64-AVRO")

    # --- schema resolution -----------------------------------------------------------------------
    def compatibility_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, AvroSchema):
            return [f"/: an Avro schema cannot read data written with a {writer.schema_type} schema"]
        return _Resolution(self, writer).check(self.parsed, writer.parsed, "")

    # --- Spark -----------------------------------------------------------------------------------
    def spark_type(self):
        from pyspark.sql import types as T
        return _spark_type(self, self.parsed, T, ())[0]

    def decode(self, payload: bytes, writer: ParsedSchema):
        if not isinstance(writer, AvroSchema):
            raise ValueError(f"cannot decode a payload written with a {writer.schema_type} schema as Avro")
        if self._decoders is None:
            self._decoders = _Decoders(self)
        return self._decoders.decode(payload, writer)

    def decode_schema(self):
        """This schema as fastavro reads it when decoding (the envelope record), built once."""
        if self._envelope is None:
            self._envelope = _Decoders.envelope(self)
        return self._envelope


class _Resolution:
    """The specification's schema resolution of a reader against a writer, collecting every reason it fails.
    Named pairs already under comparison count as compatible, so recursive types end."""

    def __init__(self, reader: AvroSchema, writer: AvroSchema):
        self.reader, self.writer = reader, writer
        self.memo: dict[tuple[str, str], list[str] | None] = {}

    def describe(self, schema, side: AvroSchema) -> str:
        kind = _kind(side._resolve(schema))
        if kind in ("record", "enum", "fixed"):
            return f"{kind} {side._resolve(schema)['name']}"
        return kind

    def mismatch(self, r, w, path) -> list[str]:
        return [f"{path or '/'}: reader type {self.describe(r, self.reader)} cannot read writer type "
                f"{self.describe(w, self.writer)}"]

    def check(self, r, w, path: str) -> list[str]:
        r, w = self.reader._resolve(r), self.writer._resolve(w)
        rk, wk = _kind(r), _kind(w)
        if wk == "union":  # whichever branch was written, the reader must read it
            errors = []
            for branch in w:
                errors += self.check(r, branch, path)
            return errors
        if rk == "union":  # the first reader branch that reads the writer's type is used
            if any(not self.check(branch, w, path) for branch in r):
                return []
            return [f"{path or '/'}: no branch of the reader union {_json(self.branch_names(r))} can read "
                    f"writer type {self.describe(w, self.writer)}"]
        if rk in PRIMITIVES or wk in PRIMITIVES:
            return [] if rk == wk or wk in _PROMOTED_FROM.get(rk, ()) else self.mismatch(r, w, path)
        if rk != wk:
            return self.mismatch(r, w, path)
        if rk == "array":
            return self.check(r["items"], w["items"], f"{path}/items")
        if rk == "map":
            return self.check(r["values"], w["values"], f"{path}/values")
        if not self.same_name(r, w):
            return [f"{path}/name: reader {rk} {r['name']} does not match writer {wk} {w['name']}"
                    " (by name or alias)"]
        key = (r["name"], w["name"])
        if key in self.memo:  # None: under comparison further up (recursion)
            done = self.memo[key]
            return [] if not done else [f"{path or '/'}: reader {rk} {r['name']} cannot read writer {wk} "
                                        f"{w['name']}"]
        self.memo[key] = None
        errors = getattr(self, f"check_{rk}")(r, w, path)
        self.memo[key] = errors
        return errors

    def branch_names(self, union) -> list[str]:
        return [self.describe(branch, self.reader) for branch in union]

    def same_name(self, r, w) -> bool:
        return _split(r["name"])[1] == _split(w["name"])[1] or w["name"] in self.reader._aliases(r)

    def check_record(self, r, w, path) -> list[str]:
        written = {f["name"]: f for f in w["fields"]}
        errors = []
        for i, field in enumerate(r["fields"]):
            names = [field["name"], *(field.get("aliases") or ())]
            match = next((written[n] for n in names if n in written), None)
            if match is not None:
                errors += self.check(field["type"], match["type"], f"{path}/fields/{i}/type")
            elif "default" not in field:
                errors.append(f"{path}/fields/{i}: reader field '{field['name']}' has no default value and is "
                              "missing from the writer")
        return errors

    def check_enum(self, r, w, path) -> list[str]:
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if missing and "default" not in r:
            return [f"{path}/symbols: reader enum {r['name']} lacks the writer's symbols {', '.join(missing)} "
                    "and has no default"]
        return []

    def check_fixed(self, r, w, path) -> list[str]:
        if r["size"] != w["size"]:
            return [f"{path}/size: reader fixed {r['name']} has size {r['size']}, writer size {w['size']}"]
        return []


# --- Spark types ---------------------------------------------------------------------------------
def _logical(schema) -> str | None:
    return schema.get("logicalType") if isinstance(schema, dict) else None


def _non_null(union) -> list:
    return [b for b in union if b != "null" and not (isinstance(b, dict) and b.get("type") == "null")]


def _spark_type(avro: AvroSchema, schema, T, stack: tuple) -> tuple[Any, bool]:
    """(DataType, nullable) as Spark's Avro schema converter maps ``schema``."""
    schema = avro._resolve(schema)
    kind, logical = _kind(schema), _logical(schema)
    if kind == "union":
        branches = _non_null(schema)
        nullable = len(branches) < len(schema)
        if not branches:
            return T.NullType(), True
        kinds = {_kind(avro._resolve(b)) for b in branches}
        if len(branches) == 1:
            return _spark_type(avro, branches[0], T, stack)[0], nullable
        if len(branches) == 2 and kinds in ({"int", "long"}, {"float", "double"}):
            return (T.LongType() if "long" in kinds else T.DoubleType()), nullable
        members = [T.StructField(f"member{i}", _spark_type(avro, b, T, stack)[0], True)
                   for i, b in enumerate(branches)]
        return T.StructType(members), nullable
    if kind == "null":
        return T.NullType(), True
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = schema.get("precision"), schema.get("scale") or 0
        if not isinstance(precision, int) or precision > 38:
            raise ValueError(f"decimal precision {precision} has no Spark type (at most 38)")
        return T.DecimalType(precision, scale), False
    if kind == "int" and logical == "date":
        return T.DateType(), False
    if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        return T.TimestampType(), False
    if kind == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return T.TimestampNTZType(), False
    simple = {"boolean": T.BooleanType, "int": T.IntegerType, "long": T.LongType, "float": T.FloatType,
              "double": T.DoubleType, "bytes": T.BinaryType, "string": T.StringType, "enum": T.StringType,
              "fixed": T.BinaryType}
    if kind in simple:
        return simple[kind](), False
    if kind == "array":
        element, contains_null = _spark_type(avro, schema["items"], T, stack)
        return T.ArrayType(element, contains_null), False
    if kind == "map":
        value, contains_null = _spark_type(avro, schema["values"], T, stack)
        return T.MapType(T.StringType(), value, contains_null), False
    if schema["name"] in stack:
        raise ValueError(f"recursive type {schema['name']} has no Spark type")
    fields = []
    for field in schema["fields"]:
        data_type, nullable = _spark_type(avro, field["type"], T, stack + (schema["name"],))
        fields.append(T.StructField(field["name"], data_type, nullable))
    return T.StructType(fields), False


# --- decoding ------------------------------------------------------------------------------------
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_LOCAL_EPOCH = datetime.datetime(1970, 1, 1)
_DATE_EPOCH = datetime.date(1970, 1, 1)
_DECIMALS = decimal.Context(prec=80)


def _decimal_reader(scale: int) -> Callable:
    def read(data: bytes):  # two's-complement big-endian unscaled value, as the specification writes it
        return decimal.Decimal(int.from_bytes(data, "big", signed=True)).scaleb(-scale, _DECIMALS)
    return read


_LOGICAL_READERS: dict[tuple[str, str], Callable] = {
    ("int", "date"): lambda days: _DATE_EPOCH + datetime.timedelta(days=days),
    ("long", "timestamp-millis"): lambda ms: _EPOCH + datetime.timedelta(milliseconds=ms),
    ("long", "timestamp-micros"): lambda us: _EPOCH + datetime.timedelta(microseconds=us),
    ("long", "local-timestamp-millis"): lambda ms: _LOCAL_EPOCH + datetime.timedelta(milliseconds=ms),
    ("long", "local-timestamp-micros"): lambda us: _LOCAL_EPOCH + datetime.timedelta(microseconds=us),
}


def _without_logical_types(schema):
    """The raw schema with logical types dropped: fastavro then returns the underlying values and the reader's
    logical types (not the writer's) decide the conversion."""
    if isinstance(schema, list):
        return [_without_logical_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "logicalType"}
    for key in ("items", "values"):
        if key in out:
            out[key] = _without_logical_types(out[key])
    if isinstance(out.get("fields"), list):
        out["fields"] = [{**f, "type": _without_logical_types(f["type"])} if isinstance(f, dict) and "type" in f
                         else f for f in out["fields"]]
    return out


class _Decoders:
    """fastavro's reader over envelope schemas (one record field holding the value), then a converter that
    turns its values into those of ``spark_type()``: logical types, and unions Spark reads as structs."""

    def __init__(self, avro: AvroSchema):
        self.avro = avro
        self.schema = avro.decode_schema()
        self.by_name: dict[str, Callable] = {}  # converters of records, filled as built (recursion)
        self.tagged = self.needs_tags(avro.parsed, set())
        self.convert = self.converter(avro.parsed)

    @staticmethod
    def envelope(avro: AvroSchema):
        named = {}
        for ref in avro.references.values():
            named.update(_stripped_named_types(ref))
        body = {"type": "record", "name": _ENVELOPE,
                "fields": [{"name": _DECODED_FIELD, "type": _without_logical_types(avro.raw)}]}
        return fastavro.parse_schema(body, named, _ignore_default_error=True)

    def decode(self, payload, writer: AvroSchema):
        writer_schema = writer.decode_schema()
        reader_schema = None if writer.canonical() == self.avro.canonical() and \
            writer.references == self.avro.references else self.schema
        stream = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(stream, writer_schema, reader_schema,
                                               return_named_type=self.tagged)[_DECODED_FIELD]
        except Exception as e:  # fastavro raises EOFError, SchemaResolutionError, UnicodeDecodeError ...
            raise ValueError(f"the Avro payload does not decode: {type(e).__name__}: {e}") from None
        if stream.tell() != len(payload):
            raise ValueError(f"the Avro payload has {len(payload) - stream.tell()} bytes after its value")
        return self.convert(value) if self.convert else value

    def needs_tags(self, schema, seen: set) -> bool:
        """Whether a union read as a struct has a named branch: fastavro then names the branch it read."""
        schema = self.avro._resolve(schema)
        kind = _kind(schema)
        if kind == "union":
            branches = _non_null(schema)
            if self.struct_union(branches) and any(_kind(self.avro._resolve(b)) in NAMED for b in branches):
                return True
            return any(self.needs_tags(b, seen) for b in branches)
        if kind in ("array", "map"):
            return self.needs_tags(schema["items" if kind == "array" else "values"], seen)
        if kind == "record" and schema["name"] not in seen:
            seen.add(schema["name"])
            return any(self.needs_tags(f["type"], seen) for f in schema["fields"])
        return False

    def struct_union(self, branches) -> bool:
        kinds = {_kind(self.avro._resolve(b)) for b in branches}
        return len(branches) > 1 and not (len(branches) == 2 and kinds in ({"int", "long"}, {"float", "double"}))

    def converter(self, schema) -> Callable | None:
        """A function converting fastavro's value of ``schema``, or None when it is already right."""
        if _kind(schema) == "name" and schema in self.by_name:
            return self.by_name[schema]
        schema = self.avro._resolve(schema)
        kind, logical = _kind(schema), _logical(schema)
        if kind == "union":
            return self.union_converter(schema)
        if logical == "decimal" and kind in ("bytes", "fixed") and isinstance(schema.get("precision"), int):
            return _decimal_reader(schema.get("scale") or 0)
        if (kind, logical) in _LOGICAL_READERS:
            return _LOGICAL_READERS[(kind, logical)]
        if kind == "array":
            item = self.converter(schema["items"])
            return None if item is None else (lambda values: [item(v) for v in values])
        if kind == "map":
            value = self.converter(schema["values"])
            return None if value is None else (lambda values: {k: value(v) for k, v in values.items()})
        if kind == "record":
            return self.record_converter(schema)
        return None

    def record_converter(self, schema) -> Callable | None:
        cell: list = [None]
        self.by_name[schema["name"]] = lambda record: cell[0](record) if cell[0] else record
        fields = [(f["name"], c) for f in schema["fields"] if (c := self.converter(f["type"])) is not None]
        if not fields:
            cell[0] = None
            return None

        def convert(record):
            for name, convert_field in fields:
                record[name] = convert_field(record[name])
            return record
        cell[0] = convert
        return convert

    def union_converter(self, union) -> Callable | None:
        branches = _non_null(union)
        named = [_kind(self.avro._resolve(b)) in NAMED for b in branches]
        converters = [self.converter(b) for b in branches]
        untag = self.tagged and any(named)
        if not self.struct_union(branches):
            only = converters[0] if converters else None
            if only is None and not untag:
                return None

            def convert_nullable(value):
                if value is None:
                    return None
                if untag and isinstance(value, tuple):
                    value = value[1]
                return only(value) if only else value
            return convert_nullable
        matchers = [self.matcher(b) for b in branches]
        names = {}
        for i, b in enumerate(branches):
            if named[i]:
                definition = self.avro._resolve(b)
                for name in (definition["name"], *self.avro._aliases(definition)):
                    names.setdefault(name, i)
        members = [f"member{i}" for i in range(len(branches))]

        def convert_struct(value):
            if value is None:
                return None
            index = None
            if untag and isinstance(value, tuple) and value[0] in names:
                index, value = names[value[0]], value[1]
            else:  # an untagged value: the first branch of its Python type
                index = next((i for i, match in enumerate(matchers) if match(value)), None)
            if index is None:
                raise ValueError(f"no branch of the union {members} holds the value {value!r}")
            out = dict.fromkeys(members)
            out[members[index]] = converters[index](value) if converters[index] else value
            return out
        return convert_struct

    def matcher(self, schema) -> Callable:
        """Whether a value fastavro read (logical types dropped) may have been written as this branch."""
        kind = _kind(self.avro._resolve(schema))
        types = {"boolean": bool, "float": float, "double": float, "string": str, "bytes": bytes,
                 "array": list, "map": dict, "record": dict, "enum": str, "fixed": bytes}
        if kind in ("int", "long"):
            return lambda v: isinstance(v, int) and not isinstance(v, bool)
        expected = types.get(kind, object)
        return lambda v: isinstance(v, expected)


def _stripped_named_types(avro: AvroSchema) -> dict:
    """fastavro-parsed named types of ``avro`` and its references, without logical types, for decoding."""
    named: dict = {}
    for ref in avro.references.values():
        named.update(_stripped_named_types(ref))
    fastavro.parse_schema(_without_logical_types(avro.raw), named, _write_hint=False, _ignore_default_error=True)
    return named


# --- parsing and checks --------------------------------------------------------------------------
def parse(text: str, references: Mapping[str, ParsedSchema]) -> AvroSchema:
    try:
        raw = json.loads(text)
    except (TypeError, ValueError) as e:
        raise InvalidSchema(f"invalid Avro schema: not JSON: {e}") from None
    named: dict[str, Any] = {}
    for name, ref in (references or {}).items():
        if not isinstance(ref, AvroSchema):
            raise InvalidSchema(f"invalid Avro schema: reference {name!r} is a "
                                f"{getattr(ref, 'schema_type', type(ref).__name__)} schema, not Avro")
        named.update(ref.named_types)
    external = set(named)
    _check_shape(raw, "")
    try:
        parsed = fastavro.parse_schema(raw, named, _write_hint=False, _ignore_default_error=True)
    except UnknownType as e:
        raise InvalidSchema(f"invalid Avro schema: unknown type {e.name!r}") from None
    except (SchemaParseException, KeyError, TypeError, ValueError, AttributeError) as e:
        raise InvalidSchema(f"invalid Avro schema: {type(e).__name__}: {e}") from None
    checker = _Checker(named, external)
    checker.check(parsed, "")
    return AvroSchema(text, references or {}, raw, parsed, named)


def _check_shape(schema, path: str):
    """What fastavro would otherwise trip over without a clear message."""
    if isinstance(schema, list):
        for i, branch in enumerate(schema):
            if isinstance(branch, list):
                raise InvalidSchema(f"invalid Avro schema at {path}/{i}: a union may not contain a union")
            _check_shape(branch, f"{path}/{i}")
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind is None:
            raise InvalidSchema(f"invalid Avro schema at {path or '/'}: no \"type\"")
        if not isinstance(kind, str):
            raise InvalidSchema(f"invalid Avro schema at {path or '/'}: \"type\" must be a string")
        if kind in NAMED and not isinstance(schema.get("name"), str):
            raise InvalidSchema(f"invalid Avro schema at {path or '/'}: a {kind} needs a \"name\"")
        if kind in ("record", "error"):
            fields = schema.get("fields")
            if not isinstance(fields, list):
                raise InvalidSchema(f"invalid Avro schema at {path or '/'}: record \"fields\" must be a list")
            for i, field in enumerate(fields):
                if not isinstance(field, dict) or not isinstance(field.get("name"), str) or "type" not in field:
                    raise InvalidSchema(f"invalid Avro schema at {path}/fields/{i}: a field needs a \"name\" and "
                                        "a \"type\"")
                _check_shape(field["type"], f"{path}/fields/{i}/type")
        elif kind == "enum" and not isinstance(schema.get("symbols"), list):
            raise InvalidSchema(f"invalid Avro schema at {path or '/'}: enum \"symbols\" must be a list")
        elif kind == "fixed":
            size = schema.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidSchema(f"invalid Avro schema at {path or '/'}: fixed \"size\" must be a "
                                    "non-negative integer")
        elif kind == "array":
            if "items" not in schema:
                raise InvalidSchema(f"invalid Avro schema at {path or '/'}: array needs \"items\"")
            _check_shape(schema["items"], f"{path}/items")
        elif kind == "map":
            if "values" not in schema:
                raise InvalidSchema(f"invalid Avro schema at {path or '/'}: map needs \"values\"")
            _check_shape(schema["values"], f"{path}/values")
    elif not isinstance(schema, str):
        raise InvalidSchema(f"invalid Avro schema at {path or '/'}: {_json(schema)} is not a schema")


class _Checker:
    """Avro's parser checks fastavro leaves out: names, redefinitions, unions, field names and defaults."""

    def __init__(self, named: dict, external: set):
        self.named, self.external = named, external

    def fail(self, path: str, message: str):
        raise InvalidSchema(f"invalid Avro schema at {path or '/'}: {message}")

    def check_name(self, name: str, path: str, what: str):
        if not isinstance(name, str) or not all(_NAME.fullmatch(part) for part in name.split(".")):
            self.fail(path, f"{what} {name!r} is not a valid Avro name")

    def check(self, schema, path: str):
        kind = _kind(schema)
        if kind == "union":
            seen = set()
            for i, branch in enumerate(schema):
                k = _kind(branch)
                key = self.named[branch]["name"] if k == "name" else branch["name"] if k in NAMED else k
                if key in seen:
                    self.fail(f"{path}/{i}", f"the union has {key} twice")
                seen.add(key)
                self.check(branch, f"{path}/{i}")
            return
        if not isinstance(schema, dict):
            return
        if kind in ("array", "map"):
            key = "items" if kind == "array" else "values"
            self.check(schema[key], f"{path}/{key}")
        if kind not in NAMED:
            return
        name = schema["name"]
        self.check_name(name, path, "name")
        if name in self.external:
            self.fail(path, f"{name} is already defined by a referenced schema")
        for alias in schema.get("aliases") or ():
            self.check_name(alias, path, "alias")
        if kind == "record":
            names = set()
            for i, field in enumerate(schema["fields"]):
                where = f"{path}/fields/{i}"
                self.check_name(field["name"], where, "field name")
                if "." in field["name"]:
                    self.fail(where, f"field name {field['name']!r} may not contain a dot")
                if field["name"] in names:
                    self.fail(where, f"field {field['name']!r} is defined twice")
                names.add(field["name"])
                if field.get("order", "ascending") not in ("ascending", "descending", "ignore"):
                    self.fail(where, f"order {field['order']!r} is not ascending, descending or ignore")
                self.check(field["type"], f"{where}/type")
                if "default" in field and not self.valid_default(field["type"], field["default"]):
                    self.fail(where, f"default {_json(field['default'])} of field {field['name']!r} does not "
                                     f"match its type")

    def valid_default(self, schema, value) -> bool:
        schema = self.named[schema] if _kind(schema) == "name" else schema
        kind = _kind(schema)
        if kind == "union":
            return any(self.valid_default(branch, value) for branch in schema)
        if kind == "null":
            return value is None
        if kind == "boolean":
            return isinstance(value, bool)
        if kind in _INT_RANGE:
            low, high = _INT_RANGE[kind]
            return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        if kind in ("float", "double"):
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind in ("string", "bytes"):
            return isinstance(value, str) and (kind == "string" or all(ord(c) < 256 for c in value))
        if kind == "enum":
            return value in schema["symbols"]
        if kind == "fixed":
            return isinstance(value, str) and len(value) == schema["size"] and all(ord(c) < 256 for c in value)
        if kind == "array":
            return isinstance(value, list) and all(self.valid_default(schema["items"], v) for v in value)
        if kind == "map":
            return isinstance(value, dict) and all(self.valid_default(schema["values"], v) for v in value.values())
        if kind == "record":
            return isinstance(value, dict) and all(
                self.valid_default(f["type"], value[f["name"]]) if f["name"] in value else "default" in f
                for f in schema["fields"])
        return False
