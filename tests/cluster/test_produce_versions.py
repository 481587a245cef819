"""Produce v9-v11 on real brokers: flexible requests on the wire, KIP-951 leader hints on a
ZooKeeper cluster, TRANSACTION_ABORTABLE for v11 producers, each next to what Apache Kafka 3.8
answers to the same bytes (those cases skip when Kafka is not built here).

The cases of the other tiers: tests/broker/test_produce_versions.py.
"""

import pytest

from pybroker.protocol import REQUESTS, encode_request
from pybroker.records import build_batch
from tests.cluster import Cluster
from tests.kafka_wire import WireClient
from tests.txn_brokers import start_target

Produce = REQUESTS[0]
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 3, 6
INVALID_TXN_STATE, TRANSACTION_ABORTABLE = 48, 120
TAGS = [(7, b"x"), (300, b"")]  # unknown tagged fields, as a newer client might send them
DEADLINE = 60.0


def request(topic: str, partition: int, records, acks: int = -1, transactional_id=None, tags=None):
    return Produce(transactional_id=transactional_id, acks=acks, timeout_ms=10000, _unknown_tagged=tags,
                   topic_data=[Produce.TopicProduceData(name=topic, _unknown_tagged=tags, partition_data=[
                       Produce.PartitionProduceData(index=partition, records=records, _unknown_tagged=tags)])])


def answer(response):
    """The one partition answer of a one-partition Produce response."""
    return response.responses[0].partition_responses[0]


def frame_of(req, version: int) -> bytes:
    """A whole request frame (header and body, no size prefix), to send cut or garbled."""
    return bytes(encode_request(version, 1, "kafka-wire-test", req))


def produce_max_version(c: WireClient) -> int:
    return next(k.max_version for k in c.api_versions().api_keys if k.api_key == 0)


# ---- one broker ------------------------------------------------------------------------------


# ---- the same bytes to Kafka 3.8 and to pybroker ------------------------------------------------

def _until(fn, done, what: str, timeout: float = DEADLINE):
    """Call ``fn`` until ``done(result)``; the result. Bounded by ``timeout`` s."""
    return Cluster.wait_for(lambda: (lambda r: r if done(r) else None)(fn()), timeout, what, interval=0.2)


def _init_transactional(c: WireClient, transactional_id: str):
    """FindCoordinator (which creates the transaction state topic), then InitProducerId."""
    c.request(REQUESTS[10](key=transactional_id, key_type=1), 1)
    return c.init_producer_id(1, transactional_id)


def _transactional_batch(pid: int, epoch: int) -> bytes:
    return bytes(build_batch([b"txn"], attributes=0x10, producer_id=pid, producer_epoch=epoch, base_sequence=0))


@pytest.mark.parametrize("target", ["pybroker", "kafka"])
def test_answers_as_kafka(target, tmp_path):
    """Plain and tagged produces, an unknown topic, and a transactional batch whose partition was
    never added to the transaction: v9 and v10 get INVALID_TXN_STATE, v11 TRANSACTION_ABORTABLE."""
    b = start_target(target, str(tmp_path))
    try:
        with WireClient(b.port) as c:
            assert produce_max_version(c) == 11
            c.create_topic("oracle")
            got = {}
            for version in (9, 10, 11):
                p = _until(lambda: answer(c.request(request("oracle", 0, bytes(build_batch([b"p"])), tags=TAGS),
                                                    version)),
                           lambda p: p.error_code not in (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER),
                           "the topic's leader")
                got[("plain", version)] = (p.error_code, p.base_offset, p.current_leader.leader_id)
                p = answer(c.request(request("nowhere", 0, bytes(build_batch([b"p"]))), version))
                got[("unknown topic", version)] = (p.error_code, p.base_offset, p.current_leader.leader_id)
            init = _until(lambda: _init_transactional(c, "oracle-tx"), lambda r: r.error_code == 0,
                          "a transactional producer id")
            batch = _transactional_batch(init.producer_id, init.producer_epoch)
            for version in (9, 10, 11):
                p = answer(c.request(request("oracle", 0, batch, transactional_id="oracle-tx"), version))
                got[("not in the transaction", version)] = (p.error_code, p.base_offset, p.current_leader.leader_id)
        assert got == {
            ("plain", 9): (0, 0, -1), ("plain", 10): (0, 1, -1), ("plain", 11): (0, 2, -1),
            **{("unknown topic", v): (UNKNOWN_TOPIC_OR_PARTITION, -1, -1) for v in (9, 10, 11)},
            ("not in the transaction", 9): (INVALID_TXN_STATE, -1, -1),
            ("not in the transaction", 10): (INVALID_TXN_STATE, -1, -1),
            ("not in the transaction", 11): (TRANSACTION_ABORTABLE, -1, -1),
        }
        good = frame_of(request("oracle", 0, bytes(build_batch([b"x"]))), 11)
        with WireClient(b.port) as c:
            c.send_frame(good[:-8])  # cut inside the records
            assert c.is_closed_by_peer()
    finally:
        b.close()


