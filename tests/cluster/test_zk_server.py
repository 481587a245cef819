"""The standalone ZooKeeper runner: a real server from Debian's package, driven through kazoo.

The cases of the other tiers: tests/unit/test_zk_server.py."""
import os
import socket

import pytest

from pybroker.controller import zk_server
from pybroker.controller.zk_server import (ZooKeeperError, ZooKeeperNotInstalled, ZooKeeperServer,
                                           find_classpath, four_letter_word)
from tests.cluster import require_zookeeper


@pytest.fixture
def server(tmp_path):
    require_zookeeper()
    s = ZooKeeperServer(str(tmp_path / "zk")).start()
    yield s
    s.kill()


def client(server, timeout=10.0):
    from kazoo.client import KazooClient
    c = KazooClient(hosts=server.connect, timeout=timeout)
    c.start(timeout=30)
    return c


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_serves_znodes_and_stops(server):
    host, port = server.connect.split(":")
    assert host == "127.0.0.1" and int(port) == server.port > 0
    assert four_letter_word(server.port, "ruok") == "imok"
    assert "Mode: standalone" in four_letter_word(server.port, "srvr")
    c = client(server)
    try:
        c.create("/pybroker-test/a", b'{"brokerid": 1}', makepath=True)
        assert c.get("/pybroker-test/a")[0] == b'{"brokerid": 1}'
    finally:
        c.stop()
        c.close()
    pid = server.pid
    server.stop()
    assert not server.alive() and server.proc.returncode is not None and gone(pid)
    server.stop()  # idempotent


def test_pause_and_resume(server):
    c = client(server)
    try:
        c.create("/x", b"1")
        server.pause()
        with pytest.raises(OSError):  # a stopped JVM accepts (the kernel does) but never answers
            four_letter_word(server.port, "ruok", timeout=1.0)
        server.resume()
        assert four_letter_word(server.port, "ruok") == "imok"
        c.set("/x", b"2")
        assert c.get("/x")[0] == b"2"
    finally:
        c.stop()
        c.close()


def test_restart_keeps_port_and_data(server):
    c = client(server)
    c.create("/kept", b"yes")
    c.stop()
    c.close()
    port, old_pid = server.port, server.pid
    server.kill()
    assert gone(old_pid)
    server.start()
    assert server.port == port and server.pid != old_pid
    c = client(server)
    try:
        assert c.get("/kept")[0] == b"yes"
    finally:
        c.stop()
        c.close()


def test_context_manager(tmp_path):
    require_zookeeper()
    with ZooKeeperServer(str(tmp_path / "zk")) as s:
        assert s.alive()
        pid = s.pid
    assert gone(pid)


def test_bad_classpath_env_is_a_clear_error(tmp_path, monkeypatch):
    require_zookeeper()
    missing = str(tmp_path / "no-such.jar")
    monkeypatch.setenv("ZOOKEEPER_CLASSPATH", missing)
    with pytest.raises(ZooKeeperNotInstalled, match="ZOOKEEPER_CLASSPATH.*no-such.jar"):
        find_classpath()
    with pytest.raises(ZooKeeperNotInstalled):
        ZooKeeperServer(str(tmp_path / "zk")).start()


def test_wrong_jars_fail_with_the_server_output(tmp_path, monkeypatch):
    require_zookeeper()
    monkeypatch.setenv("ZOOKEEPER_CLASSPATH", "/usr/share/java/slf4j-api.jar")
    s = ZooKeeperServer(str(tmp_path / "zk"))
    with pytest.raises(ZooKeeperError, match="(?s)exited with status.*QuorumPeerMain"):
        s.start(timeout=30)
    assert not s.alive()


def test_missing_jars_name_the_package(tmp_path, monkeypatch):
    require_zookeeper()
    monkeypatch.delenv("ZOOKEEPER_CLASSPATH", raising=False)
    monkeypatch.setattr(zk_server, "JAVA_DIR", str(tmp_path))
    with pytest.raises(ZooKeeperNotInstalled, match="apt-get install zookeeper"):
        find_classpath()


def test_start_fails_on_a_taken_port(tmp_path):
    require_zookeeper()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        s = ZooKeeperServer(str(tmp_path / "zk"), port=taken.getsockname()[1])
        with pytest.raises(ZooKeeperError):
            s.start(timeout=30)
        assert not s.alive()
