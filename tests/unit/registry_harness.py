"""In-process schema registries for unit tests: an asyncio loop in a thread serving real HTTP on
127.0.0.1:0 over a MemorySchemaLog, driven from the test with urllib or confluent-kafka's client."""
import asyncio
import json
import threading
import urllib.error
import urllib.request

import pytest

from pybroker.registry.http import RegistryServer
from pybroker.registry.primary import FixedPrimary, SinglePrimary
from pybroker.registry.schema_log import MemorySchemaLog, MemoryTopic
from pybroker.registry.service import SchemaRegistry
from pybroker.registry.settings import RegistrySettings

CT = "application/vnd.schemaregistry.v1+json"
TIMEOUT_S = 10


class LoopThread:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = TIMEOUT_S):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn):
        async def wrap():
            return fn()
        return self.run(wrap())

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(TIMEOUT_S)
        self.loop.close()


class Node:
    """One registry (service + HTTP server) on the loop."""

    def __init__(self, loop: LoopThread, topic: MemoryTopic, primary=None, authenticate=None, log_class=MemorySchemaLog,
                 **settings):
        self.loop = loop
        raw = {"schema.registry.listeners": "http://127.0.0.1:0", "schema.registry.request.timeout.ms": "5000"}
        raw.update({"schema.registry." + k.replace("_", "."): str(v) for k, v in settings.items()})
        self.settings = RegistrySettings.from_raw(raw)
        self.log = loop.call(lambda: log_class(topic))
        self.registry = SchemaRegistry(self.log, primary or SinglePrimary(), self.settings)
        self.server = RegistryServer(self.registry, self.settings, authenticate)
        loop.run(self.registry.start())
        loop.run(self.server.start())
        self.url = self.server.urls[0]
        if isinstance(self.registry.primary, SinglePrimary):
            self.registry.primary.url = self.url

    def stop(self):
        self.loop.run(self.server.stop())
        self.loop.run(self.registry.close())
        self.loop.run(self.log.close())

    def request(self, method, path, body=None, headers=None, raw: bytes | None = None):
        """(status, parsed JSON body or text, headers) of one HTTP request."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        hdrs = {"Content-Type": CT, "Accept": CT} if data is not None else {"Accept": CT}
        hdrs.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                status, payload, rh = resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as exc:
            status, payload, rh = exc.code, exc.read(), exc.headers
        try:
            parsed = json.loads(payload)
        except ValueError:
            parsed = payload.decode()
        return status, parsed, rh


def memory_topic(loop: LoopThread) -> MemoryTopic:
    return loop.call(MemoryTopic)


__all__ = ["LoopThread", "Node", "memory_topic", "FixedPrimary", "CT"]


# the fixtures the registry's unit tests share (imported by name into each module)
@pytest.fixture(scope="module")
def loop():
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture
def node(loop):
    n = Node(loop, memory_topic(loop))
    yield n
    n.stop()


@pytest.fixture
def nodes(loop):
    """start(topic=None, **kw): a registry over ``topic`` (default: a topic of its own), stopped afterwards."""
    started = []

    def start(topic=None, **kw):
        n = Node(loop, topic if topic is not None else memory_topic(loop), **kw)
        started.append(n)
        return n
    yield start
    for n in started:
        n.stop()
