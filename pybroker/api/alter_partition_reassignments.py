"""AlterPartitionReassignments (KIP-455): start or cancel partition moves, answered by the controller.

A single node answers as the controller of a one-broker cluster (nothing to move). The answer
comes once each move has started (its adding replicas were told to follow); the move
finishes when they have caught up. Kafka's errors: NOT_CONTROLLER (41) from any other broker,
UNKNOWN_TOPIC_OR_PARTITION (3), INVALID_REPLICA_ASSIGNMENT (39) for an empty list, duplicate or
dead brokers, NO_REASSIGNMENT_IN_PROGRESS (85) when cancelling nothing, INVALID_REQUEST (42) for
a partition named twice in one request.
"""
from pybroker.controller.reassignment_plan import (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS,
                                                   UNKNOWN_TOPIC_OR_PARTITION, check_target)
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import CLUSTER_AUTHORIZATION_FAILED, cluster_denied

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 0

NOT_CONTROLLER, INVALID_REQUEST = 41, 42

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    changes, duplicates = {}, set()
    for t in request.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if key in changes:
                duplicates.add(key)
            changes[key] = p.replicas
    wanted = {k: v for k, v in changes.items() if k not in duplicates}
    controller = ctx.broker.zk_controller
    if cluster_denied(ctx, 7):  # ALTER
        return _response(CLUSTER_AUTHORIZATION_FAILED, "not authorized to alter the cluster", {})
    if controller is None:  # a single node: the only placement is where everything already is
        results = {k: _single_node(ctx.broker, k, v) for k, v in wanted.items()}
        return _response(0, None, {**results, **{k: _named_twice(k) for k in duplicates}})
    if not controller.active:
        return _response(NOT_CONTROLLER, "this broker is not the controller", {})
    results = await controller.alter_reassignments(wanted)
    if results == NOT_CONTROLLER:
        return _response(NOT_CONTROLLER, "this broker is not the controller", {})
    for key in duplicates:
        results[key] = _named_twice(key)
    return _response(0, None, results)


def _named_twice(key) -> tuple:
    return INVALID_REQUEST, f"partition {key[0]}-{key[1]} is named more than once"


def _single_node(broker, key, target) -> tuple:
    if broker.metadata.partition(*key) is None:
        return UNKNOWN_TOPIC_OR_PARTITION, f"no partition {key[1]} of topic {key[0]!r}"
    if target is None:
        return NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {key[0]}-{key[1]} is in progress"
    problem = check_target(tuple(target), {broker.node_id})
    return (INVALID_REPLICA_ASSIGNMENT, problem) if problem else (0, None)


def _response(error: int, message, results: dict):
    topics: dict = {}
    for (topic, partition), (code, text) in sorted(results.items()):
        topics.setdefault(topic, []).append(Response.ReassignablePartitionResponse(
            partition_index=partition, error_code=code, error_message=text))
    return Response(throttle_time_ms=0, error_code=error, error_message=message, responses=[
        Response.ReassignableTopicResponse(name=t, partitions=ps) for t, ps in topics.items()])
