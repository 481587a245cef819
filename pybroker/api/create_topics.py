"""CreateTopics: new topics with partition count, replication factor and topic configs (validate-only too)."""
from pybroker.asyncutil import settle
from pybroker.errors import BrokerError
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 4

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    results = []
    authz = ctx.broker.authorizer
    cluster_create = authz is None or authz.allowed_quietly(ctx, A.CREATE, A.CLUSTER, A.CLUSTER_NAME)
    for topic in request.topics:
        configs = {c.name: c.value for c in topic.configs}
        error, message = 0, None
        try:
            if not cluster_create and not authz.allowed(ctx, A.CREATE, A.TOPIC, topic.name):
                raise TopicAuthorizationFailed(f"not authorized to create topic {topic.name!r}")
            kwargs = {}
            if topic.assignments:
                if topic.num_partitions != -1 or topic.replication_factor != -1:
                    raise InvalidRequest("with a replica assignment, partitions and replication factor must be -1")
                kwargs["assignment"] = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
            await settle(ctx.broker.controller.create_topic(topic.name, topic.num_partitions, topic.replication_factor,
                                                            configs, validate_only=request.validate_only, **kwargs))
        except BrokerError as exc:
            error, message = exc.code, str(exc)
        results.append(Response.CreatableTopicResult(name=topic.name, error_code=error, error_message=message))
    return Response(throttle_time_ms=0, topics=results)


class TopicAuthorizationFailed(BrokerError):
    code = 29  # TOPIC_AUTHORIZATION_FAILED


class InvalidRequest(BrokerError):
    code = 42  # INVALID_REQUEST
