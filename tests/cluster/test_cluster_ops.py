"""Operating a cluster: controlled shutdown, rolling restarts, leader elections (real ZooKeeper,
real brokers, real clients).

The cases of the other tiers: tests/broker/test_cluster_ops.py.
"""
import json
import subprocess
import sys

import pytest

from pybroker.protocol import REQUESTS
from tests.cluster import Cluster
from tests.kafka_wire import WireClient
from tests.replication_checks import LoggedConsumer, LoggedProducer, check_data
from tests.cluster.test_replication import OVERRIDES, PARTITIONS, create_topic, wait_consumed, wait_full_isr

MOVED_AWAY = "controlled shutdown: no partition is led here any more"


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as c:
        yield c


@pytest.mark.slow
def test_rolling_restart_moves_leaders_first_and_loses_nothing(cluster):
    """SIGTERM each broker in turn under an idempotent acks=all load: before stopping, each asks the
    controller to move its leaderships away (ControlledShutdown), so the producer never gets a
    final error, and D1-D5 hold afterwards."""
    topic = create_topic(cluster, "rolling")
    producer = LoggedProducer(cluster.bootstrap, topic).start()
    consumer = LoggedConsumer(cluster.bootstrap, topic, "g-rolling").start()
    try:
        producer.wait_acked(200)
        for b in (1, 2, 3):
            assert cluster.stop(b) == 0
            assert MOVED_AWAY in cluster.broker(b).stderr(), f"broker {b} stopped without moving its leaders"
            for p in range(PARTITIONS):  # it left every ISR before it went: nothing waits on it
                assert b not in cluster.partition_state(topic, p)["isr"]
            cluster.restart(b)
            wait_full_isr(cluster, topic)
            producer.wait_acked(200)
    finally:
        producer.stop()
    assert not producer.errors, f"the producer got final errors: {producer.errors[:3]}"
    wait_consumed(consumer, producer)
    consumer.stop()
    check_data(cluster, topic, PARTITIONS, producer, [consumer])


def test_controlled_shutdown_of_the_only_replica_reports_it_and_still_stops(tmp_path, zookeeper):
    """A partition with one replica cannot move: the broker retries
    (controlled.shutdown.max.retries), then stops anyway, exit code 0."""
    overrides = {**OVERRIDES, "controlled.shutdown.max.retries": 1, "controlled.shutdown.retry.backoff.ms": 100}
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=overrides) as cluster:
        topic = create_topic(cluster, "single-replica", partitions=1, rf=1)
        leader = cluster.wait_for(lambda: cluster.leader(topic, 0), 30, "a leader")
        assert cluster.stop(leader) == 0
        err = cluster.broker(leader).stderr()
        assert "controlled shutdown attempt 2 of 2: error 0, 1 partition(s) still led here" in err
        assert "controlled shutdown did not finish after 2 attempts; stopping anyway" in err
        assert MOVED_AWAY not in err


def assignment(cluster, topic: str) -> dict:
    return {int(p): r for p, r in json.loads(cluster._get(f"/brokers/topics/{topic}"))["partitions"].items()}


def leader_election(cluster, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybroker", "leader-election", "--bootstrap-server",
                           cluster.bootstrap, *args], capture_output=True, text=True, timeout=120)


def on_preferred_leaders(cluster, topic: str) -> bool:
    return all(cluster.leader(topic, p) == replicas[0] for p, replicas in assignment(cluster, topic).items())


def fail_over_partition_0(cluster, topic: str, auto_rebalance: bool = False) -> int:
    """kill -9 the preferred leader of partition 0, restart it, wait for a full ISR: it is in sync
    but no longer leads (unless the controller's auto rebalance already moved it back)."""
    preferred = assignment(cluster, topic)[0][0]
    cluster.wait_for(lambda: cluster.leader(topic, 0) == preferred, 30, "the preferred replica leading")
    cluster.kill(preferred)
    cluster.wait_for(lambda: cluster.leader(topic, 0) not in (preferred, -1, None), 30, "a new leader")
    cluster.restart(preferred)
    wait_full_isr(cluster, topic)
    if not auto_rebalance:
        assert cluster.leader(topic, 0) != preferred
    return preferred


