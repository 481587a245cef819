"""Mirror benchmark: ``pybroker mirror`` next to a plain consume of the same source, in one run.

    python bench/bench_mirror.py [--records 2000000] [--runs 3] [--loader bulk|librdkafka] [--json out.json]

Two single-node pybroker brokers (tests/broker.py, local metadata store): a source holding one
topic of 3 partitions with ``--records`` records (100-byte random values, 8-byte keys, no headers,
loaded once, by pybroker's bulk producer or, with ``--loader librdkafka``, by confluent-kafka with
linger.ms=5, batch.size=1000000, batch.num.messages=10000 (100 with ``librdkafka-small``), acks=all,
no compression; the mean
records per source batch is printed, since the mirror's cost is per batch), and for each mirror
run a fresh, empty target broker.
Each run measures, one after the other:

(a) plain consume: a child process with pybroker's Consumer, a new group, the mirror's own
    consumer settings (``pybroker.tools.mirror.CONSUMER_DEFAULTS``), reading the whole topic;
(b) mirror: ``python -m pybroker mirror`` (default settings) copying the topic to the empty
    target; done when the target's end offsets add up to ``--records`` (polled every 20 ms).

Two rates per side, records/s: "end to end" from launching the process (Python start-up, group
join included) to the last record consumed / the target caught up, and "steady" from the first
record consumed / first record on the target to the same end (not counting the records that
first poll / first look at the target found). The ratio mirror/consume of the
medians is printed for both. The brokers, the clients and the machine's other work share the same
cores, so this is a same-run comparison, not absolute capacity.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.broker import BrokerProcess  # noqa: E402

TOPIC = "mirror-bench"
PARTITIONS = 3
VALUE_SIZE = 100
BATCH = 10000  # records per produce_batch call while loading
BROKER = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1,
          "log.segment.bytes": 1073741824}
POLL_S = 0.02
RUN_TIMEOUT = 600


def load(bootstrap: str, records: int) -> None:
    from pybroker.client import AdminClient, NewTopic, Producer
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    values = [os.urandom(VALUE_SIZE) for _ in range(BATCH)]
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1000000})
    sent = 0
    while sent < records:
        n = min(BATCH, records - sent)
        keys = [b"k%07d" % (sent + i) for i in range(n)]
        p.produce_batch(TOPIC, values[:n], keys=keys, partition=(sent // BATCH) % PARTITIONS)
        sent += n
    assert p.flush(120) == 0
    p.close()


def load_librdkafka(bootstrap: str, records: int, per_batch: int = 10000) -> None:
    from confluent_kafka import Producer
    from pybroker.client import AdminClient, NewTopic
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    values = [os.urandom(VALUE_SIZE) for _ in range(BATCH)]
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1000000,
                  "batch.num.messages": per_batch, "acks": "all", "compression.type": "none",
                  "queue.buffering.max.messages": 1000000})
    for i in range(records):
        while True:
            try:
                p.produce(TOPIC, values[i % BATCH], b"k%07d" % i, partition=i % PARTITIONS)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def source_batches(data_dir: str) -> int:
    """How many record batches the source's segment files hold."""
    import glob
    from pybroker import core
    count = 0
    for path in glob.glob(os.path.join(data_dir, f"{TOPIC}-*", "*.log")):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 61 <= len(data):
            pos += core.batch.parse_header(data, pos).size
            count += 1
    return count


def consume_child(bootstrap: str, records: int, group: str) -> None:
    """(a), in its own process: prints one JSON line once ``records`` have been polled."""
    from pybroker.client import Consumer
    from pybroker.tools.mirror import CONSUMER_DEFAULTS
    c = Consumer({**CONSUMER_DEFAULTS, "bootstrap.servers": bootstrap, "group.id": group})
    c.subscribe([TOPIC])
    n, first, first_n = 0, None, 0
    deadline = time.monotonic() + RUN_TIMEOUT
    while n < records and time.monotonic() < deadline:
        got = len(c.poll(200))
        if got and first is None:
            first, first_n = time.time(), got
        n += got
    print(json.dumps({"records": n, "first": first, "first_records": first_n, "last": time.time()}), flush=True)
    c.close()


