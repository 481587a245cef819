"""``pybroker acls``: kafka-acls.sh against a broker (CreateAcls, DescribeAcls, DeleteAcls).

``--add`` creates an ALLOW or DENY entry for each (principal, host, operation) on each named
resource; ``--producer`` / ``--consumer`` expand to the operations those clients need; ``--list``
shows the ACLs of the named resources (or all); ``--remove`` deletes the matching ones after a
confirmation (``--force`` skips it). Output lines follow Kafka's tool.
"""
import sys

from pybroker.security import acl as A

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
TOOL_VERSIONS = {DESCRIBE_ACLS: (1, 3), CREATE_ACLS: (1, 3), DELETE_ACLS: (1, 3)}  # v1+ carry the pattern type
PATTERN_TYPES = {"literal": A.LITERAL, "prefixed": A.PREFIXED, "match": A.MATCH, "any": A.ANY_PATTERN}
OPERATIONS = {name.lower(): op for op, name in A.OPERATION_NAMES.items()}


def add_parser(sub) -> None:
    from pybroker.tools import _runner
    p = sub.add_parser("acls", help="add, list and remove ACLs (kafka-acls)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--command-config", metavar="FILE", help="client properties (security settings) for the tool")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs (of the named resources, or all)")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME", help="--list: only these")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST", help="default * for allow principals")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST", help="default * for deny principals")
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens, All (default All)")
    p.add_argument("--topic", action="append", default=[], help="a topic (* for all topics)")
    p.add_argument("--group", action="append", default=[], help="a consumer group (* for all groups)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--delegation-token", action="append", default=[])
    p.add_argument("--user-principal", action="append", default=[])
    p.add_argument("--resource-pattern-type", default=None, choices=sorted(PATTERN_TYPES),
                   help="literal (default for --add), prefixed; --list/--remove also match and any")
    p.add_argument("--producer", action="store_true", help="--add/--remove: the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="--add/--remove: the ACLs a consumer needs")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    p.add_argument("--force", action="store_true", help="--remove: do not ask for confirmation")
    p.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS")
    p.set_defaults(func=_runner("acls"))


def run(args) -> int:
    from pybroker.tools.wire import ToolError
    pattern_type = PATTERN_TYPES[args.resource_pattern_type or "literal"]
    if args.add and pattern_type not in (A.LITERAL, A.PREFIXED):
        raise ToolError("--add takes --resource-pattern-type literal or prefixed")
    if pattern_type == A.PREFIXED and "*" in args.topic + args.group + args.transactional_id:
        raise ToolError("a prefixed resource pattern may not be '*'")
    with _client(args) as client:
        conn = client.any_conn()
        if args.list:
            return _list(conn, args, pattern_type)
        plan = _plan(args, pattern_type)
        if args.add:
            return _add(conn, args, plan)
        return _remove(conn, args, plan, pattern_type)


def _client(args):
    from pybroker.tools import wire
    if hasattr(wire, "command_security"):  # TLS / SASL settings of --command-config (Kafka's client names)
        return wire.Client(args.bootstrap_server, args.command_timeout_ms,
                           security=wire.command_security(args.command_config))
    props = _read_properties(args.command_config) if args.command_config else {}
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT":
        raise wire.ToolError(f"security.protocol={protocol} in {args.command_config}: this tools client speaks "
                             "PLAINTEXT only")
    return wire.Client(args.bootstrap_server, args.command_timeout_ms)


def _read_properties(path: str) -> dict:
    from pybroker.properties import ConfigError, parse_properties
    from pybroker.tools.wire import ToolError
    try:
        with open(path, encoding="utf-8") as f:
            return {k: v for k, v, _ in parse_properties(f.read(), path)}
    except (OSError, ConfigError) as exc:
        raise ToolError(f"--command-config {path}: {exc}") from None


def _version(conn, api_key: int) -> int:
    from pybroker.tools.wire import ToolError
    lo, hi = TOOL_VERSIONS[api_key]
    blo, bhi = conn.broker_versions.get(api_key, (0, -1))
    if max(lo, blo) > min(hi, bhi):
        raise ToolError(f"broker {conn.address} does not support the ACL APIs (no authorizer support)")
    return min(hi, bhi)


def _resources(args, pattern_type: int) -> list:
    out = [A.ResourcePattern(A.TOPIC, t, pattern_type) for t in args.topic]
    out += [A.ResourcePattern(A.GROUP, g, pattern_type) for g in args.group]
    if args.cluster:
        out.append(A.ResourcePattern(A.CLUSTER, A.CLUSTER_NAME, A.LITERAL))
    out += [A.ResourcePattern(A.TRANSACTIONAL_ID, t, pattern_type) for t in args.transactional_id]
    out += [A.ResourcePattern(A.DELEGATION_TOKEN, t, pattern_type) for t in args.delegation_token]
    out += [A.ResourcePattern(A.USER, u, pattern_type) for u in args.user_principal]
    return out


def _operations(args) -> list:
    from pybroker.tools.wire import ToolError
    ops = []
    for text in args.operation or ["All"]:
        op = OPERATIONS.get(text.replace("-", "").replace("_", "").lower())
        if op is None:
            raise ToolError(f"unknown --operation {text!r}: expected one of {', '.join(A.OPERATION_NAMES.values())}")
        ops.append(op)
    return ops


def _plan(args, pattern_type: int) -> dict:
    """{resource pattern: [operations]} for --add/--remove, with --producer/--consumer expanded."""
    from pybroker.tools.wire import ToolError
    if args.producer or args.consumer:
        plan = {}
        if args.producer:
            if not args.topic:
                raise ToolError("--producer needs --topic")
            for t in args.topic:
                plan.setdefault(A.ResourcePattern(A.TOPIC, t, pattern_type), []).extend([A.WRITE, A.DESCRIBE, A.CREATE])
            for t in args.transactional_id:
                plan[A.ResourcePattern(A.TRANSACTIONAL_ID, t, pattern_type)] = [A.WRITE, A.DESCRIBE]
            if args.idempotent:
                plan[A.ResourcePattern(A.CLUSTER, A.CLUSTER_NAME, A.LITERAL)] = [A.IDEMPOTENT_WRITE]
        if args.consumer:
            if not args.topic or not args.group:
                raise ToolError("--consumer needs --topic and --group")
            for t in args.topic:
                plan.setdefault(A.ResourcePattern(A.TOPIC, t, pattern_type), []).extend([A.READ, A.DESCRIBE])
            for g in args.group:
                plan[A.ResourcePattern(A.GROUP, g, pattern_type)] = [A.READ]
        return {p: sorted(set(ops)) for p, ops in plan.items()}
    resources = _resources(args, pattern_type)
    if not resources:
        raise ToolError("name a resource: --topic, --group, --cluster, --transactional-id, --delegation-token "
                        "or --user-principal")
    ops = _operations(args)
    for r in resources:
        supported = A.SUPPORTED_OPERATIONS[r.resource_type]
        bad = [A.OPERATION_NAMES[o] for o in ops if o != A.ALL and o not in supported]
        if bad:
            raise ToolError(f"ResourceType {A.RESOURCE_NAMES[r.resource_type]} only supports operations "
                            f"{', '.join(sorted(A.OPERATION_NAMES[o] for o in supported))} (not {', '.join(bad)})")
    return {r: ops for r in resources}


def _entries(args, operations) -> list:
    from pybroker.tools.wire import ToolError
    out = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, A.ALLOW),
                                          (args.deny_principal, args.deny_host, A.DENY)):
        for principal in principals:
            try:
                A.check_principal(principal)
            except A.AclError as exc:
                raise ToolError(str(exc)) from None
            for host in hosts or ["*"]:
                out += [A.AccessControlEntry(principal, host, op, permission) for op in operations]
    return out


