"""DescribeCluster (KIP-700): the live brokers on the caller's listener, the controller and the
cluster id, from the metadata cache, as Metadata names them. A ZooKeeper-mode broker describes
brokers only: endpoint type 2 (controllers) is refused."""
from pybroker.protocol.errors import MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_operations

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 1

BROKERS_ENDPOINT = 1
NO_OPERATIONS = -2147483648  # authorized operations not asked for
# AclOperation codes the cluster resource supports (all allowed when no authorizer is configured)
# (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE)
CLUSTER_OPERATIONS = (5, 7, 8, 9, 10, 11, 12)

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    endpoint_type = request.endpoint_type if ctx.version >= 1 else BROKERS_ENDPOINT  # v0 asks for brokers
    if endpoint_type != BROKERS_ENDPOINT:
        # 2 (controllers) is a real type, but not one a broker answers for
        code = MISMATCHED_ENDPOINT_TYPE if endpoint_type == 2 else UNSUPPORTED_ENDPOINT_TYPE
        return Response(throttle_time_ms=0, error_code=code, endpoint_type=endpoint_type, cluster_id="",
                        error_message=f"a broker describes endpoint type 1 (brokers), not {endpoint_type}",
                        controller_id=-1, brokers=[], cluster_authorized_operations=NO_OPERATIONS)
    cache = ctx.metadata
    listener = ctx.connection.server.listener_name
    brokers = []
    for b in sorted(cache.brokers.values(), key=lambda b: b.id):
        address = b.address(listener)
        if address is not None:  # a broker without this listener cannot be reached by this client
            brokers.append(Response.DescribeClusterBroker(broker_id=b.id, host=address[0], port=address[1],
                                                          rack=b.rack))
    operations = NO_OPERATIONS
    if request.include_cluster_authorized_operations:
        operations = cluster_operations(ctx, CLUSTER_OPERATIONS)
    return Response(throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=BROKERS_ENDPOINT,
                    cluster_id=ctx.cluster_id, controller_id=cache.controller_id, brokers=brokers,
                    cluster_authorized_operations=operations)
