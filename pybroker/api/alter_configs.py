"""AlterConfigs (legacy, non-incremental): replace a topic's overrides with exactly the given set.

Configs not named in a resource go back to their defaults, as in Kafka. Only topic resources
can change: every broker config of this broker is static, so a broker resource is answered as
Kafka answers a config it cannot update dynamically (INVALID_REQUEST, "Cannot update these
configs dynamically"). Other resource types are INVALID_REQUEST too.
"""
from pybroker.api.incremental_alter_configs import ConfigChangeError, alter_resource, duplicate_resources
from pybroker.errors import BrokerError
from pybroker.protocol.messages import RESPONSES

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    dups = duplicate_resources(request.resources)
    results = []
    for res in request.resources:
        error, message = 0, None
        try:
            if (res.resource_type, res.resource_name) in dups:
                raise ConfigChangeError(f"duplicate resource {res.resource_name!r} (type {res.resource_type}) "
                                        "in one request")
            changes = {}
            for c in res.configs:
                if c.name in changes:
                    raise ConfigChangeError(f"duplicate config key {c.name!r}")
                if c.value is None:
                    raise ConfigChangeError(f"null value not supported for config {c.name!r}")
                changes[c.name] = c.value
            alter_resource(ctx, res.resource_type, res.resource_name, changes, replace_all=True,
                           validate_only=request.validate_only)
        except BrokerError as exc:
            error, message = exc.code, str(exc)
        results.append(Response.AlterConfigsResourceResponse(error_code=error, error_message=message,
                                                             resource_type=res.resource_type,
                                                             resource_name=res.resource_name))
    return Response(throttle_time_ms=0, responses=results)
