"""ShareGroupDescribe (KIP-932): a share group's state, epochs, assignor and members with their assignments.

As Kafka 4.2 answers it: one entry per asked group, DESCRIBE on the group or GROUP_AUTHORIZATION_FAILED; an
unknown group "Group X not found.", a classic or consumer group "Group X is not a share group." (both
GROUP_ID_NOT_FOUND); a group whose assignment names a topic the caller may not describe is answered
TOPIC_AUTHORIZATION_FAILED as a whole (no members), as Kafka's handler does. Assigned topics that no longer
exist are left out of the assignments.
"""
from pybroker.protocol.errors import (GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND, INVALID_GROUP_ID,
                                      TOPIC_AUTHORIZATION_FAILED, ErrorCode)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.share.admin import group_kind

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1

UNAUTHORIZED_TOPICS = "The group has described topic(s) that the client is not authorized to describe."

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    authz = ctx.authorizer
    groups = []
    for group_id in request.group_ids:
        if authz is not None and not authz.allowed(ctx, A.DESCRIBE, A.GROUP, group_id):
            groups.append(Response.DescribedGroup(group_id=group_id, error_code=GROUP_AUTHORIZATION_FAILED,
                                                  members=[]))
            continue
        described = _describe(ctx, group_id)
        if described.error_code == 0 and authz is not None and not _topics_visible(ctx, described):
            described = _error(group_id, TOPIC_AUTHORIZATION_FAILED, UNAUTHORIZED_TOPICS)
        if described.error_code == 0 and request.include_authorized_operations:
            from pybroker.security.acl_checks import authorized_operations
            described.authorized_operations = authorized_operations(ctx, A.GROUP, group_id)
        groups.append(described)
    return Response(throttle_time_ms=0, groups=groups)


def _describe(ctx, group_id: str):
    error = ctx.coordinator.check_available(group_id)
    if error == INVALID_GROUP_ID:
        return Response.DescribedGroup(group_id="", error_code=INVALID_GROUP_ID, members=[])
    if error:
        return _error(group_id, error, ErrorCode(error).description)
    group = ctx.services.share.groups.describe(group_id)
    if group is None:
        kind = group_kind(ctx.services, group_id)
        message = f"Group {group_id} not found." if kind is None else f"Group {group_id} is not a share group."
        return _error(group_id, GROUP_ID_NOT_FOUND, message)
    names = ctx.metadata.topic_names
    return Response.DescribedGroup(
        error_code=0, group_id=group_id, group_state=group.state, group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch, assignor_name=group.assignor_name, members=[
            Response.Member(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                            client_id=m.client_id, client_host=m.client_host,
                            subscribed_topic_names=list(m.subscribed_topic_names),
                            assignment=Response.Assignment(topic_partitions=[
                                Response.TopicPartitions(topic_id=t, topic_name=names[t], partitions=list(ps))
                                for t, ps in sorted(m.assignment.items(), key=lambda kv: names.get(kv[0], ""))
                                if t in names]))
            for m in group.members()])


def _topics_visible(ctx, described) -> bool:
    names = {tp.topic_name for m in described.members for tp in m.assignment.topic_partitions}
    return all(ctx.authorizer.allowed(ctx, A.DESCRIBE, A.TOPIC, n) for n in sorted(names))


def _error(group_id: str, error: int, message):
    return Response.DescribedGroup(group_id=group_id, error_code=error, error_message=message, members=[])
