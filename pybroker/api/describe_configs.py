"""DescribeConfigs: a topic's configs (its overrides and the broker defaults) or the broker's."""
from pybroker.errors import BrokerError
from pybroker.protocol.messages import RESPONSES

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 3
TOPIC, BROKER = 2, 4
INVALID_REQUEST = 42
# config sources
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    results = []
    for res in request.resources:
        error, message, entries = 0, None, []
        try:
            if res.resource_type == TOPIC:
                rows = [(k, v, DYNAMIC_TOPIC_CONFIG if overridden else DEFAULT_CONFIG, not overridden)
                        for k, v, overridden in ctx.broker.controller.topic_configs(res.resource_name)]
            elif res.resource_type == BROKER and res.resource_name in ("", str(ctx.broker.node_id)):
                rows = [(k, v, DEFAULT_CONFIG if is_default else STATIC_BROKER_CONFIG, True)
                        for k, (v, is_default) in sorted(ctx.broker.config.describe().items())]
                if ctx.broker.dynamic_configs is not None:  # the keys a cluster broker may change live
                    rows += [(k, v, source or DEFAULT_CONFIG, False)
                             for k, (v, source) in sorted(ctx.broker.dynamic_configs.describe().items())]
            else:
                raise BrokerError(f"cannot describe resource type {res.resource_type} {res.resource_name!r}")
            wanted = set(res.configuration_keys) if res.configuration_keys is not None else None
            entries = [Response.DescribeConfigsResourceResult(
                name=k, value=v, read_only=read_only, config_source=source,
                is_sensitive=False, synonyms=[]) for k, v, source, read_only in rows if wanted is None or k in wanted]
        except BrokerError as exc:
            error, message = exc.code if exc.code != -1 else INVALID_REQUEST, str(exc)
        results.append(Response.DescribeConfigsResult(error_code=error, error_message=message,
                                                      resource_type=res.resource_type,
                                                      resource_name=res.resource_name, configs=entries))
    return Response(throttle_time_ms=0, results=results)
