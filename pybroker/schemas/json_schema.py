"""JSON Schema (draft-07 by default; 2020-12, 2019-09, draft-06 and draft-04 by ``$schema``).

Checked against its metaschema with ``jsonschema``; ``$ref``s to references (by their names, e.g.
``address.json``) must resolve. Compatibility follows Confluent's rules for JSON Schema: the reader
must accept every document the writer accepts (types, properties under open and closed content
models, required properties, enums, bounds, items, combined schemas), reported as Confluent's
difference names with a JSON pointer. Unions are checked branch by branch (each writer branch read by
some reader branch) rather than by Confluent's one-to-one matching; patternProperties, dependencies and
unevaluated* are not compared.
"""
from __future__ import annotations

import json
from typing import Mapping
from urllib.parse import urldefrag, urljoin

from pybroker.schemas import InvalidSchema, ParsedSchema

MAX_DEPTH = 32  # $ref chains and nesting compared at most this deep (recursive schemas)
_NARROWING = {"maxLength": "MAX_LENGTH", "maxItems": "MAX_ITEMS", "maxProperties": "MAX_PROPERTIES",
              "maximum": "MAXIMUM", "exclusiveMaximum": "EXCLUSIVE_MAXIMUM"}
_WIDENING = {"minLength": "MIN_LENGTH", "minItems": "MIN_ITEMS", "minProperties": "MIN_PROPERTIES",
             "minimum": "MINIMUM", "exclusiveMinimum": "EXCLUSIVE_MINIMUM"}


def _validator_class(doc):
    import jsonschema
    from jsonschema.validators import validator_for
    if isinstance(doc, dict) and "$schema" in doc:
        return validator_for(doc, default=jsonschema.Draft7Validator)
    return jsonschema.Draft7Validator


def parse(text: str, references: Mapping[str, ParsedSchema]) -> "JsonSchema":
    try:
        doc = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise InvalidSchema(f"invalid JSON schema: not JSON: {exc}") from None
    if not isinstance(doc, (dict, bool)):
        raise InvalidSchema("invalid JSON schema: a schema is an object or a boolean")
    import jsonschema
    cls = _validator_class(doc)
    try:
        cls.check_schema(doc)
    except jsonschema.SchemaError as exc:
        raise InvalidSchema(f"invalid JSON schema: {exc.message}") from None
    for name, ref in references.items():
        if not isinstance(ref, JsonSchema):
            raise InvalidSchema(f"invalid JSON schema: reference {name!r} is not a JSON schema")
    schema = JsonSchema(text, references, doc)
    schema.check_refs()
    return schema


class JsonSchema(ParsedSchema):
    schema_type = "JSON"

    def __init__(self, text: str, references: Mapping[str, ParsedSchema], doc):
        super().__init__(text, references)
        self.doc = doc
        self._validator = None
        self._resolver = None
        self._absolute: dict = {}  # (id of a referenced node, its base) -> (node, node with absolute $refs)

    # ---- texts -------------------------------------------------------------------------------------

    def canonical(self) -> str:
        return json.dumps(self.doc, separators=(",", ":"), ensure_ascii=False)

    def normalized(self) -> str:
        return json.dumps(_normalize(self.doc), separators=(",", ":"), ensure_ascii=False, sort_keys=True)

    # ---- references --------------------------------------------------------------------------------

    def _base(self) -> str:
        return self.doc.get("$id", "") if isinstance(self.doc, dict) and isinstance(self.doc.get("$id"), str) else ""

    def _registry(self):
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT7
        base = self._base()
        resources = [(base, Resource.from_contents(self.doc, default_specification=DRAFT7))]
        for name, ref in _all_references(self).items():
            resource = Resource.from_contents(ref.doc, default_specification=DRAFT7)
            # Confluent resolves a reference's name against the referring schema's $id too
            for uri in {name, urljoin(base, name), ref._base()} - {""}:
                resources.append((uri, resource))
        return Registry().with_resources(resources)

    def resolver(self):
        if self._resolver is None:
            self._resolver = self._registry().resolver(base_uri=self._base())
        return self._resolver

    def validator(self):
        """A jsonschema validator of documents against this schema (its references resolvable)."""
        if self._validator is None:
            self._validator = _validator_class(self.doc)(self.doc, registry=self._registry())
        return self._validator

    def check_refs(self) -> None:
        """Every $ref resolves (to this document or a reference)."""
        import referencing.exceptions
        for ref in _refs(self.doc):
            try:
                self.resolver().lookup(ref)
            except referencing.exceptions.Unresolvable as exc:
                raise InvalidSchema(f"invalid JSON schema: $ref {ref!r} cannot be resolved ({exc})") from None

    def resolve(self, node, depth: int = 0):
        """``node`` with its $ref followed (within this schema or its references); the $refs inside a
        referenced document are made absolute so that they resolve from here too."""
        while isinstance(node, dict) and "$ref" in node and depth < MAX_DEPTH:
            contents = self.resolver().lookup(node["$ref"]).contents
            base = urldefrag(urljoin(self._base(), node["$ref"])).url  # the document it lives in
            if base and base != self._base():
                key = (id(contents), base)
                if key not in self._absolute:
                    self._absolute[key] = (contents, _absolute_refs(contents, base))  # keep contents alive
                contents = self._absolute[key][1]
            extra = {k: v for k, v in node.items() if k != "$ref"}
            node = {**contents, **extra} if extra and isinstance(contents, dict) else contents
            depth += 1
        return node

    # ---- compatibility -----------------------------------------------------------------------------

    def compatibility_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, JsonSchema):
            return [f"TYPE_CHANGED at #/: reader is JSON, writer is {writer.schema_type}"]
        errors: list[str] = []
        _compare(self, self.doc, writer, writer.doc, "#", errors, 0)
        return errors

    # ---- Spark -------------------------------------------------------------------------------------

    def spark_type(self):
        return _spark_type(self, self.doc, 0)

    def decode(self, payload, writer: ParsedSchema, validate: bool = False):
        """``validate``: check the document against the writer schema first (slower; off by default, as
        the serializer validated it)."""
        try:
            doc = json.loads(bytes(payload))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a JSON document: {exc}") from None
        if validate:
            if not isinstance(writer, JsonSchema):
                raise ValueError(f"a {writer.schema_type} writer schema cannot be read as JSON")
            error = next(iter(writer.validator().iter_errors(doc)), None)
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path)
                raise ValueError(f"the document does not match its schema at #/{where}: {error.message}")
        return _to_spark_value(self, self.doc, doc, 0)


