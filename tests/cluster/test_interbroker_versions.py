"""The controller-to-broker APIs at every version: LeaderAndIsr 0-7, StopReplica 0-4, UpdateMetadata 0-8.

Wire-level, against a real three-broker ZooKeeper cluster, each request shaped as a ZooKeeper
controller of that version shapes it:

* every version is applied and answered with that version's fields (LeaderAndIsr per partition with
  topic names before v5, per topic id from v5; StopReplica echoes every partition of every layout);
* a request from an older controller epoch is refused (STALE_CONTROLLER_EPOCH) at every version, and a
  wrong broker epoch (STALE_BROKER_EPOCH) from the first version that carries one (LeaderAndIsr v2,
  StopReplica v1, UpdateMetadata v5); older versions cannot name the broker's incarnation and are
  fenced by the controller epoch alone, as Kafka skips an unknown broker epoch;
* UpdateMetadata v0's single host/port and v1-v2's endpoints (named by security protocol) serve
  Metadata on the PLAINTEXT listener; racks arrive from v2;
* StopReplica v3+ with a leader epoch older than the replica's is refused (FENCED_LEADER_EPOCH) and
  the replica stays;
* LeaderRecoveryState (KIP-704, LeaderAndIsr v6+): a leader told RECOVERING leads as RECOVERED, as
  Kafka's does (it has nothing to recover from), so a caught-up follower rejoins its ISR; a follower
  keeps the state it was told.

The controller itself sends the newest versions; every other test of the cluster runs on them.

The cases of the other tiers: tests/unit/test_interbroker_versions.py.
"""
import json
import os
import uuid

import pytest

from pybroker.controller.zk_controller import topic_uuid
from pybroker.protocol import REQUESTS
from pybroker.records import build_batch
from tests.kafka_wire import WireClient
from tests.cluster.test_replication import create_topic, wait_full_isr

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
STALE_CONTROLLER_EPOCH, FENCED_LEADER_EPOCH, STALE_BROKER_EPOCH = 11, 74, 77
RECOVERED, RECOVERING = 0, 1
TIMEOUT = 60


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    """The session's shared three-broker cluster (tests/conftest.py); this module's topics are its own."""
    return shared_cluster


@pytest.fixture(scope="module")
def topic(cluster):
    name = create_topic(cluster, "interbroker", partitions=1)
    wait_full_isr(cluster, name, 1)
    with WireClient(cluster.broker(cluster.leader(name, 0)).port, timeout=TIMEOUT) as c:
        assert c.produce(name, 0, build_batch([b"seed"]), acks=-1).error_code == 0
    return name


# ---- what the cluster holds ---------------------------------------------------------------------

def broker_epoch(cluster, broker_id: int) -> int:
    return cluster.zk().exists(f"/brokers/ids/{broker_id}").czxid


def topic_id(cluster, topic: str) -> uuid.UUID:
    return topic_uuid(json.loads(cluster.zk().get(f"/brokers/topics/{topic}")[0])["topic_id"])


def zk_state(cluster, topic: str) -> dict:
    """The partition's state znode, with its version (the partition epoch)."""
    data, stat = cluster.zk().get(f"/brokers/topics/{topic}/partitions/0/state")
    return {**json.loads(data), "version": stat.version}


def endpoint(cluster, broker_id: int) -> tuple:
    """(host, port) of the broker's PLAINTEXT listener, as registered."""
    info = json.loads(cluster.zk().get(f"/brokers/ids/{broker_id}")[0])
    url = next(e for e in info["endpoints"] if e.startswith("PLAINTEXT://"))
    host, port = url[len("PLAINTEXT://"):].rsplit(":", 1)
    return host, int(port)


def request(cluster, target: int, req, version: int):
    with WireClient(cluster.broker(target).port, timeout=TIMEOUT) as c:
        response = c.request(req, version)
        assert c.api_versions().error_code == 0  # the connection stays usable
        return response


def leader_epoch_applied(cluster, broker_id: int, topic: str, epoch: int) -> bool:
    """The leader's partition runs ``epoch`` (ListOffsets with that current leader epoch passes)."""
    req = REQUESTS[2]
    r = req(replica_id=-1, isolation_level=0, topics=[req.ListOffsetsTopic(name=topic, partitions=[
        req.ListOffsetsPartition(partition_index=0, current_leader_epoch=epoch, timestamp=-1)])])
    with WireClient(cluster.broker(broker_id).port, timeout=TIMEOUT) as c:
        return c.request(r, 5).topics[0].partitions[0].error_code == 0


