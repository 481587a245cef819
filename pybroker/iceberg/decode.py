"""Rows of the value_schema_* modes: each value decoded with its registered schema into typed columns.

value_schema_id_prefix: the value names its schema (Confluent's framing: magic byte, schema id);
value_schema_latest: the value is the bare payload of the subject ``<topic>-value``'s latest schema.
A record that does not decode, or whose schema cannot be written to the table (an incompatible type
change), goes to the DLQ table with the reason, or is dropped (``iceberg.invalid.record.action``).
A schema that adds fields or widens types evolves the table first.
"""
from __future__ import annotations

import logging

import pyarrow as pa

from pybroker.iceberg import catalog as cat
from pybroker.iceberg import rows as rowlib
from pybroker.iceberg import values

log = logging.getLogger(__name__)


def value_rows(writer, batch: pa.Table):
    """(main rows or None, DLQ rows or None) of ``batch`` for ``writer`` (a translator.TopicWriter).
    Raises values.RegistryUnavailable while the registry cannot be reached (the batch waits)."""
    if writer.registry is None:
        raise values.RegistryUnavailable("no schema registry configured (iceberg.schema.registry.url)")
    mode = writer.table_settings.mode
    good_idx, good_vals, bad_idx, reasons = [], [], [], []
    latest = None
    if mode == "value_schema_latest":
        try:
            latest = writer.registry.latest(f"{writer.topic}-value")
        except values.SchemaNotFound as e:
            latest = e
    for i, value in enumerate(batch.column("value").to_pylist()):
        try:
            if value is None:
                raise ValueError("the record has no value")
            if mode == "value_schema_id_prefix":
                schema_id, payload = values.split_schema_id(value)
            elif isinstance(latest, Exception):
                raise latest
            else:
                schema_id, payload = latest[0], value
            decode = _decoder_for(writer, schema_id)
            good_vals.append(decode(payload))
            good_idx.append(i)
        except values.RegistryUnavailable:
            raise
        except ValueError as e:
            bad_idx.append(i)
            reasons.append(str(e) or type(e).__name__)
    main = None
    if good_idx:
        arrow_schema = writer.table.schema().as_arrow()
        main = rowlib.decoded_rows(rowlib.take(batch, good_idx), good_vals, arrow_schema)
    dlq = None
    if bad_idx:
        if writer.table_settings.invalid_record_action == "drop":
            writer.counters.dropped_records += len(bad_idx)
        else:
            dlq = rowlib.dlq_rows(rowlib.take(batch, bad_idx), reasons)
    return main, dlq


def _decoder_for(writer, schema_id: int):
    """The decoder of a schema id, once its schema is known writable to the table (evolving it if needed)."""
    known = writer._decoders.get(schema_id)
    if known is None:
        try:
            schema_type, text = writer.registry.by_id(schema_id)
            struct = values.value_struct(schema_type, text)
            known = (values.decoder(schema_type, text), struct, None)
        except values.RegistryUnavailable:
            raise
        except ValueError as e:  # SchemaNotFound, an unsupported schema
            known = (None, None, f"schema {schema_id}: {e}")
        writer._decoders[schema_id] = known
    decode, struct, error = known
    if error is None:
        fitted = writer._fitted.get(schema_id)  # (table schema id, verdict) of the last check
        if fitted is None or writer.table is None or fitted[0] != writer.table.schema().schema_id:
            error = _fit_table(writer, schema_id, struct)
            writer._fitted[schema_id] = (writer.table.schema().schema_id, error)
        else:
            error = fitted[1]
    if error is not None:
        raise ValueError(error)
    return decode


def _fit_table(writer, schema_id: int, struct) -> str | None:
    """Make the table able to take rows of ``struct``: create it, or evolve it. The reason when it cannot."""
    if writer.table is None:
        writer.table = cat.load_or_create(writer.catalog, writer.settings, writer.topic,
                                          cat.table_schema(writer.table_settings.mode, struct),
                                          writer.table_settings.partition_spec)
    from pyiceberg.types import StructType
    current = StructType(*[f for f in writer.table.schema().fields if f.name != "kafka"])
    verdict, reason = values.evolution(current, struct)
    if verdict == "same":
        return None
    if verdict == "incompatible":
        return f"schema {schema_id} cannot be written to table {writer.table.name()}: {reason}"
    with writer.table.update_schema() as update:  # a schema change only: no snapshot, progress unchanged
        update.union_by_name(cat.table_schema(writer.table_settings.mode, struct))
    writer.table.refresh()
    log.info("table %s: schema evolved for schema id %d", ".".join(writer.table.name()), schema_id)
    return None
