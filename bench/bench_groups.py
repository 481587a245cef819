"""Group coordinator: rebalance time and OffsetCommit throughput, at the protocol level.

    python bench/bench_groups.py [--runs 5] [--commits 5000]

A fresh `pybroker serve` (its own process, group.initial.rebalance.delay.ms=0); the clients
are threads in this process speaking the Kafka protocol directly, so the figures are the
broker's, not a client library's timers.
- rebalance: 3 members already hold member ids (JoinGroup v5 → MEMBER_ID_REQUIRED); two
  JoinGroups are parked, then the clock runs from the third (last) member's JoinGroup until
  all three SyncGroup responses with their assignments have arrived.
- commits: OffsetCommit v7 (simple commits: generation -1) from one connection, one request
  at a time and pipelined (all sent, then all responses read).
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pybroker.protocol import decode_response  # noqa: E402
from pybroker.protocol.errors import MEMBER_ID_REQUIRED  # noqa: E402
from pybroker.protocol.messages import REQUESTS  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402
from tests.kafka_wire import WireClient  # noqa: E402

JoinGroup, SyncGroup, OffsetCommit = REQUESTS[11], REQUESTS[14], REQUESTS[8]
JOIN_TIMEOUT = 30


def join(client: WireClient, group: str, member_id: str):
    return client.request(JoinGroup(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                    member_id=member_id, protocol_type="consumer",
                                    protocols=[JoinGroup.JoinGroupRequestProtocol(name="range", metadata=b"m")]), 5)


def sync(client: WireClient, group: str, joined, assignments):
    return client.request(SyncGroup(group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                                    assignments=assignments), 3)


def one_rebalance(port: int, group: str) -> float:
    clients = [WireClient(port, timeout=JOIN_TIMEOUT) for _ in range(3)]
    try:
        ids = []
        for c in clients:
            first = join(c, group, "")
            assert first.error_code == MEMBER_ID_REQUIRED, first.error_code
            ids.append(first.member_id)
        done, errors = [0.0] * 3, []

        def member(i: int) -> None:
            try:
                joined = join(clients[i], group, ids[i])
                assert joined.error_code == 0, joined.error_code
                plan = ([SyncGroup.SyncGroupRequestAssignment(member_id=m.member_id,
                                                              assignment=b"a-" + m.member_id.encode())
                         for m in joined.members] if joined.leader == joined.member_id else [])
                synced = sync(clients[i], group, joined, plan)
                assert synced.error_code == 0 and synced.assignment == b"a-" + ids[i].encode()
                done[i] = time.perf_counter()
            except Exception as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
        for t in threads[:2]:
            t.start()
        time.sleep(0.3)  # the first two JoinGroups are parked at the coordinator
        start = time.perf_counter()
        threads[2].start()
        for t in threads:
            t.join(JOIN_TIMEOUT)
        if errors or not all(done):
            raise RuntimeError(f"rebalance failed: {errors}")
        return (max(done) - start) * 1000
    finally:
        for c in clients:
            c.close()


def commit_request(offset: int):
    part = OffsetCommit.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                     committed_leader_epoch=-1, committed_metadata="")
    return OffsetCommit(group_id="commit-bench", generation_id_or_member_epoch=-1, member_id="",
                        topics=[OffsetCommit.OffsetCommitRequestTopic(name="bench", partitions=[part])])


def commits_per_second(port: int, count: int, pipelined: bool) -> float:
    with WireClient(port) as c:
        start = time.perf_counter()
        if pipelined:
            for i in range(count):
                c.send_only(commit_request(i), 7)
            for _ in range(count):
                _, resp = decode_response(c.recv_frame(), 8, 7)
                assert resp.topics[0].partitions[0].error_code == 0
        else:
            for i in range(count):
                resp = c.request(commit_request(i), 7)
                assert resp.topics[0].partitions[0].error_code == 0
        return count / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--commits", type=int, default=5000)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pybroker-bench-groups-")
    broker = BrokerProcess(os.path.join(tmp, "data"), {"group.initial.rebalance.delay.ms": 0}).start()
    try:
        with WireClient(broker.port) as c:
            c.create_topic("bench", 1)
        rebalance = [one_rebalance(broker.port, f"bench-group-{i}") for i in range(args.runs)]
        sequential = [commits_per_second(broker.port, args.commits, False) for _ in range(args.runs)]
        pipelined = [commits_per_second(broker.port, args.commits, True) for _ in range(args.runs)]
    finally:
        broker.stop()
        broker.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"group coordinator, medians of {args.runs} runs (broker in its own process)")
    print(f"  last JoinGroup -> all 3 members assigned   {statistics.median(rebalance):8.2f} ms"
          f"   (min {min(rebalance):.2f}, max {max(rebalance):.2f})")
    print(f"  OffsetCommit, one at a time                {statistics.median(sequential):8.0f} commits/s")
    print(f"  OffsetCommit, pipelined                    {statistics.median(pipelined):8.0f} commits/s")


if __name__ == "__main__":
    main()
