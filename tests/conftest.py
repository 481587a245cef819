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
ONE_WORKER_FIXTURES = ("spark", "shared_cluster")


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


# what every broker of the shared cluster runs with: the settings of the cluster tests' own clusters
SHARED_CLUSTER_OVERRIDES = {"min.insync.replicas": 2, "default.replication.factor": 3,
                            "offsets.topic.num.partitions": 3, "zookeeper.session.timeout.ms": 6000,
                            "replica.lag.time.max.ms": 3000}


def under_replicated(cluster) -> list:
    """The partitions of the cluster (topics being deleted aside) whose ISR is not all their replicas."""
    import json
    zk = cluster.zk()
    deleting = set(zk.get_children("/admin/delete_topics")) if zk.exists("/admin/delete_topics") else set()
    out = []
    for topic in sorted(set(zk.get_children("/brokers/topics")) - deleting):
        for p, replicas in json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"].items():
            state = cluster.partition_state(topic, int(p))
            if state is None or sorted(state["isr"]) != sorted(replicas):
                out.append((topic, int(p), state and state["isr"], replicas))
    return out


def wait_intact(cluster, timeout: float = 60) -> None:
    """Every broker running and registered, a controller, and every partition's ISR full."""
    dead = [i for i, b in cluster.brokers.items() if not b.alive()]
    assert not dead, f"brokers {dead} of the shared cluster are down; stderr tail: " + \
        cluster.broker(dead[0]).stderr()[-2000:]
    cluster.wait_formed(timeout)
    lagging = []

    def all_full() -> bool:
        lagging[:] = under_replicated(cluster)
        return not lagging
    try:
        cluster.wait_for(all_full, timeout, "every ISR of the shared cluster full")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; under-replicated (topic, partition, isr, replicas): {lagging}") from None


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory, zookeeper):
    """One three-broker cluster (ids 1, 2, 3) per test session (all its tests run on one parallel worker),
    for the tests that leave it as they found it: their own topic and group names, and any broker they
    stop or pause back, with every ISR full, before they end (checked after each of them)."""
    from tests.cluster import Cluster
    cluster = Cluster(tmp_path_factory.mktemp("shared-cluster"), 3, zk=zookeeper, overrides=SHARED_CLUSTER_OVERRIDES)
    try:
        yield cluster
        wait_intact(cluster)
    finally:
        cluster.close()


@pytest.fixture(autouse=True)
def _shared_cluster_left_intact(request):
    """A test that leaves the shared cluster broken fails at its own teardown, not a later test."""
    yield
    if "shared_cluster" in request.fixturenames:
        wait_intact(request.getfixturevalue("shared_cluster"))


@pytest.fixture
def cluster3(tmp_path, zookeeper):
    """Three brokers (ids 1, 2, 3) on the session's ZooKeeper; every process killed afterwards."""
    from tests.cluster import Cluster
    cluster = Cluster(tmp_path, 3, zk=zookeeper)
    yield cluster
    cluster.close()
    zookeeper.resume()  # in case the test paused the shared server
