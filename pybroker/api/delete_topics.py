"""DeleteTopics: remove topics, their partitions and data.

v6 names topics by name or by id (not both: INVALID_REQUEST); an id no topic has gets
UNKNOWN_TOPIC_ID. Asked by id without DESCRIBE on the topic, the answer keeps the id and hides the
name. Answers carry the topic id when known (v6) and an error message (v5+).
"""
import uuid

from pybroker.api.error_response import error_response
from pybroker.api.kafka_wording import default_message
from pybroker.errors import BrokerError, UnknownTopicError
from pybroker.protocol.errors import (INVALID_REQUEST, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID,
                                      UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 20
MIN_VERSION = 0
MAX_VERSION = 6

ZERO_UUID = uuid.UUID(int=0)

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    asked = _asked(ctx.version, request)
    if any(name is not None and topic_id != ZERO_UUID for name, topic_id in asked):
        return error_response(API_KEY, ctx.version, request, INVALID_REQUEST,
                              "a topic name and a topic id cannot both be given")
    cache = ctx.metadata
    authz = ctx.authorizer
    results = []
    for name, topic_id in asked:
        by_id = topic_id != ZERO_UUID
        if by_id:
            name = cache.topic_names.get(topic_id)
        result = Response.DeletableTopicResult(name=name, topic_id=topic_id)
        results.append(result)
        try:
            if name is None:
                result.error_code = UNKNOWN_TOPIC_ID
                result.error_message = default_message(UNKNOWN_TOPIC_ID)
                continue
            if authz is not None and by_id and not authz.allowed(ctx, A.DESCRIBE, A.TOPIC, name):
                result.name, result.error_code = None, TOPIC_AUTHORIZATION_FAILED
                continue
            if authz is not None and not authz.allowed(ctx, A.DELETE, A.TOPIC, name):
                result.error_code = TOPIC_AUTHORIZATION_FAILED
                continue
            known_id = cache.topic_id(name)
            await ctx.control.delete_topic(name)
            if ctx.version >= 6 and known_id is not None:
                result.topic_id = known_id
        except UnknownTopicError:  # as KRaft Kafka: the code's stock message
            result.error_code = UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = default_message(UNKNOWN_TOPIC_OR_PARTITION)
        except BrokerError as exc:
            result.error_code, result.error_message = exc.code, str(exc)
    return Response(throttle_time_ms=0, responses=results)


def _asked(version: int, request) -> list:
    """(name or None, topic id or zero) of each topic, in request order."""
    if version >= 6:
        return [(t.name, t.topic_id) for t in request.topics]
    return [(name, ZERO_UUID) for name in request.topic_names]
