"""The registry's HTTP listeners (aiohttp): routing, content types, size and time limits, basic auth.

One catch-all handler routes on the raw path split at "/" (each segment URL-decoded, so a subject
may hold "/" as %2F), and answers every failure with Confluent's error body. A connection that sends
nothing, or only part of its request line and headers, is closed after the idle timeout (aiohttp's
keep-alive timer also runs before the first request); a body must arrive within the same time.
"""
from __future__ import annotations

import asyncio
import base64
import inspect
import json
import logging
from typing import Any, Callable
from urllib.parse import unquote, urlsplit

from aiohttp import web

from pybroker.registry import errors
from pybroker.registry.errors import RegistryError
from pybroker.registry.forward import ForwardedAnswer, ForwardedRequest

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPTED_TYPES = ("application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json",
                  "application/json", "application/octet-stream")
REALM = 'Basic realm="SchemaRegistry"'
_ANY = object()  # a path segment that is a parameter


def _json_response(status: int, body: Any) -> web.Response:
    return web.Response(status=status, body=json.dumps(body).encode(), content_type=CONTENT_TYPE)


def _error(exc: RegistryError, headers: dict | None = None) -> web.Response:
    response = _json_response(exc.status, exc.body())
    if headers:
        response.headers.update(headers)
    return response


class _Call:
    """What a route handler sees: the path parameters, the query, the parsed body, the forwardable request."""

    def __init__(self, request: web.Request, params: list[str], body: Any, raw_body: bytes):
        self.request = request
        self.params = params
        self.query = request.query
        self.body = body
        self.forward = ForwardedRequest(request.method, request.raw_path, dict(request.headers), raw_body)
        self.accept_unknown = (request.headers.get("Confluent-Accept-Unknown-Properties", "").lower() == "true")

    def flag(self, name: str) -> bool:
        return self.query.get(name, "").strip().lower() == "true"


