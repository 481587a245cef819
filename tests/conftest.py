import os

import pytest

from tests.broker import BrokerProcess, dump_running_stacks

TIERS = ("unit", "broker", "cluster", "interop")
HERE = os.path.dirname(os.path.abspath(__file__))
# per-test timeout of each tier, in seconds, unless a test's own @pytest.mark.timeout says otherwise
TIER_TIMEOUT = {"unit": 180, "broker": 300, "cluster": 600, "interop": 600}


def tier_of(path) -> str | None:
    """The tier a test file belongs to: the first folder under tests/."""
    rel = os.path.relpath(str(path), HERE)
    first = rel.split(os.sep, 1)[0]
    return first if first in TIERS else None


# session fixtures too heavy to start once per parallel worker: their tests share one worker
ONE_WORKER_FIXTURES = ("spark",)


def worker_group(item) -> str | None:
    """The xdist group that keeps a test with the tests it shares an expensive fixture with:
    a module-scoped fixture (a broker or cluster per module) keeps its module on one worker."""
    fixturedefs = getattr(item, "_fixtureinfo", None)
    if fixturedefs is None:
        return None
    for name in ONE_WORKER_FIXTURES:
        if name in fixturedefs.name2fixturedefs:
            return name
    for name, defs in fixturedefs.name2fixturedefs.items():
        if defs and defs[-1].scope in ("module", "package", "class"):
            return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    """Mark each test with its folder's tier (``-m unit``), give it that tier's timeout, and
    group the tests that share an expensive fixture onto one parallel worker."""
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            continue
        item.add_marker(getattr(pytest.mark, tier))
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIER_TIMEOUT[tier]))
        if item.get_closest_marker("xdist_group") is None:
            group = worker_group(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # the long tests first, so the parallel workers do not wait on one of them at the end
        # (only tests with no module-scoped fixture move: a module's shared broker stays set up once)
        items.sort(key=lambda item: item.get_closest_marker("slow") is None or
                   item.get_closest_marker("xdist_group") is not None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test shows the stacks and last log lines of its still-running brokers."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for path, tail in dump_running_stacks():
            report.sections.append((f"broker {path}", tail))


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory):
    """One running broker per test session (per parallel worker), for the tests that leave it as they
    found it: each uses its own topic and group names, and none restarts or reconfigures it."""
    b = BrokerProcess(str(tmp_path_factory.mktemp("shared-broker") / "data"),
                      {"group.initial.rebalance.delay.ms": 0}).start()
    yield b
    try:
        code = b.stop()
    finally:
        b.close()
    assert code == 0, f"the shared broker exited with {code}; stderr tail: {b.stderr()[-2000:]}"


@pytest.fixture
def broker(tmp_path):
    """A running broker of the test's own, with its own data dir; stopped (SIGTERM, then SIGKILL) after
    the test. For a test that stops, restarts or reconfigures it; one that does not can use shared_broker."""
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
