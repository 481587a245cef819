"""Turns request frames into responses: decode, check the version, call the API module, encode.

Implements the network layer's handler contract. A request this broker cannot decode, or an
API or version it does not advertise, closes the connection (as Apache Kafka does) — except
ApiVersions, which is answered in v0 with UNSUPPORTED_VERSION and our ranges (KIP-511).

SASL listeners put an ``AuthenticationGate`` in front of the dispatcher: until the session has
authenticated, only the requests of the SASL exchange pass, in Kafka's order: at most one ApiVersions,
SaslHandshake, then SaslAuthenticate (or raw tokens after a v0 handshake). What Kafka does with any
other request, the gate does: before the handshake (and after a v0 one) the connection closes without
an answer; after a v1 handshake the request gets its own response carrying ILLEGAL_SASL_STATE (34),
after ``connection.failed.authentication.delay.ms``, and then the connection closes (a request that
cannot be decoded, or wants no answer, just closes it). Other listeners have no gate.
"""
import inspect
import logging
import struct
import time

from pybroker import core
from pybroker.api import TABLE, api_versions, produce, sasl_authenticate, sasl_handshake
from pybroker.api.context import RequestContext
from pybroker.api.error_response import error_response
from pybroker.errors import BrokerError
from pybroker.protocol import (API_NAMES, DecodeError, RequestHeader, UnsupportedVersionError, decode_request,
                               encode_response, response_header_version)
from pybroker.protocol.errors import ILLEGAL_SASL_STATE, UNSUPPORTED_VERSION
from pybroker.protocol.parts import Parts
from pybroker.quota import enforce
from pybroker.security.sasl.authenticator import EXPIRED, Exchange

log = logging.getLogger(__name__)

_KEY_AND_VERSION = struct.Struct(">hh")


VERSIONS_ANSWERED = "versions answered"  # session.sasl_state after ApiVersions: SaslHandshake must follow


class AuthenticationGate:
    """The handler of a SASL listener: authenticated sessions go straight to the dispatcher."""

    def __init__(self, dispatcher, services):
        self.dispatcher = dispatcher
        self.services = services  # its sasl: the SaslAuthenticator, there before the listener opens

    @property
    def sasl(self):
        return self.services.sasl

    def handle(self, frame, conn):
        if conn.session.authenticated:
            return self.dispatcher.handle(frame, conn)
        state = conn.session.sasl_state
        if type(state) is Exchange:
            return self._raw_token(frame, conn) if state.raw else self._exchange(frame, conn, state)
        key, version = _KEY_AND_VERSION.unpack_from(frame) if len(frame) >= 4 else (None, None)
        if key == sasl_handshake.API_KEY and state in (None, VERSIONS_ANSWERED, EXPIRED):
            return self.dispatcher.handle(frame, conn)
        if key == api_versions.API_KEY and state is None:
            if api_versions.MIN_VERSION <= version <= api_versions.MAX_VERSION:
                conn.session.sasl_state = VERSIONS_ANSWERED  # an unsupported version may be retried lower
            return self.dispatcher.handle(frame, conn)
        return self._close(conn, key, "after the session expired (connections.max.reauth.ms)"
                           if state == EXPIRED else "before SASL authentication completed")

    def _exchange(self, frame, conn, exchange):
        """After SaslHandshake v1: SaslAuthenticate passes; any other request is refused with its own
        response carrying ILLEGAL_SASL_STATE, and the connection closes after it."""
        key, version = _KEY_AND_VERSION.unpack_from(frame)
        if key == sasl_authenticate.API_KEY:
            return self.dispatcher.handle(frame, conn)
        api = TABLE.get(key)
        try:
            if key == api_versions.API_KEY and not api.MIN_VERSION <= version <= api.MAX_VERSION:
                header, request, version = RequestHeader.decode(frame, 0, 1)[0], None, 0  # v0, as KIP-511
            elif api is not None and api.MIN_VERSION <= version <= api.MAX_VERSION:
                header, request = decode_request(frame)
            else:
                return self._close(conn, key, f"v{version} during SASL authentication")
        except DecodeError as exc:
            return self._close(conn, key, f"during SASL authentication, undecodable: {exc}")
        name = API_NAMES[key]
        response = error_response(key, version, request, ILLEGAL_SASL_STATE,
                                  f"{name} request received during SASL authentication (expected SaslAuthenticate)")
        self.sasl.fail(conn, exchange.mechanism, getattr(exchange.server, "username", None),
                       f"{name} request during SASL authentication")
        if response is None:  # Produce with acks=0: closed without an answer
            return self.sasl.delayed(None)
        body = encode_response(response_header_version(key, version), header.correlation_id, response, version)
        return self.sasl.delayed([body])

    def _raw_token(self, frame, conn):
        """After SaslHandshake v0: the frame is the token, the answer a bare size-prefixed token."""
        outcome = self.sasl.authenticate(conn, bytes(frame))
        if outcome.error is not None:
            return self.sasl.delayed(None)  # Kafka closes without an answer in this mode
        return [outcome.token]

    @staticmethod
    def _close(conn, key, why: str):
        log.info("%r: closing: %s %s", conn, API_NAMES.get(key, f"API {key}"), why)
        conn.close()
        return None


