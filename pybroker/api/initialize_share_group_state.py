"""InitializeShareGroupState: a share-partition gets its first state (or a reset one, with a newer
state epoch) at its share coordinator."""
from pybroker.api.share_state_common import answer_each
from pybroker.protocol.messages import RESPONSES

API_KEY = 83
MIN_VERSION = 0
MAX_VERSION = 0

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    coordinator = ctx.services.share.coordinator

    async def one(key, p):
        return {"error_code": await coordinator.initialize(key, p.state_epoch, p.start_offset)}
    return await answer_each(ctx, request, Response, Response.InitializeStateResult, Response.PartitionResult,
                             one)
