"""ReadShareGroupStateSummary: a share-partition's state epoch and start offset without its batches
(what DescribeShareGroupOffsets shows); v1 (KIP-1226) adds how many records past the start offset are
delivered for good, for the share-partition's lag."""
from pybroker.api.share_state_common import answer_each
from pybroker.protocol.messages import RESPONSES
from pybroker.share.admin import complete_count

API_KEY = 87
MIN_VERSION = 0
MAX_VERSION = 1

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    coordinator = ctx.services.share.coordinator

    async def one(key, p):
        error, state = coordinator.summary(key)
        if error or state is None:
            return {"error_code": error, "state_epoch": -1, "start_offset": -1}
        return {"error_code": 0, "state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
                "start_offset": state.start_offset, "delivery_complete_count": complete_count(state)}
    return await answer_each(ctx, request, Response, Response.ReadStateSummaryResult, Response.PartitionResult,
                             one)
