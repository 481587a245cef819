"""Bad input to cluster brokers: an unreachable ZooKeeper, impossible topic creations, controller
requests from something that is not the controller, and data requests to the wrong replica.

* A broker whose ZooKeeper cannot be reached exits non-zero within a bounded time, saying so.
* CreateTopics with a replication factor above the broker count answers INVALID_REPLICATION_FACTOR
  (38); a manual assignment naming an unknown broker answers INVALID_REPLICA_ASSIGNMENT (39).
* LeaderAndIsr / UpdateMetadata / StopReplica carrying a broker epoch that is not the receiving
  broker's current registration answer STALE_BROKER_EPOCH (77) and change nothing; a single-node
  broker (no cluster) answers 77 to each. (A registered pybroker compares the epoch for equality;
  Kafka refuses only epochs older than the current one and skips the check for -1. While a broker is
  recording its registration both take a newer epoch: the controller may have seen it first. Both
  skip the check for the versions that carry no broker epoch: tests/cluster/test_interbroker_versions.py.)
* A replica fetch from a broker id that is not a replica, and Produce / Fetch / ListOffsets sent to
  a follower, answer NOT_LEADER_OR_FOLLOWER (6). (Kafka 2.4+ serves a v11+ consumer Fetch from a
  follower for KIP-392 follower fetching; pybroker never does, which clients accept.)

The cases of the other tiers: tests/broker/test_cluster_bad_input.py.
"""
import json
import os
import struct
import uuid

import pytest

from pybroker.controller.zk_controller import topic_uuid
from pybroker.protocol import REQUESTS
from pybroker.records import build_batch, decode_records
from tests.broker import BrokerProcess
from tests.kafka_wire import WireClient
from tests.cluster.test_replication import create_topic, wait_full_isr

NOT_LEADER_OR_FOLLOWER = 6
STALE_CONTROLLER_EPOCH = 11
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
STALE_BROKER_EPOCH = 77
MADE_UP_EPOCHS = (-1, 0, 987654321987)
TIMEOUT = 30


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    """The session's shared three-broker cluster (tests/conftest.py): every request here is refused."""
    return shared_cluster


# ---- a ZooKeeper that is not there ------------------------------------------------------------------


# ---- CreateTopics that cannot be satisfied ---------------------------------------------------------

def create_topics(port: int, topic) -> object:
    req = REQUESTS[19]
    with WireClient(port, timeout=TIMEOUT) as c:
        return c.request(req(topics=[topic], timeout_ms=20000, validate_only=False), 4).topics[0]


def test_create_topics_with_impossible_replicas_is_refused(cluster):
    req = REQUESTS[19]
    ports = [cluster.broker(b).port for b in (1, 2, 3)]
    for port in ports:  # whichever broker gets the request
        too_many = create_topics(port, req.CreatableTopic(name="rf4", num_partitions=1, replication_factor=4,
                                                          assignments=[], configs=[]))
        assert too_many.error_code == INVALID_REPLICATION_FACTOR, too_many
        unknown = create_topics(port, req.CreatableTopic(
            name="on-broker-9", num_partitions=-1, replication_factor=-1, configs=[],
            assignments=[req.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 9])]))
        assert unknown.error_code == INVALID_REPLICA_ASSIGNMENT, unknown
    for name in ("rf4", "on-broker-9"):
        assert not cluster.zk().exists(f"/brokers/topics/{name}"), f"{name} was written to ZooKeeper"
    # the brokers keep serving: a good topic is created, written and read on every broker
    topic = create_topic(cluster, "after-refusals", partitions=1)
    wait_full_isr(cluster, topic, 1)
    leader = cluster.leader(topic, 0)
    with WireClient(cluster.broker(leader).port, timeout=TIMEOUT) as c:
        assert c.produce(topic, 0, build_batch([b"still-serving"]), acks=-1).error_code == 0
        assert [r.value for r in decode_records(c.fetch(topic, 0, 0).records)] == [b"still-serving"]
    for port in ports:
        with WireClient(port, timeout=TIMEOUT) as c:
            meta = c.metadata([topic, "rf4", "on-broker-9"])
            assert sorted(b.node_id for b in meta.brokers) == [1, 2, 3]
            errors = {t.name: t.error_code for t in meta.topics}
            assert errors == {topic: 0, "rf4": 3, "on-broker-9": 3}, errors
    assert all(cluster.broker(b).alive() for b in (1, 2, 3))


