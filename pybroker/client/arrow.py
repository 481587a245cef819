"""Fetched records as Arrow record batches, built zero-copy from ``decode_columns`` buffers.

Columns: key/value binary (null when absent), topic string, partition int32, offset int64,
timestamp ``timestamp[ms, tz=UTC]`` (Kafka timestamps are milliseconds since the epoch),
timestamp_type int32 (0 CreateTime, 1 LogAppendTime), headers
``list<struct<key: string, value: binary>>`` (an empty list when a record has none).
"""
import numpy as np
import pyarrow as pa

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
    pa.field("timestamp_type", pa.int32()),
    pa.field("headers", pa.list_(HEADER_TYPE)),
])


def _buf(obj):
    return None if obj is None else pa.py_buffer(obj)


def _binary(kind, n, validity, offsets, data):
    nulls = -1 if validity is not None else 0  # -1: let Arrow count them
    return pa.Array.from_buffers(kind, n, [_buf(validity), _buf(offsets), _buf(data)], null_count=nulls)


def _topic_column(topic: str, n: int) -> pa.Array:
    raw = topic.encode("utf-8")
    offsets = np.arange(0, (n + 1) * len(raw), len(raw), dtype=np.int32) if raw else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)],
                                 null_count=0)


def _headers_column(c) -> pa.Array:
    keys = _binary(pa.string(), c.header_count, None, c.header_key_offsets, c.header_key_data)
    values = _binary(pa.binary(), c.header_count, c.header_value_validity, c.header_value_offsets,
                     c.header_value_data)
    pairs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
    return pa.Array.from_buffers(SCHEMA.field("headers").type, c.count, [None, pa.py_buffer(c.header_offsets)],
                                 null_count=0, children=[pairs])


def to_record_batch(columns, topic: str, partition: int) -> pa.RecordBatch:
    """One partition's decoded columns (``decode_columns`` result) as a RecordBatch with SCHEMA."""
    n = columns.count
    if n == 0:
        return empty_batch()
    arrays = [
        _binary(pa.binary(), n, columns.key_validity, columns.key_offsets, columns.key_data),
        _binary(pa.binary(), n, columns.value_validity, columns.value_offsets, columns.value_data),
        _topic_column(topic, n),
        # from_buffers, not pa.array: pa.array checks for pandas input and so imports pandas
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.full(n, partition, dtype=np.int32))],
                              null_count=0),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(columns.offsets)], null_count=0),
        pa.Array.from_buffers(SCHEMA.field("timestamp").type, n, [None, pa.py_buffer(columns.timestamps)],
                              null_count=0),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(columns.timestamp_types)], null_count=0),
        _headers_column(columns),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def empty_batch() -> pa.RecordBatch:
    """A RecordBatch with SCHEMA and no rows."""
    # pa.nulls: pa.array([], type=timestamp with a time zone) would import pandas
    return pa.RecordBatch.from_arrays([pa.nulls(0, type=f.type) for f in SCHEMA], schema=SCHEMA)


def concat(batches) -> pa.RecordBatch:
    """Rows of several RecordBatches (all with SCHEMA) as one; empty input gives ``empty_batch()``."""
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return empty_batch()
    if len(batches) == 1:
        return batches[0]
    return pa.concat_batches(batches)
