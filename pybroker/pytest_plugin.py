"""pytest plugin: real pybroker brokers as fixtures.

Loaded automatically when pybroker is installed (the ``pytest11`` entry point ``pybroker``), or
explicitly with ``pytest -p pybroker.pytest_plugin``.

Fixtures:

* ``pybroker_broker`` (session): one ``EmbeddedBroker`` shared by the whole run;
  ``pybroker_broker.bootstrap_servers`` is what clients connect to.
* ``pybroker_topic`` (function): the name of a fresh topic, created (broker defaults:
  ``num.partitions``, ``default.replication.factor``) on the test's broker (see below).
* ``pybroker_test_broker`` (function): the test's broker -- the session broker, or, for a test
  marked ``pybroker_config``, a broker started with those settings.
* ``pybroker_cluster`` (function): a factory, ``pybroker_cluster(brokers=3, overrides=None)``,
  returning a started ``EmbeddedCluster`` (ZooKeeper plus N brokers); everything it started is
  stopped after the test. Skipped when Java or the ZooKeeper jars are missing.
* ``pybroker_zookeeper`` (session): the ZooKeeper the clusters share (each under its own chroot).

Marker ``@pytest.mark.pybroker_config({"num.partitions": 3}, log_retention_ms=1000)``: broker
settings by their Kafka names, as dicts and/or keywords (``_`` in a keyword becomes ``.``). The
marked test's ``pybroker_test_broker`` and ``pybroker_topic`` use a broker started with these
settings; tests that ask for the same settings share one broker for the session. The marker can be
put on a module (``pytestmark``) or class as well; the closest one wins. ``pybroker_broker`` itself
is never affected (it is session-scoped).

Ini options: ``pybroker_mode`` (``process``, the default, or ``inprocess``) for the brokers the
plugin starts.
"""
import itertools
import re

import pytest

_topic_numbers = itertools.count()


def pytest_addoption(parser):
    parser.addini("pybroker_mode", "how pybroker fixtures run brokers: process (default) or inprocess",
                  default="process")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "pybroker_config(*dicts, **settings): broker settings for this test's pybroker_test_broker "
                   "and pybroker_topic (keywords: '_' becomes '.')")


def marker_settings(node) -> dict | None:
    """The broker settings of the closest ``pybroker_config`` marker, or None without one."""
    mark = node.get_closest_marker("pybroker_config")
    if mark is None:
        return None
    settings = {}
    for arg in mark.args:
        if not isinstance(arg, dict):
            raise pytest.UsageError(f"pybroker_config takes dicts and keywords, not {arg!r}")
        settings.update(arg)
    settings.update({key.replace("_", "."): value for key, value in mark.kwargs.items()})
    return settings


class _Brokers:
    """The plugin's brokers for one session: the shared one and one per distinct marker config."""

    def __init__(self, mode: str):
        self.mode = mode
        self.by_config: dict = {}

    def get(self, settings: dict):
        from pybroker.embedded import EmbeddedBroker
        key = tuple(sorted((str(k), str(v)) for k, v in settings.items()))
        broker = self.by_config.get(key)
        if broker is None:
            broker = EmbeddedBroker(settings, mode=self.mode)
            try:
                broker.start()
            except BaseException:
                broker.close()
                raise
            self.by_config[key] = broker
        return broker

    def close(self) -> None:
        for broker in self.by_config.values():
            broker.close()
        self.by_config.clear()


@pytest.fixture(scope="session")
def _pybroker_brokers(request):
    brokers = _Brokers(request.config.getini("pybroker_mode") or "process")
    yield brokers
    brokers.close()


@pytest.fixture(scope="session")
def pybroker_broker(_pybroker_brokers):
    """The session's shared EmbeddedBroker (``.bootstrap_servers``, ``.create_topic``...)."""
    return _pybroker_brokers.get({})


@pytest.fixture
def pybroker_test_broker(request, _pybroker_brokers):
    """This test's broker: the session broker, or one with the test's ``pybroker_config`` settings."""
    settings = marker_settings(request.node)
    if settings is None:
        return request.getfixturevalue("pybroker_broker")
    return _pybroker_brokers.get(settings)


@pytest.fixture
def pybroker_topic(request, pybroker_test_broker):
    """A fresh topic on the test's broker, named after the test; returns its name."""
    base = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:180]
    name = f"{base}-{next(_topic_numbers)}"
    return pybroker_test_broker.create_topic(name, partitions=-1)


@pytest.fixture(scope="session")
def pybroker_zookeeper(tmp_path_factory):
    """A ZooKeeper server for the session's clusters; skips when Java or its jars are missing."""
    from pybroker.controller.zk_server import ZooKeeperNotInstalled, ZooKeeperServer, find_classpath
    try:
        find_classpath()
    except ZooKeeperNotInstalled as exc:
        pytest.skip(f"pybroker_cluster needs ZooKeeper: {exc}")
    server = ZooKeeperServer(str(tmp_path_factory.mktemp("pybroker-zookeeper"))).start()
    yield server
    server.stop()


@pytest.fixture
def pybroker_cluster(request):
    """A factory: ``pybroker_cluster(brokers=3, overrides=None)`` starts a cluster and returns it."""
    from pybroker.embedded_cluster import EmbeddedCluster
    clusters = []

    def make(brokers: int = 3, overrides: dict | None = None) -> EmbeddedCluster:
        zookeeper = request.getfixturevalue("pybroker_zookeeper")
        cluster = EmbeddedCluster(brokers, overrides=overrides, zookeeper=zookeeper)
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in clusters:
        cluster.close()
