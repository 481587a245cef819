"""DescribeConfigs: a topic's configs (its overrides and the broker defaults), the broker's, or a group's.

Every key Kafka 3.8 describes is listed (for a topic, pybroker's own iceberg.* keys too; for the
broker, Kafka 4.2's share-group keys too), with Kafka's types, password values hidden, and (v3+, when
asked) documentation saying what the key does here, or that it is accepted and ignored and why
(pybroker/config_catalog.py). v0 answers is_default in place of the config source.

A GROUP resource (32, Kafka 4.x) is described for any group id, existing or not, as Kafka 4.2 describes
it: every group config with its effective value, source GROUP_CONFIG (8) where the group overrides it,
else STATIC_BROKER_CONFIG (4) where the broker's group.* key is set, else DEFAULT_CONFIG (5); the
synonyms are the override, then the broker key (pybroker/coordinator/group_configs.py).
"""
from pybroker import config_catalog as catalog
from pybroker.api.kafka_wording import default_message
from pybroker.controller.metadata_store import validate_topic_name
from pybroker.coordinator.group_configs import GROUP_KEYS, describe_group
from pybroker.errors import BrokerError, UnknownTopicError
from pybroker.protocol.errors import INVALID_REQUEST, UNKNOWN_SERVER_ERROR
from pybroker.protocol.messages import RESPONSES

API_KEY = 32
MIN_VERSION = 0
MAX_VERSION = 4
TOPIC, BROKER, GROUP = 2, 4, 32
# config sources
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    results = []
    for res in request.resources:
        error, message, entries = 0, "", []  # as Kafka: an empty message, not null
        synonyms = {}
        try:
            if ctx.authorizer is not None:  # ACLs: DESCRIBE_CONFIGS on the topic or the cluster
                from pybroker.security.acl_checks import check_config_resource
                check_config_resource(ctx, ctx.authorizer, 10, res.resource_type, res.resource_name)
            if res.resource_type == TOPIC:
                validate_topic_name(res.resource_name)
                try:  # every topic config may be altered: none is read-only
                    rows = [(k, v, DYNAMIC_TOPIC_CONFIG if overridden else DEFAULT_CONFIG, False)
                            for k, v, overridden in ctx.control.topic_configs(res.resource_name)]
                except UnknownTopicError:
                    raise UnknownTopicError("") from None  # Kafka tells the code alone
            elif res.resource_type == BROKER:
                _check_broker_name(res.resource_name, ctx.node_id)
                live = ctx.services.backend.dynamic_configs.describe()
                rows = [(k, v, DEFAULT_CONFIG if is_default else STATIC_BROKER_CONFIG, True)
                        for k, (v, is_default) in sorted(ctx.config.describe_all().items()) if k not in live]
                if live:  # the keys a broker may change live
                    rows += [(k, v, source or DEFAULT_CONFIG, False) for k, (v, source) in sorted(live.items())]
                    rows, synonyms = _dynamic_log_rows(ctx.services.backend.dynamic_configs, rows)
            elif res.resource_type == GROUP:
                if not res.resource_name:
                    raise BrokerError("Group name must not be empty")
                rows = []
                for k, v, source, group_synonyms in describe_group(ctx.control.group_configs(res.resource_name),
                                                                   ctx.config):
                    rows.append((k, v, source, False))
                    synonyms[k] = [Response.DescribeConfigsSynonym(name=n, value=sv, source=ss)
                                   for n, sv, ss in group_synonyms]
            else:  # as Kafka: the request's code with its stock message
                raise BrokerError(default_message(INVALID_REQUEST))
            wanted = set(res.configuration_keys) if res.configuration_keys is not None else None
            with_synonyms = getattr(request, "include_synonyms", False)
            with_docs = getattr(request, "include_documentation", False)
            describe = {TOPIC: _topic_key, GROUP: _group_key}.get(res.resource_type, _broker_key)
            entries = []
            for k, v, source, read_only in rows:
                if wanted is not None and k not in wanted:
                    continue
                kind, doc = describe(k)
                sensitive = catalog.is_sensitive(kind)
                entries.append(Response.DescribeConfigsResourceResult(
                    name=k, value=None if sensitive else v, read_only=read_only, config_source=source,
                    is_default=source == DEFAULT_CONFIG, is_sensitive=sensitive,
                    synonyms=synonyms.get(k, []) if with_synonyms else [],
                    config_type=catalog.CONFIG_TYPES.get(kind, 0), documentation=doc if with_docs else None))
        except BrokerError as exc:
            error, message = exc.code if exc.code != UNKNOWN_SERVER_ERROR else INVALID_REQUEST, str(exc)
        results.append(Response.DescribeConfigsResult(error_code=error, error_message=message,
                                                      resource_type=res.resource_type,
                                                      resource_name=res.resource_name, configs=entries))
    return Response(throttle_time_ms=0, results=results)