_UNORDERED = ("required", "type")  # lists whose order means nothing: sorted and deduplicated when normalized


def _normalize(node, key: str | None = None):
    if isinstance(node, dict):
        if key in ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas"):
            return {k: _normalize(v) for k, v in node.items()}  # names, not keywords
        return {k: _normalize(v, k) for k, v in node.items()}
    if isinstance(node, list):
        if key in _UNORDERED and all(isinstance(v, str) for v in node):
            return sorted(set(node))
        if key in ("enum", "examples", "const", "default"):
            return node
        return [_normalize(v) for v in node]
    return node


def _all_references(schema: JsonSchema, seen=None) -> dict:
    seen = {} if seen is None else seen
    for name, ref in schema.references.items():
        if name not in seen:
            seen[name] = ref
            _all_references(ref, seen)
    return seen


def _absolute_refs(node, base: str):
    if isinstance(node, dict):
        return {k: urljoin(base, v) if k == "$ref" and isinstance(v, str)
                else v if k in ("enum", "const", "default", "examples") else _absolute_refs(v, base)
                for k, v in node.items()}
    if isinstance(node, list):
        return [_absolute_refs(v, base) for v in node]
    return node


def _refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            elif key not in ("enum", "const", "default", "examples"):
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


# ---- the compatibility rules -------------------------------------------------------------------------

_ALL_TYPES = frozenset(("null", "boolean", "object", "array", "number", "integer", "string"))


def _types(node) -> frozenset:
    if node is True or node == {}:
        return _ALL_TYPES
    if node is False:
        return frozenset()
    t = node.get("type") if isinstance(node, dict) else None
    if t is None:
        if isinstance(node, dict) and ("enum" in node or "const" in node):  # the types of the listed values
            return frozenset(_json_type(v) for v in (node["enum"] if "enum" in node else [node["const"]]))
        if isinstance(node, dict) and ("properties" in node or "additionalProperties" in node):
            return frozenset(("object",))
        return _ALL_TYPES
    return frozenset([t] if isinstance(t, str) else t)


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or isinstance(value, float) and value.is_integer():
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "object")


def _accepts_types(reader: frozenset, writer: frozenset) -> frozenset:
    """The writer types the reader does not accept (a reader number accepts integers)."""
    missing = set(writer - reader)
    if "number" in reader:
        missing.discard("integer")
    return frozenset(missing)


def _open(node, key: str = "additionalProperties") -> bool:
    return not isinstance(node, dict) or node.get(key, True) is not False


