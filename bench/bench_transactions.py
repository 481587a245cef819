"""Transactional vs idempotent produce, and read_committed vs read_uncommitted consume, on one broker.

    python bench/bench_transactions.py [--runs 5] [--mb 100] [--size 1024] [--per-txn 100] [--kafka]
                                       [--json out.json]

One single-node pybroker (and with ``--kafka`` also Apache Kafka 3.8 from
``~/.cache/pybroker-kafka``, as a reference measured the same way). Each run, in alternating order:
a fresh 1-partition topic gets --mb MB of --size-byte records from one confluent-kafka producer in
its own process (this file's ``produce`` mode; acks=all, linger.ms=5, batch.size=1 MB set
explicitly), either idempotent or transactional with --per-txn records per transaction (begin,
produce, commit). Then the transactional topic is read back by one librdkafka consumer process
(bench/measure.py ``consume``) with isolation.level read_committed and read_uncommitted, in
alternating order. Prints each run, the medians, the ratios transactional/idempotent (target >= 0.7)
and read_committed/read_uncommitted (target >= 0.9), and the broker's CPU seconds per GB.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import measure  # noqa: E402

MAX_SECONDS = 300  # no producer run goes on longer than this
PRODUCER = {"acks": "all", "linger.ms": 5, "batch.size": 1000000, "compression.type": "none",
            "queue.buffering.max.kbytes": 1048576, "queue.buffering.max.messages": 1000000}
PRODUCE_MODES = ("idempotent", "transactional")
CONSUME_MODES = ("read_uncommitted", "read_committed")


# ---- the producer process ---------------------------------------------------------------------

def produce(bootstrap: str, topic: str, count: int, size: int, per_txn: int, transactional: bool) -> dict:
    """``count`` records of ``size`` bytes to partition 0; transactional: ``per_txn`` per transaction."""
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": bootstrap, **PRODUCER, "enable.idempotence": True}
    if transactional:
        conf["transactional.id"] = f"bench-{topic}"
    p = Producer(conf)
    if transactional:
        p.init_transactions(60)
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(str(err))

    payload = os.urandom(size)
    deadline = time.monotonic() + MAX_SECONDS
    start = time.perf_counter()
    sent = 0
    while sent < count and time.monotonic() < deadline:
        n = min(per_txn, count - sent)
        if transactional:
            p.begin_transaction()
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, payload, partition=0, on_delivery=report)
                    break
                except BufferError:  # queue full: let deliveries drain
                    p.poll(0.001)
        p.poll(0)
        if transactional:
            p.commit_transaction(60)
        sent += n
    if not transactional:
        p.flush(60)
    seconds = time.perf_counter() - start
    return {"records": sent, "bytes": sent * size, "seconds": seconds, "errors": len(errors)}


# ---- the benchmark ----------------------------------------------------------------------------

def timed_produce(broker, topic: str, args, mode: str) -> dict:
    count = args.mb * (1 << 20) // args.size
    cpu = measure.cpu_seconds(broker.proc.pid)
    r = measure.run_json(__file__, "produce", "--bootstrap", broker.bootstrap, "--topic", topic,
                         "--count", str(count), "--size", str(args.size), "--per-txn", str(args.per_txn),
                         *(["--transactional"] if mode == "transactional" else []))
    cpu = measure.cpu_seconds(broker.proc.pid) - cpu
    if r["errors"] or r["records"] != count:
        raise AssertionError(f"{mode}: {r}")
    return {"mode": mode, "mb_s": r["bytes"] / r["seconds"] / 1e6, "cpu_s_per_gb": cpu / (r["bytes"] / 1e9),
            "records": count}


def timed_consume(broker, topic: str, count: int, mode: str) -> dict:
    r = measure.timed_consume(broker, broker.bootstrap, topic, count, {"isolation.level": mode}, partitions=1)
    return {"mode": mode, "mb_s": r["mb_s"], "cpu_s_per_gb": r["cpu_s_per_gb"]}


def bench_broker(name: str, broker, args) -> dict:
    runs = []
    for i in range(args.runs):
        topics = {}
        for mode in measure.in_turn(PRODUCE_MODES, i):
            topic = f"bench-{mode}-{i}"
            measure.create_topic(broker.bootstrap, topic, 1)
            r = timed_produce(broker, topic, args, mode)
            topics[mode] = (topic, r["records"])
            runs.append(r)
            print(f"{name} run {i + 1} produce {mode:16}: {r['mb_s']:7.1f} MB/s, "
                  f"broker {r['cpu_s_per_gb']:.2f} CPU-s/GB", flush=True)
        topic, count = topics["transactional"]
        for mode in measure.in_turn(CONSUME_MODES, i):
            r = timed_consume(broker, topic, count, mode)
            runs.append(r)
            print(f"{name} run {i + 1} consume {mode:16}: {r['mb_s']:7.1f} MB/s, "
                  f"broker {r['cpu_s_per_gb']:.2f} CPU-s/GB", flush=True)
    med = {(m, k): statistics.median(r[k] for r in runs if r["mode"] == m)
           for m in PRODUCE_MODES + CONSUME_MODES for k in ("mb_s", "cpu_s_per_gb")}
    produce_ratio = med["transactional", "mb_s"] / med["idempotent", "mb_s"]
    consume_ratio = med["read_committed", "mb_s"] / med["read_uncommitted", "mb_s"]
    print(f"{name}: median over {args.runs} runs ({args.mb} MB of {args.size}-byte records, "
          f"{args.per_txn} per transaction):")
    for m in PRODUCE_MODES + CONSUME_MODES:
        print(f"  {m:16} {med[m, 'mb_s']:8.1f} MB/s   broker {med[m, 'cpu_s_per_gb']:6.2f} CPU-s/GB")
    print(f"  transactional/idempotent produce   {produce_ratio:.3f} (target >= 0.7)")
    print(f"  read_committed/read_uncommitted    {consume_ratio:.3f} (target >= 0.9)", flush=True)
    return {"runs": runs, "medians": {f"{m}.{k}": v for (m, k), v in med.items()},
            "produce_ratio": produce_ratio, "consume_ratio": consume_ratio}


def start_brokers(args, base: str) -> dict:
    from tests.txn_brokers import KafkaBroker, PyBroker, kafka_available
    brokers = {"pybroker": PyBroker(os.path.join(base, "pybroker")).start()}
    if args.kafka:
        if not kafka_available():
            raise SystemExit("--kafka: Apache Kafka 3.8 is not installed under ~/.cache/pybroker-kafka")
        brokers["kafka"] = KafkaBroker(os.path.join(base, "kafka")).start()
    return brokers


def bench(args) -> None:
    base = tempfile.mkdtemp(prefix="bench-txn-")
    results = {}
    brokers = {}
    try:
        brokers = start_brokers(args, base)
        for name, broker in brokers.items():
            results[name] = bench_broker(name, broker, args)
    finally:
        for broker in brokers.values():
            broker.close()
        shutil.rmtree(base, ignore_errors=True)
    measure.save_json(args.json, {"results": results, "args": vars(args)})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", nargs="?", default="bench", choices=("bench", "produce"))
    measure.add_run_options(ap, runs=5, mb=100)
    ap.add_argument("--per-txn", type=int, default=100, help="records per transaction")
    ap.add_argument("--kafka", action="store_true", help="also measure Apache Kafka 3.8 as a reference")
    ap.add_argument("--bootstrap")
    ap.add_argument("--topic")
    ap.add_argument("--count", type=int)
    ap.add_argument("--transactional", action="store_true")
    args = ap.parse_args()
    if args.mode == "produce":
        print(json.dumps(produce(args.bootstrap, args.topic, args.count, args.size, args.per_txn,
                                 args.transactional)))
    else:
        bench(args)


if __name__ == "__main__":
    main()
