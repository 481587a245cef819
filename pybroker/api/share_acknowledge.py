"""ShareAcknowledge (KIP-932): acknowledgements without a fetch, through the member's share session
(an epoch -1 request also closes it: what the member still holds is released)."""
from pybroker.api.share_common import acknowledgements, apply_acknowledgements, partitions_by_topic, refusal
from pybroker.protocol.errors import INVALID_SHARE_SESSION_EPOCH
from pybroker.protocol.messages import RESPONSES
from pybroker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 2

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    share = ctx.services.share
    acks = acknowledgements(request.topics)
    refused = refusal(ctx, request, acks)
    if refused is not None:
        return _error(*refused)
    if request.share_session_epoch == INITIAL_EPOCH:  # only ShareFetch opens a session
        return _error(INVALID_SHARE_SESSION_EPOCH)
    error, session = share.sessions.use(request.group_id, request.member_id, request.share_session_epoch)
    if error:
        return _error(error)
    results = {}
    await apply_acknowledgements(ctx, share, request.group_id, request.member_id, acks, results,
                                 Response.PartitionData)
    if request.share_session_epoch == FINAL_EPOCH:
        share.sessions.close(request.group_id, request.member_id)
        share.release(session)
    topics = [Response.ShareAcknowledgeTopicResponse(topic_id=t, partitions=ps)
              for t, ps in partitions_by_topic(results)]
    return Response(throttle_time_ms=0, error_code=0, responses=topics, node_endpoints=[],
                    acquisition_lock_timeout_ms=share.settings_for(request.group_id).lock_duration_ms)


def _error(code: int, message: str | None = None):
    return Response(throttle_time_ms=0, error_code=code, error_message=message, responses=[], node_endpoints=[])