# ---- LeaderAndIsr ---------------------------------------------------------------------------------

def leader_and_isr(cluster, topic: str, version: int, target: int, state: dict, controller_epoch=None,
                   epoch=None, recovery: int = RECOVERED):
    """What a controller of ``version`` sends ``target`` to restate ``state`` (a repeat changes nothing)."""
    req = REQUESTS[LEADER_AND_ISR]
    controller_epoch = cluster.controller_epoch() if controller_epoch is None else controller_epoch
    p = req.LeaderAndIsrPartitionState(
        topic_name=topic, partition_index=0, controller_epoch=controller_epoch, leader=state["leader"],
        leader_epoch=state["leader_epoch"], isr=list(state["isr"]), partition_epoch=state["version"],
        replicas=[1, 2, 3], adding_replicas=[], removing_replicas=[], is_new=False, leader_recovery_state=recovery)
    host, port = endpoint(cluster, state["leader"])
    fields = dict(controller_id=cluster.controller_id(), is_k_raft_controller=False,
                  controller_epoch=controller_epoch,
                  broker_epoch=broker_epoch(cluster, target) if epoch is None else epoch, type=0,
                  live_leaders=[req.LeaderAndIsrLiveLeader(broker_id=state["leader"], host_name=host, port=port)])
    if version < 2:
        return req(ungrouped_partition_states=[p], **fields)
    return req(topic_states=[req.LeaderAndIsrTopicState(topic_name=topic, topic_id=topic_id(cluster, topic),
                                                        partition_states=[p])], **fields)


def partition_errors(version: int, response) -> list:
    """[(topic name or id, partition, error)] of a LeaderAndIsr response, in its version's layout."""
    if version < 5:
        assert response.topics == []
        return [(e.topic_name, e.partition_index, e.error_code) for e in response.partition_errors]
    assert response.partition_errors == []
    return [(t.topic_id, e.partition_index, e.error_code) for t in response.topics for e in t.partition_errors]


def test_leader_and_isr_every_version(cluster, topic):
    state = zk_state(cluster, topic)
    leader = state["leader"]
    follower = next(b for b in state["isr"] if b != leader)
    tid = topic_id(cluster, topic)
    for version in range(0, 8):
        key = topic if version < 5 else tid
        for target in (leader, follower):
            resp = request(cluster, target, leader_and_isr(cluster, topic, version, target, state), version)
            assert resp.error_code == 0, (version, target, resp)
            assert partition_errors(version, resp) == [(key, 0, 0)], (version, target)
            stale = leader_and_isr(cluster, topic, version, target, state,
                                   controller_epoch=cluster.controller_epoch() - 1)
            resp = request(cluster, target, stale, version)
            assert resp.error_code == STALE_CONTROLLER_EPOCH, (version, target, resp)
            assert partition_errors(version, resp) == [(key, 0, STALE_CONTROLLER_EPOCH)]
            if version >= 2:  # the first version naming the broker's incarnation
                wrong = leader_and_isr(cluster, topic, version, target, state,
                                       epoch=broker_epoch(cluster, target) + 1)
                assert request(cluster, target, wrong, version).error_code == STALE_BROKER_EPOCH
    # the repeats changed nothing: same leader and epoch, acks=all writes still acknowledged
    assert zk_state(cluster, topic)["leader_epoch"] == state["leader_epoch"]
    with WireClient(cluster.broker(leader).port, timeout=TIMEOUT) as c:
        assert c.produce(topic, 0, build_batch([b"after-leader-and-isr"]), acks=-1).error_code == 0
    wait_full_isr(cluster, topic, 1)


# ---- UpdateMetadata -------------------------------------------------------------------------------

