"""ShareGroupHeartbeat (KIP-932): join, stay in and leave a share group; the coordinator assigns
partitions (pybroker/share/groups.py, group.py)."""
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 76
MIN_VERSION = 1
MAX_VERSION = 1

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    authz = ctx.authorizer
    if authz is not None:
        if not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
            return Response(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED)
        names = request.subscribed_topic_names or ()
        if any(not authz.allowed(ctx, A.DESCRIBE, A.TOPIC, n) for n in names if n in ctx.metadata.topics):
            return Response(throttle_time_ms=0, error_code=TOPIC_AUTHORIZATION_FAILED)
    r = ctx.services.share.groups.heartbeat(request.group_id, request.member_id, request.member_epoch,
                                            request.rack_id, request.subscribed_topic_names,
                                            ctx.header.client_id or "", "/" + str(ctx.connection.peer[0]))
    assignment = None
    if r.assignment is not None:
        assignment = Response.Assignment(topic_partitions=[
            Response.TopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(r.assignment.items(), key=lambda kv: str(kv[0]))])
    return Response(throttle_time_ms=0, error_code=r.error, error_message=r.message,
                    member_id=r.member_id if not r.error else None, member_epoch=r.member_epoch,
                    heartbeat_interval_ms=r.heartbeat_interval_ms, assignment=assignment)
