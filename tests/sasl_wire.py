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


# ---- the pre-authentication gate, step by step -----------------------------------------------

def error_codes(obj, version: int) -> list:
    """Every error code a response carries at ``version``, nested ones included, in order."""
    codes = []
    for name, kind, (low, high), _nullable, _tag in obj.FIELDS:
        value = getattr(obj, name)
        if not low <= version <= high or value is None:
            continue
        if name == "topic_config_error_code":  # CreateTopics v5+: about the configs echoed, not the request
            continue
        if name == "error_code" or name.endswith("_error_code"):  # AddPartitionsToTxn: partition_error_code
            codes.append(value)
        elif kind.startswith("[]") and kind[2:3].isupper():
            for item in value:
                codes += error_codes(item, version)
        elif kind[:1].isupper():
            codes += error_codes(value, version)
    return codes


def raw_request(api_key: int, version: int, correlation: int = 99, body: bytes = b"", flexible=False) -> bytes:
    """A request that the codecs would refuse to encode (unknown key or version); header v1, or v2
    (an empty tagged-field section after the client id) when ``flexible``."""
    client_id = b"gate-test"
    return (api_key.to_bytes(2, "big", signed=True) + version.to_bytes(2, "big", signed=True)
            + correlation.to_bytes(4, "big") + len(client_id).to_bytes(2, "big") + client_id
            + (b"\0" if flexible else b"") + body)


def observe(client: WireClient, step) -> tuple:
    """Send one step, (request, version) or ("raw", frame, api key, answer version), and say what came
    back: ("answer", its error codes) or ("closed",)."""
    from pybroker.protocol import decode_response
    from tests.kafka_wire import ConnectionClosed
    if step[0] == "raw":
        _, frame, key, version = step
    else:
        request, version = step
        key = request.API_KEY
        frame = client.encode(key, version, request)[1]
    try:
        client.send_frame(frame)
        answer = client.recv_frame()
    except (ConnectionClosed, OSError):
        return ("closed",)
    return ("answer", error_codes(decode_response(answer, key, version)[1], version))


def run_steps(port: int, steps, connect=WireClient) -> list:
    """Observations of ``steps`` on one fresh connection, up to the first ("closed",). After a last
    answer with ILLEGAL_SASL_STATE comes ("closed",) or ("open",): whether ApiVersions still works."""
    seen = []
    with connect(port) as client:
        for step in steps:
            seen.append(observe(client, step))
            if seen[-1] == ("closed",):
                return seen
        if seen and seen[-1][0] == "answer" and 34 in seen[-1][1]:
            seen.append(("open",) if observe(client, (REQUESTS[18](), 0))[0] == "answer" else ("closed",))
    return seen


