"""KIP-207 end to end: a client asking a partition's end offset through leader changes (kill -9 of the
leader, then its controlled shutdown) never sees it go backwards, and every acknowledged record is
there. A new leader whose high watermark still lags the start of its epoch answers
OFFSET_NOT_AVAILABLE, which the client retries. (The rule in-process: tests/unit/test_replica_rules.py;
across a network cut: tests/cluster/test_replication_netns.py.)"""
from tests.cluster import Cluster, require_zookeeper
from tests.cluster.test_replication import create_topic, wait_full_isr, wait_new_leader
from tests.replication_checks import librdkafka_end_offset_watcher, LoggedProducer, check_data

OVERRIDES = {"min.insync.replicas": 2, "default.replication.factor": 3, "offsets.topic.num.partitions": 3,
             "replica.lag.time.max.ms": 3000, "zookeeper.session.timeout.ms": 6000}


def test_end_offsets_never_go_back_through_leader_changes(tmp_path, zookeeper):
    require_zookeeper()
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as cluster:
        topic = create_topic(cluster, "ends", partitions=1)
        producer = LoggedProducer(cluster.bootstrap, topic).start()
        watcher = librdkafka_end_offset_watcher(cluster.bootstrap, topic).start()
        try:
            producer.wait_acked(100, timeout=120)
            wait_full_isr(cluster, topic, 1)
            watcher.wait_answers(5)
            for fault in ("kill", "stop"):  # kill -9, then SIGTERM (a controlled shutdown moves the leader first)
                state = cluster.partition_state(topic, 0)
                leader = state["leader"]
                getattr(cluster, fault)(leader)
                wait_new_leader(cluster, topic, leader, state["leader_epoch"], timeout=60)
                producer.wait_acked(50, timeout=60)
                watcher.wait_answers(5)
                cluster.restart(leader)
                wait_full_isr(cluster, topic, 1)
            producer.wait_acked(50, timeout=60)
        finally:
            producer.stop()
            watcher.stop()
        assert not watcher.went_back(), f"the end offset went back: {watcher.went_back()[:5]}"
        assert not producer.errors, producer.errors[:5]
        check_data(cluster, topic, 1, producer)
