"""OffsetFetch: a group's committed offsets, for the asked partitions or (topics=null, v2+) all.

v7+ ``require_stable``: a partition whose commit is under way (a transaction not ended, or a
commit not replicated yet) answers UNSTABLE_OFFSET_COMMIT instead of its last committed offset.
"""
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 7  # 8 batches several groups in one request
FIRST_ALL_TOPICS_VERSION = 2

GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED = 30, 29
UNSTABLE_OFFSET_COMMIT = 88

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    asked = None
    if request.topics is not None or ctx.version < FIRST_ALL_TOPICS_VERSION:
        asked = [(t.name, p) for t in (request.topics or []) for p in t.partition_indexes]
    authz = ctx.broker.authorizer
    refused = ()
    if authz is not None and not authz.allowed(ctx, A.DESCRIBE, A.GROUP, request.group_id):
        error, found, unstable = GROUP_AUTHORIZATION_FAILED, {}, set()
    else:
        error, found, unstable = ctx.broker.coordinator.fetch_offsets(
            request.group_id, asked, ctx.version >= 7 and request.require_stable)
        if authz is not None:  # ACLs: DESCRIBE on each topic; all-topics answers leave the others out
            refused = {tp[0] for tp in (asked or [*found, *unstable])
                       if not authz.allowed_quietly(ctx, A.DESCRIBE, A.TOPIC, tp[0])}
            found = {tp: v for tp, v in found.items() if tp[0] not in refused}
            unstable = {tp for tp in unstable if tp[0] not in refused}
    by_topic: dict[str, list] = {}
    for tp in (asked if asked is not None else sorted({*found, *unstable})):
        v = found.get(tp)
        by_topic.setdefault(tp[0], []).append(Response.OffsetFetchResponsePartition(
            partition_index=tp[1], committed_offset=v.offset if v else -1,
            committed_leader_epoch=v.leader_epoch if v else -1, metadata=v.metadata if v else "",
            error_code=TOPIC_AUTHORIZATION_FAILED if tp[0] in refused
            else UNSTABLE_OFFSET_COMMIT if tp in unstable
            else error if ctx.version < FIRST_ALL_TOPICS_VERSION else 0))
    topics = [Response.OffsetFetchResponseTopic(name=name, partitions=parts) for name, parts in by_topic.items()]
    return Response(throttle_time_ms=0, topics=topics, error_code=error)
