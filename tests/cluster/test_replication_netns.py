"""Replication across a real network cut: every broker in its own network namespace (tests/netns.py).

The network-cut counterpart of test_replication.py's SIGSTOP test: the cut follower keeps running
and keeps its ZooKeeper session (30 s), but no packet reaches it or leaves it. Needs root and
iproute2 (skipped otherwise; under CI=true that is a failure) and ZooKeeper (as tests/cluster.py).
"""
import os
import socket
import time

import pytest

from tests.cluster import Cluster, require_zookeeper
from tests.netns import NetnsUnavailable, TestNetwork
from tests.replication_checks import LoggedProducer, check_data
from tests.cluster.test_replication import create_topic, wait_full_isr

OVERRIDES = {"min.insync.replicas": 2, "default.replication.factor": 3, "offsets.topic.num.partitions": 3,
             "zookeeper.session.timeout.ms": 30000, "replica.lag.time.max.ms": 3000}


# one worker builds the test networks, so two never pick the same free subnet at once
pytestmark = pytest.mark.xdist_group("netns")


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture
def net():
    try:
        network = TestNetwork(3)
    except NetnsUnavailable as exc:
        if under_ci():
            pytest.fail(f"network namespaces are required under CI: {exc}", pytrace=False)
        pytest.skip(f"cannot build a namespaced test network: {exc}")
    try:
        yield network
    finally:
        network.close()


def namespaces() -> set:
    from tests.netns import _run
    return {line.split()[0] for line in _run("ip", "netns", "list").stdout.splitlines() if line.strip()}


