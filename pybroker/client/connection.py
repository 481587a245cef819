"""One TCP connection to a broker, with pipelined requests.

Requests are written as soon as they are made (no waiting for earlier responses); each waits on
a future keyed by its correlation id, resolved by the protocol's ``buffer_updated`` callback as
frames arrive. Small frames are cut out of one reusable receive buffer; a frame larger than that
buffer gets a buffer of its own that the socket reads straight into. A frame size above
``max_frame_bytes`` is refused before anything is allocated.

On any failure (peer closed, bad frame, request timeout) the connection closes and every pending
request fails: with KafkaTimeoutError for the request that timed out, KafkaConnectionError for
the rest. Kafka's clients do the same, since a response may never arrive once one is lost.

Security (``security``, a ClientSecurity): TLS wraps the socket before the first byte; SASL runs
SaslHandshake + SaslAuthenticate right after ApiVersions. When the broker gives the session a
lifetime (KIP-368), the connection re-authenticates in place at 85-95% of it: requests made
meanwhile are held and written once the new session is up, so callers never see the switch.
A PLAINTEXT connection does none of this work.
"""
import asyncio
import random
import socket
import ssl
import struct

from pybroker import core
from pybroker.client import sasl_exchange
from pybroker.client.errors import AuthenticationError, KafkaConnectionError, KafkaError, KafkaTimeoutError
from pybroker.protocol import DecodeError, REQUESTS, decode_response, encode_request
from pybroker.protocol.errors import ErrorCode

API_VERSIONS_KEY = 18
API_VERSIONS_RANGE = (0, 4)  # the ApiVersions versions this client speaks (older brokers: the v0 fallback)
SOFTWARE_NAME = "pybroker-python"
SOFTWARE_VERSION = "0.1.0"
DEFAULT_MAX_FRAME = 1 << 30
RECV_BUFFER = 256 * 1024
WRITE_HIGH_WATER = 4 << 20  # callers wait for the socket to drain above this much unsent data

_SIZE = struct.Struct(">i")
_pack_size = _SIZE.pack
_unpack_size = _SIZE.unpack_from


class _Pending:
    __slots__ = ("future", "api_key", "version", "raw", "timer")

    def __init__(self, future, api_key, version, raw, timer):
        self.future = future
        self.api_key = api_key
        self.version = version
        self.raw = raw
        self.timer = timer


class _FrameProtocol(asyncio.BufferedProtocol):
    """Cuts the byte stream into frames and hands each to the connection."""

    def __init__(self, conn: "BrokerConnection", max_frame: int):
        self.conn = conn
        self.max_frame = max_frame
        self.buf = bytearray(RECV_BUFFER)
        self.view = memoryview(self.buf)
        self.start = 0  # first unconsumed byte in buf
        self.end = 0  # end of received bytes in buf
        self.big = None  # a large frame being received: (bytearray, memoryview)
        self.big_got = 0
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, sizehint):
        if self.big is not None:
            return self.big[1][self.big_got:]
        if self.end == len(self.buf):  # no room left: move the partial frame to the front
            n = self.end - self.start
            self.buf[:n] = bytes(self.view[self.start:self.end])  # a copy: the ranges may overlap
            self.start, self.end = 0, n
        return self.view[self.end:]

    def buffer_updated(self, nbytes):
        if self.big is not None:
            self.big_got += nbytes
            if self.big_got == len(self.big[0]):
                frame = self.big[0]
                self.big = None
                self.conn._on_frame(frame)
            return
        self.end += nbytes
        buf, start, end = self.buf, self.start, self.end
        while end - start >= 4:
            size = _unpack_size(buf, start)[0]
            if size < 4 or size > self.max_frame:
                self.start = self.end = 0
                self.conn._fail(KafkaConnectionError(
                    f"{self.conn.address} sent a response frame of {size} bytes "
                    f"(allowed 4..{self.max_frame}); closing the connection"))
                return
            stop = start + 4 + size
            if stop <= end:
                frame = bytes(self.view[start + 4:stop])
                start = stop
                self.start = start
                self.conn._on_frame(frame)
                if self.conn._closed:
                    return
                continue
            if 4 + size > len(buf):  # will not fit the receive buffer: give it its own
                frame = core.client_codec.frame_buffer(size)  # filled by the reads that follow
                have = end - start - 4
                frame[:have] = self.view[start + 4:end]
                self.big = (frame, memoryview(frame))
                self.big_got = have
                start = end = 0
            break
        if start == end:
            start = end = 0
        self.start, self.end = start, end

    def eof_received(self):
        return False  # close the transport

    def connection_lost(self, exc):
        self.conn._fail(KafkaConnectionError(
            f"connection to {self.conn.address} lost" + (f": {exc}" if exc else " (closed by the broker)")))

    def pause_writing(self):
        self.conn._write_paused = True

    def resume_writing(self):
        self.conn._write_paused = False
        waiters, self.conn._drain_waiters = self.conn._drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)


