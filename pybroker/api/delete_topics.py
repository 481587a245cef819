"""DeleteTopics: remove topics, their partitions and data."""
from pybroker.asyncutil import settle
from pybroker.errors import BrokerError
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 3

TOPIC_AUTHORIZATION_FAILED = 29

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    results = []
    authz = ctx.broker.authorizer
    for name in request.topic_names:
        error = 0
        try:
            if authz is not None and not authz.allowed(ctx, A.DELETE, A.TOPIC, name):
                results.append(Response.DeletableTopicResult(name=name, error_code=TOPIC_AUTHORIZATION_FAILED))
                continue
            await settle(ctx.broker.controller.delete_topic(name))
        except BrokerError as exc:
            error = exc.code
        results.append(Response.DeletableTopicResult(name=name, error_code=error))
    return Response(throttle_time_ms=0, responses=results)
