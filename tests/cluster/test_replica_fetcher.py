"""A follower's fetcher against real leaders: one that refuses a partition, one whose log the
follower's diverged from (truncation on the leader's diverging epoch, KIP-320).

The cases of the other tiers: tests/broker/test_replica_fetcher.py, tests/unit/test_replica_fetcher.py.
"""
import struct

from pybroker.protocol.messages import REQUESTS
from pybroker.records import Record, build_batch, decode_records
from tests.cluster import Cluster
from tests.kafka_wire import WireClient

BACKOFF_MS = 200


def _batch(value: bytes) -> bytes:
    return bytes(build_batch([Record(value=value, timestamp=1_700_000_000_000)], base_timestamp=1_700_000_000_000))


def _own_log(port: int, topic: str) -> list:
    """(offset, value) of every record in a broker's own replica of ``topic``-0 (a debugging consumer)."""
    fetch = REQUESTS[1]
    out, offset = [], 0
    with WireClient(port) as w:
        for _ in range(100):  # bounded: a few records, one batch each
            resp = w.request(fetch(replica_id=-2, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0,
                                   session_epoch=-1, topics=[fetch.FetchTopic(topic=topic, partitions=[
                                       fetch.FetchPartition(partition=0, fetch_offset=offset,
                                                            partition_max_bytes=1 << 20)])]), 12)
            p = resp.responses[0].partitions[0]
            data = bytes(p.records or b"")
            if p.error_code or not data:
                return out
            pos = 0
            while pos + 12 <= len(data):
                size = struct.unpack_from(">i", data, pos + 8)[0] + 12
                out += [(r.offset, r.value) for r in decode_records(data[pos:pos + size]) if r.offset >= offset]
                pos += size
            offset = out[-1][0] + 1
    return out


def test_a_diverged_follower_truncates_on_the_leaders_diverging_epoch(tmp_path, zookeeper):
    """KIP-320 against real brokers: the old leader comes back holding two records the new leader
    (elected uncleanly) never had. Its fetches carry its last fetched epoch, the new leader answers
    a diverging epoch, and the old leader cuts its log there and takes the new leader's records."""
    create = REQUESTS[19]
    overrides = {"unclean.leader.election.enable": "true", "replica.fetch.wait.max.ms": 100,
                 "zookeeper.session.timeout.ms": 6000, "replica.lag.time.max.ms": 2000}
    with Cluster(tmp_path, 2, zk=zookeeper, overrides=overrides) as cluster:
        def created():
            with WireClient(cluster.broker(1).port) as w:
                topic = create.CreatableTopic(name="d", num_partitions=1, replication_factor=2)
                resp = w.request(create(topics=[topic], timeout_ms=20000, validate_only=False), 4)
                return resp.topics[0].error_code in (0, 36)
        cluster.wait_for(created, what="the topic created")
        cluster.wait_for(lambda: len((cluster.partition_state("d", 0) or {}).get("isr", ())) == 2, what="a full ISR")
        old = cluster.leader("d", 0)
        new = 3 - old
        with WireClient(cluster.broker(old).port) as w:
            for v in (b"a0", b"a1", b"a2"):
                assert w.produce("d", 0, _batch(v), acks=-1).error_code == 0
        cluster.wait_for(lambda: [v for _, v in _own_log(cluster.broker(new).port, "d")] == [b"a0", b"a1", b"a2"],
                         what="the follower has the first records")
        cluster.kill(new)
        with WireClient(cluster.broker(old).port) as w:  # only the old leader ever holds these two
            for v in (b"lost3", b"lost4"):
                assert w.produce("d", 0, _batch(v), acks=1).error_code == 0
        epoch = cluster.partition_state("d", 0)["leader_epoch"]
        cluster.kill(old)
        cluster.restart(new)
        cluster.wait_for(lambda: (s := cluster.partition_state("d", 0)) and s["leader"] == new
                         and s["leader_epoch"] > epoch, what="the unclean election of the other broker")

        def written():
            with WireClient(cluster.broker(new).port) as w:
                return w.produce("d", 0, _batch(b"b3"), acks=1).error_code == 0
        cluster.wait_for(written, what="a record in the new epoch")
        cluster.restart(old)
        want = [(0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"b3")]
        cluster.wait_for(lambda: _own_log(cluster.broker(old).port, "d") == want,
                         what="the old leader's log cut at the divergence and refilled from the new leader")
        stderr = cluster.broker(old).stderr()
        assert "the leader ended epoch" in stderr and "truncating to 3" in stderr, stderr[-3000:]