class BrokerConnection:
    """A connection to one broker. Create with ``await BrokerConnection.open(...)``."""

    def __init__(self, host: str, port: int, client_id: str, request_timeout_s: float,
                 node_id: int, max_frame_bytes: int, security=None):
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.api_versions: dict = {}  # api key -> (min, max) the broker supports
        self._loop = None
        self._transport = None
        self._pending: dict = {}
        self._correlation = 0
        self._closed = False
        self._close_error = None
        self._write_paused = False
        self._drain_waiters = []
        self.last_used = 0.0
        self.security = security
        self.session_lifetime_ms = 0  # of the current SASL session; 0: none or no expiry
        self.reauthentications = 0
        self._reauth_timer = None
        self._held = None  # frames written while re-authenticating, sent once it is done
        self._reauth_task = None

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "pybroker-client", timeout_s: float = 10.0,
                   *, request_timeout_s: float = 30.0, node_id: int = -1,
                   max_frame_bytes: int = DEFAULT_MAX_FRAME, security=None) -> "BrokerConnection":
        """Connect (TLS if ``security`` says so), negotiate versions with ApiVersions (KIP-511
        fallback to v0), then authenticate with SASL if ``security`` says so."""
        if security is not None and security.plaintext:
            security = None
        conn = cls(host, port, client_id, request_timeout_s, node_id, max_frame_bytes, security)
        loop = conn._loop = asyncio.get_running_loop()
        tls = security.ssl_context() if security is not None else None
        extra = {"ssl": tls, "server_hostname": host, "ssl_handshake_timeout": timeout_s} if tls is not None else {}
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: _FrameProtocol(conn, max_frame_bytes), host, port, **extra),
                timeout_s)
        except asyncio.TimeoutError:
            raise KafkaConnectionError(f"timed out after {timeout_s:g} s connecting to {conn.address}") from None
        except ssl.SSLCertVerificationError as exc:
            raise AuthenticationError(f"TLS handshake with {conn.address} failed: the broker's certificate was "
                                      f"rejected: {exc.verify_message}", code=-1, name="SSL_HANDSHAKE_FAILED") from None
        except ssl.SSLError as exc:
            raise AuthenticationError(f"TLS handshake with {conn.address} failed: {exc.reason or exc}",
                                      code=-1, name="SSL_HANDSHAKE_FAILED") from None
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {conn.address}: {exc.strerror or exc}") from None
        conn._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        try:
            await conn._handshake(timeout_s)
            if security is not None and security.sasl:
                await conn._authenticate(timeout_s)
        except KafkaConnectionError as exc:
            await conn.close()
            if tls is None and security is None:
                raise KafkaConnectionError(f"{exc.message} (if the listener uses TLS or SASL, set "
                                           "security.protocol)") from None
            raise
        except BaseException:
            await conn.close()
            raise
        conn.last_used = loop.time()
        return conn

    # ---- SASL and re-authentication (KIP-368) ------------------------------------------------------

    async def _authenticate(self, timeout_s: float, write=None) -> None:
        exchange = sasl_exchange.steps(self.security, self.api_versions, self.address)
        request, version = next(exchange)
        while True:
            fut = self._send(request, version, timeout_s, False, write)
            if self._write_paused:
                await self._drain()
            try:
                request, version = exchange.send(await fut)
            except StopIteration as done:
                lifetime = done.value or 0
                break
        self.session_lifetime_ms = lifetime
        if lifetime > 0:
            delay = lifetime / 1000 * (0.85 + 0.1 * random.random())  # spread, as Kafka's clients do
            self._reauth_timer = self._loop.call_later(delay, self._begin_reauth)

    def _begin_reauth(self) -> None:
        self._reauth_timer = None
        if self._closed:
            return
        self._held = []
        self._write = self._hold  # requests made from now on wait for the new session
        self._reauth_task = self._loop.create_task(self._reauthenticate())  # held: the loop keeps weak refs

    def _hold(self, frame) -> None:
        self._held.append(_pack_size(len(frame)))
        self._held.append(frame)

    async def _reauthenticate(self) -> None:
        try:
            await self._authenticate(self.request_timeout_s, BrokerConnection._write.__get__(self))
        except KafkaError as exc:
            self._fail(exc if isinstance(exc, AuthenticationError) else KafkaConnectionError(
                f"re-authentication with {self.address} failed: {exc.message}"))
            return
        except Exception as exc:  # never leave held requests hanging
            self._fail(KafkaConnectionError(f"re-authentication with {self.address} failed: {exc!r}"))
            return
        finally:
            self.__dict__.pop("_write", None)
        self.reauthentications += 1
        held, self._held = self._held, None
        if held and not self._closed:
            self._transport.writelines(held)

    async def _handshake(self, timeout_s: float) -> None:
        api = REQUESTS[API_VERSIONS_KEY]
        req = api(client_software_name=SOFTWARE_NAME, client_software_version=SOFTWARE_VERSION)
        version = API_VERSIONS_RANGE[1]
        frame = await self._request(req, version, timeout_s, raw=True)
        resp = _decode_lenient(frame, version)
        if resp is None or resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # the broker answers a version it lacks with a v0 body listing its own ApiVersions range
            v0 = _decode_lenient(frame, 0)
            if v0 is None:
                raise KafkaConnectionError(f"{self.address} sent an unreadable ApiVersions response")
            ranges = {k.api_key: (k.min_version, k.max_version) for k in v0.api_keys}
            lo, hi = ranges.get(API_VERSIONS_KEY, (0, 0))
            version = max(lo, min(hi, version))
            frame = await self._request(req, version, timeout_s, raw=True)
            resp = _decode_lenient(frame, version)
            if resp is None:
                raise KafkaConnectionError(f"{self.address} sent an unreadable ApiVersions v{version} response")
        if resp.error_code:
            raise KafkaError(resp.error_code, f"ApiVersions from {self.address} failed")
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version(self, api_key: int, lo: int, hi: int) -> int:
        """The highest version of ``api_key`` within lo..hi that the broker supports."""
        blo, bhi = self.api_versions.get(api_key, (0, -1))
        top = min(hi, bhi)
        if max(lo, blo) > top:
            name = REQUESTS[api_key].__name__.removesuffix("Request") if api_key in REQUESTS else str(api_key)
            offers = f"it offers {blo}-{bhi}" if bhi >= 0 else "it does not support it"
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"broker {self.address} cannot serve {name} versions {lo}-{hi} ({offers})")
        return top

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    def request(self, obj, version: int, timeout_s: float | None = None):
        """Send ``obj`` at ``version`` now; returns an awaitable of the decoded response body.
        The request is written before this returns, so several calls pipeline even if their
        results are awaited later. Errors (closed connection, timeout) surface when awaited."""
        if self._closed:
            fut = self._loop.create_future()
            fut.set_exception(self._closed_error())
            return fut
        fut = self._send(obj, version, timeout_s, False)
        if self._write_paused:
            return self._after_drain(fut)
        return fut

    def request_future(self, obj, version: int, timeout_s: float | None = None) -> asyncio.Future:
        """Like ``request`` but always an asyncio.Future (sent at once; cancel() abandons it)."""
        result = self.request(obj, version, timeout_s)
        return result if asyncio.isfuture(result) else asyncio.ensure_future(result)

    async def _after_drain(self, fut):
        try:
            await self._drain()
        except BaseException:
            fut.cancel()
            raise
        return await fut

    def send_nowait(self, obj, version: int) -> None:
        """Send a request that gets no response (Produce with acks=0)."""
        if self._closed:
            raise self._closed_error()
        self._correlation = corr = (self._correlation + 1) & 0x7FFFFFFF
        self._write(encode_request(version, corr, self.client_id, obj))

    async def _request(self, obj, version, timeout_s, raw=False):
        fut = self._send(obj, version, timeout_s, raw)
        if self._write_paused:
            await self._drain()
        return await fut

    def _send(self, obj, version, timeout_s, raw, write=None):
        if self._closed:
            raise self._closed_error()
        self._correlation = corr = (self._correlation + 1) & 0x7FFFFFFF
        frame = encode_request(version, corr, self.client_id, obj)
        loop = self._loop
        fut = loop.create_future()
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        timer = loop.call_later(timeout, self._expire, corr, timeout) if timeout is not None and timeout > 0 else None
        self._pending[corr] = _Pending(fut, obj.API_KEY, version, raw, timer)
        (write or self._write)(frame)
        self.last_used = loop.time()
        return fut

    def _write(self, frame):
        self._transport.writelines((_pack_size(len(frame)), frame))

    async def _drain(self):
        if self._write_paused and not self._closed:
            w = self._loop.create_future()
            self._drain_waiters.append(w)
            await w

    def _on_frame(self, frame):
        if len(frame) < 4:
            self._fail(KafkaConnectionError(f"{self.address} sent a response too short for a header"))
            return
        corr = _unpack_size(frame, 0)[0]
        p = self._pending.pop(corr, None)
        if p is None:
            self._fail(KafkaConnectionError(
                f"{self.address} answered unknown correlation id {corr}; closing the connection"))
            return
        if p.timer is not None:
            p.timer.cancel()
        if p.future.done():  # the caller gave up (cancelled)
            return
        if p.raw:
            p.future.set_result(frame)
            return
        try:
            _, body = decode_response(frame, p.api_key, p.version)
        except DecodeError as exc:
            p.future.set_exception(KafkaError(
                ErrorCode.CORRUPT_MESSAGE, f"cannot decode a response (api {p.api_key} v{p.version}) "
                f"from {self.address}: {exc}", retriable=False))
            return
        except Exception as exc:  # a codec bug must not kill the reader callback
            p.future.set_exception(KafkaError(-1, f"decoding a response from {self.address} failed: {exc!r}",
                                              retriable=False))
            return
        p.future.set_result(body)

    def _expire(self, corr, timeout):
        p = self._pending.pop(corr, None)
        if p is None:
            return
        if not p.future.done():
            p.future.set_exception(KafkaTimeoutError(
                f"no response from {self.address} within {timeout:g} s (api {p.api_key} v{p.version})"))
        # the response order is now unknown to us: drop the connection like Kafka's clients do
        self._fail(KafkaConnectionError(f"connection to {self.address} closed after a request timed out"))

    def _closed_error(self):
        return self._close_error or KafkaConnectionError(f"connection to {self.address} is closed")

    def _fail(self, error):
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        if not self._closed:
            self._closed = True
            self._close_error = error
            if self._transport is not None:
                self._transport.abort()
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if p.timer is not None:
                p.timer.cancel()
            if not p.future.done():
                p.future.set_exception(error if isinstance(error, AuthenticationError)
                                       else KafkaConnectionError(error.message))
        waiters, self._drain_waiters = self._drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_exception(KafkaConnectionError(error.message))

    async def close(self) -> None:
        """Close; pending requests fail with KafkaConnectionError."""
        self._fail(KafkaConnectionError(f"connection to {self.address} was closed by the client"))

    def __repr__(self):
        state = "closed" if self._closed else f"{len(self._pending)} in flight"
        return f"<BrokerConnection node {self.node_id} {self.address} {state}>"


def _decode_lenient(frame, version):
    try:
        return decode_response(frame, API_VERSIONS_KEY, version)[1]
    except DecodeError:
        return None
