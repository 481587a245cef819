"""DeleteShareGroupState: a share-partition's durable state is removed (its group or its offsets were
deleted)."""
from pybroker.api.share_state_common import answer_each
from pybroker.protocol.messages import RESPONSES

API_KEY = 86
MIN_VERSION = 0
MAX_VERSION = 0

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    coordinator = ctx.services.share.coordinator

    async def one(key, p):
        return {"error_code": await coordinator.delete(key)}
    return await answer_each(ctx, request, Response, Response.DeleteStateResult, Response.PartitionResult, one)