def unreachable(host: str, port: int, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return True
    return False


def test_network_cut_heal_and_cleanup(net):
    """The harness itself: the root namespace reaches a server bound in a broker namespace; a cut
    loses the packets, a heal restores them; close() removes every namespace and link."""
    import subprocess
    import sys
    host = net.host(2)
    server = subprocess.Popen(
        [*net.prefixes[2], sys.executable, "-c",
         "import socket, sys\n"
         f"s = socket.create_server(({host!r}, 0)); print(s.getsockname()[1], flush=True)\n"
         "while True:\n    c, _ = s.accept(); c.sendall(b'hi'); c.close()\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        with socket.create_connection((host, port), timeout=10) as c:
            assert c.recv(2) == b"hi"
        net.cut(2)
        assert unreachable(host, port), f"a cut link ({net.cut_method}) still carried a connection"
        net.heal(2)
        with socket.create_connection((host, port), timeout=10) as c:
            assert c.recv(2) == b"hi"
    finally:
        server.kill()
        server.wait(30)
        server.stdout.close()
    created = {net.hub, *(net.namespace(b) for b in net.broker_ids)}
    assert created <= namespaces()
    link = net.root_link
    net.close()
    assert not created & namespaces()
    from tests.netns import _run
    assert _run("ip", "link", "show", "dev", link, check=False).returncode != 0


def test_cut_off_follower_leaves_and_rejoins_the_isr(tmp_path, net):
    """A follower whose link is cut stops fetching: the leader drops it from the ISR after
    replica.lag.time.max.ms while its ZooKeeper session lives on; acks=all writes still succeed
    with two in-sync replicas; once the link heals it catches up and rejoins the ISR."""
    require_zookeeper()
    zk = net.start_zookeeper(tmp_path / "zookeeper")
    with Cluster(tmp_path, 3, zk=zk.connect, overrides=OVERRIDES, listener_host=net.hosts,
                 command_prefix=net.prefixes) as cluster:
        topic = create_topic(cluster, "netcut", partitions=1)
        producer = LoggedProducer(cluster.bootstrap, topic).start()
        try:
            producer.wait_acked(100, timeout=120)
            wait_full_isr(cluster, topic, 1)
            state = cluster.partition_state(topic, 0)
            leader, controller = state["leader"], cluster.controller_id()
            # a follower that is not the controller: this test is about the ISR, not controller moves
            follower = next(b for b in state["isr"] if b not in (leader, controller))
            session = cluster.zk().exists(f"/brokers/ids/{follower}").ephemeralOwner

            net.cut(follower)
            cut_at = time.monotonic()
            cluster.wait_for(lambda: follower not in cluster.partition_state(topic, 0)["isr"], 60,
                             f"the leader to drop the cut-off broker {follower} from the ISR")
            shrunk_after = time.monotonic() - cut_at
            state = cluster.partition_state(topic, 0)
            assert state["leader"] == leader and sorted(state["isr"]) == sorted({1, 2, 3} - {follower}), state
            registered = cluster.zk().exists(f"/brokers/ids/{follower}")
            assert registered is not None and registered.ephemeralOwner == session, \
                "the cut-off follower lost its ZooKeeper session (it should outlive the cut)"
            assert cluster.broker(follower).alive()
            producer.wait_acked(100, timeout=60)  # two in-sync replicas still satisfy min.insync.replicas
            assert unreachable(net.host(follower), cluster.broker(follower).port), "the link is not cut"
            cut_for = time.monotonic() - cut_at

            net.heal(follower)
            healed_at = time.monotonic()
            wait_full_isr(cluster, topic, 1, timeout=120)
            rejoined_after = time.monotonic() - healed_at
            assert cluster.zk().exists(f"/brokers/ids/{follower}").ephemeralOwner == session, \
                "the follower's ZooKeeper session expired during the cut"
            assert cluster.leader(topic, 0) == leader
            producer.wait_acked(100, timeout=60)
        finally:
            producer.stop()
        print(f"cut method {net.cut_method}: ISR shrank {shrunk_after:.1f} s after the cut, link cut for "
              f"{cut_for:.1f} s, follower {follower} back in the ISR {rejoined_after:.1f} s after the heal; "
              f"{len(producer.acked)} records acknowledged")
        assert not producer.errors, producer.errors[:5]
        check_data(cluster, topic, 1, producer)


def test_end_offsets_never_go_back_when_the_leader_is_cut_off(tmp_path, net):
    """KIP-207 across a network cut: the leader's link is cut (it loses ZooKeeper too, and its session
    expires), another broker is elected; a client asking the end offset all along never sees it go
    back, and once the link heals every acknowledged record is there."""
    from tests.cluster.test_replication import wait_new_leader
    from tests.replication_checks import librdkafka_end_offset_watcher
    require_zookeeper()
    zk = net.start_zookeeper(tmp_path / "zookeeper")
    overrides = {**OVERRIDES, "zookeeper.session.timeout.ms": 6000}
    with Cluster(tmp_path, 3, zk=zk.connect, overrides=overrides, listener_host=net.hosts,
                 command_prefix=net.prefixes) as cluster:
        topic = create_topic(cluster, "netends", partitions=1)
        # requests to the cut-off leader get no answer: give up on them after 5 s, not librdkafka's 30 s
        producer = LoggedProducer(cluster.bootstrap, topic, **{"request.timeout.ms": 5000}).start()
        watcher = librdkafka_end_offset_watcher(cluster.bootstrap, topic).start()
        try:
            producer.wait_acked(100, timeout=120)
            wait_full_isr(cluster, topic, 1)
            watcher.wait_answers(5)
            state = cluster.partition_state(topic, 0)
            leader = state["leader"]
            net.cut(leader)
            wait_new_leader(cluster, topic, leader, state["leader_epoch"], timeout=60)
            producer.wait_acked(50, timeout=90)
            watcher.wait_answers(5)
            net.heal(leader)
            wait_full_isr(cluster, topic, 1, timeout=120)
            producer.wait_acked(50, timeout=60)
        finally:
            producer.stop()
            watcher.stop()
        assert not watcher.went_back(), f"the end offset went back: {watcher.went_back()[:5]}"
        check_data(cluster, topic, 1, producer)
