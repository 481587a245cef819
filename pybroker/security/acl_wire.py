"""ACL requests' wire fields into bindings and filters, and the refusal every ACL API shares."""
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, SECURITY_DISABLED
from pybroker.security import acl as A

SECURITY_DISABLED_MESSAGE = "no authorizer is configured on the broker (authorizer.class.name)"


def cluster_refusal(ctx, operation: int) -> tuple[int, str | None] | None:
    """(error code, message) when an ACL API may not run: no authorizer, or ``operation`` on the
    cluster denied; None when it may."""
    authz = ctx.authorizer
    if authz is None:
        return SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE
    if not authz.allowed(ctx, operation, A.CLUSTER, A.CLUSTER_NAME):
        return CLUSTER_AUTHORIZATION_FAILED, None
    return None


def parse_each(items, parse) -> tuple[list, list]:
    """(what parsed, per item None or (INVALID_REQUEST, why)): each creation or filter stands alone."""
    parsed, errors = [], []
    for item in items:
        try:
            parsed.append(parse(item))
            errors.append(None)
        except A.AclError as exc:
            errors.append((INVALID_REQUEST, str(exc)))
    return parsed, errors


def describe(bindings) -> str:
    """Bindings as one log line."""
    return ", ".join(f"{b.pattern} {b.entry}" for b in bindings)


def filter_from(f, version: int) -> A.AclBindingFilter:
    """A DescribeAcls request or DeleteAcls filter (v0 has no pattern type: LITERAL)."""
    return A.validate_filter(A.AclBindingFilter(
        f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter if version >= 1 else A.LITERAL,
        f.principal_filter, f.host_filter, f.operation, f.permission_type))


def binding_from(c, version: int) -> A.AclBinding:
    """A CreateAcls creation (v0 has no pattern type: LITERAL)."""
    pattern_type = c.resource_pattern_type if version >= 1 else A.LITERAL
    return A.validate_binding(A.AclBinding(A.ResourcePattern(c.resource_type, c.resource_name, pattern_type),
                                           A.AccessControlEntry(c.principal, c.host, c.operation,
                                                                c.permission_type)))
