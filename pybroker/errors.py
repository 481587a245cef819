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


class RecordErrors:
    """A refusal that names the records at fault (KIP-467): ``record_errors`` holds (index in the batch,
    message) pairs, answered in Produce v8+; the message is the batch-level one, as Kafka's."""
    record_errors: tuple = ()

    def _name_records(self, message: str, record_errors) -> None:
        BrokerError.__init__(self, message)
        self.reason, self.offset, self.position = message, -1, -1
        self.record_errors = tuple(record_errors)


class RefusedRecordsError(RecordErrors, InvalidRecordError):
    """Records a topic does not take (e.g. without a key on a compacted topic): INVALID_RECORD."""

    def __init__(self, message: str, record_errors):
        self._name_records(message, record_errors)


class InvalidTimestampError(RecordErrors, BrokerError):
    """Records whose CreateTime lies outside the topic's timestamp bounds: INVALID_TIMESTAMP."""
    code = codes.INVALID_TIMESTAMP

    def __init__(self, message: str, record_errors):
        self._name_records(message, record_errors)


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
