"""SASL/PLAIN (RFC 4616) against the ``user_<name>="<password>"`` entries of the listener's JAAS config.

Two failure kinds, as Kafka: ``AuthenticationFailed`` carries a message safe to show the client;
``InvalidCredentials`` is answered with the generic "invalid credentials" text (it must not tell
whether the user exists).
"""
import hmac


class AuthenticationFailed(Exception):
    """The message goes to the client as is."""


class InvalidCredentials(Exception):
    """The client gets the generic message; ours is for the broker's log only."""


class PlainServer:
    def __init__(self, users: dict):
        self._users = users  # name -> password (from the JAAS config)
        self.complete = False
        self.username: str | None = None
        self.authorization_id: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise InvalidCredentials("unexpected PLAIN message")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(parts), 4)}")
        authzid, user, password = parts
        self.username = user
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(user)
        # compare even for an unknown user, so the time taken does not tell whether it exists
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0" + password).encode())
        if not ok or expected is None:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        self.complete = True
        self.authorization_id = user
        return b""
