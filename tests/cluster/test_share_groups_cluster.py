"""Share groups in a three-broker cluster: the leader of a share-partition killed with kill -9 while a
member holds records it has not acknowledged. The new leader reads the share-partition's state from its
share coordinator (``__share_group_state``, replicated): no accepted record comes again, every other
one does, the ones in flight with their delivery count kept."""
from tests.cluster import Cluster, require_zookeeper
from tests.cluster.test_replication import create_topic, wait_full_isr, wait_new_leader
from tests.shareutil import Holder, fill, poll_until, set_group_config, share_consumer, unique

OVERRIDES = {"min.insync.replicas": 2, "default.replication.factor": 3, "offsets.topic.num.partitions": 3,
             "replica.lag.time.max.ms": 3000, "zookeeper.session.timeout.ms": 6000,
             "share.coordinator.state.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
             "group.share.min.session.timeout.ms": 6000, "group.share.session.timeout.ms": 6000,
             "group.share.min.heartbeat.interval.ms": 500, "group.share.heartbeat.interval.ms": 500}


def test_share_partition_leader_killed_loses_nothing_and_redelivers_nothing_accepted(tmp_path, zookeeper):
    require_zookeeper()
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as cluster:
        topic = create_topic(cluster, unique("sq"), partitions=1)
        values = fill(cluster.bootstrap, topic, 1, 200, **{"batch.num.messages": 10, "acks": "all"})
        wait_full_isr(cluster, topic, 1)
        group = unique("sg")
        set_group_config(cluster.brokers[1].port, group, {"share.auto.offset.reset": "earliest"})
        holder = Holder(cluster.bootstrap, group, topic, max_records=20)
        state = cluster.partition_state(topic, 0)
        try:
            assert holder.accepted and holder.held
            cluster.kill(state["leader"])
        finally:
            holder.kill()
        wait_new_leader(cluster, topic, state["leader"], state["leader_epoch"], timeout=60)
        c = share_consumer(cluster.bootstrap, group, topic)
        got = {}

        def took(_, m):
            got.setdefault((m.partition(), m.offset()), []).append(m.delivery_count())
        try:
            poll_until([c], lambda: len(got) >= len(values) - len(holder.accepted), timeout=90, on_message=took)
            poll_until([c], lambda: False, timeout=2, on_message=took)
        finally:
            c.close()
        assert not holder.accepted & set(got), sorted(holder.accepted & set(got))[:5]
        assert len(got) + len(holder.accepted) == len(values), (len(got), len(holder.accepted))
        assert all(len(n) == 1 for n in got.values())
        assert {k: n[0] for k, n in got.items() if k in holder.held} == {k: 2 for k in holder.held}