# ---- controller requests from a non-broker --------------------------------------------------------

def broker_epoch(cluster, broker_id: int) -> int:
    """What the controller sends: the czxid of the broker's registration znode."""
    return cluster.zk().exists(f"/brokers/ids/{broker_id}").czxid


def topic_id(cluster, topic: str) -> uuid.UUID:
    return topic_uuid(json.loads(cluster.zk().get(f"/brokers/topics/{topic}")[0])["topic_id"])


def leader_and_isr(cluster, topic: str, leader: int, epoch: int, controller_epoch: int, state: dict):
    """A LeaderAndIsr v5 making ``leader`` the leader of ``topic``-0 under a much newer leader epoch."""
    req = REQUESTS[4]
    return req(controller_id=leader, controller_epoch=controller_epoch, broker_epoch=epoch, type=0,
               topic_states=[req.LeaderAndIsrTopicState(topic_name=topic, topic_id=topic_id(cluster, topic),
                                                        partition_states=[req.LeaderAndIsrPartitionState(
                                                            topic_name=topic, partition_index=0,
                                                            controller_epoch=controller_epoch, leader=leader,
                                                            leader_epoch=state["leader_epoch"] + 10, isr=[leader],
                                                            partition_epoch=1000, replicas=[1, 2, 3],
                                                            is_new=False)])],
               live_leaders=[req.LeaderAndIsrLiveLeader(broker_id=leader, host_name="127.0.0.1",
                                                        port=cluster.broker(leader).port)])


def produce_error(port: int, topic: str, value: bytes) -> int:
    with WireClient(port, timeout=TIMEOUT) as c:
        return c.produce(topic, 0, build_batch([value]), acks=-1).error_code


