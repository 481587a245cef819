"""Protobuf schemas as Confluent's registry sees them.

A schema arrives as ``.proto`` text or as a base64 serialized ``FileDescriptorProto`` (what Confluent's
serializers register). Text is compiled in-process by grpcio-tools' protoc; either form ends as a
``FileDescriptorProto`` whose imports are the schema's references (by import path) or the well-known
files (google/protobuf, google/type, confluent) that need none. From the descriptor come the printed
text, the compatibility rules (Confluent's, field by field number), the Spark type of a message and the
decoding of payloads that start with Confluent's message indexes.
"""
from __future__ import annotations

import ast
import base64
import binascii
import datetime
import decimal
import importlib
import os
import re
import tempfile
import threading
import warnings
from typing import Mapping

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_encoding, text_format
from google.protobuf.message import DecodeError

from pybroker.schemas import InvalidSchema, ParsedSchema

# Spark's from_protobuf option recursive.fields.max.depth: a message type appears at most this often on a path.
MAX_RECURSION_DEPTH = 3
ROOT_FILE = "schema.proto"  # the name of the schema's own file in its descriptor pool
TIMESTAMP = "google.protobuf.Timestamp"
_PROTOC_LOCK = threading.Lock()  # protoc keeps process-wide state and reports through warnings
_IMPORT = re.compile(r'\bimport\s+(?:public\s+|weak\s+)?"([^"]+)"')
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")
_F = descriptor_pb2.FieldDescriptorProto
_MAX_FIELD_NUMBER = 536870911


class ProtobufSchema(ParsedSchema):
    """A parsed Protobuf file: ``file`` is its FileDescriptorProto, ``references`` the files it imports."""

    schema_type = "PROTOBUF"

    def __init__(self, text: str, references: Mapping[str, ParsedSchema],
                 file: descriptor_pb2.FileDescriptorProto, from_descriptor: bool):
        super().__init__(text, references)
        self.file = file
        self.from_descriptor = from_descriptor  # registered as base64: its text is printed from the descriptor
        self.dependencies = _dependency_files(file, self.references)  # import path -> file, imports first
        self.pool = _build_pool(file, self.dependencies)
        self._printed: dict[bool, str] = {}
        self._classes: dict[str, type] = {}

    # -- texts ---------------------------------------------------------------------------------------------

    def canonical(self) -> str:
        return self._print(False) if self.from_descriptor else self.text.rstrip()

    def normalized(self) -> str:
        return self._print(True)

    def serialized(self) -> str:
        """The base64 FileDescriptorProto (``?format=serialized``, what Confluent's deserializers ask for)."""
        return base64.standard_b64encode(self.file.SerializeToString()).decode("ascii")

    def _print(self, normalize: bool) -> str:
        if normalize not in self._printed:
            self._printed[normalize] = print_file(self.file, normalize)
        return self._printed[normalize]

    # -- messages ------------------------------------------------------------------------------------------

    def message_names(self) -> list[str]:
        """Full names of the file's top-level messages, in order (index [i] of the message indexes)."""
        prefix = f"{self.file.package}." if self.file.package else ""
        return [prefix + message.name for message in self.file.message_type]

    def message_for(self, indexes: list[int]):
        """The message Descriptor that Confluent's message ``indexes`` point to in this file."""
        messages, name = self.file.message_type, self.file.package
        for index in indexes:
            if not 0 <= index < len(messages):
                raise ValueError(f"message index {index} out of range ({len(messages)} messages) in {indexes}")
            name = f"{name}.{messages[index].name}" if name else messages[index].name
            messages = messages[index].nested_type
        if not indexes:
            raise ValueError("empty message indexes")
        return self.pool.FindMessageTypeByName(name)

    def indexes_of(self, full_name: str) -> list[int]:
        """The message indexes of the message ``full_name`` (the inverse of ``message_for``)."""
        prefix = f"{self.file.package}." if self.file.package else ""
        if not full_name.startswith(prefix):
            raise ValueError(f"no message {full_name} in package {self.file.package!r}")
        messages, indexes = self.file.message_type, []
        for part in full_name[len(prefix):].split("."):
            index = next((i for i, m in enumerate(messages) if m.name == part), None)
            if index is None:
                raise ValueError(f"no message {full_name}")
            indexes.append(index)
            messages = messages[index].nested_type
        return indexes

    def message_class(self, full_name: str) -> type:
        """The generated class of a message of this schema (or of its imports), built on first use."""
        if full_name not in self._classes:
            try:
                descriptor = self.pool.FindMessageTypeByName(full_name)
            except KeyError:
                raise ValueError(f"the schema has no message {full_name}") from None
            self._classes[full_name] = message_factory.GetMessageClass(descriptor)
        return self._classes[full_name]

    def first_message(self) -> str:
        names = self.message_names()
        if not names:
            raise ValueError("the schema declares no message")
        return names[0]

    # -- Spark and decoding --------------------------------------------------------------------------------

    def spark_type(self):
        return self.spark_type_of(self.first_message())

    def spark_type_of(self, full_name: str):
        """The StructType of the message ``full_name``."""
        return _spark_struct(self.pool.FindMessageTypeByName(full_name), (full_name,))

    def decode(self, payload: bytes, writer: ParsedSchema | None = None):
        """Reads the message indexes, then the message they name in ``writer``, as this schema's message of
        the same full name (protobuf's own wire rules resolve the two), as a value of its Spark type."""
        writer = self if writer is None else writer
        if not isinstance(writer, ProtobufSchema):
            raise ValueError(f"a {writer.schema_type} writer schema cannot be read as PROTOBUF")
        indexes, offset = read_indexes(payload)
        full_name = writer.message_for(indexes).full_name
        cls = self.message_class(full_name)
        try:
            message = cls.FromString(bytes(payload[offset:]))
        except DecodeError as e:
            raise ValueError(f"payload is not a valid {full_name}: {e}") from None
        return message_value(message, (full_name,))

    # -- compatibility -------------------------------------------------------------------------------------

    def compatibility_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, ProtobufSchema):
            return [f"a PROTOBUF schema cannot read data written with a {writer.schema_type} schema"]
        return _Compatibility(writer, self).errors()