def _add(conn, args, plan: dict) -> int:
    from pybroker.protocol import REQUESTS
    from pybroker.tools.wire import ToolError
    api = REQUESTS[CREATE_ACLS]
    creations, shown = [], []
    for pattern, ops in plan.items():
        entries = _entries(args, ops)
        if not entries:
            raise ToolError("--add needs --allow-principal or --deny-principal")
        print(f"Adding ACLs for resource `{pattern}`: \n {_lines(entries)} \n")
        shown.append(pattern)
        creations += [api.AclCreation(resource_type=pattern.resource_type, resource_name=pattern.name,
                                      resource_pattern_type=pattern.pattern_type, principal=e.principal,
                                      host=e.host, operation=e.operation, permission_type=e.permission)
                      for e in entries]
    resp = conn.request(api(creations=creations), _version(conn, CREATE_ACLS))
    return _report(conn, resp.results, "CreateAcls", shown)


def _remove(conn, args, plan: dict, pattern_type: int) -> int:
    from pybroker.protocol import REQUESTS
    api = REQUESTS[DELETE_ACLS]
    filters = []
    for pattern, ops in plan.items():
        entries = _entries(args, ops)
        if entries:
            filters += [A.AclBindingFilter(pattern.resource_type, pattern.name, pattern.pattern_type, e.principal,
                                           e.host, e.operation, e.permission) for e in entries]
            what = f"ACLs: \n {_lines(entries)} \n from resource `{pattern}`"
        else:  # no principal: every ACL of the resource
            filters.append(_every_acl_of(pattern))
            what = f"all ACLs for resource `{pattern}`"
        if not args.force and not _confirm(f"Are you sure you want to delete {what}? (y/n)"):
            return 0
        print(f"Removing {what} \n")
    resp = conn.request(api(filters=[api.DeleteAclsFilter(
        resource_type_filter=f.resource_type, resource_name_filter=f.name, pattern_type_filter=f.pattern_type,
        principal_filter=f.principal, host_filter=f.host, operation=f.operation, permission_type=f.permission)
        for f in filters]), _version(conn, DELETE_ACLS))
    return _report(conn, resp.filter_results, "DeleteAcls", plan)


