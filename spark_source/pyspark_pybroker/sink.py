"""Writes: DataFrame rows (Arrow batches) produced to topics, batch and streaming.

Columns: ``value`` (string or binary, required), ``key`` (string or binary), ``topic`` (string;
the ``topic`` option, when set, wins), ``partition`` (int; null or absent lets the partitioner
choose) and ``headers`` (array<struct<key: string, value: binary>>); other columns are ignored,
as Spark's Kafka sink ignores them (a DataFrame read from the source can be written back as is).
Rows are produced in bulk, one ``produce_batch`` call per run of consecutive rows that share
their headers; rows whose headers change often are produced one by one. Each task produces its rows
and waits until the brokers acknowledged every one; a failed task is retried by Spark and may
write its rows again, so delivery is at-least-once.
"""
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from pyspark_pybroker.options import OptionError, WriteOptions

SINK_COLUMNS = ("key", "value", "topic", "partition", "headers")
FLUSH_TIMEOUT_S = 300.0  # bound on waiting for the last acknowledgements of a task


@dataclass
class WriteResult(WriterCommitMessage):
    """What one task wrote: row count and, per (topic, partition), the first and last offset
    written and the number of records."""
    rows: int = 0
    partitions: dict = field(default_factory=dict)  # (topic, partition) -> [first, last, count]


def _is_headers_type(dtype) -> bool:
    if not isinstance(dtype, ArrayType) or not isinstance(dtype.elementType, StructType):
        return False
    fields = dtype.elementType.fields
    return (len(fields) == 2 and fields[0].name == "key" and isinstance(fields[0].dataType, StringType)
            and fields[1].name == "value" and isinstance(fields[1].dataType, BinaryType))


