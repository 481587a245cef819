"""Topic administration on a 3-broker cluster: every broker answers, every broker sees the result."""
import os

from pybroker.client import AdminClient, NewTopic
from pybroker.client.types import ConfigResource
from tests.cluster import Cluster
from tests.kafka_wire import WireClient
from tests.cluster.test_replication import OVERRIDES


def metadata_on(cluster, broker_id: int, topic: str):
    with WireClient(cluster.broker(broker_id).port) as c:
        return c.metadata([topic])


def test_topic_lifecycle_through_any_broker(shared_cluster):
    cluster = shared_cluster
    with AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.broker(1).port}"}) as admin:
        admin.create_topics([NewTopic("orders", num_partitions=4, replication_factor=3,
                                      config={"retention.ms": "3600000"})])
        for b in (1, 2, 3):  # every broker soon knows every partition's leader and replicas
            t = cluster.wait_for(lambda: (t := metadata_on(cluster, b, "orders").topics[0]).error_code == 0 and t,
                                 30, f"broker {b} to know the topic")
            assert t.error_code == 0 and len(t.partitions) == 4
            assert all(p.leader_id in (1, 2, 3) and sorted(p.replica_nodes) == [1, 2, 3] for p in t.partitions)
        leaders = {p: cluster.leader("orders", p) for p in range(4)}
        assert len(set(leaders.values())) == 3, f"leadership is spread over the brokers: {leaders}"

        admin.alter_configs({ConfigResource("topic", "orders"): {"retention.ms": "7200000"}})
        for b in (1, 2, 3):  # the change reaches every broker's mirror of the topic
            with AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.broker(b).port}"}) as one:
                cluster.wait_for(lambda: one.describe_configs([ConfigResource("topic", "orders")])[
                    ConfigResource("topic", "orders")]["retention.ms"] == "7200000", 30,
                    f"broker {b} to see the new retention.ms")

        admin.create_partitions({"orders": 6})
        cluster.wait_for(lambda: all(len(metadata_on(cluster, b, "orders").topics[0].partitions) == 6
                                     for b in (1, 2, 3)), 30, "six partitions everywhere")
        assert all(cluster.leader("orders", p) in (1, 2, 3) for p in (4, 5))

        admin.delete_topics(["orders"])
        cluster.wait_for(lambda: all(metadata_on(cluster, b, "orders").topics[0].error_code == 3
                                     for b in (1, 2, 3)), 30, "the topic gone everywhere")
        cluster.wait_for(lambda: not any(d.startswith("orders-") for b in (1, 2, 3)
                                         for d in os.listdir(cluster.broker(b).data_dir)), 30,
                         "the replicas' logs deleted")
        assert cluster.zk().exists("/brokers/topics/orders") is None
        admin.create_topics([NewTopic("orders", num_partitions=1, replication_factor=3)])  # same name again
        cluster.wait_for(lambda: metadata_on(cluster, 2, "orders").topics[0].partitions[0].leader_id in (1, 2, 3),
                         30, "the new topic led")


def test_producer_ids_are_unique_across_brokers(tmp_path, zookeeper):
    """Producer ids come from blocks reserved in ZooKeeper: no two brokers hand out the same id."""
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as cluster:
        ids = []
        for b in (1, 2, 3, 1, 2, 3):
            with WireClient(cluster.broker(b).port) as c:
                resp = c.init_producer_id()
                assert resp.error_code == 0
                ids.append(resp.producer_id)
        assert len(set(ids)) == len(ids), ids
        cluster.restart(2)
        with WireClient(cluster.broker(2).port) as c:
            assert c.init_producer_id().producer_id not in ids  # a restart never reuses a block


def test_replication_uses_the_inter_broker_listener(tmp_path, zookeeper):
    """With a second listener named by inter.broker.listener.name, followers and the controller
    connect there, while clients are told the addresses of the listener they came in on."""
    import subprocess
    from tests.cluster import free_ports
    from tests.replication_checks import LoggedProducer
    ports = free_ports(3)
    extra = {b: {"listeners": f"PLAINTEXT://127.0.0.1:0,REPLICATION://127.0.0.1:{ports[b - 1]}",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
                 "inter.broker.listener.name": "REPLICATION"} for b in (1, 2, 3)}
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES, broker_overrides=extra) as cluster:
        from tests.cluster.test_replication import create_topic
        create_topic(cluster, "two-listeners", partitions=1)
        t = metadata_on(cluster, 1, "two-listeners")
        assert {b.port for b in t.brokers} == {cluster.broker(b).port for b in (1, 2, 3)}
        producer = LoggedProducer(cluster.bootstrap, "two-listeners").start()
        producer.wait_acked(100)
        producer.stop()
        leader = cluster.leader("two-listeners", 0)
        fetchers = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{ports[leader - 1]} )"],
                                  capture_output=True, text=True, check=True).stdout.splitlines()
        assert len(fetchers) >= 2, f"followers are not connected to the replication listener: {fetchers}"
