"""pybroker: a Kafka-compatible message broker with a native storage core."""

__version__ = "0.1.0"