def fetch(port: int, topic: str, offset: int = 0, replica_id: int = -1, version: int = 11):
    req = REQUESTS[1]
    request = req(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                  session_id=0, session_epoch=-1, topics=[req.FetchTopic(topic=topic, partitions=[req.FetchPartition(
                      partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                      partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    with WireClient(port, timeout=TIMEOUT) as c:
        return c.request(request, version).responses[0].partitions[0]


def list_offsets_error(port: int, topic: str) -> int:
    req = REQUESTS[2]
    request = req(replica_id=-1, isolation_level=0, topics=[req.ListOffsetsTopic(name=topic, partitions=[
        req.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    with WireClient(port, timeout=TIMEOUT) as c:
        return c.request(request, 5).topics[0].partitions[0].error_code


def stored_values(port: int, topic: str) -> list:
    """The values of every batch the partition answers from offset 0 (one fetch)."""
    p = fetch(port, topic)
    assert p.error_code == 0, p
    data, pos, out = bytes(p.records or b""), 0, []
    while pos + 12 <= len(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        if pos + size > len(data):
            break
        out += [r.value for r in decode_records(data[pos:pos + size])]
        pos += size
    return out


@pytest.fixture
def seeded(cluster, request):
    """A one-partition RF=3 topic of the test's own holding 5 records, full ISR: (cluster, topic, leader,
    followers)."""
    topic = create_topic(cluster, "seeded-" + request.node.name.removeprefix("test_"), partitions=1)
    wait_full_isr(cluster, topic, 1)
    leader = cluster.leader(topic, 0)
    for i in range(5):
        assert produce_error(cluster.broker(leader).port, topic, f"seed-{i}".encode()) == 0
    followers = [b for b in (1, 2, 3) if b != leader]
    return cluster, topic, leader, followers


def assert_leadership_unchanged(cluster, topic: str, state: dict, leader: int, followers: list, tag: bytes) -> None:
    now = cluster.partition_state(topic, 0)
    assert (now["leader"], now["leader_epoch"], sorted(now["isr"])) == \
           (state["leader"], state["leader_epoch"], sorted(state["isr"])), (state, now)
    assert produce_error(cluster.broker(leader).port, topic, tag) == 0, "the leader stopped leading"
    for f in followers:
        assert produce_error(cluster.broker(f).port, topic, tag + b"-to-follower") == NOT_LEADER_OR_FOLLOWER
    for b in (leader, *followers):
        with WireClient(cluster.broker(b).port, timeout=TIMEOUT) as c:
            p = c.metadata([topic]).topics[0].partitions[0]
            assert (p.leader_id, p.leader_epoch) == (leader, state["leader_epoch"]), (b, p)


def test_leader_and_isr_with_a_made_up_broker_epoch_is_refused(seeded):
    cluster, topic, leader, followers = seeded
    state = cluster.partition_state(topic, 0)
    controller_epoch = cluster.controller_epoch() + 5  # newer than any controller's: only the broker epoch fences
    for epoch in MADE_UP_EPOCHS:
        # to the leader: "the follower leads now"; to a follower: "you lead now"
        for target, new_leader in ((leader, followers[0]), (followers[0], followers[0])):
            with WireClient(cluster.broker(target).port, timeout=TIMEOUT) as c:
                resp = c.request(leader_and_isr(cluster, topic, new_leader, epoch, controller_epoch, state), 5)
                assert resp.error_code == STALE_BROKER_EPOCH, (epoch, target, resp)
                assert [e.error_code for t in resp.topics for e in t.partition_errors] == [STALE_BROKER_EPOCH]
                assert c.api_versions().error_code == 0  # the connection stays usable
    # the broker's real epoch, but a controller epoch older than the one it follows: also refused
    with WireClient(cluster.broker(leader).port, timeout=TIMEOUT) as c:
        stale = leader_and_isr(cluster, topic, followers[0], broker_epoch(cluster, leader),
                               cluster.controller_epoch() - 1, state)
        assert c.request(stale, 5).error_code == STALE_CONTROLLER_EPOCH
    assert_leadership_unchanged(cluster, topic, state, leader, followers, b"after-leader-and-isr")
    assert all(cluster.broker(b).alive() for b in (1, 2, 3))


def test_update_metadata_with_a_wrong_broker_epoch_is_refused(seeded):
    cluster, topic, leader, followers = seeded
    state = cluster.partition_state(topic, 0)
    req = REQUESTS[6]
    for target in (leader, *followers):
        real = broker_epoch(cluster, target)
        for epoch in (*MADE_UP_EPOCHS, real - 1, real + 1):
            bogus = req(controller_id=9, controller_epoch=cluster.controller_epoch() + 5, broker_epoch=epoch, type=0,
                        topic_states=[req.UpdateMetadataTopicState(
                            topic_name=topic, topic_id=topic_id(cluster, topic),
                            partition_states=[req.UpdateMetadataPartitionState(
                                topic_name=topic, partition_index=0, controller_epoch=cluster.controller_epoch() + 5,
                                leader=9, leader_epoch=state["leader_epoch"] + 10, isr=[9], zk_version=1000,
                                replicas=[9], offline_replicas=[])])],
                        live_brokers=[req.UpdateMetadataBroker(id=9, rack=None, endpoints=[req.UpdateMetadataEndpoint(
                            port=1, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0)])])
            with WireClient(cluster.broker(target).port, timeout=TIMEOUT) as c:
                assert c.request(bogus, 7).error_code == STALE_BROKER_EPOCH, (target, epoch)
                meta = c.metadata([topic])
                assert sorted(b.node_id for b in meta.brokers) == [1, 2, 3], meta.brokers
                assert meta.topics[0].partitions[0].leader_id == leader
        # control: the same request with the real broker epoch passes that check and is refused
        # only for its stale controller epoch, so 77 above was about the broker epoch alone
        bogus.broker_epoch, bogus.controller_epoch = real, cluster.controller_epoch() - 1
        with WireClient(cluster.broker(target).port, timeout=TIMEOUT) as c:
            assert c.request(bogus, 7).error_code == STALE_CONTROLLER_EPOCH, target
    assert_leadership_unchanged(cluster, topic, state, leader, followers, b"after-update-metadata")


def test_stop_replica_with_a_wrong_broker_epoch_is_refused(seeded):
    cluster, topic, leader, followers = seeded
    state = cluster.partition_state(topic, 0)
    req = REQUESTS[5]
    before = stored_values(cluster.broker(leader).port, topic)
    assert before == [f"seed-{i}".encode() for i in range(5)]
    for target in (leader, *followers):
        real = broker_epoch(cluster, target)
        for epoch in (*MADE_UP_EPOCHS, real - 1, real + 1):
            stop = req(controller_id=9, controller_epoch=cluster.controller_epoch() + 5, broker_epoch=epoch,
                       topic_states=[req.StopReplicaTopicState(topic_name=topic, partition_states=[
                           req.StopReplicaPartitionState(partition_index=0, leader_epoch=state["leader_epoch"] + 10,
                                                         delete_partition=True)])])
            with WireClient(cluster.broker(target).port, timeout=TIMEOUT) as c:
                resp = c.request(stop, 3)
                assert resp.error_code == STALE_BROKER_EPOCH, (target, epoch, resp)
                assert [e.error_code for e in resp.partition_errors] == [STALE_BROKER_EPOCH]
        stop.broker_epoch, stop.controller_epoch = real, cluster.controller_epoch() - 1  # control, as above
        with WireClient(cluster.broker(target).port, timeout=TIMEOUT) as c:
            assert c.request(stop, 3).error_code == STALE_CONTROLLER_EPOCH, target
        assert os.path.isdir(os.path.join(cluster.broker(target).data_dir, f"{topic}-0")), \
            f"broker {target} deleted its replica"
    assert stored_values(cluster.broker(leader).port, topic) == before  # data still served
    assert_leadership_unchanged(cluster, topic, state, leader, followers, b"after-stop-replica")
    # the followers still replicate: the full ISR holds and every acks=all write is acknowledged
    wait_full_isr(cluster, topic, 1)


# ---- data requests to the wrong broker ------------------------------------------------------------

def test_fetch_from_a_broker_id_that_is_not_a_replica_is_refused(seeded):
    cluster, topic, leader, followers = seeded
    state = cluster.partition_state(topic, 0)
    hw_before = fetch(cluster.broker(leader).port, topic).high_watermark
    # the leader's log end: what an impostor follower would claim to have, to move the HW
    p = fetch(cluster.broker(leader).port, topic, offset=hw_before, replica_id=42)
    assert p.error_code == NOT_LEADER_OR_FOLLOWER, p
    assert p.records is None or len(p.records) == 0
    p = fetch(cluster.broker(leader).port, topic, offset=0, replica_id=42)
    assert p.error_code == NOT_LEADER_OR_FOLLOWER and not p.records, p
    assert cluster.partition_state(topic, 0)["isr"] == state["isr"]
    assert stored_values(cluster.broker(leader).port, topic) == [f"seed-{i}".encode() for i in range(5)]


def test_produce_fetch_list_offsets_to_a_follower_answer_not_leader(seeded):
    """Produce and ListOffsets need the leader; Fetch too before v11, while from v11 a follower serves
    consumers up to its own high watermark (KIP-392), as Kafka does."""
    cluster, topic, leader, followers = seeded
    for f in followers:
        port = cluster.broker(f).port
        assert produce_error(port, topic, b"to-a-follower") == NOT_LEADER_OR_FOLLOWER
        p = fetch(port, topic, version=4)
        assert p.error_code == NOT_LEADER_OR_FOLLOWER and not p.records, (f, p)
        seeds = [f"seed-{i}".encode() for i in range(5)]
        cluster.wait_for(lambda: stored_values(port, topic) == seeds, what="the follower to serve the seeds")
        assert list_offsets_error(port, topic) == NOT_LEADER_OR_FOLLOWER
    # nothing was appended anywhere by the refused produce; the leader answers all three
    port = cluster.broker(leader).port
    assert list_offsets_error(port, topic) == 0
    assert stored_values(port, topic) == [f"seed-{i}".encode() for i in range(5)]
    assert produce_error(port, topic, b"to-the-leader") == 0


# ---- controller requests to a single-node broker ----------------------------------------------------

def test_single_node_broker_refuses_controller_requests(tmp_path):
    b = BrokerProcess(str(tmp_path / "single")).start()
    try:
        with WireClient(b.port, timeout=TIMEOUT) as c:
            c.create_topic("solo")
            assert c.produce("solo", 0, build_batch([b"solo-0"]), acks=-1).error_code == 0
            req4, req5, req6 = REQUESTS[4], REQUESTS[5], REQUESTS[6]
            lai = req4(controller_id=1, controller_epoch=1, broker_epoch=1, type=0, topic_states=[
                req4.LeaderAndIsrTopicState(topic_name="solo", topic_id=uuid.uuid4(), partition_states=[
                    req4.LeaderAndIsrPartitionState(topic_name="solo", partition_index=0, controller_epoch=1,
                                                    leader=7, leader_epoch=99, isr=[7], partition_epoch=1,
                                                    replicas=[7])])],
                live_leaders=[req4.LeaderAndIsrLiveLeader(broker_id=7, host_name="127.0.0.1", port=1)])
            for epoch in MADE_UP_EPOCHS:
                lai.broker_epoch = epoch
                resp = c.request(lai, 5)
                assert resp.error_code == STALE_BROKER_EPOCH, resp
                assert [e.error_code for t in resp.topics for e in t.partition_errors] == [STALE_BROKER_EPOCH]
                assert c.api_versions().error_code == 0  # the same connection keeps working
            um = req6(controller_id=1, controller_epoch=1, broker_epoch=1, type=0, topic_states=[], live_brokers=[])
            assert c.request(um, 7).error_code == STALE_BROKER_EPOCH
            sr = req5(controller_id=1, controller_epoch=1, broker_epoch=1, topic_states=[req5.StopReplicaTopicState(
                topic_name="solo", partition_states=[req5.StopReplicaPartitionState(
                    partition_index=0, leader_epoch=99, delete_partition=True)])])
            assert c.request(sr, 3).error_code == STALE_BROKER_EPOCH
            assert c.api_versions().error_code == 0
            # still the leader of its data
            assert [r.value for r in decode_records(c.fetch("solo", 0, 0).records)] == [b"solo-0"]
            assert c.produce("solo", 0, build_batch([b"solo-1"]), acks=-1).error_code == 0
        assert b.alive()
    finally:
        try:
            b.stop()
        finally:
            b.close()


def test_controlled_shutdown_with_a_wrong_broker_epoch_or_to_a_non_controller_is_refused(seeded):
    """ControlledShutdown moves a broker's leaderships away: only with its current epoch, only at
    the controller (v0/v1, which carry no epoch, are served too, as Kafka 3.8 does)."""
    cluster, topic, leader, followers = seeded
    state = cluster.partition_state(topic, 0)
    controller = cluster.controller_id()
    real = broker_epoch(cluster, leader)
    req = REQUESTS[7]
    with WireClient(cluster.broker(controller).port, timeout=TIMEOUT) as c:
        for epoch in (*MADE_UP_EPOCHS, real - 1, real + 1):
            resp = c.request(req(broker_id=leader, broker_epoch=epoch), 3)
            assert (resp.error_code, resp.remaining_partitions) == (STALE_BROKER_EPOCH, []), epoch
        assert c.request(req(broker_id=99, broker_epoch=real), 3).error_code == 8  # BROKER_NOT_AVAILABLE
        assert c.api_versions().error_code == 0
    non_controller = next(b for b in (1, 2, 3) if b != controller)
    with WireClient(cluster.broker(non_controller).port, timeout=TIMEOUT) as c:
        assert c.request(req(broker_id=leader, broker_epoch=real), 3).error_code == 41  # NOT_CONTROLLER
        versions = {k.api_key: (k.min_version, k.max_version) for k in c.api_versions().api_keys}
        assert versions[7] == (0, 3)
    assert_leadership_unchanged(cluster, topic, state, leader, followers, b"after-controlled-shutdown")
