"""DescribeClientQuotas: the stored quotas of the user / client-id entities matching a filter
(exact name, default, or any name per entity type; ``strict`` excludes entities with other types).
An entity type Kafka does not know is UNSUPPORTED_VERSION, as Kafka answers it."""
from pybroker.errors import BrokerError
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1

Response = RESPONSES[API_KEY]
KAFKA_ENTITY_TYPES = ("user", "client-id", "ip")


def handle(ctx, request):
    if cluster_denied(ctx, 10):  # DESCRIBE_CONFIGS
        return Response(throttle_time_ms=0, error_code=CLUSTER_AUTHORIZATION_FAILED,
                        error_message="not authorized to describe client quotas", entries=None)
    unknown = [c.entity_type for c in request.components if c.entity_type not in KAFKA_ENTITY_TYPES]
    if unknown:
        return Response(throttle_time_ms=0, error_code=UNSUPPORTED_VERSION,
                        error_message=f"Unsupported entity type {unknown[0]}", entries=None)
    try:
        found = ctx.quotas.describe([(c.entity_type, c.match_type, c.match) for c in request.components],
                                           request.strict)
    except BrokerError as exc:
        return Response(throttle_time_ms=0, error_code=exc.code, error_message=str(exc), entries=None)
    entries = [Response.EntryData(
        entity=[Response.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        values=[Response.ValueData(key=k, value=float(v)) for k, v in sorted(values.items())])
        for entity, values in found]
    return Response(throttle_time_ms=0, error_code=0, error_message="", entries=entries)  # Kafka: "" on success
