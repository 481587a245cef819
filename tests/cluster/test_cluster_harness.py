"""The multi-broker test harness itself: fixed ports across restarts, signals by PID, chroot reads."""
import socket

import pytest

from tests.cluster import Cluster


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]  # R, S, T (stopped), ...


def test_brokers_keep_their_ports_across_restarts(cluster3):
    ports = [int(hp.rsplit(":", 1)[1]) for hp in cluster3.bootstrap.split(",")]
    assert len(set(ports)) == 3
    for port in ports:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    old = cluster3.broker(2).proc.pid
    cluster3.kill(2)
    assert not cluster3.broker(2).alive()
    cluster3.restart(2)
    assert cluster3.broker(2).proc.pid != old and cluster3.broker(2).port == ports[1]
    assert cluster3.stop(1) == 0
    cluster3.restart(1)
    assert cluster3.broker(1).port == ports[0]
    assert cluster3.bootstrap == ",".join(f"127.0.0.1:{p}" for p in ports)


def test_pause_and_resume_signal_only_that_broker(cluster3):
    pid = cluster3.broker(3).proc.pid
    cluster3.pause(3)
    assert state(pid) == "T"
    assert all(state(cluster3.broker(i).proc.pid) != "T" for i in (1, 2))
    cluster3.resume(3)
    assert state(pid) != "T"
    assert cluster3.stop(3) == 0  # a paused broker is resumed before SIGTERM


def test_reads_go_to_the_clusters_own_chroot(cluster3, zookeeper, tmp_path):
    assert cluster3.live_brokers() == [1, 2, 3]
    assert cluster3.controller_id() in (1, 2, 3) and cluster3.controller_epoch() == 1
    cluster3.zk().create("/brokers/topics/t/partitions/0/state",
                         b'{"controller_epoch":4,"leader":3,"version":1,"leader_epoch":7,"isr":[3,1]}',
                         makepath=True)
    assert cluster3.partition_state("t", 0)["isr"] == [3, 1] and cluster3.leader("t", 0) == 3
    assert cluster3.partition_state("t", 1) is None and cluster3.leader("t", 1) is None
    other = Cluster(tmp_path / "other", 0, zk=zookeeper)  # no brokers: just another chroot
    try:
        assert other.chroot != cluster3.chroot
        assert other.controller_id() is None and other.controller_epoch() is None
        assert other.live_brokers() == []
    finally:
        other.close()


def test_wait_for_names_what_it_waited_for():
    assert Cluster.wait_for(lambda: 5, timeout=1, what="five") == 5
    with pytest.raises(AssertionError, match=r"waiting for the leader; last value: \[\]"):
        Cluster.wait_for(lambda: [], timeout=0.3, what="the leader")
    with pytest.raises(AssertionError, match="last error: KeyError"):
        Cluster.wait_for(lambda: {}["x"], timeout=0.3, what="a key")
