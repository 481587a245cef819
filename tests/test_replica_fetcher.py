"""A follower's fetcher against real leaders: one that refuses a partition, one whose log the
follower's diverged from (truncation on the leader's diverging epoch, KIP-320)."""
import asyncio
import struct

from pybroker.config import BrokerConfig
from pybroker.log import Log, LogConfig
from pybroker.protocol.messages import REQUESTS
from pybroker.records import Record, build_batch, decode_records
from pybroker.replica.fetcher import ReplicaFetcher, ReplicaFetcherManager
from pybroker.replica.partition import Partition
from tests.cluster import Cluster
from tests.kafka_wire import WireClient

BACKOFF_MS = 200


def test_a_refused_partition_rests_then_is_fetched_again(broker, tmp_path):
    """A leader that does not host the partition (yet) answers UNKNOWN_TOPIC_OR_PARTITION, as a
    restarted leader does until its LeaderAndIsr arrives: the fetcher must keep the partition and
    ask again after replica.fetch.backoff.ms, never drop it."""
    config = BrokerConfig(node_id=7, replica_fetch_backoff_ms=BACKOFF_MS, replica_fetch_wait_max_ms=100)
    log = Log(str(tmp_path / "ghost-0"), "ghost", 0, LogConfig(retention_ms=-1))
    partition = Partition("ghost", 0, None, log, 7, 0, (0, 7))
    key = ("ghost", 0)

    async def run():
        fetcher = ReplicaFetcher(ReplicaFetcherManager(7, config), 0, ("127.0.0.1", broker.port))
        fetcher.add([partition])
        try:
            refusals = []
            async with asyncio.timeout(20):
                while len(refusals) < 3:  # three refusals: it came back after resting, twice
                    until = fetcher.resting.get(key)
                    if until is not None and (not refusals or until > refusals[-1]):
                        refusals.append(until)
                    assert key in fetcher.partitions
                    await asyncio.sleep(0.01)
            gaps = [b - a for a, b in zip(refusals, refusals[1:])]
            assert all(gap >= BACKOFF_MS / 1000 for gap in gaps), gaps
        finally:
            await fetcher.stop()

    try:
        asyncio.run(run())
    finally:
        log.close()


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


def test_truncating_partitions_stay_out_of_the_session(tmp_path):
    """A truncating partition is not fetched, so the session forgets it; one whose answer was
    dropped is held out of one request (forgotten), then sent whole again."""
    config = BrokerConfig(node_id=7)
    logs = [Log(str(tmp_path / f"t-{i}"), "t", i, LogConfig(retention_ms=-1)) for i in range(3)]
    parts = [Partition("t", i, None, lg, 7, 0, (0, 7)) for i, lg in enumerate(logs)]

    async def run():
        fetcher = ReplicaFetcher(ReplicaFetcherManager(7, config), 0, ("127.0.0.1", 1))
        for p in parts:  # as add() does, without starting the fetch loop
            fetcher.partitions[("t", p.index)] = p
        session = fetcher.session
        wanted, _ = fetcher.wanted()
        assert session.build(wanted) == (list(wanted), []) and len(wanted) == 3
        session.answered(0, 42)  # the leader opened session 42
        fetcher.truncating.add(("t", 0))
        wanted, _ = fetcher.wanted()
        assert session.build(wanted) == ([], [("t", 0)])  # forgotten while it truncates
        session.answered(0, 42)
        fetcher.truncating.clear()
        fetcher.rejoin.add(("t", 1))  # its answer was dropped: out for one request
        wanted, _ = fetcher.wanted()
        assert session.build(wanted) == ([("t", 0)], [("t", 1)])
        session.answered(0, 42)
        fetcher.rejoin.clear()
        wanted, _ = fetcher.wanted()
        assert session.build(wanted) == ([("t", 1)], [])  # back, so the leader answers it in full

    try:
        asyncio.run(run())
    finally:
        for lg in logs:
            lg.close()