def parse(text: str, references: Mapping[str, ParsedSchema]) -> ProtobufSchema:
    for name, ref in references.items():
        if not isinstance(ref, ProtobufSchema):
            raise InvalidSchema(f"reference {name!r} is a {ref.schema_type} schema, not PROTOBUF")
    file = _from_base64(text)
    from_descriptor = file is not None
    if file is None:
        file = _compile(text, references)
    file.name = _root_name(references)
    try:
        return ProtobufSchema(text, references, file, from_descriptor)
    except InvalidSchema:
        raise
    except Exception as e:  # the descriptor pool refuses an inconsistent file (unknown types, clashes)
        raise InvalidSchema(f"invalid Protobuf schema: {e}") from None


# ---------------------------------------------------------------------------------------------------------
# Message indexes (Confluent's framing of protobuf payloads)

def _zigzag_varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_indexes(indexes: list[int]) -> bytes:
    """Confluent's message-indexes prefix: zigzag varint count then each index; [0] is the single byte 0."""
    if list(indexes) == [0]:
        return b"\x00"
    return _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(i) for i in indexes)


def read_indexes(data: bytes, offset: int = 0) -> tuple[list[int], int]:
    """(message indexes, offset just past them) from a payload."""
    def varint() -> int:
        nonlocal offset
        value = shift = 0
        for _ in range(10):  # a 64-bit varint has at most 10 bytes
            if offset >= len(data):
                raise ValueError("payload ends inside its message indexes")
            byte = data[offset]
            offset += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1)
        raise ValueError("message index varint too long")

    count = varint()
    if count == 0:
        return [0], offset
    if count < 0 or count > len(data):
        raise ValueError(f"invalid message index count {count}")
    return [varint() for _ in range(count)], offset


# ---------------------------------------------------------------------------------------------------------
# Parsing: base64 descriptors, protoc for text, the files a schema imports

