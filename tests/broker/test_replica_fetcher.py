"""A follower's fetcher against a real leader that refuses a partition: it rests, then fetches again
(the cluster cases: tests/cluster/test_replica_fetcher.py)."""
import asyncio

from pybroker.config import BrokerConfig
from pybroker.log import Log, LogConfig
from pybroker.replica.fetcher import ReplicaFetcher, ReplicaFetcherManager
from pybroker.replica.partition import Partition
from tests.cluster.test_replica_fetcher import BACKOFF_MS


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

