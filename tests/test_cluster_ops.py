"""Operating a cluster: controlled shutdown and rolling restarts (real ZooKeeper, real brokers)."""
import pytest

from tests.cluster import Cluster
from tests.replication_checks import LoggedConsumer, LoggedProducer, check_data
from tests.test_replication import OVERRIDES, PARTITIONS, create_topic, wait_consumed, wait_full_isr

MOVED_AWAY = "controlled shutdown: no partition is led here any more"


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as c:
        yield c


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
