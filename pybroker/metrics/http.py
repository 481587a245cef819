"""The metrics listener: a tiny HTTP/1.x server on the broker's event loop.

``GET /metrics`` → the Prometheus text exposition; ``GET /health`` → 200 ``ready`` once the broker
serves clients (on a cluster: registered and told the cluster by the controller), else 503
``not ready``; ``HEAD`` as GET without a body; anything else → 404 (unknown path), 405 (other
methods) or 400 (not HTTP). One request per connection (``Connection: close``). Reads are
bounded (request line and headers ≤ 16 KiB, 64 header lines, 10 s), so a slow or malformed
client costs one small buffer and never the Kafka listeners anything.
"""
import asyncio
import logging
import re

from pybroker.errors import BrokerError
from pybroker.metrics.process import LoopLagProbe
from pybroker.metrics.render import CONTENT_TYPE
from pybroker.protocol.errors import UNKNOWN_SERVER_ERROR

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADER_LINES = 64
READ_TIMEOUT_S = 10.0
_REQUEST_LINE = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.[01]\r?\n")
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error", 503: "Service Unavailable"}


_PLAIN = "text/plain; charset=utf-8"


class MetricsListenerError(BrokerError):
    code = UNKNOWN_SERVER_ERROR  # a startup failure: no client ever sees it


class MetricsServer:
    """``render()``: the exposition text; ``health()``: (serving clients?, why not)."""

    def __init__(self, metrics, host: str, port: int, *, render, health):
        self.render = render
        self.health = health
        self.host = host
        self.requested_port = port
        self.port = None
        self._server = None
        self._probe = LoopLagProbe(metrics)
        self.scrapes = 0

    async def start(self) -> "MetricsServer":
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self.requested_port,
                                                      limit=MAX_HEAD_BYTES)
        except OSError as exc:
            raise MetricsListenerError(f"metrics.listener: cannot listen on "
                                       f"{self.host}:{self.requested_port}: {exc.strerror or exc}") from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._probe.start()
        log.info("metrics on http://%s:%d/metrics (health: /health)",
                 f"[{self.host}]" if ":" in self.host else self.host, self.port)
        return self

    async def stop(self) -> None:
        self._probe.stop()
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _serve(self, reader, writer) -> None:
        try:
            status, body, head_only, content_type = await asyncio.wait_for(self._answer(reader), READ_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        except Exception:  # never let a scrape take anything down
            log.exception("metrics request failed")
            status, body, head_only, content_type = 500, b"internal error\n", False, _PLAIN
        head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        try:
            writer.write(head if head_only else head + body)
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT_S)
        except (asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, reader) -> tuple[int, bytes, bool, str]:
        """(status, body, HEAD?, content type) for one request; the headers are read and ignored."""
        status, body, head_only = await self._route(reader)
        return status, body, head_only, CONTENT_TYPE if status == 200 and body[:1] == b"#" else _PLAIN

    async def _route(self, reader) -> tuple[int, bytes, bool]:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            return 400, b"request line too long\n", False
        m = _REQUEST_LINE.fullmatch(line)
        if m is None:
            return 400, b"bad request\n", False
        for _ in range(MAX_HEADER_LINES):
            try:
                header = await reader.readuntil(b"\n")
            except asyncio.LimitOverrunError:
                return 400, b"header too long\n", False
            if header in (b"\r\n", b"\n"):
                break
        else:
            return 400, b"too many headers\n", False
        method, target = m.group(1), m.group(2)
        if method not in (b"GET", b"HEAD"):
            return 405, b"only GET and HEAD\n", False
        path = target.split(b"?", 1)[0]
        head_only = method == b"HEAD"
        if path == b"/metrics":
            self.scrapes += 1
            return 200, self.render().encode(), head_only
        if path in (b"/health", b"/ready"):
            ready, readiness = self.health()
            if ready:
                return 200, b"ready\n", head_only
            return 503, f"not ready: {readiness}\n".encode(), head_only
        if path == b"/":
            return 200, b"pybroker metrics: /metrics /health\n", head_only
        return 404, b"not found: try /metrics or /health\n", head_only