def run_consume(bootstrap: str, records: int, group: str) -> dict:
    t0 = time.time()
    child = subprocess.Popen([sys.executable, __file__, "--consume-child", bootstrap, str(records), group],
                             stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        r = json.loads(child.stdout.readline())
    finally:
        child.wait(60)
    if r["records"] < records:
        raise RuntimeError(f"plain consume got {r['records']} of {records} records")
    return {"end_to_end": records / (r["last"] - t0),
            "steady": (records - r["first_records"]) / (r["last"] - r["first"]),
            "seconds": r["last"] - t0}


def target_total(admin, tps) -> int:
    from pybroker.client import LATEST
    try:
        return sum(r.offset for r in admin.list_offsets({tp: LATEST for tp in tps}).values())
    except Exception:  # the topic is not created yet
        return 0


def run_mirror(source: str, target_dir: str, records: int, group: str) -> dict:
    from pybroker.client import AdminClient, TopicPartition
    target = BrokerProcess(target_dir, BROKER).start()
    out = open(target_dir + ".mirror.out", "w")
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        with AdminClient({"bootstrap.servers": target.bootstrap}) as admin:
            t0 = time.time()
            mirror = subprocess.Popen([sys.executable, "-m", "pybroker", "mirror", "--source", source,
                                       "--target", target.bootstrap, "--topics", TOPIC, "--group", group],
                                      cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            try:
                first, first_total = None, 0
                deadline = time.monotonic() + RUN_TIMEOUT
                while True:
                    total = target_total(admin, tps)
                    now = time.time()
                    if total and first is None:
                        first, first_total = now, total
                    if total >= records:
                        break
                    if mirror.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"mirror stopped at {total} of {records} records "
                                           f"(exit {mirror.poll()}); see {out.name}")
                    time.sleep(POLL_S)
            finally:
                if mirror.poll() is None:
                    mirror.send_signal(signal.SIGTERM)
                rc = mirror.wait(120)
        if rc != 0:
            raise RuntimeError(f"mirror exited {rc} after a SIGTERM; see {out.name}")
        return {"end_to_end": records / (now - t0), "steady": (records - first_total) / (now - first),
                "seconds": now - t0}
    finally:
        out.close()
        target.close()
        shutil.rmtree(target_dir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", help="write every run's figures and the medians here")
    ap.add_argument("--loader", choices=("bulk", "librdkafka", "librdkafka-small"), default="bulk",
                    help="what writes the source data (default: pybroker's bulk producer; librdkafka-small: "
                         "batch.num.messages=100)")
    ap.add_argument("--consume-child", nargs=3, metavar=("BOOTSTRAP", "RECORDS", "GROUP"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.consume_child:
        consume_child(args.consume_child[0], int(args.consume_child[1]), args.consume_child[2])
        return
    tmp = tempfile.mkdtemp(prefix="pybroker-bench-mirror-")
    source = BrokerProcess(os.path.join(tmp, "source"), BROKER).start()
    runs = []
    try:
        t = time.monotonic()
        if args.loader == "bulk":
            load(source.bootstrap, args.records)
        else:
            load_librdkafka(source.bootstrap, args.records, 100 if args.loader == "librdkafka-small" else 10000)
        batches = source_batches(source.data_dir)
        print(f"loaded {args.records} records into {TOPIC} in {time.monotonic() - t:.1f} s with the {args.loader} "
              f"loader: {batches} batches, {args.records / max(batches, 1):,.0f} records per batch", flush=True)
        for i in range(args.runs):
            run = {"consume": run_consume(source.bootstrap, args.records, f"bench-consume-{i}"),
                   "mirror": run_mirror(source.bootstrap, os.path.join(tmp, f"target-{i}"), args.records,
                                        f"bench-mirror-{i}")}
            runs.append(run)
            print(f"run {i + 1}/{args.runs}: " + "; ".join(
                f"{k} {v['end_to_end']:,.0f} rec/s end to end, {v['steady']:,.0f} steady ({v['seconds']:.2f} s)"
                for k, v in run.items()), flush=True)
    finally:
        source.close()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {side: {k: statistics.median(r[side][k] for r in runs) for k in ("end_to_end", "steady")}
           for side in ("consume", "mirror")}
    print(f"\nmedians of {args.runs} runs, {args.records:,} records of {VALUE_SIZE} bytes, {PARTITIONS} partitions, "
          f"{args.loader} loader")
    print("| rate (records/s) | plain consume | mirror | mirror / consume |")
    print("|---|---|---|---|")
    for k, label in (("end_to_end", "end to end (process start to done)"), ("steady", "steady (first record to done)")):
        c, m = med["consume"][k], med["mirror"][k]
        print(f"| {label} | {c:,.0f} | {m:,.0f} | {m / c:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"records": args.records, "runs": runs, "medians": med}, f, indent=1)


if __name__ == "__main__":
    main()
