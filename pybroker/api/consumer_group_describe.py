"""ConsumerGroupDescribe (KIP-848): a consumer group's epochs, assignor and members with their current
and target assignments. One entry per asked group: an unknown id answers GROUP_ID_NOT_FOUND, a
classic group of that id GROUP_ID_NOT_FOUND too ("not a consumer group"), as Kafka does.
"""
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 0

NOT_REQUESTED = -2147483648
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE: no ACLs here

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    coordinator = ctx.coordinator
    authz = ctx.authorizer
    groups = []
    for group_id in request.group_ids:
        if authz is not None and not authz.allowed(ctx, A.DESCRIBE, A.GROUP, group_id):
            groups.append(_error(group_id, GROUP_AUTHORIZATION_FAILED, None))
            continue
        ops = NOT_REQUESTED
        if request.include_authorized_operations:
            ops = GROUP_OPERATIONS
            if authz is not None:
                from pybroker.security.acl_checks import authorized_operations
                ops = authorized_operations(ctx, A.GROUP, group_id)
        groups.append(_describe(coordinator, group_id, ops))
    return Response(throttle_time_ms=0, groups=groups)


def _describe(coordinator, group_id: str, ops: int):
    """One group's entry; a member without a regex subscription answers "" for it, as Kafka 3.8 does."""
    error = coordinator.check_available(group_id)
    if error:
        return _error(group_id, error, None)
    group = coordinator.consumer.groups.get(group_id)
    if group is None:  # unknown, or a classic group: Kafka 3.8 says which in its log only, not the answer
        return _error(group_id, GROUP_ID_NOT_FOUND, None)
    names = coordinator.consumer.topic_names()
    members = [Response.Member(
        member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
        client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=list(m.subscribed_names),
        subscribed_topic_regex=m.subscribed_regex or "", assignment=_assignment(m.assigned, names),
        target_assignment=_assignment(group.target.get(m.member_id, {}), names))
        for m in group.members.values()]
    return Response.DescribedGroup(
        error_code=0, group_id=group_id, group_state=group.state, group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch, assignor_name=group.assignor or coordinator.consumer.assignor_names[0],
        members=members, authorized_operations=ops)


def _assignment(assignment: dict, names: dict):
    return Response.Assignment(topic_partitions=[
        Response.TopicPartitions(topic_id=t, topic_name=names.get(t, ""), partitions=sorted(ps))
        for t, ps in sorted(assignment.items(), key=lambda kv: names.get(kv[0], str(kv[0])))])


def _error(group_id: str, error: int, message):
    return Response.DescribedGroup(error_code=error, error_message=message, group_id=group_id, group_state="",
                                   members=[])
