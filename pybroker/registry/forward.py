"""Writes reaching a registry that is not the primary are sent on to the primary, and its answer is
returned as it is (status and body), so ids are only ever chosen in one place."""
from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

import aiohttp

from pybroker.registry.errors import FORWARDING_ERROR, RegistryError

FORWARDED_HEADER = "X-Pybroker-Registry-Forwarded"  # a forwarded request is never forwarded again
PASSED_HEADERS = ("Authorization", "Content-Type", "Accept", "Confluent-Accept-Unknown-Properties")


@dataclass
class ForwardedRequest:
    method: str
    path_qs: str  # path and query, as received
    headers: dict
    body: bytes


@dataclass
class ForwardedAnswer:
    status: int
    body: bytes
    content_type: str


class Forwarder:
    """One HTTP client session towards whichever registry is primary."""

    def __init__(self, timeout_s: float, ssl_context: ssl.SSLContext | None = None):
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None

    async def forward(self, primary_url: str | None, request: ForwardedRequest) -> ForwardedAnswer:
        if not primary_url:
            raise RegistryError(FORWARDING_ERROR, "Error while forwarding the request to the primary: "
                                                  "no primary registry is known")
        given = {k.lower(): v for k, v in request.headers.items()}
        if given.get(FORWARDED_HEADER.lower()):
            raise RegistryError(FORWARDING_ERROR, "Error while forwarding the request to the primary: "
                                                  "this registry is not the primary either")
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        headers = {k: given[k.lower()] for k in PASSED_HEADERS if k.lower() in given}
        headers[FORWARDED_HEADER] = "1"
        url = primary_url.rstrip("/") + request.path_qs
        try:
            async with self._session.request(request.method, url, data=request.body or None, headers=headers,
                                             ssl=self._ssl if url.startswith("https") else None,
                                             allow_redirects=False) as resp:
                body = await resp.read()
                return ForwardedAnswer(resp.status, body, resp.headers.get("Content-Type", ""))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise RegistryError(FORWARDING_ERROR, f"Error while forwarding the request to the primary at "
                                                  f"{primary_url}: {exc or type(exc).__name__}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
