"""Spark data source "pybroker": read and write Kafka-protocol topics from PySpark.

Installing this package is enough: Spark imports every top-level ``pyspark_*`` module it finds
and registers its ``DefaultSource``. The import stays cheap (no pyarrow, no client): the data
source class loads on first attribute access.
"""
__all__ = ["DefaultSource", "PybrokerDataSource"]


def __getattr__(name: str):
    if name in ("DefaultSource", "PybrokerDataSource"):
        from pyspark_pybroker.source import PybrokerDataSource

        globals().update(DefaultSource=PybrokerDataSource, PybrokerDataSource=PybrokerDataSource)
        return PybrokerDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
