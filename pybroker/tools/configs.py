"""``pybroker configs``: kafka-configs.sh for topics, brokers and client quotas.

``--describe`` prints the dynamic configs (``--all``: every config) of a topic or broker, or the
quotas of users / client-ids; ``--alter --add-config k=v,k2=v2 --delete-config k`` changes them
(IncrementalAlterConfigs, AlterClientQuotas). Output lines follow Kafka's tool.
"""
import re

from pybroker.protocol import REQUESTS
from pybroker.tools.wire import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS, DESCRIBE_CONFIGS, \
    INCREMENTAL_ALTER_CONFIGS, Client, ToolError, check

TOPIC, BROKER = 2, 4
SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
DYNAMIC_SOURCES = (1, 2, 3)
QUOTA_TYPES = {"users": "user", "clients": "client-id"}


def parse_add(text: str) -> dict:
    """``k=v,k2=[a,b]`` -> {k: v, k2: "a,b"} (square brackets keep commas, as in Kafka's tool)."""
    out = {}
    for m in re.finditer(r"\s*([^=,\s]+)\s*=\s*(\[[^\]]*\]|[^,]*)\s*(,|$)", text):
        value = m.group(2).strip()
        out[m.group(1)] = value[1:-1] if value.startswith("[") else value
    if text.strip() and not out:
        raise ToolError(f"--add-config must be key=value pairs separated by commas, got {text!r}")
    return out


def run(args) -> int:
    types = args.entity_type
    if "broker-loggers" in types:
        raise ToolError("broker-loggers are not supported")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise ToolError("only users and clients may be combined in one --entity-type list")
    with Client(args.bootstrap_server, args.command_timeout_ms) as client:
        if types[0] in QUOTA_TYPES:
            return _quotas(client, args)
        if len(args.entity_name) > 1:
            raise ToolError("give one --entity-name")
        name = args.entity_name[0] if args.entity_name else None
        if types[0] == "topics":
            if name is None:
                raise ToolError("--entity-name is required for topics")
            return _configs(client, args, TOPIC, name, f"topic {name}")
        if args.entity_default or name is None:
            return _configs(client, args, BROKER, "", "brokers in the cluster", default=True)
        return _configs(client, args, BROKER, name, f"broker {name}")


def _conn(client, resource_type: int, name: str):
    if resource_type == BROKER and name:
        client.metadata([])
        return client.node_conn(int(name))
    return client.any_conn()


def _configs(client, args, resource_type: int, name: str, what: str, default: bool = False) -> int:
    conn = _conn(client, resource_type, name)
    if args.describe:
        req = REQUESTS[DESCRIBE_CONFIGS]
        describe_name = name
        if default:  # the cluster default is described through any broker's own resource
            client.metadata([])
            describe_name = str(min(client.brokers)) if client.brokers else "0"
        resp = conn.request(req(resources=[req.DescribeConfigsResource(
            resource_type=resource_type, resource_name=describe_name, configuration_keys=None)],
            include_synonyms=True))
        res = resp.results[0]
        check(res.error_code, res.error_message, where=what)
        wanted = (3,) if default else (2,) if resource_type == BROKER and not args.all else DYNAMIC_SOURCES
        title = "Default configs for" if default else ("All configs for" if args.all else "Dynamic configs for")
        print(f"{title} {what} are:")
        for c in sorted(res.configs, key=lambda c: c.name):
            synonyms = [(s.source, s.name, s.value) for s in c.synonyms]
            if default:
                synonyms = [s for s in synonyms if s[0] == 3]
                if not synonyms and c.config_source != 3:
                    continue
                value = synonyms[0][2] if synonyms else c.value
            else:
                if not args.all and c.config_source not in wanted:
                    continue
                value = c.value
            syn = ", ".join(f"{SOURCES.get(src, src)}:{n}={v}" for src, n, v in synonyms)
            print(f"  {c.name}={value} sensitive={str(bool(c.is_sensitive)).lower()} synonyms={{{syn}}}")
        return 0
    changes = {k: (0, v) for k, v in parse_add(args.add_config).items()}
    changes.update({k.strip(): (1, None) for k in args.delete_config.split(",") if k.strip()})
    if not changes:
        raise ToolError("--alter needs --add-config or --delete-config")
    req = REQUESTS[INCREMENTAL_ALTER_CONFIGS]
    resp = conn.request(req(resources=[req.AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=[req.AlterableConfig(name=k, config_operation=op, value=v) for k, (op, v) in changes.items()])],
        validate_only=False))
    r = resp.responses[0]
    check(r.error_code, r.error_message, where=what)
    print(f"Completed updating {'default config for' if default else 'config for'} {what}.")
    return 0


def _quota_entity(args) -> list:
    names = list(args.entity_name)
    entity = []
    for t in args.entity_type:
        if names:
            entity.append((QUOTA_TYPES[t], names.pop(0)))
        elif args.entity_default:
            entity.append((QUOTA_TYPES[t], None))
        elif not args.describe:
            raise ToolError(f"--entity-name or --entity-default is required for {t}")
        else:
            entity.append((QUOTA_TYPES[t], ...))  # describe: any name
    return entity


def _show(entity) -> str:
    return ", ".join(f"the default {t}" if n is None else f"{t} {n!r}" for t, n in entity)


def _quotas(client, args) -> int:
    entity = _quota_entity(args)
    conn = client.any_conn()
    if args.describe:
        req = REQUESTS[DESCRIBE_CLIENT_QUOTAS]
        components = [req.ComponentData(entity_type=t, match_type=2 if n is ... else 1 if n is None else 0,
                                        match=None if n is ... else n) for t, n in entity]
        resp = conn.request(req(components=components, strict=True), version=None)
        check(resp.error_code, resp.error_message, where="DescribeClientQuotas")
        for e in resp.entries or []:
            values = ", ".join(f"{v.key}={v.value}" for v in e.values)
            shown = _show([(x.entity_type, x.entity_name) for x in e.entity])
            print(f"Quota configs for {shown} are {values}")
        return 0
    ops = [(k, v, False) for k, v in parse_add(args.add_config).items()]
    ops += [(k.strip(), 0.0, True) for k in args.delete_config.split(",") if k.strip()]
    if not ops:
        raise ToolError("--alter needs --add-config or --delete-config")
    req = REQUESTS[ALTER_CLIENT_QUOTAS]
    try:
        data = [req.OpData(key=k, value=float(v), remove=rm) for k, v, rm in ops]
    except ValueError:
        raise ToolError(f"quota values must be numbers: {args.add_config!r}") from None
    resp = conn.request(req(entries=[req.EntryData(
        entity=[req.EntityData(entity_type=t, entity_name=n) for t, n in entity], ops=data)], validate_only=False))
    e = resp.entries[0]
    check(e.error_code, e.error_message, where="AlterClientQuotas")
    print(f"Completed updating config for {_show(entity)}.")
    return 0
