"""Columnar decoding of framed Avro values: a whole Arrow column at once, with numpy, no Python object per record.

Avro's binary encoding is sequential inside a record but the same for every record of one writer schema, so a
batch is decoded field by field for all its records together: each record keeps a cursor, a field's bytes are
gathered at the cursors and the cursors advance. This covers the common shapes: records of boolean, int, long,
float, double, string, bytes and enum fields, nested records, ``[null, T]`` unions, and the schema resolution
between them (added fields with defaults, removed fields, promotions, enum symbols). Anything else (arrays, maps,
other unions, logical types, references), or any byte that does not fit, raises ``Unsupported`` and the caller
decodes record by record with the format's own decoder, which also says which record is bad.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

PAD = 16  # zero bytes after the data: a varint or a double read past a cursor never leaves the buffer
_PRIMITIVE_TYPES = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
                    "double": pa.float64(), "string": pa.string(), "bytes": pa.binary(), "enum": pa.string()}
_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
               ("float", "double"), ("string", "bytes"), ("bytes", "string")}
_INT32 = (-2 ** 31, 2 ** 31 - 1)


class Unsupported(Exception):
    """The schemas or the bytes are outside what this decoder handles: decode record by record instead."""


class _Data:
    def __init__(self, data: np.ndarray):
        self.data = data


def _kind(schema, named: dict):
    if isinstance(schema, str):
        if schema in named:
            return named[schema]["type"], named[schema]
        return schema, schema
    if isinstance(schema, list):
        return "union", schema
    kind = schema.get("type")
    if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind in named):
        return _kind(kind, named)
    if schema.get("logicalType") is not None:
        raise Unsupported("logical types")
    return ("record" if kind == "error" else kind), schema


def _varint(ctx: _Data, pos, end):
    data = ctx.data
    result = np.zeros(len(pos), np.uint64)
    more = np.ones(len(pos), bool)
    used = np.zeros(len(pos), np.int64)
    for k in range(10):
        b = data[pos + k].astype(np.uint64)
        result |= np.where(more, (b & np.uint64(0x7F)) << np.uint64(7 * k), np.uint64(0))
        used += more
        more &= b >= 0x80
        if not more.any():
            break
    else:
        raise Unsupported("a varint longer than 10 bytes")
    value = (result >> np.uint64(1)).astype(np.int64) ^ -(result & np.uint64(1)).astype(np.int64)
    pos = pos + used
    if (pos > end).any():
        raise Unsupported("a value runs past its record")
    return value, pos


def _fixed_width(ctx: _Data, pos, end, width: int, dtype: str):
    new = pos + width
    if (new > end).any():
        raise Unsupported("a value runs past its record")
    raw = ctx.data[pos[:, None] + np.arange(width)]
    return pa.array(raw.view(dtype).ravel()), new


def _length_prefixed(ctx: _Data, pos, end, arrow_type):
    length, pos = _varint(ctx, pos, end)
    if (length < 0).any():
        raise Unsupported("a negative length")
    new = pos + length
    if (new > end).any():
        raise Unsupported("a value runs past its record")
    offsets = np.zeros(len(pos) + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    if offsets[-1] >= 2 ** 31:
        raise Unsupported("more than 2 GiB of strings in one batch")
    gather = np.arange(offsets[-1], dtype=np.int64) + np.repeat(pos - offsets[:-1], length)
    values = ctx.data[gather]
    array = pa.Array.from_buffers(arrow_type, len(pos), [None, pa.py_buffer(offsets.astype(np.int32)),
                                                          pa.py_buffer(values)])
    if arrow_type == pa.string():
        try:
            array.validate(full=True)  # UTF-8
        except pa.ArrowInvalid as exc:
            raise Unsupported(str(exc)) from None
    return array, new


def with_nulls(valid: np.ndarray, sub: pa.Array) -> pa.Array:
    if valid.all():
        return sub
    index = np.cumsum(valid) - 1
    return sub.take(pa.array(index, mask=~valid))


def _union_branches(schema: list, named: dict):
    """(index of the null branch, index and schema of the other) of a ``[null, T]`` union; else Unsupported."""
    kinds = [_kind(b, named)[0] for b in schema]
    if len(schema) != 2 or kinds.count("null") != 1:
        raise Unsupported("unions other than [null, T]")
    other = 1 - kinds.index("null")
    return other, schema[other]


def _default_array(default, arrow_type, n: int):
    if isinstance(default, (dict, list)):
        raise Unsupported("record, array or map defaults")
    if isinstance(default, str) and arrow_type == pa.binary():
        default = default.encode("latin-1")  # Avro writes bytes defaults as code points 0-255
    return pa.repeat(pa.scalar(default, arrow_type), n)


def _names(schema: dict) -> set:
    full = schema["name"]
    return {full, full.rpartition(".")[2]} | set(schema.get("aliases") or ())


class Compiler:
    """Builds, once per writer/reader pair, the function decoding a column written with one reading the other."""

    def __init__(self, writer_named: dict, reader_named: dict):
        self.wn, self.rn = writer_named, reader_named
        self.depth = 0

    def compile(self, writer, reader):
        """fn(ctx, pos, end) -> (Arrow array of the reader's type, new cursors); and whether it may be null."""
        self.depth += 1
        if self.depth > 32:
            raise Unsupported("nesting deeper than 32 (recursive types)")
        try:
            return self._compile(writer, reader)
        finally:
            self.depth -= 1

    def _compile(self, writer, reader):
        wk, w = _kind(writer, self.wn)
        rk, r = _kind(reader, self.rn)
        if rk == "union":
            r_other, r_branch = _union_branches(r, self.rn)
            if wk == "union":
                w_other, w_branch = _union_branches(w, self.wn)
                inner, _ = self.compile(w_branch, r_branch)
                return self._nullable(w_other, inner), True
            return self.compile(writer, r_branch)[0], True
        if wk == "union":
            raise Unsupported("a [null, T] writer read as a non-null reader")
        if wk == "record" and rk == "record":
            if not (_names(w) & _names(r)):
                raise Unsupported("records of different names")
            return self._record(w, r), False
        if wk == "enum" and rk == "enum":
            return self._enum(w, r), False
        if wk in ("record", "enum") or rk in ("record", "enum") or wk not in _PRIMITIVE_TYPES or \
                rk not in _PRIMITIVE_TYPES:
            raise Unsupported(f"{wk} read as {rk}")
        if wk != rk and (wk, rk) not in _PROMOTIONS:
            raise Unsupported(f"{wk} read as {rk}")
        read = self._primitive(wk)
        if wk == rk:
            return read, False
        target = _PRIMITIVE_TYPES[rk]

        def promoted(ctx, pos, end):
            array, pos = read(ctx, pos, end)
            return array.cast(target), pos
        return promoted, False

    @staticmethod
    def _primitive(kind: str):
        if kind == "boolean":
            def read(ctx, pos, end):
                if (pos + 1 > end).any():
                    raise Unsupported("a value runs past its record")
                b = ctx.data[pos]
                if (b > 1).any():
                    raise Unsupported("a boolean byte other than 0 or 1")
                return pa.array(b.astype(bool)), pos + 1
        elif kind in ("int", "long"):
            def read(ctx, pos, end):
                value, pos = _varint(ctx, pos, end)
                if kind == "int":
                    if len(value) and (value.min() < _INT32[0] or value.max() > _INT32[1]):
                        raise Unsupported("an int out of range")
                    return pa.array(value.astype(np.int32)), pos
                return pa.array(value), pos
        elif kind in ("float", "double"):
            width, dtype = (4, "<f4") if kind == "float" else (8, "<f8")

            def read(ctx, pos, end):
                return _fixed_width(ctx, pos, end, width, dtype)
        else:
            arrow_type = _PRIMITIVE_TYPES[kind]

            def read(ctx, pos, end):
                return _length_prefixed(ctx, pos, end, arrow_type)
        return read

    @staticmethod
    def _nullable(other: int, inner):
        def read(ctx, pos, end):
            branch, pos = _varint(ctx, pos, end)
            if ((branch != 0) & (branch != 1)).any():
                raise Unsupported("a union branch out of range")
            valid = branch == other
            sub, sub_pos = inner(ctx, pos[valid], end[valid])
            pos = pos.copy()
            pos[valid] = sub_pos
            return with_nulls(valid, sub), pos
        return read

    def _enum(self, w: dict, r: dict):
        symbols = set(r["symbols"])
        mapped = []
        for s in w["symbols"]:
            if s in symbols:
                mapped.append(s)
            elif r.get("default") in symbols:
                mapped.append(r["default"])
            else:
                raise Unsupported("a writer enum symbol the reader lacks")
        names = pa.array(mapped, pa.string())

        def read(ctx, pos, end):
            index, pos = _varint(ctx, pos, end)
            if len(index) and (index.min() < 0 or index.max() >= len(mapped)):
                raise Unsupported("an enum index out of range")
            return names.take(pa.array(index)), pos
        return read

    def _record(self, w: dict, r: dict):
        by_name = {}
        for rf in r["fields"]:
            for name in [rf["name"], *(rf.get("aliases") or ())]:
                by_name.setdefault(name, rf["name"])
        steps = []  # (reader field name or None to skip, decode function)
        for wf in w["fields"]:
            target = by_name.get(wf["name"])
            rtype = next((rf["type"] for rf in r["fields"] if rf["name"] == target), None)
            steps.append((target, self.compile(wf["type"], rtype if target else wf["type"])[0]))
        written = {t for t, _ in steps if t}
        fields = []  # (name, nullable, default or a marker)
        for rf in r["fields"]:
            nullable = _kind(rf["type"], self.rn)[0] == "union"
            if rf["name"] not in written:
                if "default" not in rf:
                    raise Unsupported(f"reader field {rf['name']} has no default")
                fields.append((rf["name"], nullable, rf["default"], self._natural_type(rf["type"])))
            else:
                fields.append((rf["name"], nullable, None, None))

        def read(ctx, pos, end):
            arrays = {}
            for target, step in steps:
                array, pos = step(ctx, pos, end)
                if target:
                    arrays[target] = array
            children, arrow_fields = [], []
            for name, nullable, default, natural in fields:
                array = arrays[name] if name in arrays else _default_array(default, natural, len(pos))
                children.append(array)
                arrow_fields.append(pa.field(name, array.type, nullable))
            return pa.StructArray.from_arrays(children, fields=arrow_fields), pos
        return read

    def _natural_type(self, schema):
        kind, s = _kind(schema, self.rn)
        if kind == "union":
            return self._natural_type(_union_branches(s, self.rn)[1])
        if kind not in _PRIMITIVE_TYPES:
            raise Unsupported("a defaulted field that is not a primitive or an enum")
        return _PRIMITIVE_TYPES[kind]


def compile_pair(writer_schema, writer_named: dict, reader_schema, reader_named: dict):
    """The column decoder of data written with ``writer_schema`` read as ``reader_schema`` (fastavro's parsed
    forms and their named types); raises Unsupported when the pair is outside this decoder."""
    return Compiler(writer_named, reader_named).compile(writer_schema, reader_schema)[0]


def decode_column(decoder, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Decode the payloads data[starts[i]:ends[i]] (``data`` padded with PAD zero bytes) into one Arrow array."""
    array, pos = decoder(_Data(data), starts.astype(np.int64), ends.astype(np.int64))
    if (pos != ends).any():
        raise Unsupported("bytes left after a value")
    return array