def update_metadata(cluster, topic: str, version: int, target: int, racks: dict, controller_epoch=None, epoch=None):
    """The cluster's truth as a controller of ``version`` states it (with made-up racks from v2)."""
    req = REQUESTS[UPDATE_METADATA]
    controller_epoch = cluster.controller_epoch() if controller_epoch is None else controller_epoch
    state = zk_state(cluster, topic)
    p = req.UpdateMetadataPartitionState(
        topic_name=topic, partition_index=0, controller_epoch=controller_epoch, leader=state["leader"],
        leader_epoch=state["leader_epoch"], isr=list(state["isr"]), zk_version=state["version"],
        replicas=[1, 2, 3], offline_replicas=[])
    brokers = []
    for b in cluster.live_brokers():
        host, port = endpoint(cluster, b)
        brokers.append(req.UpdateMetadataBroker(
            id=b, v0_host=host, v0_port=port, rack=racks.get(b),
            endpoints=[req.UpdateMetadataEndpoint(port=port, host=host, listener="PLAINTEXT", security_protocol=0)]))
    fields = dict(controller_id=cluster.controller_id(), is_k_raft_controller=False, type=0,
                  controller_epoch=controller_epoch, live_brokers=brokers,
                  broker_epoch=broker_epoch(cluster, target) if epoch is None else epoch)
    if version < 5:
        return req(ungrouped_partition_states=[p], **fields)
    return req(topic_states=[req.UpdateMetadataTopicState(topic_name=topic, topic_id=topic_id(cluster, topic),
                                                          partition_states=[p])], **fields)


def test_update_metadata_every_version(cluster, topic):
    state = zk_state(cluster, topic)
    ports = {b: endpoint(cluster, b)[1] for b in (1, 2, 3)}
    tid = topic_id(cluster, topic)
    for version in range(0, 9):
        racks = {b: f"rack-{b}-v{version}" for b in (1, 2, 3)}
        for target in (1, 2, 3):
            resp = request(cluster, target, update_metadata(cluster, topic, version, target, racks), version)
            assert resp.error_code == 0, (version, target, resp)
            with WireClient(cluster.broker(target).port, timeout=TIMEOUT) as c:
                meta = c.metadata([topic], version=12)
            # the version's brokers serve the PLAINTEXT listener clients came in on; racks from v2
            expected_racks = racks if version >= 2 else {b: None for b in (1, 2, 3)}
            assert {b.node_id: (b.port, b.rack) for b in meta.brokers} == \
                   {b: (ports[b], expected_racks[b]) for b in (1, 2, 3)}, (version, target)
            t = meta.topics[0]
            assert (t.error_code, t.topic_id) == (0, tid), (version, target)  # the id outlives id-less versions
            assert (t.partitions[0].leader_id, t.partitions[0].leader_epoch) == (state["leader"], state["leader_epoch"])
            stale = update_metadata(cluster, topic, version, target, {},
                                    controller_epoch=cluster.controller_epoch() - 1)
            assert request(cluster, target, stale, version).error_code == STALE_CONTROLLER_EPOCH, (version, target)
            if version >= 5:
                wrong = update_metadata(cluster, topic, version, target, {}, epoch=broker_epoch(cluster, target) - 1)
                assert request(cluster, target, wrong, version).error_code == STALE_BROKER_EPOCH, (version, target)
    for target in (1, 2, 3):  # back to the truth without racks
        assert request(cluster, target, update_metadata(cluster, topic, 8, target, {}), 8).error_code == 0


# ---- StopReplica ----------------------------------------------------------------------------------

def stop_replica(cluster, version: int, target: int, partitions: list, delete: bool, controller_epoch=None,
                 epoch=None):
    """``partitions``: [(topic, index, leader epoch)] in the layout of ``version``."""
    req = REQUESTS[STOP_REPLICA]
    fields = dict(controller_id=cluster.controller_id(), is_k_raft_controller=False,
                  controller_epoch=cluster.controller_epoch() if controller_epoch is None else controller_epoch,
                  broker_epoch=broker_epoch(cluster, target) if epoch is None else epoch, delete_partitions=delete)
    topics: dict = {}
    for name, index, leader_epoch in partitions:
        topics.setdefault(name, []).append((index, leader_epoch))
    if version == 0:
        return req(ungrouped_partitions=[req.StopReplicaPartitionV0(topic_name=t, partition_index=i)
                                         for t, ps in topics.items() for i, _ in ps], **fields)
    if version < 3:
        return req(topics=[req.StopReplicaTopicV1(name=t, partition_indexes=[i for i, _ in ps])
                           for t, ps in topics.items()], **fields)
    return req(topic_states=[req.StopReplicaTopicState(topic_name=t, partition_states=[
        req.StopReplicaPartitionState(partition_index=i, leader_epoch=e, delete_partition=delete) for i, e in ps])
        for t, ps in topics.items()], **fields)


