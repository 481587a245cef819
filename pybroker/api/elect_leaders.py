"""ElectLeaders (KIP-460): preferred or unclean leader election, answered by the controller."""
from pybroker.protocol.errors import (CLUSTER_AUTHORIZATION_FAILED, ELECTION_NOT_NEEDED, ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                      INVALID_REQUEST, NOT_CONTROLLER, PREFERRED_LEADER_NOT_AVAILABLE,
                                      UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

ELECTION_TYPES = {0: "preferred", 1: "unclean"}

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    return _handle(ctx, request)


async def _handle(ctx, request):
    keys = None if request.topic_partitions is None else [
        (t.topic, p) for t in request.topic_partitions for p in t.partitions]
    election_type = request.election_type if ctx.version >= 1 else 0  # v0: preferred only
    if cluster_denied(ctx, 7):  # ALTER
        return _response(CLUSTER_AUTHORIZATION_FAILED, {k: CLUSTER_AUTHORIZATION_FAILED for k in keys or ()},
                         ctx.version)
    if election_type not in ELECTION_TYPES:
        return _response(INVALID_REQUEST, {k: INVALID_REQUEST for k in keys or ()}, ctx.version)
    results = await ctx.control.elect_leaders(election_type, keys)
    if results == NOT_CONTROLLER:
        return _response(NOT_CONTROLLER, {k: NOT_CONTROLLER for k in keys or ()}, ctx.version)
    if ctx.version == 0:  # v0 predates ELIGIBLE_LEADERS_NOT_AVAILABLE
        results = {k: PREFERRED_LEADER_NOT_AVAILABLE if e == ELIGIBLE_LEADERS_NOT_AVAILABLE else e
                   for k, e in results.items()}
    return _response(0, results, ctx.version)


def _response(error: int, results: dict, version: int):
    topics: dict = {}
    for (topic, partition), code in results.items():
        topics.setdefault(topic, []).append(Response.PartitionResult(
            partition_id=partition, error_code=code, error_message=_MESSAGES.get(code)))
    return Response(error_code=error, replica_election_results=[
        Response.ReplicaElectionResult(topic=t, partition_result=ps) for t, ps in topics.items()])


# Kafka's wording where it has a fixed one (a ZooKeeper-mode controller's, for an unknown partition)
_MESSAGES = {UNKNOWN_TOPIC_OR_PARTITION: "The partition does not exist.",
             NOT_CONTROLLER: "this broker is not the controller",
             INVALID_REQUEST: "election_type must be 0 (preferred) or 1 (unclean)",
             PREFERRED_LEADER_NOT_AVAILABLE: "the preferred replica is not live or not in sync",
             ELIGIBLE_LEADERS_NOT_AVAILABLE: "no live replica may become the leader",
             ELECTION_NOT_NEEDED: "Leader election not needed for topic partition."}
