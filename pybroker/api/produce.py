"""Produce: validate each partition's batches and append them; acks 0 (no reply), 1 and -1."""
from pybroker.protocol.messages import RESPONSES

API_KEY = 0
MIN_VERSION = 0  # older librdkafka needs the range to start at 0; v0-2 (magic 0/1) are refused
MAX_VERSION = 8
FIRST_RECORD_BATCH_VERSION = 3

CORRUPT_MESSAGE = 2
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    acks = request.acks
    error = 0
    if ctx.version < FIRST_RECORD_BATCH_VERSION:
        error = UNSUPPORTED_VERSION
    elif acks not in (0, 1, -1):
        error = INVALID_REQUIRED_ACKS
    elif request.transactional_id is not None:
        error = INVALID_REQUEST  # transactions are not supported
    outcomes = {}
    if not error:
        entries = {}
        for topic in request.topic_data:
            for part in topic.partition_data:
                key = (topic.name, part.index)
                if part.records is None or key in entries:
                    outcomes[key] = (CORRUPT_MESSAGE, None, "null or repeated partition records")
                else:
                    entries[key] = part.records
        for key, outcome in ctx.broker.replicas.append(acks, entries).items():
            outcomes[key] = (outcome.error, outcome.result, outcome.message)
    if acks == 0:
        return None
    topics = []
    for topic in request.topic_data:
        parts = []
        for part in topic.partition_data:
            code, result, message = outcomes.get((topic.name, part.index), (error, None, None))
            parts.append(Response.PartitionProduceResponse(
                index=part.index, error_code=code,
                base_offset=result.base_offset if result else -1,
                log_append_time_ms=result.log_append_time if result else -1,
                log_start_offset=result.log_start_offset if result else -1,
                error_message=message if code else None))
        topics.append(Response.TopicProduceResponse(name=topic.name, partition_responses=parts))
    return Response(responses=topics, throttle_time_ms=0)
