"""IncrementalAlterConfigs: SET / DELETE / APPEND / SUBTRACT single topic, broker or group configs.

Topic changes are validated like CreateTopics' configs, stored durably (they survive a restart)
and applied to the topic's open logs. A broker's replication throttle rates and log.* defaults may
change live (pybroker/controller/broker_configs.py); every other broker config is static, so it
fails as Kafka fails a config that cannot be updated dynamically: INVALID_REQUEST ("Cannot update
these configs dynamically"). APPEND/SUBTRACT apply only to the keys Kafka types LIST (cleanup.policy,
the throttled replica lists; INVALID_CONFIG otherwise); duplicate keys or resources in one request are
INVALID_REQUEST.

A group resource (32, Kafka 4.x's group configs) takes SET and DELETE of the keys of
pybroker/coordinator/group_configs.py (no group key is a list); an unknown key or a bad value is
INVALID_CONFIG in Kafka's words, the empty group name INVALID_REQUEST, as Kafka 4.2 answers. The change
is kept by the control (the local metadata store, or ZooKeeper for a cluster) and seen by every broker.
"""
from pybroker import config_catalog as catalog
from pybroker.errors import BrokerError
from pybroker.protocol.errors import INVALID_CONFIG, INVALID_REQUEST
from pybroker.protocol.messages import RESPONSES

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1
TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# the TLS keys Kafka changes live only per listener (listener.name.<name>.<key>)
LISTENER_ONLY = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
                 "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type",
                 "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates")

Response = RESPONSES[API_KEY]


class ConfigChangeError(BrokerError):
    code = INVALID_REQUEST


class InvalidConfigError(BrokerError):
    code = INVALID_CONFIG


def duplicate_resources(resources) -> set:
    seen, dups = set(), set()
    for res in resources:
        key = (res.resource_type, res.resource_name)
        (dups if key in seen else seen).add(key)
    return dups


async def alter_resource(ctx, resource_type, name, changes: dict, replace_all: bool, validate_only: bool) -> None:
    """Apply ``changes`` ({key: value | None}) to one resource, or raise a BrokerError."""
    if resource_type == TOPIC:
        await ctx.control.alter_topic_configs(name, changes, replace_all=replace_all, validate_only=validate_only)
    elif resource_type == BROKER:
        if name not in ("", str(ctx.node_id)):
            raise ConfigChangeError(f"unexpected broker id {name!r}: this is broker {ctx.node_id}")
        check_broker_keys(name, changes)
        await ctx.services.backend.dynamic_configs.alter(name, changes, replace_all, validate_only)
    elif resource_type == GROUP:
        if not name:
            raise ConfigChangeError("Default group resources are not allowed.")
        await ctx.control.alter_group_configs(name, changes, validate_only=validate_only, replace_all=replace_all)
    else:
        raise ConfigChangeError(f"altering configs of resource type {resource_type} is not supported "
                                "(only topics, brokers and groups)")


def check_broker_keys(name: str, changes: dict) -> None:
    """Kafka's checks of the broker keys set, in its order: read-only keys, TLS keys without a listener,
    value types (INVALID_CONFIG), per-broker keys at the cluster default; with Kafka's messages, the keys
    listed plainly (Kafka prints them as a Scala Set)."""
    kinds = {k: catalog.broker_key(k) for k, v in changes.items() if v is not None}
    static = sorted(k for k, kind in kinds.items() if kind is not None and kind.mode == catalog.READ_ONLY)
    if static:
        raise ConfigChangeError(f"Cannot update these configs dynamically: {', '.join(static)}")
    unprefixed = sorted(k for k in kinds if k in LISTENER_ONLY)
    if unprefixed:
        raise ConfigChangeError("These security configs can be dynamically updated only per-listener using the "
                                f"listener prefix: {', '.join(unprefixed)}")
    for key, kind in kinds.items():
        if kind is not None:
            try:
                catalog.check_value(key, kind.type, changes[key])
            except ValueError as exc:
                raise InvalidConfigError(str(exc)) from None
    per_broker = sorted(k for k, kind in kinds.items() if kind is not None and kind.mode == catalog.PER_BROKER)
    if not name and per_broker:
        raise ConfigChangeError("Cannot update these configs at default cluster level, broker id must be "
                                f"specified: {', '.join(per_broker)}")


def _current_list(ctx, name: str, key: str) -> list:
    for k, value, _ in ctx.control.topic_configs(name):
        if k == key:
            return [v.strip() for v in value.split(",") if v.strip()]
    return []


async def alter_each(ctx, request, response_type, changes_of, replace_all: bool) -> list:
    """Apply every resource's changes (``changes_of(res)`` -> {key: value | None}) and answer each
    resource on its own; shared by AlterConfigs and IncrementalAlterConfigs."""
    dups = duplicate_resources(request.resources)
    results = []
    for res in request.resources:
        error, message = 0, None
        try:
            if (res.resource_type, res.resource_name) in dups:
                raise ConfigChangeError(f"duplicate resource {res.resource_name!r} (type {res.resource_type}) "
                                        "in one request")
            seen = set()
            for c in res.configs:
                if c.name in seen:
                    raise ConfigChangeError(f"duplicate config key {c.name!r}")
                seen.add(c.name)
            if ctx.authorizer is not None:  # ACLs: ALTER_CONFIGS on the topic or the cluster
                from pybroker.security.acl_checks import check_config_resource
                check_config_resource(ctx, ctx.authorizer, 11, res.resource_type, res.resource_name)
            await alter_resource(ctx, res.resource_type, res.resource_name, changes_of(res), replace_all=replace_all,
                           validate_only=request.validate_only)
        except BrokerError as exc:
            error, message = exc.code, str(exc)
        results.append(response_type.AlterConfigsResourceResponse(error_code=error, error_message=message,
                                                                  resource_type=res.resource_type,
                                                                  resource_name=res.resource_name))
    return results


def _is_list(resource_type: int, name: str) -> bool:
    """Whether Kafka types the key LIST (only those take APPEND and SUBTRACT)."""
    if resource_type == TOPIC:
        return catalog.TOPIC.get(name, (None,))[0] == "LIST"
    if resource_type == GROUP:
        return False  # Kafka 4.2's group configs are ints and strings
    kafka = catalog.broker_key(name)
    return kafka is not None and kafka.type == "LIST"


def _changes(ctx, res) -> dict:
    changes = {}
    for c in res.configs:
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise ConfigChangeError(f"null value not supported for config {c.name!r}")
            changes[c.name] = c.value
        elif op == DELETE:
            changes[c.name] = None
        elif op in (APPEND, SUBTRACT):
            if not _is_list(res.resource_type, c.name):
                verb = "append" if op == APPEND else "subtract"
                raise InvalidConfigError(f"Config value {verb} is not allowed for config key: {c.name}")
            if res.resource_type != TOPIC:
                changes[c.name] = c.value
                continue
            items = _current_list(ctx, res.resource_name, c.name)
            given = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            if op == APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            changes[c.name] = ",".join(items)
        else:
            raise ConfigChangeError(f"unknown config operation {op} for config {c.name!r}")
    return changes


async def handle(ctx, request):
    results = await alter_each(ctx, request, Response, lambda res: _changes(ctx, res), replace_all=False)
    return Response(throttle_time_ms=0, responses=results)
