"""AlterUserScramCredentials: add, replace or delete users' SCRAM credentials (``kafka-configs.sh
--alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]' --entity-type users``).

The client sends the salt and the salted password; the broker keeps salt, iterations, StoredKey
and ServerKey only (pybroker/security/credentials.py). One result per user, and a user's changes
all apply or none, with Kafka's checks in Kafka's order: empty name UNACCEPTABLE_CREDENTIAL (93),
unknown mechanism UNSUPPORTED_SASL_MECHANISM (33), iterations outside 4096..16384
UNACCEPTABLE_CREDENTIAL, the same user and mechanism twice DUPLICATE_RESOURCE (92), deleting a
credential that does not exist RESOURCE_NOT_FOUND (91). Needs ALTER on the cluster when
authorization is on.
"""
from pybroker.protocol.errors import (CLUSTER_AUTHORIZATION_FAILED, DUPLICATE_RESOURCE, RESOURCE_NOT_FOUND,
                                      UNACCEPTABLE_CREDENTIAL, UNKNOWN_SERVER_ERROR, UNSUPPORTED_SASL_MECHANISM)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.security.acl_checks import cluster_denied
from pybroker.security.sasl.scram import BY_TYPE, MAX_ITERATIONS, credential_from_salted

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0

Response = RESPONSES[API_KEY]
Result = Response.AlterUserScramCredentialsResult


def _first_problem(op, upsert: bool) -> tuple[int, str] | None:
    if not op.name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mech = BY_TYPE.get(op.mechanism)
    if mech is None:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if upsert and op.iterations < mech.min_iterations:
        return UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsert and op.iterations > MAX_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if upsert and (not op.salt or not op.salted_password):
        return UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


async def handle(ctx, request):
    ops = [(d, False) for d in request.deletions] + [(u, True) for u in request.upsertions]
    if cluster_denied(ctx, A.ALTER):
        return Response(throttle_time_ms=0, results=[
            Result(user=name, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.")
            for name in dict.fromkeys(op.name for op, _ in ops)])
    errors: dict[str, tuple[int, str]] = {}
    for op, upsert in ops:
        problem = _first_problem(op, upsert)
        if problem is not None:
            errors.setdefault(op.name, problem)
    pairs = [(op.name, op.mechanism) for op, _ in ops if op.name not in errors]
    for name, mechanism in pairs:
        if pairs.count((name, mechanism)) > 1:
            errors.setdefault(name, (DUPLICATE_RESOURCE,
                                     "A user credential cannot be altered twice in the same request"))
    store = ctx.services.backend.credentials
    for op, upsert in ops:
        if not upsert and op.name not in errors and store.get(op.name, BY_TYPE[op.mechanism].name) is None:
            errors[op.name] = (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
    changes: dict[str, dict] = {}
    for op, upsert in ops:
        if op.name in errors:
            continue
        mech = BY_TYPE[op.mechanism]
        changes.setdefault(op.name, {})[mech.name] = credential_from_salted(
            mech, bytes(op.salt), bytes(op.salted_password), op.iterations) if upsert else None
    stored = await store.apply(changes) if changes else {}
    results = [Result(user=name, error_code=code, error_message=message) for name, (code, message) in errors.items()]
    for name, failure in stored.items():
        results.append(Result(user=name, error_code=0 if failure is None else UNKNOWN_SERVER_ERROR,
                              error_message=None if failure is None else "The server experienced an unexpected "
                              "error when processing the request."))
    return Response(throttle_time_ms=0, results=results)
