import pytest

from tests.broker import BrokerProcess, dump_running_stacks


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test shows the stacks and last log lines of its still-running brokers."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for path, tail in dump_running_stacks():
            report.sections.append((f"broker {path}", tail))


@pytest.fixture
def broker(tmp_path):
    """A running broker with its own data dir; stopped (SIGTERM, then SIGKILL) after the test."""
    b = BrokerProcess(str(tmp_path / "data")).start()
    yield b
    try:
        b.stop()
    finally:
        b.close()


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers with overrides: ``broker_factory(overrides=..., data_dir=...)``; all cleaned up."""
    started = []

    def make(overrides=None, data_dir=None, port=0):
        b = BrokerProcess(data_dir or str(tmp_path / f"data{len(started)}"), overrides, port).start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.close()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """One real ZooKeeper for the whole session (clusters share it, each under its own chroot).

    Skipped when Java or Debian's zookeeper jars are missing, except under CI, where that fails.
    """
    from pybroker.controller.zk_server import ZooKeeperServer
    from tests.cluster import require_zookeeper
    require_zookeeper()
    server = ZooKeeperServer(str(tmp_path_factory.mktemp("zookeeper"))).start()
    yield server
    server.stop()


@pytest.fixture
def cluster3(tmp_path, zookeeper):
    """Three brokers (ids 1, 2, 3) on the session's ZooKeeper; every process killed afterwards."""
    from tests.cluster import Cluster
    cluster = Cluster(tmp_path, 3, zk=zookeeper)
    yield cluster
    cluster.close()
    zookeeper.resume()  # in case the test paused the shared server
