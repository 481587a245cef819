"""ACL bindings as Kafka models them: a resource pattern plus an access control entry.

Codes are Kafka's wire values (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType``). A binding names a resource pattern (type, LITERAL or PREFIXED, name; a
LITERAL ``*`` matches every resource of the type) and an entry (principal, ``User:*`` for anyone;
host, ``*`` for any; operation; ALLOW or DENY). Filters take ANY for any field and MATCH for
"every pattern that applies to this resource name".
"""
from typing import NamedTuple

from pybroker.security.principal import KafkaPrincipal

# ResourceType
ANY_RESOURCE, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 1, 2, 3, 4, 5, 6, 7
RESOURCE_NAMES = {TOPIC: "Topic", GROUP: "Group", CLUSTER: "Cluster", TRANSACTIONAL_ID: "TransactionalId",
                  DELEGATION_TOKEN: "DelegationToken", USER: "User"}
RESOURCE_BY_NAME = {v.lower(): k for k, v in RESOURCE_NAMES.items()}
CLUSTER_NAME = "kafka-cluster"

# PatternType
ANY_PATTERN, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
PATTERN_NAMES = {LITERAL: "LITERAL", PREFIXED: "PREFIXED", MATCH: "MATCH", ANY_PATTERN: "ANY"}
WILDCARD = "*"

# AclOperation
(ANY_OP, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
 IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS) = range(1, 15)
OPERATION_NAMES = {ALL: "All", READ: "Read", WRITE: "Write", CREATE: "Create", DELETE: "Delete", ALTER: "Alter",
                   DESCRIBE: "Describe", CLUSTER_ACTION: "ClusterAction", DESCRIBE_CONFIGS: "DescribeConfigs",
                   ALTER_CONFIGS: "AlterConfigs", IDEMPOTENT_WRITE: "IdempotentWrite",
                   CREATE_TOKENS: "CreateTokens", DESCRIBE_TOKENS: "DescribeTokens"}
OPERATION_BY_NAME = {v.lower(): k for k, v in OPERATION_NAMES.items()}

# AclPermissionType
ANY_PERMISSION, DENY, ALLOW = 1, 2, 3
PERMISSION_NAMES = {DENY: "Deny", ALLOW: "Allow"}
PERMISSION_BY_NAME = {"deny": DENY, "allow": ALLOW}

# which operations each resource type knows (the CLI checks these; the broker, as Kafka, does not)
SUPPORTED_OPERATIONS = {
    TOPIC: {READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS},
    GROUP: {READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS},  # the configs: Kafka 4.x's group configs
    CLUSTER: {CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE},
    TRANSACTIONAL_ID: {DESCRIBE, WRITE},
    DELEGATION_TOKEN: {DESCRIBE},
    USER: {CREATE_TOKENS, DESCRIBE_TOKENS},
}

# an ALLOW of the key grants these operations too (Kafka's implied operations)
IMPLIED_BY = {DESCRIBE: (DESCRIBE, READ, WRITE, DELETE, ALTER, ALL),
              DESCRIBE_CONFIGS: (DESCRIBE_CONFIGS, ALTER_CONFIGS, ALL)}


class AclError(ValueError):
    """A binding or filter Kafka would refuse (INVALID_REQUEST)."""


class ResourcePattern(NamedTuple):
    resource_type: int
    name: str
    pattern_type: int

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={RESOURCE_NAMES.get(self.resource_type, '?').upper()}, " \
               f"name={self.name}, patternType={PATTERN_NAMES.get(self.pattern_type, '?')})"


class AccessControlEntry(NamedTuple):
    principal: str
    host: str
    operation: int
    permission: int

    def __str__(self) -> str:
        return f"(principal={self.principal}, host={self.host}, " \
               f"operation={OPERATION_NAMES.get(self.operation, '?').upper()}, " \
               f"permissionType={PERMISSION_NAMES.get(self.permission, '?').upper()})"


class AclBinding(NamedTuple):
    pattern: ResourcePattern
    entry: AccessControlEntry


