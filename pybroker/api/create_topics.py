"""CreateTopics: new topics with partition count, replication factor and topic configs (validate-only too)."""
from pybroker.errors import BrokerError
from pybroker.protocol.messages import RESPONSES

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 4

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    results = []
    for topic in request.topics:
        configs = {c.name: c.value for c in topic.configs}
        error, message = 0, None
        try:
            if topic.assignments:
                raise AssignmentNotSupported("manual replica assignment is not supported")
            ctx.broker.controller.create_topic(topic.name, topic.num_partitions, topic.replication_factor,
                                               configs, validate_only=request.validate_only)
        except BrokerError as exc:
            error, message = exc.code, str(exc)
        results.append(Response.CreatableTopicResult(name=topic.name, error_code=error, error_message=message))
    return Response(throttle_time_ms=0, topics=results)


class AssignmentNotSupported(BrokerError):
    code = 39  # INVALID_REPLICA_ASSIGNMENT
