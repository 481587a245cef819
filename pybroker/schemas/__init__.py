"""Schemas as a schema registry and its clients see them: Avro, JSON Schema and Protobuf.

``parse(schema_type, text, references)`` checks a schema and returns a ``ParsedSchema``: its
canonical text (what the registry stores, returns and compares), its normalized text
(``normalize=true``), the reasons it cannot read data written with another schema of its format,
and, for readers such as the Spark source, the Spark type of its values and a decoder of payloads.
Each format lives in its own module (avro.py, json_schema.py, protobuf.py); compatibility levels
are in compatibility.py, Confluent's wire framing in wire.py. Nothing here knows a broker or a client.
"""
from __future__ import annotations

import importlib
from typing import Mapping

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
_MODULES = {"AVRO": "pybroker.schemas.avro", "JSON": "pybroker.schemas.json_schema",
            "PROTOBUF": "pybroker.schemas.protobuf"}


class InvalidSchema(ValueError):
    """The text is not a valid schema of its type (the registry answers 42201 with this message)."""


class ParsedSchema:
    """One parsed schema. Subclasses (one per format) implement every method."""

    schema_type: str = ""

    def __init__(self, text: str, references: Mapping[str, "ParsedSchema"]):
        self.text = text  # as registered
        self.references = dict(references)  # reference name -> the parsed schema it names

    def canonical(self) -> str:
        """The text stored and returned for this schema; two registrations of the same schema have the same."""
        raise NotImplementedError

    def normalized(self) -> str:
        """The text under ``normalize=true``: equivalent schemas written differently compare equal."""
        raise NotImplementedError

    def compatibility_errors(self, writer: "ParsedSchema") -> list[str]:
        """Why this schema, as the reader, cannot read data written with ``writer``; [] when it can."""
        raise NotImplementedError

    def spark_type(self):
        """The pyspark.sql.types DataType of a decoded value (pyspark imported lazily)."""
        raise NotImplementedError

    def decode(self, payload: bytes, writer: "ParsedSchema"):
        """A payload (what follows the magic byte and id) written with ``writer``, read as this schema:
        a Python value of ``spark_type()`` (a dict for a struct). Raises ValueError when it cannot."""
        raise NotImplementedError

    def __eq__(self, other) -> bool:
        return isinstance(other, ParsedSchema) and (self.schema_type, self.canonical()) == \
            (other.schema_type, other.canonical())

    def __hash__(self) -> int:
        return hash((self.schema_type, self.canonical()))


def parse(schema_type: str | None, text: str, references: Mapping[str, ParsedSchema] = ()) -> ParsedSchema:
    """``schema_type`` None or "" means AVRO, as Confluent's. ``references``: name -> parsed schema."""
    schema_type = (schema_type or "AVRO").upper()
    if schema_type not in _MODULES:
        raise InvalidSchema(f"unknown schema type {schema_type!r}; expected one of {', '.join(SCHEMA_TYPES)}")
    module = importlib.import_module(_MODULES[schema_type])
    return module.parse(text, dict(references or {}))
