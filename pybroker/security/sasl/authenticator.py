"""The SASL state of a connection's session, from SaslHandshake to an authenticated principal.

States (``session.sasl_state``): None (nothing yet: ApiVersions and SaslHandshake allowed),
``VERSIONS_ANSWERED`` (kept by the gate in pybroker/api/dispatcher.py: SaslHandshake must follow), an
``Exchange`` (after SaslHandshake: SaslAuthenticate only, or raw tokens after a v0 handshake),
``EXPIRED`` (``connections.max.reauth.ms`` passed without re-authentication: only SaslHandshake),
``FAILED`` (the failure answer is on its way, then the connection closes). An authenticated
session has ``authenticated`` True and no state; SaslHandshake on it starts a re-authentication
(KIP-368) with the same mechanism, which must end with the same principal; as in Kafka only when the
session has a lifetime (``connections.max.reauth.ms``) and its last login is at least a second old,
otherwise the handshake is answered ILLEGAL_SASL_STATE and the session goes on.

A failure is answered after ``connection.failed.authentication.delay.ms`` (the connection stops
being read meanwhile) and then closed, as Kafka does; each one is logged on one logfmt line
(listener, client host, mechanism, user name attempted; never a password or token).
"""
import asyncio
import logging

from pybroker.logs import event
from pybroker.protocol.errors import ILLEGAL_SASL_STATE, UNSUPPORTED_SASL_MECHANISM
from pybroker.security.principal import KafkaPrincipal
from pybroker.security.sasl.plain import AuthenticationFailed, InvalidCredentials, PlainServer
from pybroker.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS, ScramServer

log = logging.getLogger(__name__)
audit = logging.getLogger("pybroker.security.audit")

EXPIRED = "expired"
MIN_REAUTH_INTERVAL_S = 1.0  # Kafka refuses re-authenticating more often
FAILED = "failed"


class Exchange:
    """One authentication (or re-authentication) in progress on a session."""
    __slots__ = ("mechanism", "server", "raw", "reauth")

    def __init__(self, mechanism: str, server, raw: bool, reauth: bool):
        self.mechanism = mechanism
        self.server = server
        self.raw = raw  # SaslHandshake v0: tokens come as bare size-prefixed frames
        self.reauth = reauth


class Outcome:
    """What SaslAuthenticate answers: the server token, or an error (code 58) and its message."""
    __slots__ = ("token", "error", "lifetime_ms")

    def __init__(self, token: bytes = b"", error: str | None = None, lifetime_ms: int = 0):
        self.token, self.error, self.lifetime_ms = token, error, lifetime_ms


class SaslAuthenticator:
    """The broker's SASL side: ``settings`` (SaslSettings) and the SCRAM ``credentials`` store."""

    def __init__(self, settings, credentials):
        self.settings = settings
        self.credentials = credentials
        self.delay_s = settings.failed_auth_delay_ms / 1000

    def listener(self, name: str):
        return self.settings.listeners.get(name)

    # ---- SaslHandshake ---------------------------------------------------------------------

    def handshake(self, conn, mechanism: str, version: int) -> tuple[int, list]:
        """(error code, enabled mechanisms); sets the session up for the exchange."""
        session = conn.session
        lst = self.listener(session.listener)
        if lst is None:
            return ILLEGAL_SASL_STATE, []  # not a SASL listener
        enabled = list(lst.mechanisms)
        if session.authenticated and not self._may_reauthenticate(session, lst):
            return ILLEGAL_SASL_STATE, []  # as Kafka: no session lifetime, or less than a second since the last login
        reauth = session.authenticated or session.sasl_state == EXPIRED
        if mechanism not in lst.mechanisms:
            self.fail(conn, mechanism, None, f"unsupported mechanism {mechanism!r}")
            return UNSUPPORTED_SASL_MECHANISM, enabled
        if reauth and mechanism != session.mechanism:
            self.fail(conn, mechanism, None, f"re-authentication with {mechanism} instead of {session.mechanism}")
            return UNSUPPORTED_SASL_MECHANISM, enabled
        if mechanism == "PLAIN":
            server = PlainServer(lst.plain_users)
        else:
            server = ScramServer(SCRAM_MECHANISMS[mechanism], self.credentials.get)
        session.authenticated = False  # a re-authentication keeps its principal but gates requests again
        session.sasl_state = Exchange(mechanism, server, raw=version == 0, reauth=reauth)
        return 0, enabled

    @staticmethod
    def _may_reauthenticate(session, lst) -> bool:
        if session.reauth_deadline is None:
            return False
        authenticated_at = session.reauth_deadline - lst.reauth_ms.get(session.mechanism, 0) / 1000
        return asyncio.get_running_loop().time() - authenticated_at >= MIN_REAUTH_INTERVAL_S

    # ---- SaslAuthenticate (and raw v0 tokens) ----------------------------------------------

    def authenticate(self, conn, token: bytes) -> Outcome:
        session = conn.session
        exchange = session.sasl_state
        server = exchange.server
        what = "re-authentication" if exchange.reauth else "authentication"
        try:
            out = server.evaluate(token)
            if not server.complete:
                return Outcome(out)
            principal = KafkaPrincipal("User", server.authorization_id)
            if exchange.reauth and principal != session.principal:
                raise AuthenticationFailed(f"Cannot change principals during re-authentication from "
                                           f"{session.principal.type}.{session.principal.name}: "
                                           f"{principal.type}.{principal.name}")
        except AuthenticationFailed as exc:
            self.fail(conn, exchange.mechanism, server.username, str(exc))
            return Outcome(error=str(exc))
        except InvalidCredentials as exc:
            self.fail(conn, exchange.mechanism, server.username, str(exc))
            return Outcome(error=f"Authentication failed during {what} due to invalid credentials with SASL "
                                 f"mechanism {exchange.mechanism}")
        lifetime = self.settings.listeners[session.listener].reauth_ms.get(exchange.mechanism, 0)
        session.principal = principal
        session.mechanism = exchange.mechanism
        session.sasl_state = None
        session.authenticated = True
        conn.allow_full_requests()
        if lifetime:
            deadline = asyncio.get_running_loop().time() + lifetime / 1000
            session.reauth_deadline = deadline
            asyncio.get_running_loop().call_at(deadline, _expire, session, deadline)
        else:
            session.reauth_deadline = None
        log.debug("%r: %s as %s with %s", conn, what, principal, exchange.mechanism)
        return Outcome(out, lifetime_ms=lifetime)

    # ---- failures --------------------------------------------------------------------------

    def fail(self, conn, mechanism: str | None, username: str | None, reason: str) -> None:
        """Audit line, stop reading, close once the (delayed) answer is written."""
        session = conn.session
        fields = {"listener": session.listener, "client_host": session.client_host, "mechanism": _clip(mechanism),
                  "username": _clip(username), "reason": reason}
        if session.mechanism is not None:  # a re-authentication: who the connection was
            fields["principal"] = str(session.principal)
        event(audit, "authentication failed", level=logging.WARNING, **fields)
        session.authenticated = False
        session.sasl_state = FAILED
        conn.drain()

    async def delayed(self, result):
        """``result`` after connection.failed.authentication.delay.ms."""
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        return result


def _clip(text: str | None, limit: int = 256) -> str | None:
    """A client-chosen string for the log: at most ``limit`` characters."""
    return text if text is None or len(text) <= limit else text[:limit] + "..."


def _expire(session, deadline: float) -> None:
    """connections.max.reauth.ms passed: only a re-authentication may follow on this connection."""
    if session.reauth_deadline == deadline and session.authenticated:
        session.authenticated = False
        session.sasl_state = EXPIRED