def test_stop_replica_every_version_echoes_each_partition(cluster, topic):
    """Partitions this broker does not host: stopping (and deleting) them is a no-op that still answers."""
    target = zk_state(cluster, topic)["leader"]
    absent = [("not-hosted-a", 0, -2), ("not-hosted-a", 3, -2), ("not-hosted-b", 1, -2)]
    for version in range(0, 5):
        resp = request(cluster, target, stop_replica(cluster, version, target, absent, delete=True), version)
        assert resp.error_code == 0, (version, resp)
        assert sorted((e.topic_name, e.partition_index, e.error_code) for e in resp.partition_errors) == \
               sorted((t, i, 0) for t, i, _ in absent), version
        stale = stop_replica(cluster, version, target, absent, True, controller_epoch=cluster.controller_epoch() - 1)
        resp = request(cluster, target, stale, version)
        assert resp.error_code == STALE_CONTROLLER_EPOCH, (version, resp)
        assert {e.error_code for e in resp.partition_errors} == {STALE_CONTROLLER_EPOCH}
        if version >= 1:
            wrong = stop_replica(cluster, version, target, absent, True, epoch=broker_epoch(cluster, target) + 1)
            assert request(cluster, target, wrong, version).error_code == STALE_BROKER_EPOCH, version
    assert zk_state(cluster, topic)["leader"] == target  # the real partition was never named


# ---- a leader change, then StopReplica fencing and LeaderRecoveryState ----------------------------------

def log_size(cluster, broker_id: int, topic: str) -> int:
    d = os.path.join(cluster.broker(broker_id).data_dir, f"{topic}-0")
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".log"))


def replicated(cluster, leader: int, follower: int, topic: str, value: bytes) -> None:
    """Write one record to the leader (acks=1) and wait until the follower's log holds the same bytes."""
    with WireClient(cluster.broker(leader).port, timeout=TIMEOUT) as c:
        assert c.produce(topic, 0, build_batch([value]), acks=1).error_code == 0
    cluster.wait_for(lambda: log_size(cluster, follower, topic) == log_size(cluster, leader, topic), TIMEOUT,
                     f"broker {follower} to copy {value!r}")


def test_stop_replica_fencing_and_leader_recovery_state(cluster, topic):
    wait_full_isr(cluster, topic, 1)
    before = zk_state(cluster, topic)
    old_leader = before["leader"]
    cluster.kill(old_leader)  # a new leader, in a new leader epoch, without the old one in its ISR
    state = cluster.wait_for(lambda: (lambda s: s["leader"] not in (old_leader, -1) and old_leader not in s["isr"]
                                      and s["leader_epoch"] > before["leader_epoch"] and s)(zk_state(cluster, topic)),
                             TIMEOUT, "a new leader")
    leader = state["leader"]
    follower = next(b for b in state["isr"] if b != leader)
    cluster.wait_for(lambda: leader_epoch_applied(cluster, leader, topic, state["leader_epoch"]), TIMEOUT,
                     "the new leader to run its epoch")
    state = zk_state(cluster, topic)  # the ISR and version the leader now works from

    # StopReplica v3+: an older leader epoch than the replica's is refused and the replica stays
    for version in (3, 4):
        old = stop_replica(cluster, version, follower, [(topic, 0, state["leader_epoch"] - 1)], delete=True)
        resp = request(cluster, follower, old, version)
        assert resp.error_code == 0, resp
        assert [(e.topic_name, e.partition_index, e.error_code) for e in resp.partition_errors] == \
               [(topic, 0, FENCED_LEADER_EPOCH)], version
    assert os.path.isdir(os.path.join(cluster.broker(follower).data_dir, f"{topic}-0"))
    replicated(cluster, leader, follower, topic, b"after-fenced-stop")

    # LeaderAndIsr v6/v7 with RECOVERING: the leader takes it as RECOVERED, so the old leader rejoins
    for version in (6, 7):
        resp = request(cluster, leader, leader_and_isr(cluster, topic, version, leader, state, recovery=RECOVERING),
                       version)
        assert (resp.error_code, partition_errors(version, resp)) == (0, [(topic_id(cluster, topic), 0, 0)])
    cluster.restart(old_leader)
    replicated(cluster, leader, old_leader, topic, b"while-recovering")
    wait_full_isr(cluster, topic, 1)


# ---- the partition's own rule ------------------------------------------------------------------------