def _from_base64(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    stripped = text.strip()
    if not stripped or not _BASE64.fullmatch(stripped):
        return None
    try:
        data = base64.b64decode("".join(stripped.split()), validate=True)
        file = descriptor_pb2.FileDescriptorProto.FromString(data)
    except (binascii.Error, ValueError, DecodeError):
        return None  # not a descriptor: protoc will say what is wrong with it as text
    if any([builtin_file(dep) is not None for dep in file.dependency]):
        file = descriptor_pb2.FileDescriptorProto.FromString(data)  # now with the custom options they define
    return file


def _root_name(references: Mapping[str, ParsedSchema]) -> str:
    """The schema's own file name: any name its imports do not use."""
    taken = set(references)
    for ref in references.values():
        taken.update(ref.dependencies)
    name, n = ROOT_FILE, 0
    while name in taken:
        n += 1
        name = f"schema_{n}.proto"
    return name


def _builtin_module(name: str) -> str | None:
    """The Python module that carries a file imported without a reference, as Confluent's clients allow."""
    if not name.endswith(".proto"):
        return None
    stem = name[:-len(".proto")].replace("/", ".")
    if name.startswith(("google/protobuf/", "google/type/")):
        return stem + "_pb2"
    if name.startswith("confluent/"):
        return "confluent_kafka.schema_registry." + stem + "_pb2"
    return None


_BUILTINS: dict[str, descriptor_pb2.FileDescriptorProto | None] = {}


def builtin_file(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    """A well-known file (google/protobuf/*, google/type/*, confluent/*) from its installed module, or None."""
    if name not in _BUILTINS:
        module_name, file = _builtin_module(name), None
        if module_name is not None:
            try:
                module = importlib.import_module(module_name)
                if module.DESCRIPTOR.name == name:
                    file = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
            except Exception:  # not installed: the import stays unresolved
                file = None
        _BUILTINS[name] = file
    return _BUILTINS[name]


def _dependency_files(file: descriptor_pb2.FileDescriptorProto,
                      references: Mapping[str, ParsedSchema]) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """Every file ``file`` imports, directly or not, by import path, each after its own imports."""
    out: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def visit(current, refs, chain):
        for dep in current.dependency:
            if dep in out:
                continue
            if dep in chain:
                raise InvalidSchema(f"import cycle through {dep!r}")
            ref = refs.get(dep)
            if isinstance(ref, ProtobufSchema):
                visit(ref.file, ref.references, chain | {dep})
                copy = descriptor_pb2.FileDescriptorProto()
                copy.CopyFrom(ref.file)
                copy.name = dep  # files name each other by import path
                out[dep] = copy
                continue
            builtin = builtin_file(dep)
            if builtin is None:
                raise InvalidSchema(f"import {dep!r} is neither a schema reference nor a well-known file")
            visit(builtin, {}, chain | {dep})
            out[dep] = builtin

    visit(file, references, frozenset())
    return out


def _build_pool(file, dependencies) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for dep in dependencies.values():
        pool.Add(dep)
    pool.Add(file)
    pool.FindFileByName(file.name)  # builds and checks the file now, not at first use
    return pool


def _protoc_include() -> str:
    import grpc_tools
    return os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


def _write_source(root: str, name: str, text: str) -> None:
    path = os.path.normpath(os.path.join(root, name))
    if os.path.isabs(name) or not path.startswith(root + os.sep):
        raise InvalidSchema(f"invalid import path {name!r}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _write_imports(root: str, text: str, references: Mapping[str, ParsedSchema], written: set[str]) -> None:
    """Writes the sources ``text`` imports: references by import path, well-known files protoc lacks."""
    for name in _IMPORT.findall(text):
        if name in written or name.startswith("google/protobuf/"):  # protoc ships google/protobuf itself
            continue
        ref = references.get(name)
        if isinstance(ref, ProtobufSchema):
            source, refs = ref.canonical(), ref.references
        elif builtin_file(name) is not None:
            source, refs = print_file(builtin_file(name), False), {}
        else:
            continue  # protoc reports the missing file
        written.add(name)
        _write_source(root, name, source)
        _write_imports(root, source, refs, written)


def _compile(text: str, references: Mapping[str, ParsedSchema]) -> descriptor_pb2.FileDescriptorProto:
    from grpc_tools import _protoc_compiler
    root_name = _root_name(references)
    with _PROTOC_LOCK, tempfile.TemporaryDirectory(prefix="pybroker-proto-") as root:
        written = {root_name}
        _write_source(root, root_name, text)
        _write_imports(root, text, references, written)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unused imports and the like are not errors
            try:
                generated = _protoc_compiler.get_protos(root_name.encode(), [root.encode(), _protoc_include().encode()])
            except _protoc_compiler.ProtocErrors as e:
                raise InvalidSchema("; ".join(_protoc_message(error) for error in e.errors()) or str(e)) from None
    return descriptor_pb2.FileDescriptorProto.FromString(_serialized_descriptor(generated[-1][1]))


def _protoc_message(error) -> str:
    filename = error.filename.decode(errors="replace")
    message = error.message.decode(errors="replace")
    return f"{filename}:{error.line + 1}:{error.column + 1}: {message}"  # protoc counts from 0 here


def _serialized_descriptor(code: bytes) -> bytes:
    """The serialized FileDescriptorProto protoc's Python output embeds (read, never executed)."""
    for node in ast.walk(ast.parse(code)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, bytes)):
            return node.args[0].value
    raise InvalidSchema("protoc produced no descriptor")


# ---------------------------------------------------------------------------------------------------------
# Printing a FileDescriptorProto as .proto text

_SCALAR_NAMES = {getattr(_F, name): name[len("TYPE_"):].lower() for name in _F.Type.keys()}
_LABELS = {_F.LABEL_OPTIONAL: "optional", _F.LABEL_REQUIRED: "required", _F.LABEL_REPEATED: "repeated"}


def print_file(file: descriptor_pb2.FileDescriptorProto, normalize: bool = False) -> str:
    """``.proto`` text of ``file``. ``normalize``: imports and options sorted, fields and enum values in
    number order, so that equivalent files print the same (declaration order of messages is kept: the
    message indexes depend on it)."""
    return _Printer(file, normalize).text()


def _quote(value: str | bytes) -> str:
    return '"' + text_encoding.CEscape(value, as_utf8=isinstance(value, str)) + '"'


def _option_value(field, value) -> str:
    if field.type == field.TYPE_MESSAGE:
        return "{ " + text_format.MessageToString(value, as_one_line=True) + " }"
    if field.type == field.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else str(value)
    if field.type == field.TYPE_BOOL:
        return "true" if value else "false"
    if field.type in (field.TYPE_STRING, field.TYPE_BYTES):
        return _quote(value)
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else str(value).lower()
    return str(value)


def _options(options, normalize: bool, skip=()) -> list[tuple[str, str]]:
    """(name, value) of the options set in an options message (custom options unknown here are dropped)."""
    out = []
    for field, value in options.ListFields():
        if field.name in skip or field.name == "uninterpreted_option":
            continue
        name = f"({field.full_name})" if field.is_extension else field.name
        for item in (value if field.is_repeated else [value]):
            out.append((name, _option_value(field, item)))
    return sorted(out) if normalize else out


def _json_name(name: str) -> str:
    """protoc's default json_name: underscores dropped, the letter after each capitalised."""
    out, upper = [], False
    for ch in name:
        if ch == "_":
            upper = True
        else:
            out.append(ch.upper() if upper else ch)
            upper = False
    return "".join(out)


def _ranges(ranges, end_inclusive: bool) -> str:
    parts = []
    for r in ranges:
        end = r.end if end_inclusive else r.end - 1
        if end == r.start:
            parts.append(str(r.start))
        else:
            parts.append(f"{r.start} to {'max' if end >= _MAX_FIELD_NUMBER else end}")
    return ", ".join(parts)


class _Printer:
    def __init__(self, file, normalize: bool):
        self.file, self.normalize, self.lines = file, normalize, []
        self.syntax = file.syntax or "proto2"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("  " * depth + line)

    def text(self) -> str:
        file = self.file
        if self.syntax == "editions":
            self.emit(0, f'edition = "{descriptor_pb2.Edition.Name(file.edition).removeprefix("EDITION_")}";')
        else:
            self.emit(0, f'syntax = "{self.syntax}";')
        if file.package:
            self.emit(0, f"package {file.package};")
        imports = []
        for i, dep in enumerate(file.dependency):
            kind = "public " if i in file.public_dependency else "weak " if i in file.weak_dependency else ""
            imports.append(f'import {kind}"{dep}";')
        for line in sorted(imports) if self.normalize else imports:
            self.emit(0, line)
        for name, value in _options(file.options, self.normalize):
            self.emit(0, f"option {name} = {value};")
        for message in file.message_type:
            self.message(message, 0)
        for enum in file.enum_type:
            self.enum(enum, 0)
        self.extensions(file.extension, 0)
        for service in file.service:
            self.service(service)
        return "\n".join(self.lines) + "\n"

    def type_name(self, field) -> str:
        if field.type in (_F.TYPE_MESSAGE, _F.TYPE_ENUM, _F.TYPE_GROUP):
            return field.type_name  # fully qualified with a leading dot: resolves the same in any scope
        return _SCALAR_NAMES[field.type]

    def label(self, field, in_oneof: bool) -> str:
        if in_oneof:
            return ""
        if field.label == _F.LABEL_REPEATED:
            return "repeated "
        if self.syntax == "proto2" or field.proto3_optional:
            return _LABELS[field.label] + " "
        if field.label == _F.LABEL_REQUIRED:
            return "required "
        return ""

    def field_options(self, field) -> str:
        parts = []
        if field.HasField("default_value"):
            value = field.default_value
            if field.type == _F.TYPE_STRING:
                value = _quote(value)
            elif field.type == _F.TYPE_BYTES:
                value = f'"{value}"'  # stored C-escaped already
            parts.append(("default", value))
        if field.HasField("json_name") and field.json_name != _json_name(field.name):
            parts.append(("json_name", _quote(field.json_name)))
        parts += _options(field.options, self.normalize)
        return " [" + ", ".join(f"{k} = {v}" for k, v in parts) + "]" if parts else ""

    def field(self, field, depth: int, nested: dict, in_oneof: bool = False) -> None:
        entry = nested.get(field.type_name.rsplit(".", 1)[-1]) if field.type_name else None
        if entry is not None and entry.options.map_entry and field.label == _F.LABEL_REPEATED:
            key, value = sorted(entry.field, key=lambda f: f.number)
            self.emit(depth, f"map<{self.type_name(key)}, {self.type_name(value)}> {field.name} = {field.number}"
                             f"{self.field_options(field)};")
        elif field.type == _F.TYPE_GROUP and entry is not None:
            self.emit(depth, f"{self.label(field, in_oneof)}group {entry.name} = {field.number}"
                             f"{self.field_options(field)} {{")
            self.body(entry, depth + 1)
            self.emit(depth, "}")
        else:
            self.emit(depth, f"{self.label(field, in_oneof)}{self.type_name(field)} {field.name} = {field.number}"
                             f"{self.field_options(field)};")

    def message(self, message, depth: int) -> None:
        self.emit(depth, f"message {message.name} {{")
        self.body(message, depth + 1)
        self.emit(depth, "}")

    def body(self, message, depth: int) -> None:
        nested = {m.name: m for m in message.nested_type}
        for name, value in _options(message.options, self.normalize, skip=("map_entry",)):
            self.emit(depth, f"option {name} = {value};")
        fields = sorted(message.field, key=lambda f: f.number) if self.normalize else list(message.field)
        real_oneof = [f.HasField("oneof_index") and not f.proto3_optional for f in fields]
        printed_oneofs = set()
        for field, in_oneof in zip(fields, real_oneof):
            if not in_oneof:
                self.field(field, depth, nested)
                continue
            if field.oneof_index in printed_oneofs:
                continue
            printed_oneofs.add(field.oneof_index)
            oneof = message.oneof_decl[field.oneof_index]
            self.emit(depth, f"oneof {oneof.name} {{")
            for name, value in _options(oneof.options, self.normalize):
                self.emit(depth + 1, f"option {name} = {value};")
            for member in fields:
                if member.HasField("oneof_index") and member.oneof_index == field.oneof_index:
                    self.field(member, depth + 1, nested, in_oneof=True)
            self.emit(depth, "}")
        groups = {f.type_name.rsplit(".", 1)[-1] for f in message.field if f.type == _F.TYPE_GROUP}
        for child in message.nested_type:
            if not child.options.map_entry and child.name not in groups:
                self.message(child, depth)
        for enum in message.enum_type:
            self.enum(enum, depth)
        self.extensions(message.extension, depth)
        if message.extension_range:
            self.emit(depth, f"extensions {_ranges(self.sorted_ranges(message.extension_range), False)};")
        self.reserved(message.reserved_range, message.reserved_name, depth, end_inclusive=False)

    def sorted_ranges(self, ranges):
        return sorted(ranges, key=lambda r: (r.start, r.end)) if self.normalize else list(ranges)

    def reserved(self, ranges, names, depth: int, end_inclusive: bool) -> None:
        if ranges:
            self.emit(depth, f"reserved {_ranges(self.sorted_ranges(ranges), end_inclusive)};")
        if names:
            names = sorted(names) if self.normalize else list(names)
            if self.syntax == "editions":
                self.emit(depth, "reserved " + ", ".join(names) + ";")
            else:
                self.emit(depth, "reserved " + ", ".join(_quote(n) for n in names) + ";")

    def enum(self, enum, depth: int) -> None:
        self.emit(depth, f"enum {enum.name} {{")
        for name, value in _options(enum.options, self.normalize):
            self.emit(depth + 1, f"option {name} = {value};")
        values = sorted(enum.value, key=lambda v: (v.number, v.name)) if self.normalize else list(enum.value)
        for value in values:
            opts = _options(value.options, self.normalize)
            suffix = " [" + ", ".join(f"{k} = {v}" for k, v in opts) + "]" if opts else ""
            self.emit(depth + 1, f"{value.name} = {value.number}{suffix};")
        self.reserved(enum.reserved_range, enum.reserved_name, depth + 1, end_inclusive=True)
        self.emit(depth, "}")

    def extensions(self, extensions, depth: int) -> None:
        by_extendee: dict[str, list] = {}
        for field in extensions:
            by_extendee.setdefault(field.extendee, []).append(field)
        for extendee in sorted(by_extendee) if self.normalize else by_extendee:
            self.emit(depth, f"extend {extendee} {{")
            fields = by_extendee[extendee]
            for field in sorted(fields, key=lambda f: f.number) if self.normalize else fields:
                self.field(field, depth + 1, {})
            self.emit(depth, "}")

    def service(self, service) -> None:
        self.emit(0, f"service {service.name} {{")
        for name, value in _options(service.options, self.normalize):
            self.emit(1, f"option {name} = {value};")
        for method in service.method:
            source = ("stream " if method.client_streaming else "") + method.input_type
            sink = ("stream " if method.server_streaming else "") + method.output_type
            opts = _options(method.options, self.normalize)
            if opts:
                self.emit(1, f"rpc {method.name}({source}) returns ({sink}) {{")
                for name, value in opts:
                    self.emit(2, f"option {name} = {value};")
                self.emit(1, "}")
            else:
                self.emit(1, f"rpc {method.name}({source}) returns ({sink});")
        self.emit(0, "}")


# ---------------------------------------------------------------------------------------------------------
# Spark types and decoded values

def _is_map(field) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _recursion_cut(field, path: tuple[str, ...]) -> bool:
    """A message field whose type already appears MAX_RECURSION_DEPTH times on the path is left out."""
    message = field.message_type
    if message is None:
        return False
    if _is_map(field):
        message = message.fields_by_name["value"].message_type
        if message is None:
            return False
    return path.count(message.full_name) >= MAX_RECURSION_DEPTH


def _spark_struct(descriptor, path: tuple[str, ...]):
    from pyspark.sql import types as T
    fields = [T.StructField(f.name, _spark_field(f, path), True)
              for f in descriptor.fields if not _recursion_cut(f, path)]
    return T.StructType(fields)


def _spark_field(field, path):
    from pyspark.sql import types as T
    if _is_map(field):
        entry = field.message_type.fields_by_name
        return T.MapType(_spark_scalar(entry["key"], path), _spark_scalar(entry["value"], path), True)
    element = _spark_scalar(field, path)
    return T.ArrayType(element, True) if field.is_repeated else element


def _spark_scalar(field, path):
    from pyspark.sql import types as T
    if field.message_type is not None:
        if field.message_type.full_name == TIMESTAMP:
            return T.TimestampType()
        return _spark_struct(field.message_type, path + (field.message_type.full_name,))
    kind = field.type
    if kind in (field.TYPE_INT32, field.TYPE_SINT32, field.TYPE_SFIXED32):
        return T.IntegerType()
    if kind in (field.TYPE_INT64, field.TYPE_SINT64, field.TYPE_SFIXED64, field.TYPE_UINT32, field.TYPE_FIXED32):
        return T.LongType()
    if kind in (field.TYPE_UINT64, field.TYPE_FIXED64):
        return T.DecimalType(20, 0)
    return {field.TYPE_FLOAT: T.FloatType(), field.TYPE_DOUBLE: T.DoubleType(), field.TYPE_BOOL: T.BooleanType(),
            field.TYPE_STRING: T.StringType(), field.TYPE_BYTES: T.BinaryType(),
            field.TYPE_ENUM: T.StringType()}[kind]


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def message_value(message, path: tuple[str, ...]) -> dict:
    """A message as a dict of its Spark struct (unset message, oneof and optional fields are None)."""
    out = {}
    for field in message.DESCRIPTOR.fields:
        if _recursion_cut(field, path):
            continue
        value = getattr(message, field.name)
        if _is_map(field):
            entry = field.message_type.fields_by_name
            out[field.name] = {_scalar_value(entry["key"], k, path): _scalar_value(entry["value"], v, path)
                               for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_scalar_value(field, item, path) for item in value]
        elif (field.message_type is not None or field.containing_oneof is not None) and \
                not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _scalar_value(field, value, path)
    return out


def _scalar_value(field, value, path):
    if field.message_type is not None:
        if field.message_type.full_name == TIMESTAMP:
            return _EPOCH + datetime.timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)
        return message_value(value, path + (field.message_type.full_name,))
    if field.type == field.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else str(value)  # open enums keep unknown numbers
    if field.type in (field.TYPE_UINT64, field.TYPE_FIXED64):
        return decimal.Decimal(value)
    return value


# ---------------------------------------------------------------------------------------------------------
# Compatibility: Confluent's rules for a reader schema and the writer schema of the data

_SCALAR_GROUPS = {}
for _group, _types in {
    "varint": (_F.TYPE_INT32, _F.TYPE_UINT32, _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_BOOL, _F.TYPE_ENUM),
    "zigzag": (_F.TYPE_SINT32, _F.TYPE_SINT64),
    "fixed32": (_F.TYPE_FIXED32, _F.TYPE_SFIXED32),
    "fixed64": (_F.TYPE_FIXED64, _F.TYPE_SFIXED64),
    "length-delimited": (_F.TYPE_STRING, _F.TYPE_BYTES),
    "float": (_F.TYPE_FLOAT,),
    "double": (_F.TYPE_DOUBLE,),
}.items():
    for _type in _types:
        _SCALAR_GROUPS[_type] = _group


class _Types:
    """Every message and enum of a schema and its imports by full name: (DescriptorProto, package)."""

    def __init__(self, schema: ProtobufSchema):
        self.messages: dict[str, tuple] = {}
        for file in [*schema.dependencies.values(), schema.file]:
            for message in file.message_type:
                self._add(message, file.package, file.package)

    def _add(self, message, scope: str, package: str) -> None:
        name = f"{scope}.{message.name}" if scope else message.name
        self.messages[name] = (message, package)
        for child in message.nested_type:
            self._add(child, name, package)

    def get(self, type_name: str):
        return self.messages.get(type_name.lstrip("."), (None, ""))


def _local_name(type_name: str, package: str) -> str:
    name = type_name.lstrip(".")
    return name[len(package) + 1:] if package and name.startswith(package + ".") else name


class _Compatibility:
    """Compares the writer's file with the reader's, message by message and field by field number.

    Compatible, as in Confluent's registry: adding or removing messages' fields (not required ones), renaming
    fields, adding or removing enums and enum values, moving messages, adding oneofs or fields to them,
    removing a whole oneof, moving a field out of a oneof, changing syntax, switching within a wire group.
    """

    def __init__(self, writer: ProtobufSchema, reader: ProtobufSchema):
        self.writer, self.reader = writer, reader
        self.writer_types, self.reader_types = _Types(writer), _Types(reader)
        self.seen: set[tuple[str, str]] = set()
        self.out: list[str] = []

    def add(self, kind: str, path: str, detail: str) -> None:
        self.out.append(f"{kind} at {path}: {detail}")

    def errors(self) -> list[str]:
        w_file, r_file = self.writer.file, self.reader.file
        if w_file.package != r_file.package:
            self.add("PACKAGE_CHANGED", "#/", f"package {w_file.package!r} became {r_file.package!r}")
        self.messages(w_file.message_type, r_file.message_type, w_file.package, r_file.package, "")
        return self.out

    def messages(self, writer_list, reader_list, w_scope: str, r_scope: str, path: str) -> None:
        readers = {m.name: m for m in reader_list}
        for w in writer_list:
            if w.options.map_entry:
                continue  # compared through the map field
            name = f"{path}.{w.name}" if path else w.name
            r = readers.get(w.name)
            if r is None:
                self.add("MESSAGE_REMOVED", name, f"message {name} was removed")
                continue
            self.message(w, r, f"{w_scope}.{w.name}".lstrip("."), f"{r_scope}.{r.name}".lstrip("."), name)

    def message(self, w, r, w_full: str, r_full: str, path: str) -> None:
        if (w_full, r_full) in self.seen:
            return
        self.seen.add((w_full, r_full))
        w_fields, r_fields = {f.number: f for f in w.field}, {f.number: f for f in r.field}
        w_oneof, r_oneof = _oneof_members(w), _oneof_members(r)
        w_of = {n: name for name, members in w_oneof.items() for n in members}
        deleted = {name for name, members in w_oneof.items()
                   if name not in r_oneof and not any(n in r_fields for n in members)}
        for name, members in r_oneof.items():
            origins, moved_in = set(), 0
            for number in members:
                if number in w_of:
                    origins.add("oneof " + w_of[number])
                elif number in w_fields:
                    origins.add(f"field {number}")
                    moved_in += 1
            if len(origins) > 1:
                kind = "MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF"
                self.add(kind, f"{path}.{name}", f"oneof {name} now makes exclusive fields that were not: "
                                                 + ", ".join(sorted(origins)))
        for number in sorted(set(w_fields) | set(r_fields)):
            wf, rf = w_fields.get(number), r_fields.get(number)
            where = f"{path}.{(rf or wf).name} (field {number})"
            if rf is None:
                if number in w_of and w_of[number] not in deleted:
                    self.add("ONEOF_FIELD_REMOVED", where, f"field removed from oneof {w_of[number]}")
                elif number not in w_of and wf.label == _F.LABEL_REQUIRED:
                    self.add("REQUIRED_FIELD_REMOVED", where, "a required field was removed")
            elif wf is None:
                if rf.label == _F.LABEL_REQUIRED:
                    self.add("REQUIRED_FIELD_ADDED", where, "a required field was added")
            else:
                if rf.label == _F.LABEL_REQUIRED and wf.label != _F.LABEL_REQUIRED:
                    self.add("REQUIRED_FIELD_ADDED", where, "an optional field became required")
                self.field(wf, rf, where)
        self.messages(w.nested_type, r.nested_type, w_full, r_full, path)

    def kind(self, field, types: _Types) -> str:
        if field.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP):
            message, _ = types.get(field.type_name)
            if message is not None and message.options.map_entry and field.label == _F.LABEL_REPEATED:
                return "map"
            return "message"
        return "scalar"

    def field(self, wf, rf, where: str) -> None:
        w_kind, r_kind = self.kind(wf, self.writer_types), self.kind(rf, self.reader_types)
        if w_kind != r_kind:
            self.add("FIELD_KIND_CHANGED", where, f"a {w_kind} field became a {r_kind} field")
            return
        if w_kind == "map":
            w_entry, _ = self.writer_types.get(wf.type_name)
            r_entry, _ = self.reader_types.get(rf.type_name)
            w_kv, r_kv = {f.name: f for f in w_entry.field}, {f.name: f for f in r_entry.field}
            for part in ("key", "value"):
                if part in w_kv and part in r_kv:
                    self.field(w_kv[part], r_kv[part], f"{where} map {part}")
            return
        if (wf.label == _F.LABEL_REPEATED) != (rf.label == _F.LABEL_REPEATED) and w_kind == "scalar" and \
                _SCALAR_GROUPS[wf.type] != "length-delimited":
            self.add("FIELD_NUMERIC_LABEL_CHANGED", where, "a numeric field changed between singular and repeated")
        if w_kind == "scalar":
            w_group, r_group = _SCALAR_GROUPS[wf.type], _SCALAR_GROUPS[rf.type]
            if w_group != r_group:
                self.add("FIELD_SCALAR_KIND_CHANGED", where,
                         f"{self.type_text(wf)} ({w_group}) became {self.type_text(rf)} ({r_group})")
            return
        w_msg, w_package = self.writer_types.get(wf.type_name)
        r_msg, r_package = self.reader_types.get(rf.type_name)
        w_local, r_local = _local_name(wf.type_name, w_package), _local_name(rf.type_name, r_package)
        if w_local != r_local or w_msg is None or r_msg is None:
            self.add("FIELD_NAMED_TYPE_CHANGED", where,
                     f"message type {wf.type_name.lstrip('.')} became {rf.type_name.lstrip('.')}")
            return
        self.message(w_msg, r_msg, wf.type_name.lstrip("."), rf.type_name.lstrip("."), r_local)

    @staticmethod
    def type_text(field) -> str:
        return field.type_name.lstrip(".") if field.type_name else _SCALAR_NAMES[field.type]


def _oneof_members(message) -> dict[str, set[int]]:
    """Real (not proto3 optional) oneofs: name -> field numbers."""
    out: dict[str, set[int]] = {}
    for field in message.field:
        if field.HasField("oneof_index") and not field.proto3_optional:
            out.setdefault(message.oneof_decl[field.oneof_index].name, set()).add(field.number)
    return out
