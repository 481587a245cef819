"""Where the registry's records live: the protocol every storage implements, and one in memory.

The Kafka implementation (the topic ``_schemas``) is kafka_log.py; ``MemorySchemaLog`` serves tests
and shows the contract: records are applied in offset order, exactly once each, by every reader.
"""
from __future__ import annotations

import asyncio
from typing import Callable, Protocol

OnRecord = Callable[[bytes, "bytes | None", int], None]


class SchemaLog(Protocol):
    async def start(self, on_record: OnRecord) -> None:
        """Tail the log from its start: ``on_record(key, value, offset)`` for every record, in order."""

    async def append(self, key: bytes, value: bytes | None) -> int:
        """Write one record durably; its offset."""

    async def wait_applied(self, offset: int, timeout_s: float) -> None:
        """Return once on_record has seen ``offset`` (TimeoutError or a storage error otherwise)."""

    async def catch_up(self, timeout_s: float) -> None:
        """Return once every record below the log's current end has been applied."""

    async def close(self) -> None:
        ...


class MemoryTopic:
    """The shared records: several MemorySchemaLog readers over one topic act as registries of one cluster."""

    def __init__(self):
        self.records: list[tuple[bytes, bytes | None]] = []
        self.changed = asyncio.Event()

    def add(self, key: bytes, value: bytes | None) -> int:
        self.records.append((key, value))
        self.changed.set()  # wake every reader; each one clears it after catching up
        self.changed = asyncio.Event()
        return len(self.records) - 1


class MemorySchemaLog:
    """A SchemaLog in memory. ``MemorySchemaLog(topic)`` shares ``topic`` with other instances; each
    instance applies records in a background task, as a Kafka consumer would."""

    def __init__(self, topic: MemoryTopic | None = None):
        self.topic = topic if topic is not None else MemoryTopic()
        self._on_record: OnRecord | None = None
        self._position = 0
        self._progress = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.closed = False

    async def start(self, on_record: OnRecord) -> None:
        self._on_record = on_record
        self._task = asyncio.get_running_loop().create_task(self._tail())

    async def _tail(self) -> None:
        while True:
            changed = self.topic.changed
            while self._position < len(self.topic.records):
                key, value = self.topic.records[self._position]
                self._on_record(key, value, self._position)
                self._position += 1
                self._progress.set()
                self._progress = asyncio.Event()
            await changed.wait()

    async def append(self, key: bytes, value: bytes | None) -> int:
        if self.closed:
            raise ConnectionError("the schema log is closed")
        return self.topic.add(key, value)

    async def wait_applied(self, offset: int, timeout_s: float) -> None:
        await self._wait_position(offset + 1, timeout_s)

    async def catch_up(self, timeout_s: float) -> None:
        await self._wait_position(len(self.topic.records), timeout_s)

    async def _wait_position(self, position: int, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._position < position:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"the schema log did not reach offset {position} in {timeout_s}s")
            try:
                await asyncio.wait_for(self._progress.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    @property
    def position(self) -> int:
        return self._position

    async def close(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
