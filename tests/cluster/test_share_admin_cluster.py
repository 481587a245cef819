"""The share-group admin APIs in a three-broker cluster, where a group's coordinator, its share-partitions'
share coordinators (``__share_group_state`` leaders) and the partitions' leaders are spread over the
brokers: start offsets and lags gathered from the other brokers (ReadShareGroupStateSummary v1,
ListOffsets), resets and deletions of state held elsewhere, and NOT_COORDINATOR from the brokers that do
not coordinate the group. One broker: tests/broker/test_share_admin.py."""
from confluent_kafka import Producer

from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import NOT_COORDINATOR
from tests.broker.test_share_admin import (alter_offsets, delete_groups, delete_offsets, describe_offsets, drain,
                                           group_state, offsets_of, wait_for)
from tests.cluster import Cluster, require_zookeeper
from tests.cluster.test_replication import create_topic, wait_full_isr
from tests.kafka_wire import WireClient
from tests.shareutil import fill, set_group_config, share_consumer, unique

OVERRIDES = {"min.insync.replicas": 2, "default.replication.factor": 3, "offsets.topic.num.partitions": 3,
             "replica.lag.time.max.ms": 3000, "zookeeper.session.timeout.ms": 6000,
             "share.coordinator.state.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
             "group.share.min.session.timeout.ms": 6000, "group.share.session.timeout.ms": 6000,
             "group.share.min.heartbeat.interval.ms": 500, "group.share.heartbeat.interval.ms": 500}
PARTITIONS = 6


def coordinator_port(cluster, group) -> int:
    with WireClient(cluster.brokers[1].port) as w:
        def found():
            r = w.request(REQUESTS[10](key=group, key_type=0), 2)
            return r.port if r.error_code == 0 else None
        return wait_for("the group's coordinator", found)


def test_share_group_admin_across_brokers(tmp_path, zookeeper):
    require_zookeeper()
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as cluster:
        topic = create_topic(cluster, unique("sq"), partitions=PARTITIONS)
        fill(cluster.bootstrap, topic, PARTITIONS, 10 * PARTITIONS, acks="all")
        wait_full_isr(cluster, topic, PARTITIONS)
        group = unique("sg")
        set_group_config(cluster.brokers[1].port, group, {"share.auto.offset.reset": "earliest"})
        port = coordinator_port(cluster, group)
        elsewhere = [b.port for b in cluster.brokers.values() if b.port != port]
        c = share_consumer(cluster.bootstrap, group, topic)
        everything = {(topic, p): (10, 0) for p in range(PARTITIONS)}
        try:
            drain(c, 10 * PARTITIONS)
            wait_for("everything accepted", lambda: offsets_of(describe_offsets(port, group)) == everything,
                     consumers=[c])
        finally:
            c.close()
        for other in elsewhere:
            assert describe_offsets(other, group).error_code == NOT_COORDINATOR
            assert alter_offsets(other, group, {topic: {0: 0}}).error_code == NOT_COORDINATOR
        # the lag of every share-partition, wherever its leader and its share coordinator are
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for partition in range(PARTITIONS):
            for _ in range(partition):
                p.produce(topic, value=b"late", partition=partition)
        assert p.flush(30) == 0
        wait_for("the group to empty", lambda: group_state(port, group) == "Empty")
        assert offsets_of(describe_offsets(port, group)) == {(topic, p): (10, p) for p in range(PARTITIONS)}
        # reset every share-partition to 4, then delete the topic's state, then the group
        altered = alter_offsets(port, group, {topic: {p: 4 for p in range(PARTITIONS)}})
        assert altered.error_code == 0 and all(p.error_code == 0 for t in altered.responses for p in t.partitions)
        assert offsets_of(describe_offsets(port, group)) == {(topic, p): (4, 6 + p) for p in range(PARTITIONS)}
        deleted = delete_offsets(port, group, [topic])
        assert [(t.topic_name, t.error_code) for t in deleted.responses] == [(topic, 0)]
        assert describe_offsets(port, group).topics == []
        assert alter_offsets(port, group, {topic: {0: 1}}).error_code == 0
        assert delete_groups(port, group) == {group: 0}
        assert describe_offsets(port, group).topics == []
