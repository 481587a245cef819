"""The "pybroker" data source: Spark's Kafka source and sink schema and options, on pybroker's
own clients (any Kafka-protocol broker works)."""
from pyspark.sql.datasource import DataSource

from pyspark_pybroker.options import (
    SOURCE_NAME, OptionError, include_headers, parse_read_options, parse_write_options,
)
from pyspark_pybroker.schema import spark_schema


class PybrokerDataSource(DataSource):
    """``spark.read.format("pybroker")``, ``spark.readStream.format("pybroker")``,
    ``df.write.format("pybroker")`` and ``df.writeStream.format("pybroker")``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self):
        if is_table_mode(self.options):  # an Iceberg table (a topic's, or any other) instead of topics
            from pyspark_pybroker.table import table_schema

            return table_schema(self.options)
        # checked here too so that load() already fails on a bad option
        opts = parse_read_options(self.options, streaming=None)
        if opts.registry is not None:  # typed keys/values: the reader schemas come from the registry
            from pyspark_pybroker.registry_decode import decoded_schema, resolve_plan

            return decoded_schema(resolve_plan(opts.registry), opts.include_headers)
        return spark_schema(include_headers(self.options))

    def reader(self, schema):
        if is_table_mode(self.options):
            from pyspark_pybroker.table import plan_table_read

            return plan_table_read(self.options, schema)
        from pyspark_pybroker.batch import BatchReader
        from pyspark_pybroker.fetch import read_config

        opts = parse_read_options(self.options, streaming=False)
        decoding = _decoding(opts, schema)
        read_config(opts)  # a bad kafka.* setting fails here, before any task
        return BatchReader(opts, decoding)

    def streamReader(self, schema):
        _refuse_table_mode(self.options, "streaming read (spark.readStream)")
        from pyspark_pybroker.fetch import read_config
        from pyspark_pybroker.stream import StreamReader

        opts = parse_read_options(self.options, streaming=True)
        decoding = _decoding(opts, schema)
        read_config(opts)
        return StreamReader(opts, decoding)

    def writer(self, schema, overwrite: bool):
        _refuse_table_mode(self.options, "write")
        from pyspark_pybroker.sink import BatchWriter, check_sink_schema, write_config

        opts = _write_options(self.options, overwrite)
        check_sink_schema(schema, opts)
        write_config(opts)
        return BatchWriter(opts)

    def streamWriter(self, schema, overwrite: bool):
        _refuse_table_mode(self.options, "streaming write")
        from pyspark_pybroker.sink import StreamWriter, check_sink_schema, write_config

        opts = _write_options(self.options, overwrite)
        check_sink_schema(schema, opts)
        write_config(opts)
        return StreamWriter(opts)


def is_table_mode(options) -> bool:
    """True when option 'table' names an Iceberg table to read instead of topics."""
    return "table" in {str(k).lower() for k in dict(options or {})}


def _refuse_table_mode(options, what: str) -> None:
    if is_table_mode(options):
        raise OptionError(f"option 'table': the {SOURCE_NAME} source reads Iceberg tables in batch only; a {what} "
                          f"works on topics (options 'subscribe'/'topic'), not tables")


def _decoding(opts, schema):
    """The decode plan of a read with key.format/value.format (None without), its reader schemas resolved
    again here; ``schema`` (what Spark planned with) must still be what they give."""
    if opts.registry is None:
        check_user_schema(schema, opts.include_headers)
        return None
    from pyspark_pybroker.registry_decode import decoded_schema, resolve_plan

    plan = resolve_plan(opts.registry)
    expected = decoded_schema(plan, opts.include_headers)
    given = _as_struct(schema)
    if given is not None and given.simpleString() != expected.simpleString():
        raise OptionError(f"the {SOURCE_NAME} source's schema comes from the reader schemas in the schema registry "
                          f"and is {expected.simpleString()}, not {given.simpleString()} (a .schema(...) was "
                          f"given, or a new version was registered while the query was planned: pin "
                          f"'value.schema.version' / 'key.schema.version' or run the query again)")
    return plan


def _as_struct(schema):
    if isinstance(schema, str):
        from pyspark.sql.types import _parse_datatype_string

        return _parse_datatype_string(schema)
    return schema


def check_user_schema(schema, headers: bool) -> None:
    """The source's schema is fixed (as Spark's Kafka source's is): a different one given with
    ``.schema(...)`` is refused before any task runs."""
    fixed = spark_schema(headers)
    given = schema
    if isinstance(given, str):
        from pyspark.sql.types import _parse_datatype_string

        given = _parse_datatype_string(given)
    if given is None or given.simpleString() == fixed.simpleString():
        return
    raise OptionError(f"the {SOURCE_NAME} source has a fixed schema and does not take one from "
                      f".schema(...): got {given.simpleString()}, the source gives "
                      f"{fixed.simpleString()} (cast or parse the 'key' and 'value' columns "
                      f"after loading instead)")


def _write_options(options, overwrite: bool):
    if overwrite:
        raise OptionError("the pybroker sink only appends records: use .mode(\"append\") (or the "
                          "\"append\" output mode for streams)")
    return parse_write_options(options)