class AclBindingFilter(NamedTuple):
    """None for a name, principal or host matches any; ANY codes match any type/op/permission."""
    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        p, e = b.pattern, b.entry
        if self.resource_type != ANY_RESOURCE and self.resource_type != p.resource_type:
            return False
        if not self._matches_pattern(p):
            return False
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and (self.operation == ANY_OP or self.operation == e.operation)
                and (self.permission == ANY_PERMISSION or self.permission == e.permission))

    def _matches_pattern(self, p: ResourcePattern) -> bool:
        if self.pattern_type == MATCH:  # every pattern that would apply to the named resource
            if self.name is None:
                return True
            if p.pattern_type == LITERAL:
                return p.name == self.name or p.name == WILDCARD
            return p.pattern_type == PREFIXED and self.name.startswith(p.name)
        if self.pattern_type != ANY_PATTERN and self.pattern_type != p.pattern_type:
            return False
        return self.name is None or self.name == p.name


def check_principal(text: str) -> str:
    try:
        principal = KafkaPrincipal.parse(text)
    except ValueError as exc:
        raise AclError(str(exc)) from None
    if principal.type not in ("User", "Group"):
        raise AclError(f"unknown principal type {principal.type!r} in {text!r}")
    return text


def _check_code(value: int, known, what: str) -> None:
    """A code outside ``known`` is one Kafka does not define for this field."""
    if value not in known:
        raise AclError(f"invalid {what} {value}")


def validate_binding(b: AclBinding) -> AclBinding:
    """Kafka's checks on a binding to create: concrete codes, a name, a known principal, a valid host."""
    p, e = b.pattern, b.entry
    _check_code(p.resource_type, RESOURCE_NAMES, "resource type")
    if p.pattern_type not in (LITERAL, PREFIXED):
        raise AclError(f"invalid pattern type {p.pattern_type}: expected LITERAL or PREFIXED")
    if not p.name:
        raise AclError("a resource name is required")
    if p.pattern_type == PREFIXED and p.name == WILDCARD:
        raise AclError("a PREFIXED pattern may not be '*' (use LITERAL '*' to match every resource)")
    if p.resource_type == CLUSTER and p.name != CLUSTER_NAME:
        raise AclError(f"the cluster resource is named {CLUSTER_NAME}")
    _check_code(e.operation, OPERATION_NAMES, "operation")
    _check_code(e.permission, (ALLOW, DENY), "permission type")
    if not e.host:
        raise AclError("a host is required ('*' for any)")
    check_principal(e.principal)
    return b


def validate_filter(f: AclBindingFilter) -> AclBindingFilter:
    """A filter Kafka cannot evaluate (unknown codes, a PREFIXED '*'...) is INVALID_REQUEST."""
    _check_code(f.resource_type, (*RESOURCE_NAMES, ANY_RESOURCE), "resource type filter")
    _check_code(f.pattern_type, PATTERN_NAMES, "pattern type filter")
    if f.pattern_type == PREFIXED and f.name == WILDCARD:
        raise AclError("a PREFIXED pattern may not be '*'")
    _check_code(f.operation, (*OPERATION_NAMES, ANY_OP), "operation filter")
    _check_code(f.permission, (ALLOW, DENY, ANY_PERMISSION), "permission type filter")
    if f.principal is not None:
        check_principal(f.principal)
    return f


def binding_to_json(b: AclBinding) -> dict:
    return {"resourceType": RESOURCE_NAMES[b.pattern.resource_type], "name": b.pattern.name,
            "patternType": PATTERN_NAMES[b.pattern.pattern_type], **entry_to_json(b.entry)}


def binding_from_json(d: dict) -> AclBinding:
    return AclBinding(ResourcePattern(RESOURCE_BY_NAME[d["resourceType"].lower()], d["name"],
                                      {"LITERAL": LITERAL, "PREFIXED": PREFIXED}[d["patternType"].upper()]),
                      entry_from_json(d))


def entry_to_json(e: AccessControlEntry) -> dict:
    """Kafka's ZooKeeper ACL entry: operation and permission in their camel-case names."""
    return {"principal": e.principal, "permissionType": PERMISSION_NAMES[e.permission],
            "operation": OPERATION_NAMES[e.operation], "host": e.host}


def entry_from_json(d: dict) -> AccessControlEntry:
    return AccessControlEntry(d["principal"], d["host"], OPERATION_BY_NAME[d["operation"].lower()],
                              PERMISSION_BY_NAME[d["permissionType"].lower()])
