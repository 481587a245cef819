"""InitProducerId: a new producer id (epoch 0) for an idempotent producer."""
from pybroker.asyncutil import settle
from pybroker.protocol.messages import RESPONSES

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 1
INVALID_REQUEST = 42

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    if request.transactional_id is not None:  # transactions are not supported
        return Response(throttle_time_ms=0, error_code=INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
    return Response(throttle_time_ms=0, error_code=0, producer_id=await settle(ctx.broker.producer_ids.allocate()),
                    producer_epoch=0)