# ---- KIP-951 on a cluster ----------------------------------------------------------------------

CLUSTER_OVERRIDES = {"offsets.topic.num.partitions": 3, "zookeeper.session.timeout.ms": 6000,
                     "default.replication.factor": 3}


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=CLUSTER_OVERRIDES) as c:
        yield c


def _create(cluster, name: str, replicas=None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(name, 1, replica_assignment=[replicas]) if replicas else NewTopic(name, 1, 3)
    admin.create_topics([topic])[name].result(DEADLINE)


def _leader_seen_by_all(cluster, topic: str, after_epoch: int = -1) -> tuple[int, int]:
    """(leader, epoch) of ``topic``-0 once every live broker's Metadata answer agrees on it."""
    def agreed():
        seen = set()
        for broker_id in cluster.live_brokers():
            with WireClient(cluster.broker(broker_id).port) as c:
                part = c.metadata([topic]).topics[0].partitions
                seen.add((part[0].leader_id, part[0].leader_epoch) if part else None)
        if len(seen) != 1:
            return None
        state = seen.pop()
        return state if state is not None and state[0] >= 0 and state[1] > after_epoch else None
    return cluster.wait_for(agreed, DEADLINE, f"every broker to know the leader of {topic}-0")


def _hint(port: int, topic: str, version: int, partition: int = 0):
    """(error, (leader id, leader epoch), [(node id, host, port, rack)]) of one produce."""
    with WireClient(port) as c:
        response = c.request(request(topic, partition, bytes(build_batch([b"h"]))), version)
    p = answer(response)
    return (p.error_code, (p.current_leader.leader_id, p.current_leader.leader_epoch),
            [(e.node_id, e.host, e.port, e.rack) for e in response.node_endpoints])


def test_not_leader_answers_name_the_current_leader(cluster):
    """A follower and a broker with no replica both answer NOT_LEADER_OR_FOLLOWER; from v10 the
    answer names the leader and its endpoint, and follows the leader when it moves."""
    _create(cluster, "spread")
    leader, epoch = _leader_seen_by_all(cluster, "spread")
    pinned_on = next(i for i in (1, 2, 3) if i != leader)
    _create(cluster, "pinned", [pinned_on])
    assert _leader_seen_by_all(cluster, "pinned")[0] == pinned_on
    port = {i: cluster.broker(i).port for i in (1, 2, 3)}
    for topic, owner in (("spread", leader), ("pinned", pinned_on)):
        owner_epoch = _leader_seen_by_all(cluster, topic)[1]
        endpoint = [(owner, "127.0.0.1", port[owner], None)]
        for other in (i for i in (1, 2, 3) if i != owner):
            for version in (10, 11):
                assert _hint(port[other], topic, version) == (NOT_LEADER_OR_FOLLOWER, (owner, owner_epoch), endpoint)
            assert _hint(port[other], topic, 9) == (NOT_LEADER_OR_FOLLOWER, (-1, -1), [])  # no tagged fields
            assert _hint(port[other], topic, 8)[0] == NOT_LEADER_OR_FOLLOWER
        assert _hint(port[owner], topic, 11) == (0, (-1, -1), [])
        assert _hint(port[owner], topic, 11, partition=7) == (UNKNOWN_TOPIC_OR_PARTITION, (-1, -1), [])
    cluster.stop(leader)  # a clean shutdown hands the leadership over
    new_leader, new_epoch = _leader_seen_by_all(cluster, "spread", after_epoch=epoch)
    assert new_leader != leader
    other = next(i for i in (1, 2, 3) if i not in (leader, new_leader))
    assert cluster.wait_for(
        lambda: _hint(port[other], "spread", 11) == (NOT_LEADER_OR_FOLLOWER, (new_leader, new_epoch),
                                                     [(new_leader, "127.0.0.1", port[new_leader], None)]),
        DEADLINE, "the hint to name the new leader")