def gate_cases(scram_user: str = "carol") -> dict:
    """name -> steps (see ``observe``) for each state of the SASL exchange: PLAIN as alice, SCRAM-SHA-512
    as ``scram_user`` (who must have a credential)."""
    from pybroker.records import build_batch
    versions = (REQUESTS[18](client_software_name="gate-test", client_software_version="1"), 3)
    handshake = lambda v: (REQUESTS[17](mechanism="PLAIN"), v)  # noqa: E731
    metadata = (REQUESTS[3](topics=[REQUESTS[3].MetadataRequestTopic(name="gate-topic")],
                            allow_auto_topic_creation=False), 8)
    heartbeat = (REQUESTS[12](group_id="g", generation_id=1, member_id="m"), 3)
    P = REQUESTS[0]
    batch = bytes(build_batch([b"gate"]))
    produce = lambda acks: (P(acks=acks, timeout_ms=1000, topic_data=[P.TopicProduceData(  # noqa: E731
        name="gate-topic", partition_data=[P.PartitionProduceData(index=0, records=batch)])]), 8)
    authenticate = (REQUESTS[36](auth_bytes=b"\0alice\0alice-secret"), 2)
    scram_first = (REQUESTS[36](auth_bytes=f"n,,n={scram_user},r=abcdefgh".encode()), 2)
    return {
        "metadata first": [metadata],
        "authenticate first": [authenticate],
        "versions, metadata": [versions, metadata],
        "versions twice": [versions, versions],
        "versions, authenticate": [versions, authenticate],
        "v1 handshake, metadata": [versions, handshake(1), metadata],
        "v1 handshake, heartbeat": [handshake(1), heartbeat],
        "v1 handshake, versions": [handshake(1), versions],
        "v1 handshake, unsupported versions": [
            handshake(1), ("raw", raw_request(18, 999, body=b"\1\1\0", flexible=True), 18, 0)],
        "v1 handshake, handshake": [versions, handshake(1), handshake(1)],
        "v1 handshake, produce acks=1": [handshake(1), produce(1)],
        "v1 handshake, produce acks=0": [handshake(1), produce(0)],
        "v1 handshake, unknown api": [handshake(1), ("raw", raw_request(999, 0), None, None)],
        "mid-exchange, metadata": [(REQUESTS[17](mechanism="SCRAM-SHA-512"), 1), scram_first, metadata],
        "v0 handshake, metadata": [handshake(0), metadata],
        "v0 handshake, handshake": [handshake(0), handshake(1)],
        "authenticated, handshake": [handshake(1), authenticate, handshake(1)],
    }


def sample_request(api_key: int, version: int):
    """A request with one item in every list (nested ones too) and plausible values, so that an
    answer that echoes the request's items has something to echo."""
    import uuid

    from pybroker.records import build_batch
    cls = REQUESTS[api_key]
    scalars = {"int8": 3, "int16": 1, "int32": 1, "int64": 1, "uint16": 1, "float64": 1.0, "bool": False,
               "string": "gate", "bytes": b"x", "uuid": uuid.UUID(int=1),
               "records": bytes(build_batch([b"gate"]))}

    def fill(struct):
        obj = struct()
        for name, kind, _versions, _nullable, _tag in struct.FIELDS:
            inner = kind[2:] if kind.startswith("[]") else kind
            value = scalars[inner] if inner in scalars else fill(getattr(cls, inner))
            setattr(obj, name, [value] if kind.startswith("[]") else value)
        return obj
    return fill(cls)


def response_fields(obj, version: int) -> dict:
    """A decoded response as nested dicts of the fields ``version`` carries; messages about the SASL
    state read "<message>" (their wording is each broker's own)."""
    fields = {}
    for name, _kind, (low, high), _nullable, _tag in obj.FIELDS:
        if not low <= version <= high:
            continue
        value = getattr(obj, name)
        if isinstance(value, list):
            value = [response_fields(v, version) if hasattr(v, "FIELDS") else v for v in value]
        elif hasattr(value, "FIELDS"):
            value = response_fields(value, version)
        elif isinstance(value, memoryview):
            value = bytes(value)
        elif name == "error_message" and value and "SASL authentication" in value:
            value = "<message>"
        fields[name] = value
    return fields


def refusals(port: int, cases, connect=WireClient) -> dict:
    """(api key, version) -> the decoded answer (None: closed without one) to a sample request sent
    right after SaslHandshake v1; all connections at once, so that the brokers' failed-authentication
    delays overlap. Also asserts that each connection is closed after its answer."""
    from pybroker.protocol import decode_response
    from tests.kafka_wire import ConnectionClosed
    clients = {}
    try:
        for key, version in cases:
            client = clients[key, version] = connect(port)
            assert client.request(REQUESTS[17](mechanism="PLAIN"), 1).error_code == 0
            client.send_only(sample_request(key, version), version)
        answers = {}
        for (key, version), client in clients.items():
            try:
                frame = client.recv_frame()
            except (ConnectionClosed, OSError):
                answers[key, version] = None
                continue
            answers[key, version] = decode_response(frame, key, version)[1]
            assert client.is_closed_by_peer(), (key, version)
        return answers
    finally:
        for client in clients.values():
            client.close()
