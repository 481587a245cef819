"""AlterConfigs (legacy, non-incremental): replace a topic's overrides with exactly the given set.

Configs not named in a resource go back to their defaults, as in Kafka. A broker resource takes
the keys Kafka changes live (pybroker/controller/broker_configs.py); any other broker key is answered
as Kafka answers a config it cannot update dynamically (INVALID_REQUEST, "Cannot update these configs
dynamically"). A group resource (32) has its overrides replaced by the given set, checked as
IncrementalAlterConfigs checks them: Kafka 4.2's controller takes legacy AlterConfigs of groups too (one
authorization and validation path for both APIs). Other resource types are INVALID_REQUEST.
"""
from pybroker.api.incremental_alter_configs import ConfigChangeError, alter_each
from pybroker.protocol.messages import RESPONSES

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

Response = RESPONSES[API_KEY]


def _changes(res) -> dict:
    for c in res.configs:
        if c.value is None:
            raise ConfigChangeError(f"null value not supported for config {c.name!r}")
    return {c.name: c.value for c in res.configs}


async def handle(ctx, request):
    results = await alter_each(ctx, request, Response, _changes, replace_all=True)
    return Response(throttle_time_ms=0, responses=results)
