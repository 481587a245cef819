"""AlterPartitionReassignments (KIP-455): start or cancel partition moves, answered by the controller.

A single node answers as the controller of a one-broker cluster (nothing to move). The answer
comes once each move has started (its adding replicas were told to follow); the move
finishes when they have caught up. Kafka's errors: NOT_CONTROLLER (41) from any other broker,
UNKNOWN_TOPIC_OR_PARTITION (3), INVALID_REPLICA_ASSIGNMENT (39) for an empty list, duplicate or
dead brokers, NO_REASSIGNMENT_IN_PROGRESS (85) when cancelling nothing, INVALID_REQUEST (42) for
a partition named twice in one request.
"""
from pybroker.protocol.errors import (CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, NO_REASSIGNMENT_IN_PROGRESS,
                                      NOT_CONTROLLER)
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 0

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
    if cluster_denied(ctx, 7):  # ALTER
        return _response(CLUSTER_AUTHORIZATION_FAILED, "not authorized to alter the cluster", {})
    results = await ctx.control.alter_reassignments(wanted)
    if results == NOT_CONTROLLER:
        return _response(NOT_CONTROLLER, "this broker is not the controller", {})
    for key in duplicates:
        results[key] = _named_twice(key)
    return _response(0, None, results)


def _named_twice(key) -> tuple:
    return INVALID_REQUEST, f"partition {key[0]}-{key[1]} is named more than once"


def _response(error: int, message, results: dict):
    topics: dict = {}
    for (topic, partition), (code, text) in sorted(results.items()):
        topics.setdefault(topic, []).append(Response.ReassignablePartitionResponse(
            partition_index=partition, error_code=code,
            error_message=None if code == NO_REASSIGNMENT_IN_PROGRESS else text))  # Kafka says nothing more
    return Response(throttle_time_ms=0, error_code=error, error_message=message, responses=[
        Response.ReassignableTopicResponse(name=t, partitions=ps) for t, ps in topics.items()])
