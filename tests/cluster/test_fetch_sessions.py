"""Fetch sessions of followers and the current leader's answers on a cluster
(fetch sessions on one broker: tests/broker/test_fetch_sessions.py)."""
import pytest

from pybroker.protocol.messages import REQUESTS
from tests.broker.test_fetch_sessions import (CountingProxy, Fetch, answered, fetch_request, produce,
                                              produce_until_accepted)
from tests.kafka_wire import WireClient


@pytest.mark.slow
def test_follower_sessions_and_current_leader(tmp_path, zookeeper):
    from tests.cluster import Cluster
    req = REQUESTS[19]
    proxy = CountingProxy().start()  # broker 1 is reached through it: its followers' fetches are counted
    with Cluster(tmp_path, 2, zk=zookeeper, overrides={"replica.fetch.wait.max.ms": 100}, broker_overrides={
            1: {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}}) as cluster, proxy:
        proxy.target(cluster.broker(1).port)

        def created():  # once the controller reaches broker 1 through the proxy, both brokers are live
            with WireClient(cluster.broker(2).port) as w:
                resp = w.request(req(topics=[req.CreatableTopic(name="r", num_partitions=4, replication_factor=2)],
                                     timeout_ms=20000, validate_only=False), 4)
                return resp.topics[0].error_code in (0, 36)  # created (maybe by an earlier try)
        cluster.wait_for(created, what="the topic created")
        cluster.wait_for(lambda: all(cluster.partition_state("r", i) and len(cluster.partition_state("r",
                                                                                                     i)["isr"]) == 2
                                     for i in range(4)), what="a full ISR")
        leader = cluster.leader("r", 0)
        follower = 3 - leader
        with WireClient(cluster.broker(leader).port) as w:
            produce_until_accepted(w, "r", 0)  # the leader may not have applied its epoch yet
            for _ in range(19):  # several rounds of records: the followers' sessions carry them
                produce(w, "r", 0)

        def replicated():
            with WireClient(cluster.broker(follower).port) as w:
                p = answered(w.request(Fetch(  # a debugging consumer reads the follower's own log
                    replica_id=-2, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                    topics=[Fetch.FetchTopic(topic="r", partitions=[Fetch.FetchPartition(
                        partition=0, fetch_offset=19, partition_max_bytes=1 << 20)])]), 12))[("r", 0)]
                return p.error_code == 0 and p.records is not None and len(bytes(p.records)) > 0
        cluster.wait_for(replicated, what="the follower has every record")
        # a partition only the leader hosts: the other broker answers NOT_LEADER_OR_FOLLOWER naming the leader
        # (a follower serves consumers from Fetch v11, KIP-392)
        with WireClient(cluster.broker(leader).port) as w:
            resp = w.request(req(topics=[req.CreatableTopic(name="r-one", num_partitions=-1, replication_factor=-1,
                                                            assignments=[req.CreatableReplicaAssignment(
                                                                partition_index=0, broker_ids=[leader])])],
                                 timeout_ms=20000, validate_only=False), 4)
            assert resp.topics[0].error_code == 0, resp
        cluster.wait_for(lambda: cluster.partition_state("r-one", 0), what="the one-replica topic's state")
        state = cluster.partition_state("r-one", 0)
        with WireClient(cluster.broker(follower).port) as w:
            topic_id = cluster.wait_for(lambda: w.metadata(["r-one"], version=12).topics[0].topic_id,
                                        what="the other broker to know the topic")
            resp = w.request(fetch_request({topic_id: [(0, 0)]}, by_id=True), 16)
            assert resp.responses[0].topic_id == topic_id
            p = resp.responses[0].partitions[0]
            assert p.error_code == 6
            assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (leader, state["leader_epoch"])
            advertised = proxy.port if leader == 1 else cluster.broker(leader).port
            assert [(n.node_id, n.port) for n in resp.node_endpoints] == [(leader, advertised)]
            old = w.request(fetch_request({topic_id: [(0, 0)]}, by_id=True), 15)
            assert old.responses[0].partitions[0].current_leader.leader_id == -1  # KIP-951 answers from v16
        # broker 2 follows broker 1's partitions in one session: a full fetch, then requests naming only
        # the partitions that moved (none, once caught up)
        def idle_fetch_answered():
            sizes = [req for _, _, req, _ in proxy.fetches()[1:]]
            return sizes and min(sizes) < 100
        cluster.wait_for(idle_fetch_answered, what="an incremental fetch naming no partition")
        follower_fetches = proxy.fetches()
        assert {v for _, v, _, _ in follower_fetches} == {17}
        assert follower_fetches[0][2] > 100  # the full fetch named the partitions