class UnsupportedRequestError(BrokerError):
    code = UNSUPPORTED_VERSION


class Dispatcher:
    def __init__(self, services):
        self.services = services  # pybroker.services.Services: what every request's context carries
        metrics = services.metrics
        if metrics is not None:  # request timing (pybroker/metrics); no wrapper at all when metrics are off
            plain = self.handle
            self.handle = lambda frame, conn: metrics.handle(plain, frame, conn)

    def handle(self, frame, conn):
        try:
            header, request = self._decode(frame)
        except UnsupportedVersionError as exc:
            if exc.api_key == api_versions.API_KEY and exc.header is not None:
                return self._unsupported_api_versions(exc.header.correlation_id)
            raise
        key, version = header.request_api_key, header.request_api_version
        api = TABLE.get(key)
        if api is None or not api.MIN_VERSION <= version <= api.MAX_VERSION:
            if key == api_versions.API_KEY:
                return self._unsupported_api_versions(header.correlation_id)
            raise UnsupportedRequestError(f"{API_NAMES.get(key, f'API {key}')} v{version} is not supported")
        services = self.services
        quotas = services.quotas
        started = time.perf_counter() if quotas is not None and quotas.enabled else None
        result = api.handle(RequestContext(services, header, conn), request)
        if started is not None:  # client quotas: throttle time into the response, then mute (KIP-219)
            handler_s = time.perf_counter() - started
            if inspect.isawaitable(result):
                return self._finish_throttled(result, key, version, header, request, frame, conn, handler_s)
            result = enforce.apply(quotas, result, key, header, request, frame, conn, handler_s)
        if inspect.isawaitable(result):
            return self._finish(result, key, version, header.correlation_id)
        return self._respond(result, key, version, header.correlation_id)

    async def _finish_throttled(self, pending, key, version, header, request, frame, conn, handler_s):
        result = enforce.apply(self.services.quotas, await pending, key, header, request, frame, conn, handler_s)
        return self._respond(result, key, version, header.correlation_id)

    @staticmethod
    def _decode(frame):
        """Header and body; Produce record batches come out as views of ``frame`` (native decoder)."""
        if len(frame) >= 4:
            key, version = _KEY_AND_VERSION.unpack_from(frame)
            if key == produce.API_KEY and produce.FIRST_RECORD_BATCH_VERSION <= version <= produce.MAX_VERSION:
                header, pos = RequestHeader.decode(frame, 0, 2 if version >= produce.FIRST_FLEXIBLE_VERSION else 1)
                return header, core.kafka_codec.decode_produce(frame, pos, version)
        return decode_request(frame)

    async def _finish(self, pending, key, version, correlation_id):
        return self._respond(await pending, key, version, correlation_id)

    @staticmethod
    def _respond(result, key: int, version: int, correlation_id: int):
        if result is None:
            return None
        header_version = response_header_version(key, version)
        if isinstance(result, Parts):
            head = struct.pack(">i", correlation_id) + (b"\x00" if header_version >= 1 else b"")
            return [head, *result]
        return [encode_response(header_version, correlation_id, result, version)]

    @staticmethod
    def _unsupported_api_versions(correlation_id: int):
        return [encode_response(0, correlation_id, api_versions.unsupported_version_response(), 0)]