def check_sink_schema(schema: StructType, opts: WriteOptions) -> None:
    """Fail before any task runs when the DataFrame cannot be written."""
    by_name = {f.name: f.dataType for f in schema.fields if f.name in SINK_COLUMNS}
    if "value" not in by_name:
        raise OptionError("the pybroker sink needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in by_name and not isinstance(by_name[name], (StringType, BinaryType)):
            raise OptionError(f"column '{name}' must be string or binary, not "
                              f"{by_name[name].simpleString()}")
    if "topic" in by_name:
        if not isinstance(by_name["topic"], StringType):
            raise OptionError(f"column 'topic' must be string, not "
                              f"{by_name['topic'].simpleString()}")
    elif opts.topic is None:
        raise OptionError("no topic to write to: set the option 'topic' or add a 'topic' column")
    if "partition" in by_name and not isinstance(by_name["partition"], IntegerType):
        raise OptionError(f"column 'partition' must be int, not "
                          f"{by_name['partition'].simpleString()}")
    if "headers" in by_name and not _is_headers_type(by_name["headers"]):
        raise OptionError(f"column 'headers' must be array<struct<key:string,value:binary>>, not "
                          f"{by_name['headers'].simpleString()}")


def _groups(batch, opts: WriteOptions):
    """(topic, partition, rows) per destination in ``batch``; partition -1 = partitioner's choice."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.schema.names
    if opts.topic is not None or "topic" not in names:
        by_topic = [(opts.topic, batch)]
    else:
        topics = batch.column(names.index("topic"))
        if topics.null_count:
            raise OptionError("a row has a null 'topic': set the option 'topic' or fill the column")
        unique = pc.unique(topics)
        if len(unique) == 1:
            by_topic = [(unique[0].as_py(), batch)]
        else:
            by_topic = [(t.as_py(), batch.filter(pc.equal(topics, t))) for t in unique]
    for topic, rows in by_topic:
        if "partition" not in names:
            yield topic, -1, rows
            continue
        parts = rows.column(names.index("partition"))
        parts = parts.fill_null(-1) if parts.null_count else parts
        unique = pc.unique(parts)
        if len(unique) == 1:
            yield topic, unique[0].as_py(), rows
        else:
            for p in unique:
                yield topic, p.as_py(), rows.filter(pc.equal(parts, pa.scalar(p.as_py(), pa.int32())))


def _binary(column):
    import pyarrow as pa

    return column.cast(pa.binary()) if pa.types.is_string(column.type) else column


# Producer defaults of the sink where they differ from Kafka's: bulk writes fill large batches.
SINK_DEFAULTS = {"batch.size": 512 * 1024, "linger.ms": 5}


def write_config(opts: WriteOptions) -> dict:
    """The producer settings of the write tasks, checked (a bad kafka.* option fails here)."""
    from pybroker.client.producer import parse_config

    conf = {**SINK_DEFAULTS, **opts.client_config()}
    try:
        parse_config(conf)
    except ValueError as exc:
        raise OptionError(f"bad kafka.* option for writing: {exc}") from None
    return conf


class _Tally:
    """Per (topic, partition): first and last offset written and the record count."""

    def __init__(self):
        self.partitions = {}
        self.errors = []

    def add(self, topic, partition, base_offset, count):
        if count <= 0:
            return
        entry = self.partitions.setdefault((topic, partition), [base_offset, -1, 0])
        entry[0] = min(entry[0], base_offset)
        entry[1] = max(entry[1], base_offset + count - 1)
        entry[2] += count

    def on_delivery(self, err, meta):
        if err is not None:
            self.errors.append(err)
        else:
            self.add(meta.topic, meta.partition, meta.offset, 1)


# Rows with headers go in bulk when runs of equal headers are this long on average; shorter
# runs cost more as bulk calls than as one produce() per row.
MIN_HEADER_RUN = 32


def _row_headers(row) -> tuple | None:
    return tuple((h["key"], h["value"]) for h in row) if row else None


def _header_runs(column) -> list:
    """(start, stop, headers or None) for each run of consecutive rows with equal headers."""
    runs = []
    for i, row in enumerate(column.to_pylist()):
        headers = _row_headers(row)
        if runs and runs[-1][2] == headers:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1, headers])
    return runs


def _produce_each(producer, tally, topic, partition, keys, values, column) -> None:
    """Rows whose headers differ from row to row: one produce call each."""
    keys = keys.to_pylist() if keys is not None else None
    headers = column.to_pylist()
    for i, value in enumerate(values.to_pylist()):
        row_headers = _row_headers(headers[i])
        producer.produce(topic, value=value, key=None if keys is None else keys[i],
                         partition=partition, headers=list(row_headers) if row_headers else None,
                         on_delivery=tally.on_delivery)
        if i % 10_000 == 9_999:
            producer.poll(0)  # run the delivery callbacks so far


def _produce_group(producer, tally, futures, topic, partition, group) -> None:
    """Queue the rows of one destination, in order."""
    names = group.schema.names
    values = _binary(group.column(names.index("value")))
    keys = _binary(group.column(names.index("key"))) if "key" in names else None
    runs = [[0, group.num_rows, None]]
    if "headers" in names:
        column = group.column(names.index("headers"))
        if column.null_count < len(column):
            runs = _header_runs(column)
            if len(runs) > 1 and len(runs) * MIN_HEADER_RUN > group.num_rows:
                _produce_each(producer, tally, topic, partition, keys, values, column)
                return
    whole = len(runs) == 1
    for start, stop, headers in runs:
        n = stop - start
        run_values = values if whole else values.slice(start, n)
        run_keys = keys if whole or keys is None else keys.slice(start, n)
        futures.append((topic, producer.produce_batch(
            topic, run_values, keys=run_keys, partition=partition,
            headers=list(headers) if headers else None)))


def produce_rows(opts: WriteOptions, batches) -> WriteResult:
    """Produce every row of ``batches`` and wait for all acknowledgements."""
    from pybroker.client import Producer

    producer = Producer(write_config(opts))
    futures = []
    tally = _Tally()
    rows = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            rows += batch.num_rows
            for topic, partition, group in _groups(batch, opts):
                _produce_group(producer, tally, futures, topic, partition, group)
        left = producer.flush(FLUSH_TIMEOUT_S)
        if left:
            raise TimeoutError(f"{left} record(s) were not acknowledged within "
                               f"{FLUSH_TIMEOUT_S:.0f}s")
        if tally.errors:
            raise tally.errors[0]
        for topic, fut in futures:
            for partition, base_offset, count in fut.result(timeout=FLUSH_TIMEOUT_S):
                tally.add(topic, partition, base_offset, count)
    finally:
        producer.close()
    return WriteResult(rows=rows, partitions=tally.partitions)


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions):
        self.opts = opts

    def write(self, iterator):
        return produce_rows(self.opts, iterator)

    def commit(self, messages):
        pass  # every task already waited for its acknowledgements

    def abort(self, messages):
        pass  # produced records cannot be taken back: rows of finished tasks stay written


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions):
        self.opts = opts

    def write(self, iterator):
        return produce_rows(self.opts, iterator)

    def commit(self, messages, batchId):
        pass

    def abort(self, messages, batchId):
        pass
