"""unclean.leader.election.enable set on a topic: with the brokers' own setting false, a partition of that
topic whose in-sync replicas are all gone is led again by the out-of-sync replica that comes back; a
partition of a topic without the override stays offline (as Kafka)."""
from tests.cluster import Cluster
from tests.kafka_wire import WireClient
from pybroker.protocol.messages import REQUESTS

OVERRIDES = {"zookeeper.session.timeout.ms": 6000, "replica.lag.time.max.ms": 2000}


def create(cluster, name: str, configs: dict) -> None:
    req = REQUESTS[19]
    with WireClient(cluster.broker(1).port) as w:
        topic = req.CreatableTopic(name=name, num_partitions=1, replication_factor=2, configs=[
            req.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])
        assert w.request(req(topics=[topic], timeout_ms=20000, validate_only=False), 4).topics[0].error_code == 0


def test_the_topic_setting_allows_an_unclean_election(tmp_path, zookeeper):
    with Cluster(tmp_path, 2, zk=zookeeper, overrides=OVERRIDES) as cluster:
        create(cluster, "unclean", {"unclean.leader.election.enable": "true"})
        create(cluster, "clean", {})
        for t in ("unclean", "clean"):
            cluster.wait_for(lambda t=t: len((cluster.partition_state(t, 0) or {}).get("isr", ())) == 2,
                             what=f"a full ISR of {t}")
        leader = cluster.leader("unclean", 0)
        follower = 3 - leader  # once it is gone, the other broker leads both partitions with an ISR of itself
        cluster.kill(follower)
        for t in ("unclean", "clean"):
            cluster.wait_for(lambda t=t: cluster.partition_state(t, 0)["isr"] == [leader], timeout=60,
                             what=f"the follower out of the ISR of {t}")
        epochs = {t: cluster.partition_state(t, 0)["leader_epoch"] for t in ("unclean", "clean")}
        cluster.kill(leader)
        cluster.restart(follower)
        cluster.wait_for(lambda: (s := cluster.partition_state("unclean", 0))["leader"] == follower
                         and s["leader_epoch"] > epochs["unclean"], timeout=60,
                         what="the unclean election of the returning out-of-sync replica")
        assert cluster.partition_state("clean", 0)["leader"] == -1  # the broker setting (false) keeps it offline
