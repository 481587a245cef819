"""WriteShareGroupState: a share-partition leader writes the share-partition's state (start offset and
in-flight batches) to its share coordinator; an older leader's or state epoch's write is refused."""
from pybroker.api.share_state_common import answer_each
from pybroker.protocol.messages import RESPONSES

API_KEY = 85
MIN_VERSION = 0
MAX_VERSION = 1  # v1's DeliveryCompleteCount is recomputed from the batches

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    coordinator = ctx.services.share.coordinator

    async def one(key, p):
        batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]
        return {"error_code": await coordinator.write(key, p.state_epoch, p.leader_epoch, p.start_offset, batches)}
    return await answer_each(ctx, request, Response, Response.WriteStateResult, Response.PartitionResult, one)
