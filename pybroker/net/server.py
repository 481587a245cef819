"""The broker's listener: accepts sockets and runs one Connection per socket on one event loop.

Handler contract (implemented by the API dispatcher)::

    handle(frame: memoryview, conn: Connection) -> list | Awaitable[list] | None

``frame`` is one request without its size prefix, in a buffer of its own (the handler may keep
views of it). The result is a response (a list of bytes-like parts and file slices), an
awaitable of one, or None for "no response" (Produce acks=0). If ``handle`` raises, or the
awaitable fails, that connection is closed and the error logged on one line.

Settings use Kafka's names: ``socket.request.max.bytes`` (max_request_bytes) and
``connections.max.idle.ms`` (max_idle_ms; negative: never). ``stop(timeout)`` stops accepting,
lets responses in flight finish and flush (bounded by ``timeout``), then closes every connection.

Security: ``security_protocol`` is the listener's (it goes into each connection's session);
``tls`` (pybroker.security.tls.ListenerTls) makes every connection a TlsConnection, chosen once
at accept, so plaintext connections run exactly the code they ran before. ``limits``
(pybroker.net.limits.ConnectionLimits, shared by a broker's listeners) refuses sockets over
``max.connections``/``max.connections.per.ip``.
"""
import asyncio
import logging
import signal
import socket

from pybroker.net.connection import Connection
from pybroker.net.tls_connection import TlsConnection
from pybroker.sender import get_sender

log = logging.getLogger(__name__)

ACCEPTS_PER_EVENT = 64
ACCEPT_RETRY_S = 0.1  # after EMFILE and the like, instead of spinning on a ready listener
TLS_HANDSHAKE_TIMEOUT_MS = 10000


def tls_handshake_timeout_ms(idle_ms: int) -> int:
    """A TLS handshake gets TLS_HANDSHAKE_TIMEOUT_MS, or connections.max.idle.ms when that is shorter."""
    return TLS_HANDSHAKE_TIMEOUT_MS if idle_ms < 0 else min(idle_ms, TLS_HANDSHAKE_TIMEOUT_MS)


def new_event_loop(use_uvloop: bool | None = None) -> asyncio.AbstractEventLoop:
    """A uvloop loop when uvloop is importable (or ``use_uvloop`` is True), else asyncio's."""
    if use_uvloop is not False:
        try:
            import uvloop
        except ImportError:
            if use_uvloop:
                raise
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(main, *, use_uvloop: bool | None = None, debug: bool | None = None):
    """Run the coroutine ``main`` to completion on a fresh loop from ``new_event_loop``."""
    with asyncio.Runner(debug=debug, loop_factory=lambda: new_event_loop(use_uvloop)) as runner:
        return runner.run(main)


class NetStats:
    """Counters for metrics and tests."""
    __slots__ = ("open_connections", "accepted", "requests", "bytes_in", "bytes_out")

    def __init__(self):
        self.open_connections = 0
        self.accepted = 0
        self.requests = 0  # requests received and handed to the handler
        self.bytes_in = 0
        self.bytes_out = 0

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


