"""OffsetDelete to a broker that is not the coordinator (on one broker: tests/broker/test_offset_delete.py)."""
from tests.broker.test_group_versions import _settled, find
from tests.broker.test_offset_delete import (GROUP_ID_NOT_FOUND, NOT_COORDINATOR, coordinator_ready, delete_offsets,
                                             unique)
from tests.clientutil import wait_until
from tests.kafka_wire import WireClient


def test_a_broker_that_is_not_the_coordinator_says_so(tmp_path, zookeeper):
    from tests.cluster import Cluster
    group = unique("od-elsewhere")
    with Cluster(tmp_path, 2, zk=zookeeper, overrides={"offsets.topic.num.partitions": 1,
                                                       "offsets.topic.replication.factor": 1}) as cluster:
        with WireClient(cluster._port(cluster.broker(1))) as w:
            found = wait_until(lambda: _settled(find(w, 3, [group])), timeout=60)
            assert found, "no coordinator"
        other = next(b for i, b in cluster.brokers.items() if i != found.node_id)
        with WireClient(found.port) as w:
            coordinator_ready(w, group)
            assert delete_offsets(w, group, []) == (GROUP_ID_NOT_FOUND, {})
        with WireClient(cluster._port(other)) as w:
            assert delete_offsets(w, group, []) == (NOT_COORDINATOR, {})

