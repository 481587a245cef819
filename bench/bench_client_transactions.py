"""What transactions cost our Python clients, and that plain producing did not slow down.

    python bench/bench_client_transactions.py [--records 1000000] [--size 100] [--runs 3]
                                             [--txn-records 10000] [--baseline DIR]

One ``pybroker serve`` (this tree) on 127.0.0.1; every measurement runs in a fresh child process.

- ``plain produce()``: ``Producer.produce(topic, value)`` per record (idempotent, the default),
  ``poll(0)`` every 10,000 records, then ``flush()`` — the hot path the transactional code must
  not slow down. With ``--baseline DIR`` (an unpacked older tree with its native modules built)
  the same child also runs with DIR's client, so the ratio compares the clients in one run.
- ``transactional produce()``: the same records with ``transactional.id``, one transaction per
  ``--txn-records`` records (begin, produce, commit).
- ``consume read_uncommitted`` / ``consume read_committed``: our Consumer reading the
  transactional topic (every ``--abort-every``-th transaction aborted) to its end, in log offsets
  per second (read_committed returns fewer records for the same log); the read_committed filter
  runs in the native decoder.

Medians of ``--runs`` runs (records/s, offsets/s) and ratios measured in the same run. Every loop is
bounded; only the broker started here is stopped.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.environ.get("PYBROKER_BENCH_TREE") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MAX_SECONDS = 300
POLL_EVERY = 10_000


def _value(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]


# ---- child processes ------------------------------------------------------------------------------

def produce(bootstrap: str, topic: str, count: int, size: int, txn_records: int, abort_every: int) -> dict:
    from pybroker.client import Producer
    value = _value(size)
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "none"}
    if txn_records:
        conf["transactional.id"] = f"bench-{topic}"
    start = time.perf_counter()
    p = Producer(conf)
    produce_one, poll = p.produce, p.poll
    if not txn_records:
        for i in range(count):
            produce_one(topic, value)
            if i % POLL_EVERY == 0:
                poll(0)
        left = p.flush(MAX_SECONDS)
    else:
        p.init_transactions(60)
        done, n = 0, 0
        while done < count:
            p.begin_transaction()
            chunk = min(txn_records, count - done)
            for i in range(chunk):
                produce_one(topic, value)
                if i % POLL_EVERY == 0:
                    poll(0)
            n += 1
            if abort_every and n % abort_every == 0:
                p.flush(MAX_SECONDS)
                p.abort_transaction(60)
            else:
                p.commit_transaction(MAX_SECONDS)
            done += chunk
        left = 0
    seconds = time.perf_counter() - start
    errors = p.metrics()["record_errors"]
    p.close()
    ok = count - left - (errors if not abort_every else 0)
    return {"records": ok, "seconds": seconds}


def consume(bootstrap: str, topic: str, isolation: str) -> dict:
    from pybroker.client import Consumer, TopicPartition
    tp = TopicPartition(topic, 0)
    start = time.perf_counter()
    got = 0
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation, "auto.offset.reset": "earliest",
                   "enable.auto.commit": False}) as c:
        c.assign([tp])
        end = c.end_offsets([tp])[tp]
        deadline = time.monotonic() + MAX_SECONDS
        while c.position(tp) < end and time.monotonic() < deadline:
            got += len(c.poll(200, max_records=100_000))
    return {"records": got, "offsets": end, "seconds": time.perf_counter() - start}


def child(tree: str, *args) -> dict:
    env = {**os.environ, "PYBROKER_BENCH_TREE": tree}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "_child", *map(str, args)], env=env,
                         capture_output=True, text=True, timeout=MAX_SECONDS + 60)
    if out.returncode != 0:
        raise RuntimeError(f"{args[:2]} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def create_topic(bootstrap: str, topic: str) -> None:
    from pybroker.client import AdminClient, NewTopic
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])


# ---- the benchmark ---------------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        what, bootstrap, topic, *rest = sys.argv[2:]
        if what == "produce":
            count, size, txn_records, abort_every = map(int, rest)
            print(json.dumps(produce(bootstrap, topic, count, size, txn_records, abort_every)))
        else:
            print(json.dumps(consume(bootstrap, topic, rest[0])))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--txn-records", type=int, default=10_000, help="records per transaction")
    ap.add_argument("--abort-every", type=int, default=4, help="abort every n-th transaction of the consume topic")
    ap.add_argument("--baseline", default=None, help="an older tree (built) whose client runs the plain row too")
    args = ap.parse_args()
    from tests.broker import BrokerProcess
    tmp = tempfile.mkdtemp(prefix="pybroker-txn-client-bench-")
    broker = BrokerProcess(os.path.join(tmp, "data"), {
        "log.segment.bytes": 1073741824, "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1, "offsets.topic.replication.factor": 1}).start()
    bs = broker.bootstrap
    rows = {"plain produce()": [], "transactional produce()": [], "consume read_uncommitted": [],
            "consume read_committed": []}
    if args.baseline:
        rows["plain produce() baseline"] = []
    n = 0
    try:
        for i in range(args.runs):
            order = [("plain produce()", HERE, 0)] + (
                [("plain produce() baseline", args.baseline, 0)] if args.baseline else []) + [
                ("transactional produce()", HERE, args.txn_records)]
            for name, tree, txn in order:
                n += 1
                topic = f"txn-bench-{n}"
                create_topic(bs, topic)
                r = child(tree, "produce", bs, topic, args.records, args.size, txn, 0)
                if r["records"] < args.records:
                    raise RuntimeError(f"{name} delivered {r['records']} of {args.records}")
                rows[name].append(r["records"] / r["seconds"])
                print(f"  run {i + 1} {name:30s} {rows[name][-1]:12,.0f} records/s", flush=True)
            n += 1
            topic = f"txn-bench-{n}"
            create_topic(bs, topic)
            child(HERE, "produce", bs, topic, args.records, args.size, args.txn_records, args.abort_every)
            for isolation in ("read_uncommitted", "read_committed"):
                name = f"consume {isolation}"
                r = child(HERE, "consume", bs, topic, isolation)
                rows[name].append(r["offsets"] / r["seconds"])  # log offsets read per second
                print(f"  run {i + 1} {name:30s} {rows[name][-1]:12,.0f} offsets/s ({r['records']:,} records "
                      "returned)", flush=True)
    finally:
        broker.close()
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    print(f"\n{args.records:,} records of {args.size} B, {args.runs} runs (medians)")
    print(f"{'':32s} {'records/s':>12s} {'ratio':>8s}")
    for name, value in med.items():
        base = med["plain produce()"] if "produce" in name else med["consume read_uncommitted"]
        print(f"{name:32s} {value:12,.0f} {value / base:8.3f}")


if __name__ == "__main__":
    main()
