"""A SASL client on the raw wire for tests and benchmarks (written from the RFCs, independent of the
broker's code): PLAIN and SCRAM logins that check the server signature, and the SCRAM admin requests."""
import base64
import hashlib
import hmac
import secrets

from pybroker.protocol import REQUESTS
from tests.kafka_wire import WireClient

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_TYPES = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}


def scram_salted(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def login(client: WireClient, mechanism: str, user: str, password: str, auth_version: int = 2):
    """SaslHandshake v1 + SaslAuthenticate; returns the last SaslAuthenticate response (or the
    handshake response when it failed). SCRAM checks the server signature."""
    hs = client.request(REQUESTS[17](mechanism=mechanism), 1)
    if hs.error_code:
        return hs
    auth = lambda token: client.request(REQUESTS[36](auth_bytes=token), auth_version)  # noqa: E731
    if mechanism == "PLAIN":
        return auth(f"\0{user}\0{password}".encode())
    hash_name = SCRAM_TYPES[mechanism][1]
    cnonce = secrets.token_urlsafe(18)
    first_bare = f"n={user},r={cnonce}"
    resp = auth(f"n,,{first_bare}".encode())
    if resp.error_code:
        return resp
    server_first = bytes(resp.auth_bytes).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    assert fields["r"].startswith(cnonce)
    salted = scram_salted(hash_name, password, base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, hash_name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    resp = auth(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    if resp.error_code == 0:
        server_key = hmac.new(salted, b"Server Key", hash_name).digest()
        expected = base64.b64encode(hmac.new(server_key, auth_message, hash_name).digest()).decode()
        assert bytes(resp.auth_bytes).decode() == f"v={expected}"
    return resp


def admin_client(port: int) -> WireClient:
    client = WireClient(port)
    assert login(client, "PLAIN", "admin", "admin-secret").error_code == 0
    return client


def upsertion(user: str, mechanism: str, password: str, iterations: int = 4096):
    kind, hash_name = SCRAM_TYPES[mechanism]
    salt = secrets.token_bytes(16)
    return REQUESTS[51].ScramCredentialUpsertion(name=user, mechanism=kind, iterations=iterations, salt=salt,
                                                 salted_password=scram_salted(hash_name, password, salt, iterations))


def alter(client: WireClient, upsertions=(), deletions=()) -> dict:
    dels = [REQUESTS[51].ScramCredentialDeletion(name=u, mechanism=SCRAM_TYPES[m][0] if isinstance(m, str) else m)
            for u, m in deletions]
    resp = client.request(REQUESTS[51](deletions=dels, upsertions=list(upsertions)), 0)
    return {r.user: (r.error_code, r.error_message) for r in resp.results}


def describe(client: WireClient, users=None):
    req = REQUESTS[50](users=None if users is None else [REQUESTS[50].UserName(name=u) for u in users])
    return client.request(req, 0)


def can_login(port: int, mechanism: str, user: str, password: str) -> int:
    with WireClient(port) as client:
        return login(client, mechanism, user, password).error_code
