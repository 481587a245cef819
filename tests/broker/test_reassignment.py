"""Partition reassignment on a single node, answered as by a one-broker cluster
(reassignment on a real cluster: tests/cluster/test_reassignment.py)."""
from pybroker.protocol import REQUESTS
from tests.cluster.test_reassignment import (ALTER, INVALID_REPLICA_ASSIGNMENT, LIST, NO_REASSIGNMENT_IN_PROGRESS,
                                             UNKNOWN_TOPIC_OR_PARTITION, broker_id)
from tests.kafka_wire import WireClient


def test_a_single_node_answers_as_a_one_broker_cluster(broker):
    """No ZooKeeper: the only placement is the broker itself; nothing is ever in progress."""
    with WireClient(broker.port) as w:
        w.create_topic("solo", partitions=1)
        api = REQUESTS[ALTER]
        resp = w.request(api(timeout_ms=30000, topics=[api.ReassignableTopic(name="solo", partitions=[
            api.ReassignablePartition(partition_index=0, replicas=[broker_id(w)]),
            api.ReassignablePartition(partition_index=1, replicas=[broker_id(w)])]),
            api.ReassignableTopic(name="elsewhere", partitions=[])]), 0)
        codes = {(t.name, p.partition_index): p.error_code for t in resp.responses for p in t.partitions}
        assert resp.error_code == 0 and codes == {("solo", 0): 0, ("solo", 1): UNKNOWN_TOPIC_OR_PARTITION}
        resp = w.request(api(timeout_ms=30000, topics=[api.ReassignableTopic(name="solo", partitions=[
            api.ReassignablePartition(partition_index=0, replicas=[broker_id(w), 99])])]), 0)
        assert resp.responses[0].partitions[0].error_code == INVALID_REPLICA_ASSIGNMENT
        resp = w.request(api(timeout_ms=30000, topics=[api.ReassignableTopic(name="solo", partitions=[
            api.ReassignablePartition(partition_index=0, replicas=None)])]), 0)
        assert resp.responses[0].partitions[0].error_code == NO_REASSIGNMENT_IN_PROGRESS
        listed = w.request(REQUESTS[LIST](timeout_ms=30000, topics=None), 0)
        assert listed.error_code == 0 and listed.topics == []

