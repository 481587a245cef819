"""Microseconds per request on the broker's produce and fetch paths, with and without transactions.

    python bench/bench_txn_log.py [--runs 7] [--min-time 0.3] [--baseline DIR] [--rounds 3] [--stat median]

In-process, no network: a real ReplicaManager and Partition over a log in a temporary directory.
  produce_plain      Produce v8 handler (produce.handle) with one 1 KiB batch (10 records), acks=1
  produce_idempotent the same batch with a producer id and growing sequences
  fetch_uncommitted  ReplicaManager.read (read_uncommitted) + encode_fetch, one partition, 16 KiB
  fetch_committed    the same with isolation_level 1 (LSO bound, aborted list collected: none)
  produce_txn        a transactional batch (request with a transactional id, no coordinator)
  marker             ReplicaManager.write_txn_markers for one partition (HW follows: RF 1)
  fetch_committed_aborted  read_committed over a log whose txn indexes hold 100 aborted transactions
The last four exist only where transactions do. ``--baseline DIR`` also runs the same script from
DIR (a checkout of the reference commit with its native modules built): each round runs current
then baseline in fresh processes, and the table gives medians over rounds and current/baseline.
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "bench"))  # after the measured tree, which children put first
from loop_timing import call_samples_us  # noqa: E402


def per_call_us(fn, runs, min_time):
    return statistics.median(call_samples_us(fn, runs, min_time))


def measure(runs: int, min_time: float) -> dict:
    """Run inside the tree on sys.path[0]; {case: microseconds per call}."""
    from pybroker import core
    from pybroker.api import produce
    from pybroker.controller.metadata_cache import PartitionState
    from pybroker.log import LogConfig
    from pybroker.log.manager import LogManager
    from pybroker.protocol.messages import REQUESTS
    from pybroker.records import build_batch
    from pybroker.replica.manager import FetchRequestPartition, ReplicaManager
    transactions = os.path.exists(os.path.join(sys.path[0], "pybroker", "replica", "txn_marker.py"))
    out = {}
    tmp = tempfile.mkdtemp(prefix="pybroker-bench-txn-")
    config = LogConfig(retention_ms=-1, segment_bytes=1 << 30)
    logs = LogManager([tmp], config, background=False).startup()
    rm = ReplicaManager(0, logs)
    states = [PartitionState(t, 0, 0, 1, (0,), (0,)) for t in ("plain", "idem", "txn", "aborted")]
    rm.apply_states(1, states, {}, lambda topic: config, {})
    broker = SimpleNamespace(replicas=rm, authorizer=None, metrics=None, transactions=None, quotas=None,
                             config=SimpleNamespace(transaction_partition_verification_enable=False))
    ctx = SimpleNamespace(version=8, broker=broker)
    P = REQUESTS[0]
    values = [bytes(100)] * 10

    def handler(topic, batch, tid=None, sequences=False):
        """One Produce call per call: a copy of one request frame (the append stamps offsets in place);
        with ``sequences``, each copy carries the next base sequence (and its CRC)."""
        req = P(transactional_id=tid, acks=1, timeout_ms=30000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.PartitionProduceData(index=0, records=bytes(batch))])])
        template = bytes(req.to_bytes(8))
        at = template.index(bytes(batch))  # the batch inside the frame
        crc = core.crc.crc32c

        def call():
            f = bytearray(template)
            if sequences:
                f[at + 53:at + 57] = (call.seq * 10).to_bytes(4, "big")
                f[at + 17:at + 21] = crc(memoryview(f)[at + 21:at + len(batch)]).to_bytes(4, "big")
                call.seq += 1
            resp = produce.handle(ctx, core.kafka_codec.decode_produce(memoryview(f), 0, 8))
            assert resp.responses[0].partition_responses[0].error_code == 0, resp
        call.seq = 0
        return call

    out["produce_plain"] = per_call_us(handler("plain", build_batch(values)), runs, min_time)
    out["produce_idempotent"] = per_call_us(handler("idem", build_batch(
        values, producer_id=7, producer_epoch=0, base_sequence=0), sequences=True), runs, min_time)
    requests = [FetchRequestPartition("plain", 0, 0, 16384)]
    encode = core.kafka_codec.encode_fetch
    F = REQUESTS[1]
    topics = [F.FetchTopic(topic="plain", partitions=[F.FetchPartition(partition=0)])]

    def fetch(committed):
        def call():
            results, _ = rm.read(requests, 1 << 20, committed)
            encode(11, topics, results, committed)
        return call
    out["fetch_uncommitted"] = per_call_us(fetch(False), runs, min_time)
    out["fetch_committed"] = per_call_us(fetch(True), runs, min_time)
    if transactions:
        from pybroker.replica.txn_marker import TxnMarker
        out["produce_txn"] = per_call_us(handler("txn", build_batch(
            values, producer_id=8, producer_epoch=0, base_sequence=0, attributes=0x10), "t", sequences=True),
            runs, min_time)
        loop = asyncio.new_event_loop()
        marker = [TxnMarker(8, 0, 0, True, [("txn", 0)])]
        out["marker"] = per_call_us(lambda: loop.run_until_complete(rm.write_txn_markers(marker, 1000)),
                                    runs, min_time)
        p = rm.get("aborted", 0)
        for i in range(100):
            p.append_as_leader(build_batch(values, producer_id=1000 + i, producer_epoch=0, base_sequence=0,
                                           attributes=0x10), 1)
            p.append_marker(1000 + i, 0, False, 0, 0)
        requests[:] = [FetchRequestPartition("aborted", 0, 0, 16384)]
        topics[:] = [F.FetchTopic(topic="aborted", partitions=[F.FetchPartition(partition=0)])]
        out["fetch_committed_aborted"] = per_call_us(fetch(True), runs, min_time)
        loop.close()
    logs.shutdown()
    subprocess.run(["rm", "-rf", tmp], check=False)
    return out


def run_tree(tree: str, runs: int, min_time: float) -> dict:
    code = ("import sys, json; sys.path.insert(0, %r); sys.argv[0] = 'bench';"
            "from importlib.machinery import SourceFileLoader;"
            "m = SourceFileLoader('b', %r).load_module();"
            "print(json.dumps(m.measure(%d, %r)))") % (tree, str(Path(__file__).resolve()), runs, min_time)
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", help="a checkout of the reference commit, native modules built")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="over rounds: the median, or the minimum (least disturbed by other load)")
    args = ap.parse_args()
    current, baseline = [], []
    for _ in range(args.rounds):  # interleaved, so that the machine's other load hits both alike
        current.append(run_tree(str(ROOT), args.runs, args.min_time))
        if args.baseline:
            baseline.append(run_tree(os.path.abspath(args.baseline), args.runs, args.min_time))
    print(f"{'case':26s} {'current us':>11s}" + (f" {'baseline us':>12s} {'ratio':>7s}" if baseline else ""))
    stat = statistics.median if args.stat == "median" else min
    print(f"({args.stat} over {args.rounds} rounds)")
    for case in current[0]:
        cur = stat(r[case] for r in current)
        line = f"{case:26s} {cur:11.2f}"
        if baseline and case in baseline[0]:
            base = stat(r[case] for r in baseline)
            line += f" {base:12.2f} {cur / base:7.3f}"
        print(line)
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