class Server:
    """A TCP listener for the broker's binary protocol."""

    def __init__(self, handler, host: str = "127.0.0.1", port: int = 0, *,
                 max_request_bytes: int = 104857600, max_idle_ms: int = 600000,
                 max_in_flight: int = 64, max_queued_bytes: int = 16 << 20,
                 recv_buffer_bytes: int = 64 * 1024, backlog: int = 128, sender=None,
                 listener_name: str = "PLAINTEXT", security_protocol: str = "PLAINTEXT", tls=None,
                 tls_handshake_timeout_ms: int = TLS_HANDSHAKE_TIMEOUT_MS, limits=None, limits_exempt: bool = False,
                 max_pre_auth_bytes: int | None = None):
        if max_request_bytes < 8:
            raise ValueError("socket.request.max.bytes must be at least 8")
        if max_in_flight < 1 or max_queued_bytes < 1 or recv_buffer_bytes < 16:
            raise ValueError("max_in_flight, max_queued_bytes and recv_buffer_bytes must be positive")
        self.handler = handler
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.tls = tls
        self.tls_handshake_timeout_ms = tls_handshake_timeout_ms
        self.limits = limits
        self._limits_exempt = limits_exempt
        self._limited_ips: dict[int, str] = {}  # connection id -> the address it counts against
        self._connection_class = Connection if tls is None else TlsConnection
        self.tls_scratch = None  # the TLS connections' shared write buffer, made on first use
        self.tls_rx_scratch = None  # ... and receive buffer
        self.host = host
        self.max_request_bytes = max_request_bytes
        # SASL listeners: the request size limit until a connection has authenticated
        self.max_pre_auth_bytes = max_request_bytes if max_pre_auth_bytes is None else max_pre_auth_bytes
        self.max_idle_ms = max_idle_ms
        self.max_in_flight = max_in_flight
        self.max_queued_bytes = max_queued_bytes
        self.recv_buffer_bytes = recv_buffer_bytes
        self.backlog = backlog
        self.stats = NetStats()
        self.connections: dict[int, Connection] = {}
        self.loop = None
        self.sender = sender
        self._own_sender = sender is None
        self._requested_port = port
        self._listener = None
        self._next_id = 0
        self._stopping = False
        self._stopped = None
        self._all_closed = None  # a future set when the last connection closes during stop
        self._signal_task = None
        self._accepting = False
        self.on_response_written = None  # fn(conn) per response written, in request order (metrics)

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self, accepting: bool = True) -> "Server":
        """Bind and listen; ``accepting=False`` holds connections in the backlog until ``open()``."""
        self.loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        if self.sender is None:
            self.sender = get_sender()
        family = socket.getaddrinfo(self.host or None, self._requested_port,
                                    type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        self._listener = socket.create_server((self.host, self._requested_port), family=family,
                                              backlog=self.backlog)
        self._listener.setblocking(False)
        self._accepting = False
        if accepting:
            self.open()
        return self

    def open(self) -> None:
        """Start accepting connections."""
        if not self._accepting and not self._stopping:
            self._accepting = True
            self.loop.add_reader(self._listener.fileno(), self._on_accept)
            log.info("listening on %s:%d", *self.address)

    @property
    def address(self) -> tuple:
        return tuple(self._listener.getsockname()[:2]) if self._listener else (self.host, None)

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one when constructed with port=0)."""
        return self.address[1]

    @property
    def queued_bytes(self) -> int:
        """Request and response bytes held by all connections (see Connection.held_bytes)."""
        return sum(c.held_bytes for c in self.connections.values())

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop accepting; let in-flight responses flush for up to ``timeout`` s; close all."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        if self._listener is not None:
            if self._accepting:
                self.loop.remove_reader(self._listener.fileno())
            self._listener.close()
        self._all_closed = self.loop.create_future()
        for conn in list(self.connections.values()):
            conn.drain()
        if self.connections:
            try:
                await asyncio.wait_for(asyncio.shield(self._all_closed), timeout)
            except asyncio.TimeoutError:
                log.warning("stop: %d connection(s) still busy after %.1f s; closing them",
                            len(self.connections), timeout)
        for conn in list(self.connections.values()):
            conn.close()
        if self._own_sender and self.sender is not None:
            self.sender.close()
        log.info("stopped")
        self._stopped.set()

    async def wait_stopped(self) -> None:
        """Wait until ``stop`` has finished (e.g. triggered by a signal)."""
        await self._stopped.wait()

    async def __aenter__(self) -> "Server":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def install_signal_handlers(self, timeout: float = 30.0, signals=(signal.SIGTERM, signal.SIGINT),
                                before_stop=None) -> None:
        """SIGTERM/SIGINT start ``stop(timeout)`` (main thread, running loop only).

        ``before_stop`` runs first, e.g. to answer long-polling requests so the drain is quick.
        """
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.add_signal_handler(sig, self._on_signal, sig, timeout, before_stop)

    def _on_signal(self, sig, timeout: float, before_stop=None) -> None:
        log.info("received %s: shutting down", signal.Signals(sig).name)
        if before_stop is not None:
            before_stop()
        if self._signal_task is None:
            self._signal_task = self.loop.create_task(self.stop(timeout))

    # ---- connections -----------------------------------------------------------------------

    def _on_accept(self) -> None:
        listener = self._listener
        for _ in range(ACCEPTS_PER_EVENT):
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                log.warning("accept failed: %s; retrying in %.1f s", exc, ACCEPT_RETRY_S)
                self.loop.remove_reader(listener.fileno())
                self.loop.call_later(ACCEPT_RETRY_S, self._resume_accepting)
                return
            ip = addr[0] if isinstance(addr, tuple) else str(addr)
            if self.limits is not None:
                refused = self.limits.refusal(ip, self._limits_exempt, self.listener_name)
                if refused is not None:
                    log.info("closing a new connection from %s: %s", ip, refused)
                    sock.close()
                    continue
            try:
                sock.setblocking(False)
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._next_id += 1
                conn = self._connection_class(self, sock, self._next_id)
            except OSError as exc:  # the peer may already be gone
                log.info("dropping a new connection: %s", exc)
                sock.close()
                if self.limits is not None:
                    self.limits.release(ip, self.listener_name)
                continue
            if self.limits is not None:
                self._limited_ips[conn.id] = ip
            self.connections[conn.id] = conn
            self.stats.accepted += 1
            self.stats.open_connections += 1
            conn.start()

    def _resume_accepting(self) -> None:
        if not self._stopping:
            self.loop.add_reader(self._listener.fileno(), self._on_accept)

    def _connection_closed(self, conn: Connection) -> None:
        if self.connections.pop(conn.id, None) is not None:
            self.stats.open_connections -= 1
            if self.limits is not None:
                self.limits.release(self._limited_ips.pop(conn.id), self.listener_name)
        if not self.connections and self._all_closed is not None and not self._all_closed.done():
            self._all_closed.set_result(None)


async def serve(handler, host: str = "127.0.0.1", port: int = 0, *, stop_timeout: float = 30.0,
                **settings) -> None:
    """Start a Server, stop it on SIGTERM/SIGINT, return once stopped (for ``pybroker serve``)."""
    server = await Server(handler, host, port, **settings).start()
    server.install_signal_handlers(stop_timeout)
    await server.wait_stopped()
