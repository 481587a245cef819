"""UpdateFeatures (KIP-584): change finalized feature levels, which on this broker are fixed while it
runs (pybroker/api/features.py). Each update is judged by Kafka 3.8's rules first (an empty name, a
level below 1 that is not a deletion, deleting a feature not finalized, the level already in force,
a downgrade not marked as one: each answered INVALID_REQUEST with Kafka's message); any other change
answers INVALID_REQUEST too, saying the levels are fixed. The caller needs ALTER on the cluster (else
CLUSTER_AUTHORIZATION_FAILED for the whole request)."""
from pybroker.api import api_versions, features
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.security.acl_checks import cluster_denied

API_KEY = 57
MIN_VERSION = 0
MAX_VERSION = 1
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3  # v1 upgrade_type

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    if cluster_denied(ctx, A.ALTER):
        return Response(throttle_time_ms=0, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=None, results=[])
    finalized = features.finalized(api_versions.TABLE)
    results = []
    for u in request.feature_updates:
        kind = u.upgrade_type if ctx.version >= 1 else (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE)
        message = _refusal(u.feature, u.max_version_level, kind, finalized.get(u.feature))
        results.append(Response.UpdatableFeatureResult(feature=u.feature, error_code=INVALID_REQUEST,
                                                       error_message=message))
    return Response(throttle_time_ms=0, error_code=0, error_message=None, results=results)


def _refusal(name: str, level: int, kind: int, existing: int | None) -> str:
    if not name:
        return "Feature name can not be empty."
    if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "Received unknown upgrade type."
    if level < 1 and kind != UPGRADE and existing is None:
        return "Can not delete non-existing finalized feature."
    if level < 1 and kind == UPGRADE:
        return (f"Can not provide versionLevel: {level} less than 1 without setting the SAFE downgradeType "
                "in the request.")
    if existing is not None and level == existing:
        verb = "downgrade" if kind == SAFE_DOWNGRADE else "upgrade"
        return f"Can not {verb} a finalized feature from existing versionLevel:{existing} to the same value."
    if existing is not None and level < existing and kind == UPGRADE:
        return (f"Can not downgrade finalized feature from existing versionLevel:{existing} to provided "
                f"versionLevel:{level} without setting the downgradeType to SAFE in the request.")
    return f"The finalized level of feature {name!r} is fixed on this broker."
