"""AlterClientQuotas: set or remove producer_byte_rate / consumer_byte_rate / request_percentage
of user and client-id entities (a null name is the default). Each entry is answered on its own:
a bad entity, key or value is INVALID_REQUEST (as Kafka answers all three); the valid ones are stored
durably together (pybroker/quota/store.py) and applied by every broker.
"""
from pybroker.errors import BrokerError
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED, INVALID_CONFIG, INVALID_REQUEST
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied
from pybroker.quota import entities as ent

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    results, valid, seen = [], [], set()
    if cluster_denied(ctx, 11):  # ALTER_CONFIGS
        return Response(throttle_time_ms=0, entries=[Response.EntryData(
            error_code=CLUSTER_AUTHORIZATION_FAILED, error_message="not authorized to alter client quotas",
            entity=[Response.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
            for entry in request.entries])
    for entry in request.entries:
        error, message = 0, None
        try:
            entity = ent.make_entity((e.entity_type, e.entity_name) for e in entry.entity)
            if entity in seen:
                raise ent.InvalidQuotaRequestError(f"Duplicate quota entity {ent.to_path(entity)}")
            seen.add(entity)
            ops, keys = [], set()
            for op in entry.ops:
                if op.key in keys:
                    raise ent.InvalidQuotaRequestError(f"Duplicate quota key {op.key}")
                keys.add(op.key)
                if op.remove:
                    if op.key not in ent.KEYS:
                        raise ent.InvalidQuotaConfigError(f"Invalid configuration key {op.key}")
                    ops.append((op.key, None, True))
                else:
                    ops.append((op.key, ent.check_value(op.key, op.value), False))
            valid.append((entity, ops))
        except BrokerError as exc:  # Kafka refuses a bad quota key or value as an invalid request
            error, message = INVALID_REQUEST if exc.code == INVALID_CONFIG else exc.code, str(exc)
        results.append(Response.EntryData(
            error_code=error, error_message=message,
            entity=[Response.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity]))
    if valid:
        try:
            await ctx.services.backend.quota_store.alter(valid, request.validate_only)
        except BrokerError as exc:
            for r in results:
                if r.error_code == 0:
                    r.error_code, r.error_message = exc.code, str(exc)
    return Response(throttle_time_ms=0, entries=results)
