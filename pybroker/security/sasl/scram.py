"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): stored credentials and the server exchange.

A credential keeps the salt, iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
ServerKey = HMAC(SaltedPassword, "Server Key"): enough to verify a client proof and sign the
answer, never enough to log in. Kafka's text form (ZooKeeper, our credentials file) is
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.

The exchange (gs2 header ``n`` only, no channel binding, extensions ignored, as Kafka):
client-first ``n,,n=<user>,r=<cnonce>`` -> server-first ``r=<cnonce><snonce>,s=<salt>,i=<n>``
-> client-final ``c=biws,r=<nonce>,p=<proof>`` -> server-final ``v=<server signature>``.
"""
import base64
import binascii
import hashlib
import hmac
import re
import secrets
from typing import NamedTuple

from pybroker.security.sasl.plain import AuthenticationFailed, InvalidCredentials


class Mechanism(NamedTuple):
    name: str
    type: int          # the int8 of Describe/AlterUserScramCredentials
    hash: str          # hashlib name
    min_iterations: int


MECHANISMS = {m.name: m for m in (Mechanism("SCRAM-SHA-256", 1, "sha256", 4096),
                                  Mechanism("SCRAM-SHA-512", 2, "sha512", 4096))}
BY_TYPE = {m.type: m for m in MECHANISMS.values()}
MAX_ITERATIONS = 16384  # Kafka's ceiling for AlterUserScramCredentials


class ScramCredential(NamedTuple):
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations})"

    def to_text(self) -> str:
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        props = {}
        for item in text.split(","):
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValueError("malformed SCRAM credential")
            props[key] = value
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError("malformed SCRAM credential")
        try:
            return cls(base64.b64decode(props["salt"], validate=True),
                       base64.b64decode(props["stored_key"], validate=True),
                       base64.b64decode(props["server_key"], validate=True), int(props["iterations"]))
        except (binascii.Error, ValueError):
            raise ValueError("malformed SCRAM credential") from None


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def credential_from_salted(mechanism: Mechanism, salt: bytes, salted_password: bytes,
                           iterations: int) -> ScramCredential:
    client_key = _hmac(mechanism.hash, salted_password, b"Client Key")
    stored_key = hashlib.new(mechanism.hash, client_key).digest()
    server_key = _hmac(mechanism.hash, salted_password, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


def salted_password(mechanism: Mechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(mechanism.hash, password.encode(), salt, iterations)


def credential_from_password(mechanism: Mechanism, password: str, iterations: int = 4096,
                             salt: bytes | None = None) -> ScramCredential:
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                  iterations)


# RFC 5802 grammar, as Kafka accepts it (printable ASCII, no ',' in values; saslname escapes =2C =3D)
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_B64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)?"
CLIENT_FIRST = re.compile(rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)(?:m={_VALUE},)?"
                          rf"(?P<bare>n=(?P<name>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS})")
CLIENT_FINAL = re.compile(rf"(?P<without_proof>c=(?P<channel>{_B64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),"
                          rf"p=(?P<proof>{_B64})")


def username(saslname: str) -> str:
    """RFC 5802 saslname -> user name (=2C is ',' and =3D is '=')."""
    name = saslname.replace("=2C", ",")
    if "=" in name.replace("=3D", ""):
        raise ValueError("invalid user name")
    return name.replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange; ``credentials(user, mechanism_name)`` -> ScramCredential or None."""
    def __init__(self, mechanism: Mechanism, credentials):
        self.mechanism = mechanism
        self._credentials = credentials
        self.complete = False
        self.username: str | None = None  # the user the client claims, for the audit line
        self.authorization_id: str | None = None
        self._credential = None
        self._client_first_bare = self._server_first = None
        self._gs2 = ""

    def evaluate(self, token: bytes) -> bytes:
        if self._credential is None:
            return self._first(token)
        return self._final(token)

    def _first(self, token: bytes) -> bytes:
        if self._client_first_bare is not None:
            raise InvalidCredentials("unexpected SCRAM message")
        m = CLIENT_FIRST.fullmatch(_ascii(token))
        if m is None:
            raise InvalidCredentials("invalid SCRAM client first message")
        try:
            self.username = username(m.group("name"))
        except ValueError:
            raise InvalidCredentials("invalid SCRAM user name") from None
        authzid = m.group("authzid")
        credential = self._credentials(self.username, self.mechanism.name)
        if credential is None:
            raise InvalidCredentials("unknown user")
        if authzid and authzid.replace("=2C", ",").replace("=3D", "=") != self.username:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        if credential.iterations < self.mechanism.min_iterations:
            raise InvalidCredentials("too few iterations")
        nonce = m.group("nonce") + secrets.token_urlsafe(24)
        self._gs2 = m.group("gs2")
        self._credential = credential
        self._client_first_bare = m.group("bare")
        self._server_first = f"r={nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        self._nonce = nonce
        return self._server_first.encode()

    def _final(self, token: bytes) -> bytes:
        if self.complete:
            raise InvalidCredentials("unexpected SCRAM message")
        m = CLIENT_FINAL.fullmatch(_ascii(token))
        if m is None:
            raise InvalidCredentials("invalid SCRAM client final message")
        if not m.group("nonce").endswith(self._nonce):  # Kafka's test: older librdkafka repeats the client nonce
            raise InvalidCredentials("invalid client nonce")
        if base64.b64decode(m.group("channel")) != self._gs2.encode():
            raise InvalidCredentials("invalid channel binding")
        cred, h = self._credential, self.mechanism.hash
        auth_message = f"{self._client_first_bare},{self._server_first},{m.group('without_proof')}".encode()
        client_signature = _hmac(h, cred.stored_key, auth_message)
        proof = base64.b64decode(m.group("proof"))
        if len(proof) != len(client_signature):
            raise InvalidCredentials("invalid client proof")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(h, client_key).digest(), cred.stored_key):
            raise InvalidCredentials("invalid client credentials")
        server_signature = _hmac(h, cred.server_key, auth_message)
        self._credential = cred._replace(stored_key=b"", server_key=b"")  # keys no longer needed
        self.complete = True
        self.authorization_id = self.username
        return b"v=" + base64.b64encode(server_signature)


def _ascii(token: bytes) -> str:
    try:
        return bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidCredentials("SCRAM message is not UTF-8") from None
