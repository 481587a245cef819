"""ConsumerGroupHeartbeat (KIP-848): join, stay in and leave a consumer group; the coordinator assigns.

v0 may leave the member id to the coordinator; v1 (the version librdkafka and Kafka 4.0 clients
use) carries the client's own member id and may subscribe by regex. The flow and the rules are in
pybroker/coordinator/consumer_coordinator.py.
"""
from pybroker.coordinator.consumer_coordinator import HeartbeatRequest
from pybroker.protocol.errors import GROUP_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1
FIRST_REGEX_VERSION = 1

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return Response(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED)
    owned = None
    if request.topic_partitions is not None:
        owned = {}
        for t in request.topic_partitions:  # a topic named twice: its partitions add up
            owned[t.topic_id] = owned.get(t.topic_id, frozenset()) | frozenset(t.partitions)
    req = HeartbeatRequest(
        request.group_id, request.member_id, request.member_epoch, request.instance_id, request.rack_id,
        request.rebalance_timeout_ms, request.subscribed_topic_names,
        request.subscribed_topic_regex if ctx.version >= FIRST_REGEX_VERSION else None,
        request.server_assignor, owned)
    r = ctx.coordinator.consumer.heartbeat(req, ctx.version, ctx.header.client_id or "",
                                                  "/" + str(ctx.connection.peer[0]))
    assignment = None
    if r.assignment is not None:
        assignment = Response.Assignment(topic_partitions=[
            Response.TopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(r.assignment.items(), key=lambda kv: str(kv[0]))])
    return Response(throttle_time_ms=0, error_code=r.error, error_message=r.message, member_id=r.member_id,
                    member_epoch=r.member_epoch,
                    heartbeat_interval_ms=r.heartbeat_interval_ms, assignment=assignment)
