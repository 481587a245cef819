"""DescribeUserScramCredentials: which SCRAM mechanisms (and iteration counts) each user has.

Never a salt or key. No users named (null or empty): every user with a credential, by name.
Named users: an empty name or a user without credentials is RESOURCE_NOT_FOUND (91), a name given
twice DUPLICATE_RESOURCE (92), each answered once, as Kafka. Needs DESCRIBE on the cluster when
authorization is on.
"""
from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED, DUPLICATE_RESOURCE, RESOURCE_NOT_FOUND
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.security.acl_checks import cluster_denied
from pybroker.security.sasl.scram import MECHANISMS

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0

Response = RESPONSES[API_KEY]
Result = Response.DescribeUserScramCredentialsResult


async def handle(ctx, request):
    if cluster_denied(ctx, A.DESCRIBE):
        return Response(throttle_time_ms=0, error_code=CLUSTER_AUTHORIZATION_FAILED,
                        error_message="Cluster authorization failed.", results=[])
    users = await ctx.services.backend.credentials.current()
    if not request.users:
        results = [_described(name, users[name]) for name in sorted(users)]
        return Response(throttle_time_ms=0, error_code=0, error_message="", results=results)  # Kafka: ""
    names = [u.name for u in request.users]
    results = []
    for name in dict.fromkeys(names):
        if not name:
            results.append(Result(user=name, error_code=RESOURCE_NOT_FOUND, error_message="Username must not be empty",
                                  credential_infos=[]))
        elif names.count(name) > 1:
            results.append(Result(user=name, error_code=DUPLICATE_RESOURCE, credential_infos=[],
                                  error_message=f"Cannot describe SCRAM credentials for the same user twice in a "
                                                f"single request: {name}"))
        elif name not in users:
            results.append(Result(user=name, error_code=RESOURCE_NOT_FOUND, credential_infos=[],
                                  error_message=f"Attempt to describe a user credential that does not exist: {name}"))
        else:
            results.append(_described(name, users[name]))
    return Response(throttle_time_ms=0, error_code=0, error_message="", results=results)


def _described(name: str, creds) -> Result:
    infos = [Response.CredentialInfo(mechanism=MECHANISMS[m].type, iterations=creds[m].iterations)
             for m in MECHANISMS if m in creds]
    return Result(user=name, error_code=0, error_message="", credential_infos=infos)
