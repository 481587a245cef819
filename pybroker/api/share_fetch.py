"""ShareFetch (KIP-932): a share consumer's fetch from a partition leader, through its share session,
with its acknowledgements of earlier records piggybacked. Records come back as the log's batches with
the ranges acquired for this member (pybroker/share/manager.py); the client skips the rest."""
from pybroker.api.leader_hints import LeaderHints
from pybroker.api.share_common import (acknowledgements, apply_acknowledgements, group_error, open_or_use_session,
                                       partitions_by_topic, refusal)
from pybroker.protocol.errors import (INVALID_REQUEST, NOT_LEADER_OR_FOLLOWER,
                                      TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 2
DEFAULT_MAX_RECORDS = 500  # share.fetch.max.fetch.records when a request names none
RECORD_LIMIT = 1  # ShareAcquireMode (v2): never more records than MaxRecords

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    share = ctx.services.share
    authz = ctx.authorizer
    acks = acknowledgements(request.topics)
    refused = refusal(ctx, request, acks)
    if refused is not None:
        return _error(*refused)
    error, message = group_error(ctx, request.group_id)
    if error:
        return _error(error, message)
    renewing = ctx.version >= 2 and request.is_renew_ack
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH and acks:
        return _error(INVALID_REQUEST, "acknowledgements cannot open a share session")
    if epoch == FINAL_EPOCH and (request.forgotten_topics_data or any(
            not p.acknowledgement_batches for t in request.topics or () for p in t.partitions)):
        return _error(INVALID_REQUEST, "a final share fetch cannot add or forget partitions")
    error, session = open_or_use_session(ctx, share, request.group_id, request.member_id, epoch)
    if error:
        return _error(error)
    names = ctx.metadata.topic_names
    results = {}  # (topic id, index) -> PartitionData
    await apply_acknowledgements(ctx, share, request.group_id, request.member_id, acks, results,
                                 Response.PartitionData)
    hints = LeaderHints(ctx)
    if epoch == FINAL_EPOCH:
        share.sessions.close(request.group_id, request.member_id)
        share.release(session)
        return _respond(ctx, request.group_id, results, hints)
    if renewing:  # KIP-1222: locks renewed, nothing fetched
        return _respond(ctx, request.group_id, results, hints)
    for t in request.topics or ():
        for p in t.partitions:
            session.partitions.add((t.topic_id, p.partition_index))
    for t in request.forgotten_topics_data or ():
        for index in t.partitions:
            session.partitions.discard((t.topic_id, index))
    wanted = []
    for topic_id, index in sorted(session.partitions, key=lambda k: (str(k[0]), k[1])):
        name = names.get(topic_id)
        if name is None:
            results[(topic_id, index)] = Response.PartitionData(partition_index=index, error_code=UNKNOWN_TOPIC_ID)
        elif authz is not None and not authz.allowed(ctx, A.READ, A.TOPIC, name):
            results[(topic_id, index)] = Response.PartitionData(partition_index=index,
                                                                error_code=TOPIC_AUTHORIZATION_FAILED)
        else:
            wanted.append((name, index, topic_id))
    fetched = await share.partitions.fetch(request.group_id, request.member_id, wanted,
                                           request.max_records if request.max_records > 0 else DEFAULT_MAX_RECORDS,
                                           request.max_bytes, request.max_wait_ms, request.min_bytes,
                                           record_limit=ctx.version >= 2 and request.share_acquire_mode == RECORD_LIMIT)
    for name, index, topic_id in wanted:
        f = fetched.get((name, index))
        if f is None or (not f.error and not f.acquired and (topic_id, index) not in results):
            continue
        pd = results.get((topic_id, index)) or Response.PartitionData(partition_index=index)
        pd.error_code = f.error
        if f.error == NOT_LEADER_OR_FOLLOWER:
            leader_id, leader_epoch = hints.leader_of(name, index)
            pd.current_leader = Response.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)
        if f.acquired:
            pd.records = f.records
            pd.acquired_records = [Response.AcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset,
                                                            delivery_count=a.delivery_count) for a in f.acquired]
        results[(topic_id, index)] = pd
    return _respond(ctx, request.group_id, results, hints)


def _respond(ctx, group_id: str, results: dict, hints: LeaderHints):
    for pd in results.values():  # empty, never null: librdkafka drops a whole response with null records
        if pd.records is None:
            pd.records = b""
    topics = [Response.ShareFetchableTopicResponse(topic_id=t, partitions=ps)
              for t, ps in partitions_by_topic(results)]
    endpoints = [Response.NodeEndpoint(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
                 for e in hints.sorted_endpoints()]
    return Response(throttle_time_ms=0, error_code=0,
                    acquisition_lock_timeout_ms=ctx.services.share.settings_for(group_id).lock_duration_ms,
                    responses=topics, node_endpoints=endpoints)


def _error(code: int, message: str | None = None):
    return Response(throttle_time_ms=0, error_code=code, error_message=message, responses=[], node_endpoints=[])