def _report(conn, results, api_name: str, patterns) -> int:
    """Stop at the first error the broker gave, else show the ACLs each resource now has."""
    from pybroker.tools.wire import check
    for r in results:
        check(r.error_code, r.error_message, api_name)
    for pattern in patterns:
        _print_current(conn, _every_acl_of(pattern))
    return 0


def _list(conn, args, pattern_type: int) -> int:
    resources = _resources(args, PATTERN_TYPES[args.resource_pattern_type or "any"])
    for r in resources or [A.ResourcePattern(A.ANY_RESOURCE, None, A.ANY_PATTERN)]:  # none named: all
        for principal in args.principal or [None]:
            _print_current(conn, _every_acl_of(r, principal), principal)
    return 0


def _every_acl_of(pattern: A.ResourcePattern, principal: str | None = None) -> A.AclBindingFilter:
    """The filter for all ACLs of a resource pattern (of one principal when given)."""
    return A.AclBindingFilter(pattern.resource_type, pattern.name, pattern.pattern_type, principal, None,
                              A.ANY_OP, A.ANY_PERMISSION)


def describe(conn, filt: A.AclBindingFilter) -> dict:
    """{resource pattern: [entry]} the broker holds for ``filt``."""
    from pybroker.protocol import REQUESTS
    from pybroker.tools.wire import check
    api = REQUESTS[DESCRIBE_ACLS]
    resp = conn.request(api(resource_type_filter=filt.resource_type, resource_name_filter=filt.name,
                            pattern_type_filter=filt.pattern_type, principal_filter=filt.principal,
                            host_filter=filt.host, operation=filt.operation, permission_type=filt.permission),
                        _version(conn, DESCRIBE_ACLS))
    check(resp.error_code, resp.error_message, "DescribeAcls")
    return {A.ResourcePattern(r.resource_type, r.resource_name, r.pattern_type):
            [A.AccessControlEntry(a.principal, a.host, a.operation, a.permission_type) for a in r.acls]
            for r in resp.resources}


def _print_current(conn, filt: A.AclBindingFilter, principal: str | None = None) -> None:
    found = describe(conn, filt)
    if principal is not None and found:
        print(f"ACLs for principal `{principal}`")
    for pattern, entries in found.items():
        print(f"Current ACLs for resource `{pattern}`: \n {_lines(entries)} \n")


def _lines(entries) -> str:
    return "\n".join(f"\t{e}" for e in entries)


def _confirm(question: str) -> bool:
    print(question)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")

