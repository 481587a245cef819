"""DeleteShareGroupOffsets (KIP-932): forget the share-partition state of whole topics in an empty share
group (``kafka-share-groups --delete-offsets``); the group starts those topics afresh, at
``share.auto.offset.reset``.

As Kafka 4.2 answers it: DELETE on the group or GROUP_AUTHORIZATION_FAILED for the whole request; topics without
READ TOPIC_AUTHORIZATION_FAILED each; served by the group's coordinator; a group of another kind or unknown is
GROUP_ID_NOT_FOUND, a group with members NON_EMPTY_GROUP. An unknown topic is UNKNOWN_TOPIC_OR_PARTITION, a topic
the group has no state on too ("There is no offset information to delete."); a failed deletion answers its error
on the topic. A group this coordinator does not know but whose state the share coordinators hold (membership is
not durable here: after a coordinator move an idle group is known only by its state) counts as an empty group.
"""
from pybroker.protocol.errors import (GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP,
                                      TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION, ErrorCode)
from pybroker.protocol.messages import RESPONSES
from pybroker.protocol.primitives import ZERO_UUID
from pybroker.security import acl as A
from pybroker.share import admin
from pybroker.share.group import EMPTY

API_KEY = 92
MIN_VERSION = 0
MAX_VERSION = 0

NO_OFFSETS = "There is no offset information to delete."

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    group_id = request.group_id
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.DELETE, A.GROUP, group_id):
        return _error(GROUP_AUTHORIZATION_FAILED)
    answers, asked = [], []
    for t in request.topics:
        if authz is not None and not authz.allowed(ctx, A.READ, A.TOPIC, t.topic_name):
            answers.append(_topic(t.topic_name, ZERO_UUID, TOPIC_AUTHORIZATION_FAILED))
        else:
            asked.append(t.topic_name)
    error = ctx.coordinator.check_available(group_id)
    if error:
        return _error(error)
    kind = admin.group_kind(ctx.services, group_id)
    if kind not in (None, admin.GROUP_TYPE):
        return _error(GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    share = ctx.services.share
    group = share.groups.describe(group_id)
    if group is not None and group.state != EMPTY:
        return _error(NON_EMPTY_GROUP)
    known = [n for n in asked if ctx.metadata.topic_id(n) is not None]
    summaries = await admin.summaries(share, admin.topic_keys(ctx.services, group_id, set(known)))
    found = [k for k, s in summaries.items() if s.state is not None]
    if group is None and not found:
        unread = next((s.error for s in summaries.values() if s.error), 0)
        return _error(unread) if unread else _error(GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    results = await admin.delete_states(share, found)
    share.partitions.forget_group(group_id)
    for name in asked:
        topic_id = ctx.metadata.topic_id(name)
        if topic_id is None:
            answers.append(_topic(name, ZERO_UUID, UNKNOWN_TOPIC_OR_PARTITION))
            continue
        # a deletion's error, else a summary's (a share-partition whose state could not be read now)
        errors = [c for k, c in results.items() if k.topic_id == topic_id and c]
        errors += [s.error for k, s in summaries.items() if k.topic_id == topic_id and s.error]
        if errors:
            answers.append(_topic(name, topic_id, errors[0]))
        elif any(k.topic_id == topic_id for k in results):
            answers.append(_topic(name, topic_id, 0))
        else:
            answers.append(_topic(name, topic_id, UNKNOWN_TOPIC_OR_PARTITION, NO_OFFSETS))
    return Response(throttle_time_ms=0, error_code=0, responses=answers)


def _topic(name: str, topic_id, error: int, message: str | None = None):
    return Response.DeleteShareGroupOffsetsResponseTopic(
        topic_name=name, topic_id=topic_id, error_code=error,
        error_message=message or (ErrorCode(error).description if error else None))


def _error(error: int, message: str | None = None):
    return Response(throttle_time_ms=0, error_code=error, error_message=message or ErrorCode(error).description,
                    responses=[])
