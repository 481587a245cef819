"""EmbeddedBroker, ``serve --ready-file`` and the pytest plugin, with real brokers and confluent-kafka."""
import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import tomllib

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from pybroker import AsyncEmbeddedBroker, EmbeddedBroker
from pybroker.log.manager import CLEAN_SHUTDOWN
from pybroker.ready import read_ready_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ["process", "inprocess"]


def produce(bootstrap: str, topic: str, values: list) -> None:
    """acks=all; every message must be acknowledged."""
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0
    assert errors == []


def consume(bootstrap: str, topic: str, n: int, timeout: float = 30.0) -> list:
    """The first ``n`` values of partition 0 (assigned, no group)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-embedded", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        return got
    finally:
        c.close()


def values(prefix: str, n: int) -> list:
    return [f"{prefix}-{i}".encode() for i in range(n)]


@pytest.mark.parametrize("mode", MODES)
def test_produce_consume_and_restart_keeps_data(mode):
    with EmbeddedBroker(mode=mode) as b:
        assert b.bootstrap_servers == f"127.0.0.1:{b.port}"
        b.create_topic("events")
        sent = values("a", 20)
        produce(b.bootstrap_servers, "events", sent)
        assert consume(b.bootstrap_servers, "events", 20) == sent
        port, data_dir = b.port, b.data_dir
        b.restart()
        assert b.running and b.port == port  # same data dir, same port
        assert consume(b.bootstrap_servers, "events", 20) == sent
    assert not b.running
    assert not os.path.exists(data_dir)  # our own temporary data dir is gone


@pytest.mark.parametrize("mode", MODES)
def test_kill_then_restart_recovers_acknowledged_data(mode, tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(mode=mode, data_dir=str(data)) as b:
        b.create_topic("events", partitions=1)
        sent = values("k", 50)
        produce(b.bootstrap_servers, "events", sent)
        b.kill()
        assert not b.running
        assert not (data / CLEAN_SHUTDOWN).exists()  # a crash, not a clean stop
        b.start()
        assert consume(b.bootstrap_servers, "events", 50) == sent
        more = values("after", 5)
        produce(b.bootstrap_servers, "events", more)
        assert consume(b.bootstrap_servers, "events", 55) == sent + more
    assert (data / CLEAN_SHUTDOWN).exists()  # close() stopped it cleanly
    assert data.exists()  # the caller's data dir is kept


def test_overrides_and_create_topic_config():
    with EmbeddedBroker({"num.partitions": 3}) as b:
        b.create_topic("defaults", partitions=-1)
        b.create_topic("short", config={"retention.ms": "60000"})
        with b.admin() as admin:
            assert len(admin.describe_topics(["defaults"])["defaults"].partitions) == 3
            from pybroker.client import ConfigResource
            res = ConfigResource("topic", "short")
            value = admin.describe_configs([res])[res]["retention.ms"]
            assert getattr(value, "value", value) == "60000"


def test_async_context_managers():
    async def main():
        async with AsyncEmbeddedBroker(mode="inprocess") as b:
            await b.create_topic("a")
            await asyncio.to_thread(produce, b.bootstrap_servers, "a", [b"x"])
            await b.restart()
            assert await asyncio.to_thread(consume, b.bootstrap_servers, "a", 1) == [b"x"]
        async with EmbeddedBroker() as b2:  # the sync class works with ``async with`` too
            assert b2.running
        return b2
    assert not asyncio.run(main()).running


def test_child_stops_when_its_stdin_closes():
    """The broker process does not outlive its parent: its stdin pipe closing stops it cleanly."""
    with EmbeddedBroker() as b:
        b.proc.stdin.close()
        assert b.proc.wait(30) == 0


def test_serve_ready_file(tmp_path):
    ready = tmp_path / "run" / "ready.json"
    ready.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "pybroker", "serve", "--ready-file", str(ready),
                             "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                             "--override", f"log.dirs={tmp_path / 'data'}"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while (info := read_ready_file(str(ready))) is None:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        assert info["pid"] == proc.pid
        assert set(info) >= {"pid", "listeners", "version"}
        host, port = info["listeners"]["PLAINTEXT"].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        socket.create_connection((host, int(port)), timeout=5).close()  # serving already
        assert os.listdir(ready.parent) == ["ready.json"]  # no temporary file left behind
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not ready.exists()  # removed on a clean exit
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


# ---- the pytest plugin, run on a sample suite in a subprocess ----------------------------------

SAMPLE = '''
import time
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

seen = {}


def roundtrip(bootstrap, topic, n=3):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sample"})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == [b"v%d" % i for i in range(n)]


def test_roundtrip(pybroker_broker, pybroker_topic):
    seen["broker"], seen["topic"] = pybroker_broker, pybroker_topic
    roundtrip(pybroker_broker.bootstrap_servers, pybroker_topic)


def test_fresh_topic_same_broker(pybroker_broker, pybroker_topic, pybroker_test_broker):
    assert pybroker_broker is seen["broker"] is pybroker_test_broker
    assert pybroker_topic != seen["topic"]
    roundtrip(pybroker_broker.bootstrap_servers, pybroker_topic)


@pytest.mark.pybroker_config({"num.partitions": 3}, log_retention_ms=60000)
def test_marker(pybroker_test_broker, pybroker_topic, pybroker_broker):
    assert pybroker_test_broker is not pybroker_broker
    assert pybroker_test_broker.overrides == {"num.partitions": 3, "log.retention.ms": 60000}
    with pybroker_test_broker.admin() as admin:
        assert len(admin.describe_topics([pybroker_topic])[pybroker_topic].partitions) == 3
    roundtrip(pybroker_test_broker.bootstrap_servers, pybroker_topic)
'''

SAMPLE_CLUSTER = '''
from test_sample import roundtrip


def test_cluster(pybroker_cluster):
    cluster = pybroker_cluster(brokers=3)
    assert len(cluster.bootstrap_servers.split(",")) == 3
    topic = cluster.create_topic("replicated", partitions=1)
    from pybroker.client import AdminClient
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        assert len(admin.describe_topics([topic])[topic].partitions[0].replicas) == 3
    roundtrip(cluster.bootstrap_servers, topic)
'''


def run_pytest(path, *args, env_path=()):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*env_path, ROOT, *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "--strict-markers", *args, str(path)],
                          cwd=str(path), env=env, capture_output=True, text=True, timeout=300)


def summary(result) -> str:
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-2000:]


def zookeeper_available() -> bool:
    from pybroker.controller.zk_server import ZooKeeperNotInstalled, find_classpath
    try:
        find_classpath()
        return True
    except ZooKeeperNotInstalled:
        return False


@pytest.mark.slow
def test_plugin_sample_suite(tmp_path):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SAMPLE))
    (tmp_path / "test_sample_cluster.py").write_text(textwrap.dedent(SAMPLE_CLUSTER))
    result = run_pytest(tmp_path, "-p", "pybroker.pytest_plugin")
    expected = "4 passed" if zookeeper_available() else "3 passed, 1 skipped"
    assert expected in summary(result), result.stdout[-4000:] + result.stderr[-2000:]


def test_plugin_in_process_mode(tmp_path):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SAMPLE))
    result = run_pytest(tmp_path, "-p", "pybroker.pytest_plugin", "-o", "pybroker_mode=inprocess")
    assert "3 passed" in summary(result), result.stdout[-4000:] + result.stderr[-2000:]


def test_plugin_entry_point_and_dash_p_together(tmp_path):
    """Installed, the plugin loads by its pytest11 entry point; ``-p pybroker.pytest_plugin`` on top
    of that must not register it twice. An installed distribution is simulated with a dist-info
    directory carrying the entry point declared in pyproject.toml."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        entry_points = tomllib.load(f)["project"]["entry-points"]["pytest11"]
    dist = tmp_path / "site" / "pybroker_fake-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pybroker-fake\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_loaded.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.mark.pybroker_config(num_partitions=2)
        def test_loaded(pytestconfig):
            plugins = [p for p in pytestconfig.pluginmanager.get_plugins()
                       if getattr(p, "__name__", "") == "pybroker.pytest_plugin"]
            assert len(plugins) == 1
    '''))
    for extra in ((), ("-p", "pybroker.pytest_plugin")):
        result = run_pytest(suite, *extra, env_path=[str(tmp_path / "site")])
        assert "1 passed" in summary(result), (extra, result.stdout[-4000:] + result.stderr[-2000:])


@pytest.mark.parametrize("mode", MODES)
def test_restart_takes_a_new_port_when_the_old_one_is_taken(mode):
    with EmbeddedBroker(mode=mode) as b:
        b.create_topic("t")
        produce(b.bootstrap_servers, "t", [b"kept"])
        old = b.port
        b.stop()
        with socket.create_server(("127.0.0.1", old)):  # someone else got the port meanwhile
            b.start()
            assert b.running and b.port != old
            assert consume(b.bootstrap_servers, "t", 1) == [b"kept"]
