"""A broker process serving the schema registry, for the registry's CLI, interop tests and benchmark."""
import json
import socket
import time
import urllib.error
import urllib.request

from tests.broker import BrokerProcess

READY_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def registry_ready(url: str, timeout_s: float = READY_S) -> None:
    """Wait (bounded) until the registry at ``url`` answers GET /subjects."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/subjects", timeout=5) as resp:
                json.loads(resp.read())
                return
        except (OSError, ValueError, urllib.error.URLError) as exc:
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"the registry at {url} did not answer within {timeout_s}s: {last}")


def start_registry_broker(data_dir: str, overrides: dict | None = None) -> tuple[BrokerProcess, str]:
    """A started broker with ``schema.registry.listeners`` on a free port, and the registry's URL
    once it answers. The caller stops and closes the broker."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    broker = BrokerProcess(data_dir, {"schema.registry.listeners": url, "group.initial.rebalance.delay.ms": 0,
                                      **(overrides or {})}).start()
    try:
        registry_ready(url)
    except BaseException:
        broker.close()
        raise
    return broker, url
