"""DeleteGroups: forget empty groups and tombstone their committed offsets.

A share group (pybroker/share) is deleted as Kafka 4.2's group coordinator deletes it: only when Empty
(NON_EMPTY_GROUP otherwise); the durable state of every share-partition it has is deleted first, wherever
its share coordinator is, and a failure there is the group's answer (the group stays). A group id no
group coordinated here has, but with share-partition state (an idle share group whose membership, kept
in memory, was lost with a coordinator move), is deleted the same way; otherwise GROUP_ID_NOT_FOUND.
"""
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.share import admin

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    authz = ctx.authorizer
    return Response(throttle_time_ms=0, results=[
        Response.DeletableGroupResult(group_id=name, error_code=GROUP_AUTHORIZATION_FAILED
                                      if authz is not None and not authz.allowed(ctx, A.DELETE, A.GROUP, name)
                                      else await _delete(ctx, name))
        for name in request.groups_names])


async def _delete(ctx, group_id: str) -> int:
    coordinator = ctx.coordinator
    share = getattr(ctx.services, "share", None)
    if share is None or coordinator.check_available(group_id):
        return await coordinator.delete_group(group_id)
    group = share.groups.describe(group_id)
    if group is None:
        error = await coordinator.delete_group(group_id)
        if error != GROUP_ID_NOT_FOUND:
            return error
    elif group.size:
        return NON_EMPTY_GROUP
    found, error = await admin.states_of(share, group_id)
    if group is None and not found:
        return GROUP_ID_NOT_FOUND
    if error:  # some share-partition's state could not be read now: deleting would leave it behind
        return error
    results = await admin.delete_states(share, list(found))
    error = next((code for code in results.values() if code), 0)
    if error:
        return error
    now = share.groups.describe(group_id)
    if now is not None and now.size:  # a member joined while the state was deleted: it starts afresh
        return NON_EMPTY_GROUP
    share.groups.delete(group_id)
    share.partitions.forget_group(group_id)
    return 0