def test_preferred_election_puts_leaders_back_on_their_first_replica(cluster):
    topic = create_topic(cluster, "preferred")
    producer = LoggedProducer(cluster.bootstrap, topic).start()
    try:
        producer.wait_acked(200)
        fail_over_partition_0(cluster, topic)
        done = leader_election(cluster, "--election-type", "preferred", "--all-topic-partitions")
        assert done.returncode == 0, done.stderr
        assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in done.stdout
        assert on_preferred_leaders(cluster, topic)
        again = leader_election(cluster, "--election-type", "preferred", "--topic", topic, "--partition", "0")
        assert again.returncode == 0 and f"Valid replica already elected for partitions {topic}-0" in again.stdout
        producer.wait_acked(200)
    finally:
        producer.stop()
    check_data(cluster, topic, PARTITIONS, producer)


@pytest.mark.slow
def test_elect_leaders_from_confluent_kafka_and_by_auto_rebalance(tmp_path, zookeeper):
    """librdkafka's AdminClient.elect_leaders reaches the controller; and with
    auto.leader.rebalance.enable the controller does it alone after leader.imbalance.check.interval."""
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient
    overrides = {**OVERRIDES, "leader.imbalance.check.interval.seconds": 1,
                 "leader.imbalance.per.broker.percentage": 0}
    with Cluster(tmp_path, 3, zk=zookeeper, overrides={**overrides, "auto.leader.rebalance.enable": "false"}) as c:
        topic = create_topic(c, "elect-admin")
        fail_over_partition_0(c, topic)
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(60)
        assert [(tp.topic, tp.partition, tp.error) for tp in result] == [(topic, 0, None)]
        assert on_preferred_leaders(c, topic)
    (tmp_path / "auto").mkdir()
    with Cluster(tmp_path / "auto", 3, zk=zookeeper, overrides=overrides) as c:
        topic = create_topic(c, "elect-auto")
        fail_over_partition_0(c, topic, auto_rebalance=True)
        c.wait_for(lambda: on_preferred_leaders(c, topic), 30, "leaders back on their preferred replicas")


def test_election_with_no_eligible_replica_or_unknown_partition_is_refused(cluster):
    topic = create_topic(cluster, "lonely", partitions=1, rf=1)
    only = cluster.wait_for(lambda: cluster.leader(topic, 0), 30, "a leader")
    cluster.kill(only)
    cluster.wait_for(lambda: cluster.leader(topic, 0) == -1, 30, "the partition to go offline")
    out = leader_election(cluster, "--election-type", "unclean", "--topic", topic, "--partition", "0")
    assert out.returncode == 1
    assert f"Error completing leader election (UNCLEAN) for partition: {topic}-0: ELIGIBLE_LEADERS_NOT_AVAILABLE" \
        in out.stdout, out.stdout
    out = leader_election(cluster, "--election-type", "preferred", "--topic", "no-such-topic", "--partition", "3")
    assert out.returncode == 1 and "no-such-topic-3: UNKNOWN_TOPIC_OR_PARTITION" in out.stdout, out.stdout
    out = leader_election(cluster, "--election-type", "preferred")
    assert out.returncode == 1 and "name the partitions" in out.stderr
    controller = cluster.wait_for(lambda: (c := cluster.controller_id()) not in (None, only) and c, 30, "a controller")
    with WireClient(cluster.broker(next(b for b in (1, 2, 3) if b not in (only, controller))).port, timeout=30) as c:
        req = REQUESTS[43]
        resp = c.request(req(election_type=0, topic_partitions=None), 2)
        assert resp.error_code == 41  # NOT_CONTROLLER: only the controller elects
        resp = c.request(req(election_type=7, topic_partitions=[req.TopicPartitions(topic=topic, partitions=[0])]), 2)
        assert resp.error_code == 42  # INVALID_REQUEST: no such election type
    cluster.restart(only)
    cluster.wait_for(lambda: cluster.leader(topic, 0) == only, 30, "the replica back as leader")


