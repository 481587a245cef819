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



def test_a_recreated_topic_starts_a_new_session(tmp_path):
    """A topic deleted and created again under the same name has a new id: the leader's session
    still names the old one, so the fetcher starts over with a full fetch naming the new id
    (otherwise an unchanged offset keeps the partition out of every incremental request)."""
    import uuid
    config = BrokerConfig(node_id=7)
    old = Log(str(tmp_path / "old" / "t-0"), "t", 0, LogConfig(retention_ms=-1))
    new = Log(str(tmp_path / "new" / "t-0"), "t", 0, LogConfig(retention_ms=-1))
    first = Partition("t", 0, uuid.uuid4(), old, 7, 0, (0, 7))
    again = Partition("t", 0, uuid.uuid4(), new, 7, 0, (0, 7))

    async def run():
        fetcher = ReplicaFetcher(ReplicaFetcherManager(7, config), 0, ("127.0.0.1", 1))
        fetcher.task = asyncio.get_running_loop().create_future()  # keeps add() from starting the fetch loop
        fetcher.add([first])
        wanted, _ = fetcher.wanted()
        fetcher.session.build(wanted)
        fetcher.session.answered(0, 42)
        fetcher.remove([("t", 0)])
        fetcher.add([again])
        wanted, _ = fetcher.wanted()
        assert fetcher.session.full and fetcher.session.build(wanted) == ([("t", 0)], [])
        assert fetcher.topic_ids["t"] == again.topic_id

    try:
        asyncio.run(run())
    finally:
        old.close()
        new.close()
