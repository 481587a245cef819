"""KIP-951 leader hints in our clients, in-process: only a newer hint moves the cached leader
(on a ZooKeeper cluster: tests/cluster/test_client_leader_hints.py)."""
from pybroker.client import config as client_config
from pybroker.client.cluster import Cluster as ClientCluster
from pybroker.client.types import BrokerMetadata, PartitionMetadata, TopicMetadata


def test_only_newer_hints_move_the_leader():
    """A hint is applied when its leader epoch is newer than the cached one; a repeated or stale
    hint is ignored (the caller then backs off and refreshes), so a broker naming itself again
    cannot make a client retry without pause."""
    c = ClientCluster(client_config.parse({"bootstrap.servers": "127.0.0.1:1"}, "admin"))
    c.brokers = {1: BrokerMetadata(1, "h1", 1), 2: BrokerMetadata(2, "h2", 2)}
    c._topics = {"t": TopicMetadata("t", {0: PartitionMetadata("t", 0, 1, [1, 2, 3], [1, 2, 3], 5)})}
    assert not c.maybe_update_leader("t", 0, 1, 5, {})  # the same epoch: nothing new
    assert not c.maybe_update_leader("t", 0, 2, 4, {})  # older
    assert not c.maybe_update_leader("t", 0, 3, 6, {})  # broker 3's address is unknown
    assert c.maybe_update_leader("t", 0, 3, 6, {3: BrokerMetadata(3, "h3", 3)})
    assert c.leader_for(("t", 0)) == 3 and c.brokers[3].host == "h3"
    assert not c.maybe_update_leader("u", 0, 3, 9, {})  # an unknown topic

