"""Dynamic configs on a cluster: configs and quotas live in ZooKeeper; num.replica.fetchers changes live
while replication goes on (on one broker: tests/broker/test_dynamic_configs.py)."""
import time

from confluent_kafka import Producer

from tests.broker.test_dynamic_configs import (DEADLINE, DEFAULT, DYNAMIC_BROKER, DYNAMIC_DEFAULT, INVALID_CONFIG,
                                               describe, inc_alter)
from tests.broker.test_quotas import alter as alter_quotas, describe as describe_quotas


def test_cluster_dynamic_configs_and_quotas_live_in_zookeeper(cluster3):
    p1, p2 = cluster3.broker(1).port, cluster3.broker(2).port
    assert inc_alter(p1, "", {"log.retention.ms": "7200000"}) == (0, None)
    assert inc_alter(p1, "1", {"message.max.bytes": "50000"}) == (0, None)
    assert alter_quotas(p1, {"client-id": "limited"}, {"producer_byte_rate": 1 << 20})[0].error_code == 0

    def wait(check, what):
        deadline = time.monotonic() + DEADLINE
        while not check():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)
    wait(lambda: describe(p2, "2", ["log.retention.ms"])["log.retention.ms"][:2] == ("7200000", DYNAMIC_DEFAULT),
         "broker 2 to see the cluster default")
    assert describe(p2, "2", ["message.max.bytes"])["message.max.bytes"][1] == DEFAULT  # broker 1's own only
    wait(lambda: describe_quotas(p2) == {(("client-id", "limited"),): {"producer_byte_rate": 1 << 20}},
         "broker 2 to see the quota")
    cluster3.restart(2)
    p2 = cluster3.broker(2).port
    assert describe(p2, "2", ["log.retention.ms"])["log.retention.ms"][:2] == ("7200000", DYNAMIC_DEFAULT)
    assert describe_quotas(p2) == {(("client-id", "limited"),): {"producer_byte_rate": 1 << 20}}
    assert alter_quotas(p2, {"client-id": "limited"}, {"producer_byte_rate": None})[0].error_code == 0
    wait(lambda: describe_quotas(p1) == {}, "broker 1 to see the quota removed")


def test_num_replica_fetchers_changes_live_and_replication_goes_on(cluster3):
    """num.replica.fetchers on broker 2: its followed partitions move to the new fetchers, and an
    acks=all producer keeps a full ISR (every follower keeps fetching)."""
    from tests.cluster.test_replication import create_topic as create_replicated, wait_full_isr
    topic = create_replicated(cluster3, "fetchers", partitions=6, rf=3)
    wait_full_isr(cluster3, topic, 6)  # broker 2 follows (or leads) every partition
    p2 = cluster3.broker(2).port
    assert inc_alter(p2, "2", {"num.replica.fetchers": "3"}) == (0, None)
    assert describe(p2, "2", ["num.replica.fetchers"])["num.replica.fetchers"][:3] == ("3", DYNAMIC_BROKER, False)
    deadline = time.monotonic() + DEADLINE
    while "num.replica.fetchers: 1 -> 3" not in cluster3.broker(2).stderr():
        assert time.monotonic() < deadline, "broker 2 never resized its fetchers"
        time.sleep(0.1)
    p = Producer({"bootstrap.servers": cluster3.bootstrap, "acks": "all"})
    for i in range(600):
        p.produce(topic, b"x%d" % i, partition=i % 6)
    assert p.flush(DEADLINE) == 0
    from tests.replication_checks import replica_batches

    def copied(part):  # broker 2's own copy of the partition holds all 100 records
        batches = replica_batches(cluster3.broker(2).data_dir, topic, part, 10**9)
        return batches and batches[-1][1] + 1 == 100
    while not all(copied(part) for part in range(6)):
        assert time.monotonic() < deadline + DEADLINE, "broker 2 stopped copying after the resize"
        time.sleep(0.1)
    assert inc_alter(p2, "2", {"num.replica.fetchers": "0"})[0] == INVALID_CONFIG



def test_a_restarted_brokers_logs_take_their_topic_configs(cluster3):
    """The logs a broker recovers at start take their topic's configs (not the broker defaults) once the
    controller hands it the partitions: a leader again after a restart refuses what the topic refuses."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.cluster.test_cluster_ops import leader_election, on_preferred_leaders
    from tests.cluster.test_replication import wait_full_isr
    admin = AdminClient({"bootstrap.servers": cluster3.bootstrap})
    topic = "small-records"
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[2, 1, 3]],
                                  config={"max.message.bytes": "2000"})])[topic].result(60)
    wait_full_isr(cluster3, topic, 1)
    cluster3.restart(2)
    wait_full_isr(cluster3, topic, 1)
    done = leader_election(cluster3, "--election-type", "preferred", "--all-topic-partitions")
    assert done.returncode == 0, done.stdout + done.stderr
    assert cluster3.wait_for(lambda: on_preferred_leaders(cluster3, topic), 60, "broker 2 leading again")
    errors = []
    p = Producer({"bootstrap.servers": cluster3.bootstrap, "acks": "all", "message.max.bytes": 100000})
    p.produce(topic, value=b"x" * 10000, on_delivery=lambda err, _: errors.append(err))
    assert p.flush(60) == 0
    assert [e and e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE], errors
