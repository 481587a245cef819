"""pybroker: a Kafka-compatible message broker with a native storage core."""

from pybroker.version import __version__  # noqa: F401  (pybroker.__version__)


def __getattr__(name):  # lazy: ``pybroker serve`` imports this package and must stay quick to start
    if name in ("EmbeddedBroker", "AsyncEmbeddedBroker"):
        from pybroker import embedded
        return getattr(embedded, name)
    raise AttributeError(f"module 'pybroker' has no attribute {name!r}")
