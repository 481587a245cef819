"""ACLs on a cluster: bindings reach every broker and replication needs ClusterAction
(ACL authorization on one broker: tests/broker/test_acls.py)."""
import time
import uuid

from confluent_kafka.admin import AclOperation, AclPermissionType, AdminClient, NewTopic, ResourceType

from pybroker.records import build_batch
from tests.broker.test_acls import ANON, AUTHORIZER, TOPIC_AUTHORIZATION_FAILED, binding, create_acls, produce_wire
from tests.kafka_wire import WireClient


def test_cluster_acls_reach_every_broker_and_replication_needs_cluster_action(tmp_path, zookeeper):
    """On PLAINTEXT the brokers talk to each other as User:ANONYMOUS, so that principal needs
    CLUSTER_ACTION (follower fetches, LeaderAndIsr, UpdateMetadata): granted here by an ACL written
    while it was a super user, after which the brokers restart without any super user."""
    import json
    from tests.cluster import Cluster
    base = {"authorizer.class.name": AUTHORIZER, "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": 2, "min.insync.replicas": 2}
    with Cluster(tmp_path, 2, zk=zookeeper, overrides={**base, "super.users": ANON}) as cluster:
        admin1 = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.broker(1).port}"})
        create_acls(admin1, [binding(ResourceType.BROKER, "kafka-cluster", op) for op in
                             (AclOperation.CLUSTER_ACTION, AclOperation.ALTER, AclOperation.CREATE)])
        stored = json.loads(cluster.zk().get("/kafka-acl/Cluster/kafka-cluster")[0])
        assert stored["version"] == 1 and {"principal": ANON, "permissionType": "Allow", "operation": "ClusterAction",
                                           "host": "*"} in stored["acls"]
        for b in (1, 2):
            cluster.broker(b).overrides.pop("super.users")
            cluster.restart(b)
        admin1 = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.broker(1).port}"})
        topic = f"replicated-{uuid.uuid4().hex[:6]}"
        admin1.create_topics([NewTopic(topic, 1, 2)])[topic].result(timeout=30)
        leader = cluster.wait_for(lambda: cluster.leader(topic, 0), 30, "a leader")
        other = 2 if leader == 1 else 1
        create_acls(admin1, [binding(ResourceType.TOPIC, topic, AclOperation.WRITE)])  # through broker 1
        assert cluster.wait_for(lambda: produce_wire(cluster.broker(leader).port, topic) == 0, 30,
                                "the ACL applied on the leader")  # acks=1 here; acks=all below
        with WireClient(cluster.broker(leader).port) as c:
            assert c.produce(topic, 0, bytes(build_batch([b"all"], base_timestamp=int(time.time() * 1000))),
                             acks=-1).error_code == 0  # the follower replicated it (min.insync.replicas=2)
        assert len(cluster.partition_state(topic, 0)["isr"]) == 2
        # a DENY written through the broker that does not lead applies on the leader too
        admin_other = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.broker(other).port}"})
        create_acls(admin_other, [binding(ResourceType.TOPIC, topic, AclOperation.WRITE, AclPermissionType.DENY)])
        assert cluster.wait_for(lambda: produce_wire(cluster.broker(leader).port, topic) == TOPIC_AUTHORIZATION_FAILED,
                                30, "the DENY applied on the leader")
        assert cluster.zk().get_children("/kafka-acl-changes")

