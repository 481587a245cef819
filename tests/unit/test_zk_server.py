"""The standalone ZooKeeper runner without Java: a clear error (a real server: tests/cluster/test_zk_server.py)."""
import pytest

from pybroker.controller.zk_server import ZooKeeperNotInstalled, find_classpath


def test_missing_java(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ZooKeeperNotInstalled, match="java"):
        find_classpath()

