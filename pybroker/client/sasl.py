"""Client side of SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677).

A mechanism is a small state machine over opaque tokens: ``first()`` is the client's first token,
``step(server_token)`` the answer to each server token (None once the exchange is complete).
It knows nothing of sockets, so the asyncio connection, the blocking tool client and the broker's
own inter-broker links all drive the same code. A server that cannot prove it knows the password
(SCRAM's server signature) fails the exchange with SaslError, as does any malformed message.
"""
import base64
import hashlib
import hmac
import secrets

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_MIN_ITERATIONS = 4096  # what Kafka's brokers use at least; a lower count means a weak or forged salt
SCRAM_MAX_ITERATIONS = 1 << 20  # bounds the client's PBKDF2 work against a hostile server


class SaslError(Exception):
    """The exchange cannot go on: a malformed or unverifiable server message, or a server error."""


class PlainMechanism:
    """PLAIN: one token, authzid empty, then the server's (empty) answer ends it."""
    name = "PLAIN"

    def __init__(self, username: str, password: str):
        self.username = username
        self._password = password
        self.done = False

    def first(self) -> bytes:
        return b"\0" + self.username.encode() + b"\0" + self._password.encode()

    def step(self, server_token: bytes) -> bytes | None:
        self.done = True
        return None

    def __repr__(self):
        return f"<PlainMechanism user={self.username!r}>"


def _scram_name(name: str) -> str:
    # RFC 5802 5.1: ',' and '=' in a username are escaped
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: bytes, what: str) -> dict:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError(f"the server's SCRAM {what} is not UTF-8") from None
    attrs = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslError(f"malformed SCRAM {what} from the server: {text[:200]!r}")
        attrs.setdefault(key, value)
    return attrs


class ScramMechanism:
    """SCRAM-SHA-256 / SCRAM-SHA-512 client (no channel binding: gs2 header ``n,,``)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None):
        if mechanism not in SCRAM_HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.name = mechanism
        self.username = username
        self._password = password
        self._hash = SCRAM_HASHES[mechanism]
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_scram_name(username)},r={self._nonce}"
        self._server_signature = None
        self.done = False

    def first(self) -> bytes:
        return ("n,," + self._client_first_bare).encode()

    def step(self, server_token: bytes) -> bytes | None:
        if self._server_signature is None:
            return self._client_final(server_token)
        return self._verify_server_final(server_token)

    def _client_final(self, server_first: bytes) -> bytes:
        attrs = _attributes(server_first, "server-first message")
        if "e" in attrs:
            raise SaslError(f"the server refused the SCRAM exchange: {attrs['e']}")
        nonce, salt_b64, iterations = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if not nonce or not salt_b64 or not iterations:
            raise SaslError("the server's SCRAM first message lacks the nonce, salt or iteration count")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslError("the server's SCRAM nonce does not extend the client's nonce")
        if not iterations.isdigit() or not SCRAM_MIN_ITERATIONS <= int(iterations) <= SCRAM_MAX_ITERATIONS:
            raise SaslError(f"the server's SCRAM iteration count {iterations!r} is outside "
                            f"{SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
        except ValueError:
            raise SaslError("the server's SCRAM salt is not base64") from None
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt, int(iterations))
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"  # biws = base64("n,,")
        auth_message = f"{self._client_first_bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.digest(salted, b"Server Key", self._hash)
        self._server_signature = hmac.digest(server_key, auth_message, self._hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: bytes) -> None:
        attrs = _attributes(server_final, "server-final message")
        if "e" in attrs:
            raise SaslError(f"the server refused the SCRAM proof: {attrs['e']}")
        try:
            signature = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError:
            raise SaslError("the server's SCRAM signature is not base64") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslError("the server's SCRAM signature is wrong: it does not know this user's credentials")
        self.done = True
        return None

    def __repr__(self):
        return f"<ScramMechanism {self.name} user={self.username!r}>"


def mechanism(name: str, username: str, password: str):
    """A fresh client state machine for ``name`` (one per exchange: nonces are never reused)."""
    if name == "PLAIN":
        return PlainMechanism(username, password)
    if name in SCRAM_HASHES:
        return ScramMechanism(name, username, password)
    raise ValueError(f"unsupported SASL mechanism {name!r} (supported: {', '.join(MECHANISMS)})")
