"""Table rows from fetched records: the consumer's Arrow batches (pybroker/client/arrow.py columns)
turned into the ``kafka`` struct and the mode's columns, without a Python loop for key_value."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

KAFKA_TYPE = pa.struct([
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("timestamp_type", pa.int32(), nullable=False),
    pa.field("headers", pa.list_(pa.field("element", pa.struct([pa.field("key", pa.large_string()),
                                                                 pa.field("value", pa.large_binary())]),
                                          nullable=False))),
    pa.field("key", pa.large_binary()),
])


def kafka_column(batch: pa.RecordBatch | pa.Table) -> pa.StructArray:
    """The ``kafka`` struct of each fetched record."""
    def col(name):
        c = batch.column(name)
        return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
    headers = col("headers").cast(KAFKA_TYPE.field("headers").type)
    arrays = [col("partition"), col("offset"), col("timestamp").cast(pa.timestamp("us", tz="UTC")),
              col("timestamp_type"), headers, col("key").cast(pa.large_binary())]
    return pa.StructArray.from_arrays(arrays, fields=list(KAFKA_TYPE))


def key_value_rows(batch) -> pa.Table:
    return pa.table({"kafka": kafka_column(batch), "key": batch.column("key").cast(pa.large_binary()),
                     "value": batch.column("value").cast(pa.large_binary())})


def dlq_rows(batch, reasons: list[str]) -> pa.Table:
    return pa.table({"kafka": kafka_column(batch), "value": batch.column("value").cast(pa.large_binary()),
                     "reason": pa.array(reasons, pa.large_string())})


def decoded_rows(batch, values: list[dict], arrow_schema: pa.Schema) -> pa.Table:
    """Rows of the value_schema_* modes: ``values`` (decoded dicts, one per record of ``batch``) under
    the table's Arrow schema; fields a value lacks are null."""
    kafka = kafka_column(batch)
    value_fields = [f for f in arrow_schema if f.name != "kafka"]
    columns = {"kafka": kafka}
    for field in value_fields:
        columns[field.name] = pa.array([v.get(field.name) for v in values], type=field.type)
    return pa.table(columns)


def take(batch, indices: list[int]):
    return batch.take(pa.array(indices, pa.int64()))


def offsets_by_partition(batch) -> dict[int, tuple[int, int]]:
    """{partition: (first offset, last offset)} of a batch."""
    parts = batch.column("partition")
    offsets = batch.column("offset")
    if not len(parts):
        return {}
    bounds = pc.min_max(parts)
    if bounds["min"] == bounds["max"]:  # the usual fetched batch: one partition, offsets ascending
        return {bounds["min"].as_py(): (offsets[0].as_py(), offsets[-1].as_py())}
    out = {}
    for p in pc.unique(parts).to_pylist():
        mask = pc.equal(parts, p)
        chosen = pc.filter(offsets, mask)
        lo_hi = pc.min_max(chosen)
        out[p] = (lo_hi["min"].as_py(), lo_hi["max"].as_py())
    return out
