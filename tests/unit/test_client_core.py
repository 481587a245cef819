"""Client core in-process: backoff, errors, config parsing, the loop thread
(against a real broker: tests/broker/test_client_core.py)."""
import asyncio

import pytest

from pybroker.client import config as client_config
from pybroker.client.cluster import backoff_s
from pybroker.client.errors import ConfigError, KafkaConnectionError, KafkaError, KafkaTimeoutError, error_for
from pybroker.client.runner import LoopThread
from pybroker.protocol.errors import ErrorCode


def test_backoff_grows_and_is_capped():
    for attempt in range(12):
        d = backoff_s(attempt, 100, 1000)
        expected = min(100 * 2 ** attempt, 1000) / 1000
        assert expected * 0.8 - 1e-9 <= d <= expected * 1.2 + 1e-9


def test_errors():
    e = error_for(6, "moved")
    assert (e.code, e.name, e.retriable, e.message) == (6, "NOT_LEADER_OR_FOLLOWER", True, "moved")
    assert not error_for(ErrorCode.TOPIC_ALREADY_EXISTS).retriable
    assert error_for(3).__class__.__name__ == "UnknownTopicError"
    assert isinstance(error_for(7), KafkaTimeoutError) and isinstance(error_for(13), KafkaConnectionError)
    assert KafkaError(12345).name == "ERROR_12345"


def test_config_parsing():
    cfg = client_config.parse({"bootstrap.servers": "h1:9092, h2:9093", "retries": "3",
                               "request.timeout.ms": 500.0, "linger.ms": "7", "enable.idempotence": "TRUE",
                               "ratio": "0.5", "compression.type": "LZ4"}, "producer",
                              {"linger.ms": (int, 5, 0), "enable.idempotence": (bool, True),
                               "ratio": (float, 1.0), "compression.type": (str, "none", ("none", "lz4"))})
    assert cfg["retries"] == 3 and cfg["request.timeout.ms"] == 500 and cfg["linger.ms"] == 7
    assert cfg["enable.idempotence"] is True and cfg["ratio"] == 0.5 and cfg["compression.type"] == "lz4"
    assert cfg.bootstrap == [("h1", 9092), ("h2", 9093)]
    assert cfg["retry.backoff.ms"] == 100 and cfg["metadata.max.age.ms"] == 300000  # Kafka's defaults
    assert cfg.client_id == "pybroker-producer" and cfg.seconds("request.timeout.ms") == 0.5
    assert client_config.parse({"bootstrap.servers": ["a:1"], "client.id": "x"}, "admin").client_id == "x"

    def bad(props, extra=None):
        with pytest.raises(ConfigError) as info:
            client_config.parse(props, "consumer", extra)
        return info.value.message
    assert "'linger.ms'" in bad({"bootstrap.servers": "a:1", "linger.ms": 5})  # a producer key
    assert "bootstrap.servers is required" in bad({})
    assert "retries" in bad({"bootstrap.servers": "a:1", "retries": "many"})
    assert "retries" in bad({"bootstrap.servers": "a:1", "retries": True})
    assert "below the minimum" in bad({"bootstrap.servers": "a:1", "request.timeout.ms": 0})
    assert "HOST:PORT" in bad({"bootstrap.servers": "nohost"})
    assert "empty" in bad({"bootstrap.servers": " , "})
    assert "check.crcs" in bad({"bootstrap.servers": "a:1", "check.crcs": "yes"}, {"check.crcs": (bool, True)})
    assert "not one of" in bad({"bootstrap.servers": "a:1", "security.protocol": "KERBEROS"})
    assert "None" in bad({"bootstrap.servers": "a:1", "client.id": None})
    for unsupported in ("client.dns.lookup", "socket.connection.setup.timeout.max.ms"):
        message = bad({"bootstrap.servers": "a:1", unsupported: "1"})
        assert unsupported in message and "not supported" in message
    with pytest.raises(ConfigError):
        client_config.parse("bootstrap.servers=a:1", "admin")


def test_loop_thread():
    lt = LoopThread()
    try:
        async def double(x):
            await asyncio.sleep(0.01)
            return 2 * x

        async def boom():
            raise KafkaError(ErrorCode.INVALID_REQUEST, "bad")
        assert lt.run(double(21)) == 42
        with pytest.raises(KafkaError) as info:
            lt.run(boom())
        assert info.value.message == "bad"
        cancelled = []

        async def slow():
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
        with pytest.raises(KafkaTimeoutError):
            lt.run(slow(), timeout=0.2)
        fut = lt.submit(double(1))
        assert fut.result(5) == 2
        called = []
        lt.call_soon(called.append, 1)
        assert lt.run(double(0)) == 0 and called == [1]
        assert cancelled == [True]

        async def reenter():
            return lt.run(double(1))
        with pytest.raises(RuntimeError):
            lt.run(reenter())
    finally:
        lt.stop()
    assert not lt.thread.is_alive() and not lt.running
    lt.stop()  # idempotent
    with pytest.raises(RuntimeError):
        lt.run(asyncio.sleep(0))
    shared = LoopThread.shared()
    assert LoopThread.shared() is shared and shared.thread.daemon

