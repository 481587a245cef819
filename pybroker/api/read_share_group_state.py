"""ReadShareGroupState: a share-partition leader takes a share-partition on and reads its durable state
from its share coordinator (pybroker/share/coordinator.py); the read records the leader's epoch."""
from pybroker.api.share_state_common import answer_each
from pybroker.protocol.messages import RESPONSES

API_KEY = 84
MIN_VERSION = 0
MAX_VERSION = 0

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    coordinator = ctx.services.share.coordinator

    async def one(key, p):
        error, state = await coordinator.read(key, p.leader_epoch)
        if error or state is None:
            return {"error_code": error, "state_epoch": -1, "start_offset": -1, "state_batches": []}
        return {"error_code": 0, "state_epoch": state.state_epoch, "start_offset": state.start_offset,
                "state_batches": [Response.StateBatch(first_offset=f, last_offset=la, delivery_state=s,
                                                      delivery_count=c) for f, la, s, c in state.batches]}
    return await answer_each(ctx, request, Response, Response.ReadStateResult, Response.PartitionResult, one)