class RegistryServer:
    """``RegistryServer(registry, settings, authenticate=None)``: ``authenticate(user, password) -> bool``
    (or an awaitable of it) turns on HTTP basic authentication, unless the settings say
    ``authentication=none``; ``urls`` are the bound listener URLs (real ports)."""

    def __init__(self, registry, settings, authenticate: Callable[[str, str], Any] | None = None):
        self.registry = registry
        self.settings = settings
        mode = getattr(settings, "authentication", None)
        if mode == "basic" and authenticate is None:
            raise ValueError("schema.registry.authentication=basic needs users to check passwords against "
                             "(the broker's SASL users)")
        self.authenticate = None if mode == "none" else authenticate
        self.urls: list[str] = []
        self._runner: web.AppRunner | None = None
        self._routes = self._route_table()

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=self.settings.max_request_bytes)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     keepalive_timeout=self.settings.idle_timeout_s,
                                     lingering_time=min(1.0, self.settings.idle_timeout_s),
                                     shutdown_timeout=1.0)
        await self._runner.setup()
        try:
            for url in self.settings.listeners:
                parts = urlsplit(url)
                tls = self.settings.ssl_context if parts.scheme == "https" else None
                site = web.TCPSite(self._runner, parts.hostname, parts.port, ssl_context=tls, backlog=128)
                await site.start()
                port = site._server.sockets[0].getsockname()[1]
                host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
                self.urls.append(f"{parts.scheme}://{host}:{port}")
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # ---- one request ---------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._serve(request)
        except RegistryError as exc:
            response = _error(exc)
            if exc.error_code in (408, errors.PAYLOAD_TOO_LARGE):  # the rest of the body is not worth reading
                response.force_close()
            return response
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("schema registry: %s %s failed", request.method, request.path)
            return _error(RegistryError(errors.STORE_ERROR, "Internal error while serving the request"))

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        if self.authenticate is not None and not await self._authenticated(request):
            return _error(RegistryError(errors.UNAUTHORIZED, "Unauthorized"), {"WWW-Authenticate": REALM})
        segments = [unquote(s) for s in request.raw_path.split("?", 1)[0].split("/") if s != ""]
        handler, params = self._route(request.method, segments)
        raw_body = b""
        body = None
        if request.method in ("POST", "PUT"):
            raw_body = await self._read_body(request)
            body = self._parse_body(request, raw_body)
        result = await handler(_Call(request, params, body, raw_body))
        if isinstance(result, ForwardedAnswer):
            return web.Response(status=result.status, body=result.body,
                                headers={"Content-Type": result.content_type or CONTENT_TYPE})
        if isinstance(result, str):  # RawText: a schema's own text
            return web.Response(status=200, body=result.encode(), content_type=CONTENT_TYPE)
        return _json_response(200, result)

    async def _authenticated(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        if not sep:
            return False
        try:
            ok = self.authenticate(user, password)
            if inspect.isawaitable(ok):
                ok = await ok
        except Exception:
            log.exception("schema registry: authenticating %r failed", user)
            return False
        return bool(ok)

    async def _read_body(self, request: web.Request) -> bytes:
        ctype = request.headers.get("Content-Type")
        if ctype is not None and request.content_type not in ACCEPTED_TYPES:
            raise RegistryError(errors.UNSUPPORTED_MEDIA_TYPE, f"HTTP 415 Unsupported Media Type: {ctype}")
        limit = self.settings.max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            raise RegistryError(errors.PAYLOAD_TOO_LARGE, f"The request body is larger than {limit} bytes")
        try:
            return await asyncio.wait_for(request.read(), self.settings.idle_timeout_s)
        except web.HTTPRequestEntityTooLarge:
            raise RegistryError(errors.PAYLOAD_TOO_LARGE, f"The request body is larger than {limit} bytes") from None
        except asyncio.TimeoutError:
            raise RegistryError(408, "The request body did not arrive in time") from None

    @staticmethod
    def _parse_body(request: web.Request, raw: bytes) -> Any:
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RegistryError(errors.BAD_REQUEST, f"Malformed JSON: {exc}") from None

    # ---- routes --------------------------------------------------------------------------------

    def _route(self, method: str, segments: list[str]):
        allowed = False
        for pattern, handlers in self._routes:
            if len(pattern) != len(segments):
                continue
            params = []
            for want, got in zip(pattern, segments):
                if want is _ANY:
                    params.append(got)
                elif want != got:
                    break
            else:
                if method in handlers:
                    return handlers[method], params
                allowed = True
        if allowed:
            raise RegistryError(errors.METHOD_NOT_ALLOWED, "HTTP 405 Method Not Allowed")
        raise RegistryError(errors.NOT_FOUND, "HTTP 404 Not Found")

    def _route_table(self) -> list[tuple[tuple, dict]]:
        r = self.registry
        A = _ANY

        def write(op):  # a write runs on the primary, or is forwarded to it
            async def handler(c: _Call):
                return await r.write(c.forward, lambda: op(c))
            return handler

        def read(fn):
            async def handler(c: _Call):
                return fn(c)
            return handler

        def deleted(c):
            return c.flag("deleted")

        def ver(c):
            return c.params[-1]

        return [
            ((), {"GET": read(lambda c: r.root())}),
            (("v1", "metadata", "id"), {"GET": read(lambda c: {"scope": {"path": [], "clusters": {}}})}),
            (("contexts",), {"GET": read(lambda c: r.contexts())}),
            (("subjects",), {"GET": read(lambda c: r.subjects(deleted(c), c.query.get("subjectPrefix"),
                                                              c.flag("deletedOnly")))}),
            (("subjects", A), {
                "POST": read(lambda c: r.lookup(c.params[0], c.body, c.flag("normalize"), deleted(c),
                                                c.accept_unknown)),
                "DELETE": write(lambda c: r.delete_subject(c.params[0], c.flag("permanent")))}),
            (("subjects", A, "versions"), {
                "GET": read(lambda c: r.versions(c.params[0], deleted(c))),
                "POST": write(lambda c: r.register(c.params[0], c.body, c.flag("normalize"), c.accept_unknown))}),
            (("subjects", A, "versions", A), {
                "GET": read(lambda c: r.get_version(c.params[0], ver(c), deleted(c), c.query.get("format"))),
                "DELETE": write(lambda c: r.delete_version(c.params[0], ver(c), c.flag("permanent")))}),
            (("subjects", A, "versions", A, "schema"), {
                "GET": read(lambda c: r.get_version_schema(c.params[0], c.params[1], deleted(c)))}),
            (("subjects", A, "versions", A, "referencedby"), {
                "GET": read(lambda c: r.referenced_by(c.params[0], c.params[1]))}),
            (("schemas",), {"GET": read(lambda c: r.list_schemas(c.query.get("subjectPrefix"), deleted(c),
                                                                 c.flag("latestOnly")))}),
            (("schemas", "types"), {"GET": read(lambda c: r.schema_types())}),
            (("schemas", "ids", A), {"GET": read(lambda c: r.get_schema(c.params[0], c.query.get("format")))}),
            (("schemas", "ids", A, "schema"), {"GET": read(lambda c: r.get_schema_text(c.params[0]))}),
            (("schemas", "ids", A, "versions"), {
                "GET": read(lambda c: r.schema_versions(c.params[0], deleted(c), c.query.get("subject")))}),
            (("schemas", "ids", A, "subjects"), {
                "GET": read(lambda c: r.schema_subjects(c.params[0], deleted(c), c.query.get("subject")))}),
            (("config",), {
                "GET": read(lambda c: r.get_config(None)),
                "PUT": write(lambda c: r.set_config(None, c.body)),
                "DELETE": write(lambda c: r.delete_config(None))}),
            (("config", A), {
                "GET": read(lambda c: r.get_config(c.params[0], c.flag("defaultToGlobal"))),
                "PUT": write(lambda c: r.set_config(c.params[0], c.body)),
                "DELETE": write(lambda c: r.delete_config(c.params[0]))}),
            (("mode",), {
                "GET": read(lambda c: r.get_mode(None)),
                "PUT": write(lambda c: r.set_mode(None, c.body, c.flag("force"))),
                "DELETE": write(lambda c: r.delete_mode(None))}),
            (("mode", A), {
                "GET": read(lambda c: r.get_mode(c.params[0], c.flag("defaultToGlobal"))),
                "PUT": write(lambda c: r.set_mode(c.params[0], c.body, c.flag("force"))),
                "DELETE": write(lambda c: r.delete_mode(c.params[0]))}),
            (("compatibility", "subjects", A, "versions", A), {
                "POST": read(lambda c: r.check_compatibility(c.params[0], c.params[1], c.body, c.flag("normalize"),
                                                             c.flag("verbose"), c.accept_unknown))}),
            (("compatibility", "subjects", A, "versions"), {
                "POST": read(lambda c: r.check_compatibility(c.params[0], None, c.body, c.flag("normalize"),
                                                             c.flag("verbose"), c.accept_unknown))}),
        ]
