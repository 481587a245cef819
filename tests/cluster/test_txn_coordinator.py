"""A transaction coordinator killed on a cluster: another broker takes over its transactions
(the coordinator on one broker: tests/broker/test_txn_coordinator.py)."""
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient

from pybroker.coordinator.records import offsets_partition
from tests.broker.test_txn_coordinator import (CLUSTER, NOT_COORDINATOR, PRODUCER_FENCED, STATE_PARTITIONS, STATE_TOPIC,
                                               TRANSACTION_ABORTABLE, UNKNOWN_TOPIC, create_topic, describe, init_pid,
                                               produce_in_transaction, producer, verify_only, wait_for, wait_state)
from tests.cluster import Cluster
from tests.kafka_wire import WireClient


def test_cluster_coordinator_killed_another_broker_takes_over(tmp_path, zookeeper):
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=CLUSTER) as cluster:
        topic, tid = "txn-data", "cluster-txn"
        create_topic(cluster.bootstrap, topic, partitions=3, rf=3)  # led by 3 brokers: markers go remote
        p = producer(cluster.bootstrap, tid, **{"request.timeout.ms": 10000})
        p.init_transactions(60)
        produce_in_transaction(p, topic, partitions=3)
        p.commit_transaction(60)
        index = offsets_partition(tid, STATE_PARTITIONS)
        old = cluster.leader(STATE_TOPIC, index)
        c = WireClient(cluster._port(cluster.broker(old)))
        wait_state(c, tid, "CompleteCommit")
        c.close()
        produce_in_transaction(p, topic, partitions=3)  # left Ongoing when its coordinator dies
        cluster.kill(old)
        new = wait_for(lambda: (lambda n: n if n not in (None, -1, old) else None)(cluster.leader(STATE_TOPIC, index)),
                       "a new leader of the transaction's state partition")
        c = WireClient(cluster._port(cluster.broker(new)))
        d = wait_for(lambda: (lambda d: d if d.error_code == 0 else None)(describe(c, tid)),
                     "the new coordinator to load")
        assert d.transaction_state == "Ongoing" and [t.topic for t in d.topics] == [topic]
        # the new coordinator aborts it for a new producer instance and serves that one
        p2 = producer(cluster.bootstrap, tid, **{"request.timeout.ms": 10000})
        p2.init_transactions(60)
        assert describe(c, tid).transaction_state == "Empty"
        produce_in_transaction(p2, topic, partitions=3)
        p2.commit_transaction(60)
        d = wait_state(c, tid, "CompleteCommit")
        assert d.producer_epoch == 2  # one bump fenced the first producer, one is the new one's
        survivor = next(b for b in cluster.brokers if b not in (old, new))
        with WireClient(cluster._port(cluster.broker(survivor))) as other:
            assert describe(other, tid).error_code == NOT_COORDINATOR
        # KIP-890's broker-to-broker check (AddPartitionsToTxn v4, verify_only)
        produce_in_transaction(p2, topic, partitions=3)
        assert verify_only(c, tid, d.producer_id, 2, [(topic, 0), (topic, 1)]) == {(topic, 0): 0, (topic, 1): 0}
        assert verify_only(c, tid, d.producer_id, 2, [("other", 0)]) == {("other", 0): UNKNOWN_TOPIC}
        assert verify_only(c, tid, d.producer_id, 1, [(topic, 0)]) == {(topic, 0): PRODUCER_FENCED}
        p2.abort_transaction(60)
        wait_state(c, tid, "CompleteAbort")
        assert verify_only(c, tid, d.producer_id, 2, [(topic, 0)]) == {(topic, 0): TRANSACTION_ABORTABLE}
        # the old coordinator comes back and takes its preferred leadership back from a live broker
        cluster.restart(old)
        cluster.wait_for(lambda: old in (cluster.partition_state(STATE_TOPIC, index) or {}).get("isr", ()), 60,
                         "the old coordinator back in the ISR")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        [elected] = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(STATE_TOPIC, index)]).result(60)
        assert elected.error is None, elected.error
        wait_for(lambda: describe(c, tid).error_code == NOT_COORDINATOR, "the live broker to drop the id")
        assert init_pid(c, tid).error_code == NOT_COORDINATOR
        c.close()
        with WireClient(cluster._port(cluster.broker(old))) as back:
            d = wait_for(lambda: (lambda d: d if d.error_code == 0 else None)(describe(back, tid)),
                         "the old coordinator to load what the other one wrote")
            assert (d.transaction_state, d.producer_epoch) == ("CompleteAbort", 2)
        p3 = producer(cluster.bootstrap, tid, **{"request.timeout.ms": 10000})
        p3.init_transactions(60)
        produce_in_transaction(p3, topic, partitions=3)
        p3.commit_transaction(60)