def _check_broker_name(name: str, node_id: int) -> None:
    """A broker resource is this broker's id or "" (the cluster default), refused in Kafka's words."""
    if name == "":
        return
    try:
        broker = int(name)
    except ValueError:
        raise BrokerError(f"Broker id must be an integer, but it is: {name}") from None
    if broker != node_id:
        raise BrokerError(f"Unexpected broker id, expected {node_id} or empty string, but received {name}")


def _topic_key(name: str) -> tuple[str | None, str | None]:
    """(Kafka type, documentation) of a topic key."""
    kind, doc = catalog.TOPIC.get(name, (None, None))
    return kind, doc


def _group_key(name: str) -> tuple[str | None, str | None]:
    """(Kafka type, documentation) of a group key."""
    spec = GROUP_KEYS.get(name)
    return (spec.type, spec.doc) if spec else (None, None)


def _broker_key(name: str) -> tuple[str | None, str | None]:
    """(Kafka type, documentation) of a broker key: a topic default, applied here, or accepted and ignored."""
    from pybroker.config import SUPPORTED
    from pybroker.log.config import BROKER_NAMES, TOPIC_NAMES
    kafka = catalog.broker_key(name)
    field = next((f for f, key in BROKER_NAMES.items() if key == name), None)
    if field is None and name in ("log.retention.minutes", "log.retention.hours"):
        field = "retention_ms"
    elif field is None and name in ("log.roll.hours", "log.roll.jitter.hours"):
        field = "segment_ms" if name == "log.roll.hours" else "segment_jitter_ms"
    if field is not None:
        return (kafka.type if kafka else None), catalog.broker_documentation(name, True, TOPIC_NAMES[field])
    if kafka is None:
        return None, ("A pybroker setting (not a Kafka key)." if name in SUPPORTED else None)
    return kafka.type, catalog.broker_documentation(name, name in SUPPORTED)


# Kafka's synonyms in a coarser unit, used while the key itself is unset
_COARSER = {"log.retention.ms": ("log.retention.minutes", "log.retention.hours"), "log.roll.ms": ("log.roll.hours",),
            "log.roll.jitter.ms": ("log.roll.jitter.hours",)}


def _dynamic_log_rows(dynamic_configs, rows) -> tuple[list, dict]:
    """Broker rows with the dynamic log defaults in place of the static ones (sources 2/3, not
    read-only) and {key: synonyms}: the dynamic values most specific first, then the static one."""
    from pybroker.controller.broker_configs import LOG_KEYS
    from pybroker.log.config import BROKER_NAMES
    dynamic = dynamic_configs.describe_log()
    field_of = {key: name for name, key in BROKER_NAMES.items()}
    out, synonyms = [], {}
    given = {k: (v, source) for k, v, source, _ in rows}
    for k, v, source, read_only in rows:
        if k in LOG_KEYS:
            read_only = False
            derived = k in field_of and v is not None  # unset keys without a Kafka default stay null
            static_value = str(getattr(dynamic_configs.static_log, field_of[k])) if derived else v
            static = [Response.DescribeConfigsSynonym(name=k, value=static_value, source=source)] \
                if static_value is not None else []
            static += [Response.DescribeConfigsSynonym(name=other, value=given[other][0], source=given[other][1])
                       for other in _COARSER.get(k, ()) if given.get(other, (None,))[0] is not None]
            if k in dynamic:
                (v, source), *_ = dynamic[k]
                synonyms[k] = [Response.DescribeConfigsSynonym(name=k, value=dv, source=ds)
                               for dv, ds in dynamic[k]] + static
            else:
                v = static_value
                synonyms[k] = static
        out.append((k, v, source, read_only))
    return out, synonyms
