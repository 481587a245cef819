"""DescribeConfigs: a topic's configs (its overrides and the broker defaults) or the broker's.

Every key Kafka 3.8 describes is listed, with Kafka's types, password values hidden, and (v3+, when
asked) documentation saying what the key does here, or that it is accepted and ignored and why
(pybroker/config_catalog.py). v0 answers is_default in place of the config source.
"""
from pybroker import config_catalog as catalog
from pybroker.errors import BrokerError
from pybroker.protocol.errors import INVALID_REQUEST, UNKNOWN_SERVER_ERROR
from pybroker.protocol.messages import RESPONSES

API_KEY = 32
MIN_VERSION = 0
MAX_VERSION = 4
TOPIC, BROKER = 2, 4
# config sources
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    results = []
    for res in request.resources:
        error, message, entries = 0, None, []
        synonyms = {}
        try:
            if ctx.authorizer is not None:  # ACLs: DESCRIBE_CONFIGS on the topic or the cluster
                from pybroker.security.acl_checks import check_config_resource
                check_config_resource(ctx, ctx.authorizer, 10, res.resource_type, res.resource_name)
            if res.resource_type == TOPIC:
                rows = [(k, v, DYNAMIC_TOPIC_CONFIG if overridden else DEFAULT_CONFIG, not overridden)
                        for k, v, overridden in ctx.control.topic_configs(res.resource_name)]
            elif res.resource_type == BROKER and res.resource_name in ("", str(ctx.node_id)):
                live = ctx.services.backend.dynamic_configs.describe()
                rows = [(k, v, DEFAULT_CONFIG if is_default else STATIC_BROKER_CONFIG, True)
                        for k, (v, is_default) in sorted(ctx.config.describe_all().items()) if k not in live]
                if live:  # the keys a broker may change live
                    rows += [(k, v, source or DEFAULT_CONFIG, False) for k, (v, source) in sorted(live.items())]
                    rows, synonyms = _dynamic_log_rows(ctx.services.backend.dynamic_configs, rows)
            else:
                raise BrokerError(f"cannot describe resource type {res.resource_type} {res.resource_name!r}")
            wanted = set(res.configuration_keys) if res.configuration_keys is not None else None
            with_synonyms = getattr(request, "include_synonyms", False)
            with_docs = getattr(request, "include_documentation", False)
            describe = _topic_key if res.resource_type == TOPIC else _broker_key
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


def _topic_key(name: str) -> tuple[str | None, str | None]:
    """(Kafka type, documentation) of a topic key."""
    kind, doc = catalog.TOPIC.get(name, (None, None))
    return kind, doc


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


def _dynamic_log_rows(dynamic_configs, rows) -> tuple[list, dict]:
    """Broker rows with the dynamic log defaults in place of the static ones (sources 2/3, not
    read-only) and {key: synonyms}: the dynamic values most specific first, then the static one."""
    from pybroker.controller.broker_configs import LOG_KEYS
    from pybroker.log.config import BROKER_NAMES
    dynamic = dynamic_configs.describe_log()
    field_of = {key: name for name, key in BROKER_NAMES.items()}
    out, synonyms = [], {}
    for k, v, source, read_only in rows:
        if k in LOG_KEYS:
            read_only = False
            static_value = str(getattr(dynamic_configs.static_log, field_of[k])) if k in field_of else v
            static = [Response.DescribeConfigsSynonym(name=k, value=static_value, source=source)] \
                if static_value is not None else []
            if k in dynamic:
                (v, source), *_ = dynamic[k]
                synonyms[k] = [Response.DescribeConfigsSynonym(name=k, value=dv, source=ds)
                               for dv, ds in dynamic[k]] + static
            else:
                v = static_value
                synonyms[k] = static
        out.append((k, v, source, read_only))
    return out, synonyms
