"""DeleteTopics: remove topics, their partitions and data."""
from pybroker.asyncutil import settle
from pybroker.errors import BrokerError
from pybroker.protocol.messages import RESPONSES

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 3

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    results = []
    for name in request.topic_names:
        error = 0
        try:
            await settle(ctx.broker.controller.delete_topic(name))
        except BrokerError as exc:
            error = exc.code
        results.append(Response.DeletableTopicResult(name=name, error_code=error))
    return Response(throttle_time_ms=0, responses=results)