def _compare(r: JsonSchema, rn, w: JsonSchema, wn, path: str, errors: list, depth: int) -> None:
    """Add why the reader node ``rn`` rejects some document the writer node ``wn`` accepts."""
    if depth > MAX_DEPTH:
        return
    rn, wn = r.resolve(rn), w.resolve(wn)
    if rn is True or rn == {} or wn is False:
        return
    if rn is False:
        errors.append(f"TYPE_CHANGED at {path}: the reader accepts nothing")
        return
    if wn is True:
        wn = {}
    for combiner in ("oneOf", "anyOf"):
        if combiner in wn:  # every writer branch must be readable
            for i, branch in enumerate(wn[combiner]):
                _compare(r, rn, w, branch, f"{path}/{combiner}/{i}", errors, depth + 1)
            return
        if combiner in rn:  # some reader branch must read the writer
            if not any(not _errors_of(r, b, w, wn, path, depth) for b in rn[combiner]):
                errors.append(f"COMBINED_TYPE_SUBSCHEMAS_CHANGED at {path}/{combiner}: no branch reads the writer")
            return
    for i, branch in enumerate(rn.get("allOf", ())):
        _compare(r, branch, w, wn, f"{path}/allOf/{i}", errors, depth + 1)
    missing = _accepts_types(_types(rn), _types(wn))
    if missing:
        errors.append(f"TYPE_CHANGED at {path}: the reader does not accept {', '.join(sorted(missing))}")
        return
    if "enum" in rn:
        extra = [v for v in wn.get("enum", [None]) if v not in rn["enum"]] if "enum" in wn else ["any"]
        if "const" in wn and wn["const"] in rn["enum"]:
            extra = []
        if extra:
            errors.append(f"ENUM_ARRAY_NARROWED at {path}/enum: the reader lacks {extra}")
    if "const" in rn and wn.get("const", object()) != rn["const"]:
        errors.append(f"CONST_CHANGED at {path}/const")
    for key, name in _NARROWING.items():
        if isinstance(rn.get(key), bool) or isinstance(wn.get(key), bool):
            continue  # draft-04's flag form, compared through maximum/minimum
        if key in rn and (key not in wn or _num(wn[key]) > _num(rn[key])):
            errors.append(f"{name}_DECREASED at {path}/{key}" if key in wn else f"{name}_ADDED at {path}/{key}")
    for key, name in _WIDENING.items():
        if isinstance(rn.get(key), bool) or isinstance(wn.get(key), bool):
            continue
        if key in rn and (key not in wn or _num(wn[key]) < _num(rn[key])):
            errors.append(f"{name}_INCREASED at {path}/{key}" if key in wn else f"{name}_ADDED at {path}/{key}")
    if "not" in rn:  # the reader refuses what its "not" accepts: the writer must refuse all of that too
        if "not" not in wn or _errors_of(w, wn["not"], r, rn["not"], f"{path}/not", depth):
            errors.append(f"NOT_TYPE_EXTENDED at {path}/not: the reader refuses documents the writer may write")
    if "pattern" in rn and rn["pattern"] != wn.get("pattern"):
        errors.append(f"PATTERN_CHANGED at {path}/pattern" if "pattern" in wn else f"PATTERN_ADDED at {path}/pattern")
    if "object" in _types(wn) and "object" in _types(rn):
        _compare_objects(r, rn, w, wn, path, errors, depth)
    if "array" in _types(wn) and "array" in _types(rn):
        _compare_arrays(r, rn, w, wn, path, errors, depth)


def _errors_of(r, rn, w, wn, path, depth) -> list:
    errors: list[str] = []
    _compare(r, rn, w, wn, path, errors, depth + 1)
    return errors


