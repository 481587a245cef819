"""Typed errors of the storage layer, each carrying the Kafka error code a broker would answer with."""


class BrokerError(Exception):
    """Base of pybroker's errors; ``code`` is the Kafka protocol error code."""
    code = -1  # UNKNOWN_SERVER_ERROR


class CorruptRecordError(BrokerError):
    """A record batch failed validation (CRC, length, magic, counts...)."""
    code = 2  # CORRUPT_MESSAGE

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
    code = 87  # INVALID_RECORD


class KeylessRecordError(InvalidRecordError):
    """A record without a key sent to a compacted topic; the message is Kafka's."""

    def __init__(self, topic: str, partition: int):
        BrokerError.__init__(self, "Compacted topic cannot accept message without key in topic partition "
                                   f"{topic}-{partition}.")
        self.reason, self.offset, self.position = str(self), -1, -1


class RecordTooLargeError(BrokerError):
    code = 10  # MESSAGE_TOO_LARGE


class OffsetOutOfRangeError(BrokerError):
    code = 1  # OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"offset {offset} is out of range: valid offsets are "
            f"[{log_start_offset}, {log_end_offset}]")


class CorruptIndexError(BrokerError):
    """An index file is inconsistent with itself or its segment; it gets rebuilt."""
    code = -1


class IndexFullError(BrokerError):
    code = -1


class LogDirError(BrokerError):
    """A log directory is missing, unwritable or otherwise unusable."""
    code = 56  # KAFKA_STORAGE_ERROR


class RecordListTooLargeError(BrokerError):
    """A batch larger than a whole segment can never be appended."""
    code = 18  # RECORD_LIST_TOO_LARGE



class InconsistentTopicIdError(BrokerError):
    """A partition directory belongs to another incarnation of its topic (another topic id)."""
    code = 103  # INCONSISTENT_TOPIC_ID


class PartitionMetadataError(BrokerError):
    """A partition directory's partition.metadata cannot be read, parsed or written."""
    code = 56  # KAFKA_STORAGE_ERROR
