"""Consumer throughput from Python: pybroker's Consumer against confluent-kafka's.

    python bench/bench_client_consumer.py [--records 1000000] [--size 100] [--runs 3] [--batch 10000]

One broker process; a producer process fills one partition with ``--records`` records of
``--size`` bytes (confluent-kafka, large uncompressed batches); then, per run, each consumer
runs in a fresh process of its own and reads the partition from offset 0 to the end:

- ``confluent poll()``: ``Consumer.poll`` once per message (librdkafka).
- ``confluent consume()``: ``Consumer.consume(num_messages=--batch)`` (librdkafka).
- ``pybroker poll()``: ``Consumer.poll(max_records=--batch)``, a list of ConsumerRecord.
- ``pybroker poll() 500``: the same with Kafka's default max.poll.records (500).
- ``pybroker poll_batch()``: ``Consumer.poll_batch()``, pyarrow RecordBatches.

Every client touches each record's value (``len``) except poll_batch, which sums the value
column's byte size (its rows are already columns). Each process first reads a small other topic
with the same client (one-time costs: lazy imports, pyarrow's imports); then the clock runs from
creating the consumer to receiving the last record. The table shows medians of ``--runs`` runs
(the clients take turns within each run) and each pybroker row's ratio to the faster
confluent-kafka API, the baseline. Every loop is bounded; only the broker started here is stopped.

``--fetch-versions 11,17`` runs each pybroker row once per Fetch version cap (the highest version
our consumer may negotiate: v11 sessionless by topic name, v17 in a fetch session by topic id), so
old and new request versions are compared in one run.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MAX_SECONDS = 300  # no client runs longer than this, whatever happens
TOPIC = "consumer-bench"
WARMUP_TOPIC, WARMUP_RECORDS = "consumer-bench-warmup", 100

CLIENTS = {
    "confluent-poll": "confluent poll()",
    "confluent-consume": "confluent consume()",
    "pybroker-poll": "pybroker poll()",
    "pybroker-poll-500": "pybroker poll() 500",
    "pybroker-poll-batch": "pybroker poll_batch()",
}
# librdkafka tuned for throughput: without queued.min.messages raised it stops prefetching early and
# reads this workload about 8x slower
CONFLUENT_CONF = {"group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                  "max.partition.fetch.bytes": 10485760, "fetch.wait.max.ms": 100,
                  "queued.min.messages": 1000000, "queued.max.messages.kbytes": 1048576,
                  "enable.partition.eof": False}
# Kafka's defaults (CRCs verified, which librdkafka by default does not do) but 2 MiB per partition fetch
PYBROKER_CONF = {"enable.auto.commit": False, "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 2097152,
                 "fetch.max.wait.ms": 100}


# ---- child processes ------------------------------------------------------------------------------

def produce(bootstrap: str, count: int, size: int) -> dict:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 1048576,
                  "batch.num.messages": 100000, "queue.buffering.max.kbytes": 1048576,
                  "queue.buffering.max.messages": 1000000, "compression.type": "none",
                  "enable.idempotence": False})
    value = (bytes(range(256)) * (size // 256 + 1))[:size]
    for _ in range(WARMUP_RECORDS):
        p.produce(WARMUP_TOPIC, value, partition=0)
    deadline = time.monotonic() + MAX_SECONDS
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                p.poll(0.001)
                if time.monotonic() > deadline:
                    raise TimeoutError("producer queue stayed full")
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(MAX_SECONDS)
    return {"records": count - left, "seconds": time.perf_counter() - start}


def warm_up(kind: str, bootstrap: str) -> None:
    """One short read of another topic with the same client first, so that one-time process costs
    (lazy imports, first connections, pyarrow's own imports) stay out of the measurement."""
    deadline = time.monotonic() + 30
    got = 0
    if kind.startswith("confluent"):
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": bootstrap, **CONFLUENT_CONF})
        c.assign([TopicPartition(WARMUP_TOPIC, 0, 0)])
        while got < WARMUP_RECORDS and time.monotonic() < deadline:
            got += len(c.consume(num_messages=WARMUP_RECORDS, timeout=0.5))
    else:
        from pybroker.client import Consumer
        c = Consumer({"bootstrap.servers": bootstrap, **PYBROKER_CONF})
        c.assign([(WARMUP_TOPIC, 0, 0)])
        while got < WARMUP_RECORDS and time.monotonic() < deadline:
            got += c.poll_batch(500).num_rows if kind == "pybroker-poll-batch" else len(c.poll(500))
    c.close()
    if got < WARMUP_RECORDS:
        raise RuntimeError(f"warm-up read {got} of {WARMUP_RECORDS} records")


def consume(kind: str, bootstrap: str, count: int, batch: int) -> dict:
    kind, _, cap = kind.partition("@v")
    if cap:  # this row's Fetch version cap
        from pybroker.client import fetcher
        fetcher.FETCH_RANGE = (fetcher.FETCH_RANGE[0], int(cap))
        fetcher.FETCH_BY_NAME_MAX = min(fetcher.FETCH_BY_NAME_MAX, int(cap))
    warm_up(kind, bootstrap)
    deadline = time.monotonic() + MAX_SECONDS
    got = nbytes = 0
    if kind.startswith("confluent"):
        from confluent_kafka import Consumer, TopicPartition
        start = time.perf_counter()
        c = Consumer({"bootstrap.servers": bootstrap, **CONFLUENT_CONF})
        c.assign([TopicPartition(TOPIC, 0, 0)])
        if kind == "confluent-poll":
            poll = c.poll
            while got < count and time.monotonic() < deadline:
                m = poll(1.0)
                if m is not None and not m.error():
                    got += 1
                    nbytes += len(m.value())
        else:
            consume_ = c.consume
            while got < count and time.monotonic() < deadline:
                for m in consume_(num_messages=batch, timeout=1.0):
                    if not m.error():
                        got += 1
                        nbytes += len(m.value())
        seconds = time.perf_counter() - start
        c.close()
    else:
        from pybroker.client import Consumer
        start, cpu = time.perf_counter(), time.process_time()
        c = Consumer({"bootstrap.servers": bootstrap, **PYBROKER_CONF})
        c.assign([(TOPIC, 0, 0)])
        if kind == "pybroker-poll-batch":
            while got < count and time.monotonic() < deadline:
                b = c.poll_batch(1000)
                got += b.num_rows
                nbytes += b.column(1).buffers()[2].size if b.num_rows else 0
        else:
            n = 500 if kind == "pybroker-poll-500" else batch
            poll = c.poll
            while got < count and time.monotonic() < deadline:
                for r in poll(1000, n):
                    got += 1
                    nbytes += len(r.value)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        c.close()
        return {"records": got, "bytes": nbytes, "seconds": seconds, "cpu_seconds": cpu}
    return {"records": got, "bytes": nbytes, "seconds": seconds}


def child(*args) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *map(str, args)], capture_output=True,
                         text=True, timeout=MAX_SECONDS + 60)
    if out.returncode != 0:
        raise RuntimeError(f"{args[:2]} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- the benchmark ---------------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("_produce", "_consume"):
        if sys.argv[1] == "_produce":
            print(json.dumps(produce(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        else:
            print(json.dumps(consume(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=10000, help="records per poll/consume call")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--json", default=None)
    ap.add_argument("--fetch-versions", default="", help="e.g. 11,17: pybroker rows per Fetch version cap")
    args = ap.parse_args()
    kinds = [k for k in args.clients.split(",") if k]
    caps = [c for c in args.fetch_versions.split(",") if c]
    if caps:
        kinds = [v for k in kinds for v in ([f"{k}@v{c}" for c in caps] if k.startswith("pybroker") else [k])]
        for k in kinds:
            base_name, _, cap = k.partition("@v")
            CLIENTS.setdefault(k, f"{CLIENTS[base_name]} v{cap}" if cap else CLIENTS[base_name])
    from tests.broker import BrokerProcess
    tmp = tempfile.mkdtemp(prefix="pybroker-consumer-bench-")
    broker = BrokerProcess(os.path.join(tmp, "data"), {"log.segment.bytes": 1073741824,
                                                       "message.max.bytes": 10485760}).start()
    runs = {k: [] for k in kinds}
    try:
        p = child("_produce", broker.bootstrap, args.records, args.size)
        if p["records"] != args.records:
            raise RuntimeError(f"only {p['records']} of {args.records} records were produced")
        print(f"produced {args.records} records of {args.size} B in {p['seconds']:.1f} s", flush=True)
        for i in range(args.runs):
            for k in kinds:
                r = child("_consume", k, broker.bootstrap, args.records, args.batch)
                if r["records"] < args.records:
                    raise RuntimeError(f"{k} read {r['records']} of {args.records} records")
                runs[k].append(r)
                print(f"  run {i + 1} {CLIENTS[k]:24s} {r['records'] / r['seconds']:12,.0f} records/s", flush=True)
    finally:
        try:
            broker.stop()
        finally:
            broker.close()
            shutil.rmtree(tmp, ignore_errors=True)
    med = {k: {"records_s": statistics.median(r["records"] / r["seconds"] for r in v),
               "mb_s": statistics.median(r["bytes"] / r["seconds"] / 1e6 for r in v)} for k, v in runs.items()}
    base_kind = max((k for k in med if k.startswith("confluent")), key=lambda k: med[k]["records_s"], default=None)
    base = med[base_kind]["records_s"] if base_kind else None
    print(f"\nconsume {args.records:,} x {args.size} B records from one partition, medians of {args.runs} runs "
          f"(batch {args.batch}); baseline: {CLIENTS[base_kind] if base_kind else 'none'}")
    print(f"  {'client':24s} {'records/s':>12s} {'MB/s':>8s} {'vs baseline':>12s}")
    for k in kinds:
        ratio = f"{med[k]['records_s'] / base:.2f}x" if base else "-"
        print(f"  {CLIENTS[k]:24s} {med[k]['records_s']:12,.0f} {med[k]['mb_s']:8.1f} {ratio:>12s}")
    for k in kinds:  # the highest cap against the lowest, per pybroker row
        base_name, _, cap = k.partition("@v")
        if cap and cap == caps[-1] and len(caps) > 1:
            old = med[f"{base_name}@v{caps[0]}"]["records_s"]
            # records per CPU second of the consumer process: steadier than wall time on a busy host
            cpu_old = statistics.median(r["records"] / r["cpu_seconds"] for r in runs[f"{base_name}@v{caps[0]}"])
            cpu_new = statistics.median(r["records"] / r["cpu_seconds"] for r in runs[k])
            print(f"  {CLIENTS[base_name]:24s} Fetch v{cap} / v{caps[0]}: wall {med[k]['records_s'] / old:.3f}x, "
                  f"client CPU {cpu_new / cpu_old:.3f}x ({cpu_old:,.0f} -> {cpu_new:,.0f} records per CPU s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs, "median": med, "baseline": base_kind}, f, indent=2)


if __name__ == "__main__":
    main()
