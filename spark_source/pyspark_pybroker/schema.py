"""The source's fixed schema (Spark's Kafka schema) and the Arrow form Spark expects for it.

Spark checks every Arrow batch a Python source yields against the Arrow form of the declared
schema: binary/string columns, ``timestamp[us, tz=UTC]``, nullable fields.
"""
from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
)

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))


def spark_schema(include_headers: bool = False) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(include_headers: bool = False):
    """The Arrow schema of the batches ``read()`` yields."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.field(
            "element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))))
    return pa.schema(fields)


_CLIENT_NAMES = {"timestampType": ("timestampType", "timestamp_type")}


def _column(batch, name: str):
    for candidate in _CLIENT_NAMES.get(name, (name,)):
        idx = batch.schema.get_field_index(candidate)
        if idx >= 0:
            return batch.column(idx)
    raise KeyError(f"the client's record batch has no '{name}' column: {batch.schema}")


def _as(array, target):
    """``array`` with Arrow type ``target`` (no copy when it already is)."""
    import pyarrow as pa

    if array.type.equals(target):
        return array
    if pa.types.is_integer(array.type) and pa.types.is_timestamp(target):
        array = array.cast(pa.timestamp("ms"))  # client timestamps are milliseconds
    return array.cast(target)


def to_spark_batch(batch, target_schema):
    """A client record batch (key, value, topic, partition, offset, timestamp, timestamp type,
    headers) as a batch of exactly ``target_schema`` (see ``arrow_schema``)."""
    import pyarrow as pa

    columns = [_as(_column(batch, f.name), f.type) for f in target_schema]
    return pa.RecordBatch.from_arrays(columns, schema=target_schema)