def _num(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _compare_objects(r, rn, w, wn, path, errors, depth) -> None:
    rprops, wprops = rn.get("properties", {}), wn.get("properties", {})
    for name in sorted(set(rn.get("required", ())) - set(wn.get("required", ()))):
        if isinstance(rprops.get(name), dict) and "default" in rprops[name]:
            continue  # Confluent: a required property with a default may be added
        errors.append(f"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL at {path}/required: {name!r}"
                      if name not in wprops else f"REQUIRED_ATTRIBUTE_ADDED at {path}/required: {name!r}")
    for name, wprop in wprops.items():
        where = f"{path}/properties/{name}"
        if name in rprops:
            _compare(r, rprops[name], w, wprop, where, errors, depth + 1)
        elif not _open(rn):
            errors.append(f"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at {where}")
        elif isinstance(rn.get("additionalProperties"), dict):
            _compare(r, rn["additionalProperties"], w, wprop, where, errors, depth + 1)
    for name, rprop in rprops.items():
        if name in wprops:
            continue
        where = f"{path}/properties/{name}"
        if not _open(wn):
            continue  # the writer never writes it
        wextra = wn.get("additionalProperties", True)
        if r.resolve(rprop) in (True, {}):
            continue  # PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL: it reads anything
        if wextra is True:
            errors.append(f"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at {where}: the writer may write any value there")
        else:
            _compare(r, rprop, w, wextra, where, errors, depth + 1)
    if _open(wn) and not _open(rn):
        errors.append(f"ADDITIONAL_PROPERTIES_REMOVED at {path}/additionalProperties")
    elif isinstance(rn.get("additionalProperties"), dict) and _open(wn):
        wextra = wn.get("additionalProperties", True)
        _compare(r, rn["additionalProperties"], w, {} if wextra is True else wextra,
                 f"{path}/additionalProperties", errors, depth + 1)


def _compare_arrays(r, rn, w, wn, path, errors, depth) -> None:
    ritems, witems = rn.get("items", True), wn.get("items", True)
    if isinstance(ritems, list) or isinstance(witems, list):  # draft-07 tuples: position by position
        rlist = ritems if isinstance(ritems, list) else []
        wlist = witems if isinstance(witems, list) else []
        for i, wi in enumerate(wlist):
            if i < len(rlist):
                _compare(r, rlist[i], w, wi, f"{path}/items/{i}", errors, depth + 1)
        return
    for key in ("prefixItems",):
        for i, wi in enumerate(wn.get(key, ())):
            if i < len(rn.get(key, ())):
                _compare(r, rn[key][i], w, wi, f"{path}/{key}/{i}", errors, depth + 1)
    _compare(r, ritems, w, witems, f"{path}/items", errors, depth + 1)
    if rn.get("uniqueItems") and not wn.get("uniqueItems"):
        errors.append(f"UNIQUE_ITEMS_ADDED at {path}/uniqueItems")


# ---- Spark ------------------------------------------------------------------------------------------

def _nullable_branch(schema: JsonSchema, node):
    """The non-null branch of a oneOf/anyOf [null, T], or of a type list [T, "null"]; else None."""
    for combiner in ("oneOf", "anyOf"):
        branches = node.get(combiner) if isinstance(node, dict) else None
        if branches:
            rest = [b for b in branches if _types(schema.resolve(b)) != frozenset(("null",))]
            if len(rest) == 1 and len(branches) == 2:
                return rest[0]
    t = node.get("type") if isinstance(node, dict) else None
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        if len(rest) == 1:
            return {**node, "type": rest[0]}
    return None


def _spark_type(schema: JsonSchema, node, depth: int):
    from pyspark.sql import types as T
    node = schema.resolve(node)
    branch = _nullable_branch(schema, node)
    if branch is not None:
        return _spark_type(schema, branch, depth + 1)
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        return T.StringType()
    t = node.get("type")
    if t is None and "properties" in node:
        t = "object"
    if t == "object":
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if not props and isinstance(extra, dict):
            return T.MapType(T.StringType(), _spark_type(schema, extra, depth + 1))
        return T.StructType([T.StructField(name, _spark_type(schema, p, depth + 1), True)
                             for name, p in (props or {}).items()])
    if t == "array":
        items = node.get("items", {})
        return T.ArrayType(_spark_type(schema, items if isinstance(items, dict) else {}, depth + 1), True)
    if t == "string":
        fmt = node.get("format")
        return T.DateType() if fmt == "date" else T.TimestampType() if fmt == "date-time" else T.StringType()
    return {"integer": T.LongType(), "number": T.DoubleType(), "boolean": T.BooleanType()}.get(t, T.StringType())


def _to_spark_value(schema: JsonSchema, node, value, depth: int):
    """``value`` (a parsed document) as the Python value of ``_spark_type(node)``."""
    if value is None:
        return None
    node = schema.resolve(node)
    branch = _nullable_branch(schema, node)
    if branch is not None:
        return _to_spark_value(schema, branch, value, depth + 1)
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        return value if isinstance(value, str) else json.dumps(value)
    t = node.get("type")
    if t is None and "properties" in node:
        t = "object"
    if t == "object":
        if not isinstance(value, dict):
            raise ValueError(f"expected an object, got {type(value).__name__}")
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if not props and isinstance(extra, dict):
            return {k: _to_spark_value(schema, extra, v, depth + 1) for k, v in value.items()}
        return {name: _to_spark_value(schema, p, value.get(name), depth + 1) for name, p in (props or {}).items()}
    if t == "array":
        if not isinstance(value, list):
            raise ValueError(f"expected an array, got {type(value).__name__}")
        items = node.get("items", {})
        return [_to_spark_value(schema, items if isinstance(items, dict) else {}, v, depth + 1) for v in value]
    if t == "string":
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {type(value).__name__}")
        fmt = node.get("format")
        if fmt in ("date", "date-time"):
            import datetime
            text = value.replace("Z", "+00:00")
            return datetime.date.fromisoformat(text) if fmt == "date" else datetime.datetime.fromisoformat(text)
        return value
    if t == "integer":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    if t == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {value!r}")
        return float(value)
    if t == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"expected a boolean, got {value!r}")
        return value
    return value if isinstance(value, str) else json.dumps(value)
