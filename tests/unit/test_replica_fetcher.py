"""A follower fetcher's session in-process: truncating partitions stay out of it
(against real leaders: tests/cluster/test_replica_fetcher.py)."""
import asyncio

from pybroker.config import BrokerConfig
from pybroker.log import Log, LogConfig
from pybroker.replica.fetcher import ReplicaFetcher, ReplicaFetcherManager
from pybroker.replica.partition import Partition


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

