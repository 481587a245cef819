"""KIP-951 in our clients: a Produce (v10+) or Fetch (v12+) answered NOT_LEADER_OR_FOLLOWER names
the new leader, and our producer and consumer move there without a metadata round trip.

A real three-broker cluster (real ZooKeeper): partition 0 fails over away from its preferred
replica, our clients learn the stand-in leader, then a preferred election moves the leadership
back while they keep sending to the stand-in.

The cases of the other tiers: tests/unit/test_client_leader_hints.py.
"""
import json
import subprocess
import sys
import time

import pytest

from pybroker.client import Consumer, Producer
from tests.cluster import Cluster
from tests.cluster.test_replication import OVERRIDES, create_topic

DEADLINE = 60


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path, 3, zk=zookeeper, overrides={**OVERRIDES, "auto.leader.rebalance.enable": "false"}) as c:
        yield c


def preferred_replica(cluster, topic: str) -> int:
    return json.loads(cluster._get(f"/brokers/topics/{topic}"))["partitions"]["0"][0]


def full_isr(cluster, topic: str) -> bool:
    return len((cluster.partition_state(topic, 0) or {}).get("isr", ())) == 3


def fail_over(cluster, topic: str) -> int:
    """Kill the preferred leader, restart it, wait until it is back in the ISR (not leading)."""
    preferred = preferred_replica(cluster, topic)
    cluster.wait_for(lambda: cluster.leader(topic, 0) == preferred, 30, "the preferred replica leading")
    cluster.kill(preferred)
    cluster.wait_for(lambda: cluster.leader(topic, 0) not in (preferred, -1, None), 30, "a new leader")
    cluster.restart(preferred)
    cluster.wait_for(lambda: full_isr(cluster, topic), 90, "a full ISR")
    return preferred


def elect_preferred(cluster, topic: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pybroker", "leader-election", "--bootstrap-server",
                           cluster.bootstrap, "--election-type", "preferred", "--topic", topic, "--partition", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_producer_and_consumer_follow_the_leader_hint(cluster):
    topic = create_topic(cluster, "hinted", partitions=1, rf=3)
    preferred = fail_over(cluster, topic)
    stand_in = cluster.leader(topic, 0)
    conf = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "metadata.max.age.ms": 600_000}
    with Producer(conf) as p, Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 100,
                                        "metadata.max.age.ms": 600_000}) as c:
        p.produce(topic, b"before", partition=0)
        assert p.flush(DEADLINE) == 0
        c.assign([(topic, 0, 0)])
        got, deadline = [], time.monotonic() + DEADLINE
        while len(got) < 1 and time.monotonic() < deadline:
            got += c.poll(200)
        assert [r.value for r in got] == [b"before"]
        assert p._engine.cluster.leader_for((topic, 0)) == stand_in

        elect_preferred(cluster, topic)
        assert cluster.leader(topic, 0) == preferred
        p.produce(topic, b"after", partition=0)
        assert p.flush(DEADLINE) == 0
        assert p.metrics()["record_errors"] == 0
        assert p.metrics()["leader_hints"] >= 1
        assert p._engine.cluster.leader_for((topic, 0)) == preferred
        while len(got) < 2 and time.monotonic() < deadline:
            got += c.poll(200)
        assert [r.value for r in got] == [b"before", b"after"]
        assert c._async._cluster.leader_for((topic, 0)) == preferred
        assert c._async._fetcher.leader_hints >= 1
