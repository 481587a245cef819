"""CreatePartitions: grow a topic's partition count (validate-only too)."""
from pybroker.errors import BrokerError
from pybroker.protocol.errors import INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST, TOPIC_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    results = []
    authz = ctx.authorizer
    names = [t.name for t in request.topics]
    for topic in request.topics:
        error, message = 0, None
        try:
            if names.count(topic.name) > 1:
                raise DuplicateTopic("duplicate topic in request")
            if authz is not None and not authz.allowed(ctx, A.ALTER, A.TOPIC, topic.name):
                raise TopicAuthorizationFailed(f"not authorized to alter topic {topic.name!r}")
            if topic.assignments:
                raise AssignmentNotSupported("manual replica assignment is not supported")
            await ctx.control.create_partitions(topic.name, topic.count, validate_only=request.validate_only)
        except BrokerError as exc:
            error, message = exc.code, str(exc)
        results.append(Response.CreatePartitionsTopicResult(name=topic.name, error_code=error,
                                                            error_message=message))
    return Response(throttle_time_ms=0, results=results)


class TopicAuthorizationFailed(BrokerError):
    code = TOPIC_AUTHORIZATION_FAILED


class DuplicateTopic(BrokerError):
    code = INVALID_REQUEST


class AssignmentNotSupported(BrokerError):
    code = INVALID_REPLICA_ASSIGNMENT
