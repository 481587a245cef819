"""A deleted topic's committed offsets go with it, as in Kafka.

On a ZooKeeper cluster of three brokers, the group's coordinator (the only replica of its
``__consumer_offsets`` partition) hosts no replica of the topic, so it learns of the deletion from
the controller's UpdateMetadata alone. Its offsets of the deleted topic go (tombstones), the offsets
of a topic that stays are kept, a recreated topic of the same name has none, and a restart of the
coordinator (which replays its log) leaves them gone. On a single node, offsets a transaction sent
for the topic before its deletion are not applied by the transaction's commit (as Kafka 3.8).

The cases of the other tiers: tests/broker/test_offset_deletion_on_topic_delete.py.
"""
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol import REQUESTS
from tests.cluster import Cluster
from tests.kafka_wire import WireClient

OVERRIDES = {"offsets.topic.num.partitions": 3, "offsets.topic.replication.factor": 1}
NONE = 0
TIMEOUT_S = 60
GROUP = "offsets-of-a-deleted-topic"
GONE, KEPT = "deleted-then-recreated", "kept"

COMMIT, FETCH, FIND_COORDINATOR = REQUESTS[8], REQUESTS[9], REQUESTS[10]


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as c:
        yield c


def find_coordinator(cluster) -> int:
    """The group's coordinator id, once ``__consumer_offsets`` exists and has a leader for it."""
    port = cluster.broker(1).port

    def ask():
        with WireClient(port) as w:
            r = w.request(FIND_COORDINATOR(key=GROUP, key_type=0), 3)
        return r.node_id if r.error_code == NONE else None
    return cluster.wait_for(ask, TIMEOUT_S, "a coordinator for the group")


def committed(port: int, topics=None) -> dict | None:
    """{(topic, partition): committed offset} (None while the coordinator cannot answer)."""
    asked = None if topics is None else [FETCH.OffsetFetchRequestTopic(name=t, partition_indexes=[0]) for t in topics]
    try:
        with WireClient(port) as w:
            r = w.request(FETCH(group_id=GROUP, topics=asked), 7)
    except OSError:
        return None
    if r.error_code != NONE or any(p.error_code for t in r.topics for p in t.partitions):
        return None
    return {(t.name, p.partition_index): p.committed_offset for t in r.topics for p in t.partitions}


def commit(port: int, offsets: dict) -> None:
    topics = [COMMIT.OffsetCommitRequestTopic(name=t, partitions=[
        COMMIT.OffsetCommitRequestPartition(partition_index=0, committed_offset=o)]) for t, o in offsets.items()]
    with WireClient(port) as w:
        r = w.request(COMMIT(group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=topics), 8)
    assert all(p.error_code == NONE for t in r.topics for p in t.partitions), r


def test_a_coordinator_without_the_topic_drops_its_offsets_for_good(cluster):
    coordinator = find_coordinator(cluster)
    elsewhere = next(b for b in sorted(cluster.brokers) if b != coordinator)
    port = cluster.broker(coordinator).port
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for name in (GONE, KEPT):
        admin.create_topics([NewTopic(name, 1, replica_assignment=[[elsewhere]])])[name].result(TIMEOUT_S)
    assert coordinator not in cluster.partition_state(GONE, 0)["isr"]

    commit(port, {GONE: 5, KEPT: 7})
    assert committed(port, [GONE, KEPT]) == {(GONE, 0): 5, (KEPT, 0): 7}

    admin.delete_topics([GONE])[GONE].result(TIMEOUT_S)
    cluster.wait_for(lambda: committed(port, [GONE, KEPT]) == {(GONE, 0): -1, (KEPT, 0): 7}, TIMEOUT_S,
                     "the deleted topic's offset to go")
    assert committed(port) == {(KEPT, 0): 7}  # all of the group's offsets: the deleted topic is not listed

    cluster.restart(coordinator)
    cluster.wait_formed()
    cluster.wait_for(lambda: committed(port) is not None, TIMEOUT_S, "the coordinator to load the group again")
    assert committed(port) == {(KEPT, 0): 7}  # the tombstones were replayed: still gone

    admin.create_topics([NewTopic(GONE, 1, replica_assignment=[[elsewhere]])])[GONE].result(TIMEOUT_S)
    assert committed(port, [GONE]) == {(GONE, 0): -1}


