"""Typed errors shared across the layers, each carrying the Kafka error code a broker would answer with.

A leaf module (it imports only the generated error table): the record codecs and the log raise the
storage errors, the metadata stores and the services above them the topic-metadata errors, and the
clients catch a codec's ``CorruptRecordError``.
"""
from pybroker.protocol import errors as codes


class BrokerError(Exception):
    """Base of pybroker's errors; ``code`` is the Kafka protocol error code."""
    code = codes.UNKNOWN_SERVER_ERROR


class CorruptRecordError(BrokerError):
    """A record batch failed validation (CRC, length, magic, counts...)."""
    code = codes.CORRUPT_MESSAGE

    def __init__(self, reason: str, offset: int = -1, position: int = -1):
        self.reason = reason
        self.offset = offset
        self.position = position
        where = []
        if offset >= 0:
            where.append(f"offset {offset}")
        if position >= 0:
            where.append(f"position {position}")
        super().__init__(f"corrupt record batch at {', '.join(where) or 'unknown place'}: {reason}")


class InvalidRecordError(CorruptRecordError):
    """A well-formed batch that a producer may not send (e.g. a control batch)."""
    code = codes.INVALID_RECORD


class KeylessRecordError(InvalidRecordError):
    """A record without a key sent to a compacted topic; the message is Kafka's."""

    def __init__(self, topic: str, partition: int):
        BrokerError.__init__(self, "Compacted topic cannot accept message without key in topic partition "
                                   f"{topic}-{partition}.")
        self.reason, self.offset, self.position = str(self), -1, -1


class RecordTooLargeError(BrokerError):
    code = codes.MESSAGE_TOO_LARGE


class OffsetOutOfRangeError(BrokerError):
    code = codes.OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"offset {offset} is out of range: valid offsets are "
            f"[{log_start_offset}, {log_end_offset}]")


class CorruptIndexError(BrokerError):
    """An index file is inconsistent with itself or its segment; it gets rebuilt."""
    code = codes.UNKNOWN_SERVER_ERROR


class IndexFullError(BrokerError):
    code = codes.UNKNOWN_SERVER_ERROR


class LogDirError(BrokerError):
    """A log directory is missing, unwritable or otherwise unusable."""
    code = codes.KAFKA_STORAGE_ERROR


class RecordListTooLargeError(BrokerError):
    """A batch larger than a whole segment can never be appended."""
    code = codes.RECORD_LIST_TOO_LARGE


class InconsistentTopicIdError(BrokerError):
    """A partition directory belongs to another incarnation of its topic (another topic id)."""
    code = codes.INCONSISTENT_TOPIC_ID


class PartitionMetadataError(BrokerError):
    """A partition directory's partition.metadata cannot be read, parsed or written."""
    code = codes.KAFKA_STORAGE_ERROR


# topic metadata: raised by the metadata stores, answered by the APIs, caught by the coordinators

class MetadataError(BrokerError):
    """Base of the metadata store's errors; ``code`` is the Kafka error code."""
    code = codes.UNKNOWN_SERVER_ERROR

    def __str__(self) -> str:  # KeyError subclasses would otherwise print repr(message)
        return str(self.args[0]) if self.args else ""


class TopicExistsError(MetadataError, KeyError):
    code = codes.TOPIC_ALREADY_EXISTS


class UnknownTopicError(MetadataError, KeyError):
    code = codes.UNKNOWN_TOPIC_OR_PARTITION


class InvalidTopicError(MetadataError, ValueError):
    code = codes.INVALID_TOPIC_EXCEPTION


class InvalidPartitionsError(MetadataError, ValueError):
    code = codes.INVALID_PARTITIONS


class InvalidReplicationFactorError(MetadataError, ValueError):
    code = codes.INVALID_REPLICATION_FACTOR


class InvalidConfigError(MetadataError, ValueError):
    code = codes.INVALID_CONFIG


class InconsistentClusterIdError(MetadataError):
    """meta.properties names another cluster (Kafka's InconsistentClusterIdException)."""
    code = codes.INCONSISTENT_CLUSTER_ID


class InconsistentNodeIdError(MetadataError):
    """meta.properties names another node (Kafka's InconsistentBrokerIdException)."""


class MetadataCorruptError(MetadataError):
    """meta.properties or the topic table cannot be read; needs an operator, not a guess."""
    code = codes.KAFKA_STORAGE_ERROR
