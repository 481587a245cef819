"""Fetch v0-3: the records of each partition as a message set of magic 0 (v0-1) or 1 (v2-3), converted
from the log's v2 batches as Kafka does (pybroker/legacy_records.py). The read itself is Fetch's
(pybroker/api/fetch.py); this answers it.

As Kafka: a consumer asking for a topic with ``message.downconversion.enable=false`` gets
UNSUPPORTED_VERSION, one whose compression.type is zstd (or a zstd batch) UNSUPPORTED_COMPRESSION_TYPE.
These versions have no isolation level: they read uncommitted, so aborted records are returned too.
"""
from pybroker import legacy_records
from pybroker.errors import BrokerError
from pybroker.protocol.errors import UNSUPPORTED_COMPRESSION_TYPE, UNSUPPORTED_VERSION
from pybroker.protocol.messages import RESPONSES
from pybroker.protocol.parts import Parts

FIRST_MAGIC_1_VERSION = 2
FIRST_THROTTLE_VERSION = 1

Response = RESPONSES[1]


def response(ctx, version: int, topics, partitions, results, replica_id: int):
    """The response (v1+: its encoded body) for ``results`` (one per entry of ``partitions``, in request order)."""
    magic = 1 if version >= FIRST_MAGIC_1_VERSION else 0
    answers, it = [], iter(zip(partitions, results))
    for t in topics:
        parts = []
        for _ in t.partitions:
            p, r = next(it)
            error, high_watermark, records = r.error, r.high_watermark, b""  # errors come with no records
            if not error:
                error = _refusal(ctx, p, replica_id)
                if not error and r.records is not None:
                    error, records = _converted(r.records, magic, p.fetch_offset)
                if error:
                    high_watermark = -1  # as Kafka's answer for a partition it does not convert
            parts.append(Response.PartitionData(partition_index=p.partition, error_code=error,
                                                high_watermark=high_watermark, records=records))
        answers.append(Response.FetchableTopicResponse(topic=t.topic, partitions=parts))
    response = Response(throttle_time_ms=0, responses=answers)
    if version < FIRST_THROTTLE_VERSION:
        return response  # not Parts: the quota code writes a throttle time into the first bytes of those
    out = bytearray()
    response.encode(version, out)
    return Parts([bytes(out)])  # counted against the consumer's byte rate, as v4+


def _refusal(ctx, p, replica_id: int) -> int:
    """Kafka's reasons not to convert ``p``'s records, from its topic's configs (0: none)."""
    partition = ctx.services.replicas.get(p.topic, p.partition)
    config = getattr(getattr(partition, "log", None), "config", None)
    if config is None:
        return 0
    if config.compression_type == "zstd":
        return UNSUPPORTED_COMPRESSION_TYPE
    if replica_id < 0 and not config.message_downconversion_enable:
        return UNSUPPORTED_VERSION
    return 0


def _converted(records, magic: int, fetch_offset: int) -> tuple[int, bytes]:
    """(error, message set) of the log slice ``records``."""
    try:
        return 0, legacy_records.downconvert(records.read(), magic, fetch_offset)
    except legacy_records.UnsupportedCompressionError:
        return UNSUPPORTED_COMPRESSION_TYPE, b""
    except BrokerError as exc:
        return exc.code, b""
