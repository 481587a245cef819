"""Authorization checks several API modules share: config resources and the cluster-only APIs."""
from pybroker.errors import BrokerError
from pybroker.protocol.errors import (CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
                                      TOPIC_AUTHORIZATION_FAILED)
from pybroker.security import acl as A

# DescribeConfigs/AlterConfigs resource types
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_GROUP = 2, 4, 8, 32


class AuthorizationFailed(BrokerError):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def check_config_resource(ctx, authz, operation: int, resource_type: int, name: str) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic or the group, or on the cluster for broker resources."""
    if resource_type == CONFIG_TOPIC:
        if not authz.allowed(ctx, operation, A.TOPIC, name):
            raise AuthorizationFailed(TOPIC_AUTHORIZATION_FAILED, f"not authorized to access topic {name!r}")
    elif resource_type == CONFIG_GROUP:
        if not authz.allowed(ctx, operation, A.GROUP, name):
            raise AuthorizationFailed(GROUP_AUTHORIZATION_FAILED, f"not authorized to access group {name!r}")
    elif not authz.allowed(ctx, operation, A.CLUSTER, A.CLUSTER_NAME):
        raise AuthorizationFailed(CLUSTER_AUTHORIZATION_FAILED, "not authorized to access the cluster")


def cluster_denied(ctx, operation: int) -> bool:
    """True (and audited) when the caller may not do ``operation`` on the cluster; False with no authorizer."""
    authz = ctx.authorizer
    return authz is not None and not authz.allowed(ctx, operation, A.CLUSTER, A.CLUSTER_NAME)


def authorized_operations(ctx, resource_type: int, name: str) -> int:
    """The authorized-operations bit field of a topic or group (every operation when no authorizer)."""
    supported = A.SUPPORTED_OPERATIONS[resource_type]
    authz = ctx.authorizer
    if authz is None:
        return sum(1 << op for op in supported)
    return sum(1 << op for op in supported if authz.allowed_quietly(ctx, op, resource_type, name))


def cluster_operations(ctx, supported) -> int:
    """The authorized-operations bit field (1 << AclOperation) of the cluster for the caller."""
    authz = ctx.authorizer
    if authz is None:
        return sum(1 << op for op in supported)
    return sum(1 << op for op in supported if authz.allowed_quietly(ctx, op, A.CLUSTER, A.CLUSTER_NAME))
