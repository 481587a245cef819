"""AlterShareGroupOffsets (KIP-932): set the start offset of share-partitions of an empty share group
(``kafka-share-groups --reset-offsets``).

As Kafka 4.2 answers it: READ on the group or GROUP_AUTHORIZATION_FAILED for the whole request; per topic, READ
on it or TOPIC_AUTHORIZATION_FAILED and an existing topic or UNKNOWN_TOPIC_OR_PARTITION, for each of its
partitions (and a partition past the topic's count UNKNOWN_TOPIC_OR_PARTITION); served by the group's
coordinator. A group of that id of another kind is GROUP_ID_NOT_FOUND; an unknown group is created Empty (4.2
lets offsets be set before a group's first member, KAFKA-19662); a group with members is NON_EMPTY_GROUP.
Each share-partition's state starts again at its new offset with the next state epoch (pybroker/share/admin.py),
so a leader still holding the old state is fenced when it next writes; this broker's leaders forget the group's
share-partitions at once, so the next fetch reads the new state.
"""
from pybroker.protocol.errors import (GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP,
                                      TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION, ErrorCode)
from pybroker.protocol.messages import RESPONSES
from pybroker.protocol.primitives import ZERO_UUID
from pybroker.security import acl as A
from pybroker.share import admin
from pybroker.share.group import EMPTY
from pybroker.share.state_records import StateKey

API_KEY = 91
MIN_VERSION = 0
MAX_VERSION = 0

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    group_id = request.group_id
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.READ, A.GROUP, group_id):
        return _error(GROUP_AUTHORIZATION_FAILED)
    answers: dict = {}  # (topic name, topic id) -> {partition: error}, in the request's order
    offsets: dict = {}  # StateKey -> new start offset
    for t in request.topics:
        topic_id = ctx.metadata.topic_id(t.topic_name)
        meta = ctx.metadata.topics.get(t.topic_name)
        parts = answers.setdefault((t.topic_name, topic_id or ZERO_UUID), {})
        if authz is not None and not authz.allowed(ctx, A.READ, A.TOPIC, t.topic_name):
            parts.update({p.partition_index: TOPIC_AUTHORIZATION_FAILED for p in t.partitions})
        elif topic_id is None:
            parts.update({p.partition_index: UNKNOWN_TOPIC_OR_PARTITION for p in t.partitions})
        else:
            for p in t.partitions:
                if p.partition_index in meta.partitions:
                    offsets[StateKey(group_id, topic_id, p.partition_index)] = p.start_offset
                else:
                    parts[p.partition_index] = UNKNOWN_TOPIC_OR_PARTITION
    error, message = _group_error(ctx, group_id)
    if error:
        return _error(error, message)
    share = ctx.services.share
    admin.ensure_group(share, group_id)
    if offsets:
        current = await admin.summaries(share, offsets)
        results = await admin.reset_states(share, offsets, current)
        share.partitions.forget_group(group_id)  # the leaders here read the new state on their next fetch
        names = ctx.metadata.topic_names
        for k, code in results.items():
            answers[(names.get(k.topic_id, ""), k.topic_id)][k.partition] = code
    return Response(throttle_time_ms=0, error_code=0, responses=[
        Response.AlterShareGroupOffsetsResponseTopic(topic_name=name, topic_id=topic_id, partitions=[
            Response.AlterShareGroupOffsetsResponsePartition(
                partition_index=i, error_code=code, error_message=ErrorCode(code).description if code else None)
            for i, code in sorted(parts.items())])
        for (name, topic_id), parts in answers.items()])


def _group_error(ctx, group_id: str) -> tuple[int, str | None]:
    """The request's error from the group coordinator: not served here, another kind of group, members."""
    error = ctx.coordinator.check_available(group_id)
    if error:
        return error, ErrorCode(error).description
    kind = admin.group_kind(ctx.services, group_id)
    if kind not in (None, admin.GROUP_TYPE):
        return GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    group = ctx.services.share.groups.describe(group_id)
    if group is not None and group.state != EMPTY:
        return NON_EMPTY_GROUP, ErrorCode(NON_EMPTY_GROUP).description
    return 0, None


def _error(error: int, message: str | None = None):
    return Response(throttle_time_ms=0, error_code=error, error_message=message or ErrorCode(error).description,
                    responses=[])
