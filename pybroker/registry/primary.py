"""Which registry writes: the protocol of an election, and the single-node one (always primary).

In a cluster the election is zk_primary.py; the others forward writes to ``primary_url``.
"""
from __future__ import annotations

from typing import Protocol


class Primary(Protocol):
    async def start(self) -> None: ...

    @property
    def is_primary(self) -> bool: ...

    @property
    def primary_url(self) -> str | None:
        """The primary registry's base URL (None: no primary known now)."""

    async def wait_decided(self, timeout_s: float) -> bool:
        """Wait (bounded) until some registry is known as the primary; whether one is."""

    async def close(self) -> None: ...


class SinglePrimary:
    """A single node: always the primary, at its own URL."""

    def __init__(self, url: str | None = None):
        self.url = url

    async def start(self) -> None:
        pass

    @property
    def is_primary(self) -> bool:
        return True

    @property
    def primary_url(self) -> str | None:
        return self.url

    async def wait_decided(self, timeout_s: float) -> bool:
        return True

    async def close(self) -> None:
        pass


class FixedPrimary:
    """Another registry at a known URL is the primary (tests, and a fixed secondary)."""

    def __init__(self, primary_url: str | None, is_primary: bool = False):
        self._url = primary_url
        self._is_primary = is_primary

    async def start(self) -> None:
        pass

    @property
    def is_primary(self) -> bool:
        return self._is_primary

    @property
    def primary_url(self) -> str | None:
        return self._url

    async def wait_decided(self, timeout_s: float) -> bool:
        return self._is_primary or self._url is not None

    async def close(self) -> None:
        pass
