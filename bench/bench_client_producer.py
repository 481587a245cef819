"""Producer throughput from Python: pybroker's Producer against confluent-kafka's and kafka-python's.

    python bench/bench_client_producer.py [--records 1000000] [--kp-records 100000] [--size 100] [--runs 3]

One broker process (``python -m pybroker serve``); per run, each client runs in a fresh process of
its own and sends ``--records`` records of ``--size`` bytes (no key) to partition 0 of a fresh
one-partition topic, then flushes. Common settings: acks=all, linger.ms=5, no compression; each
client's default idempotence (pybroker: on, confluent-kafka and kafka-python: off). Each client
runs twice: with its own default batch size (pybroker and kafka-python 16384 as Kafka's Java
client, librdkafka 1000000) and with a common 1 MiB.

- ``pybroker produce()``: ``Producer.produce(topic, value)`` per record (the native fast path),
  ``poll(0)`` every 10,000 records, then ``flush()``.
- ``confluent produce()``: the same calls on confluent-kafka's Producer (a BufferError, when its
  queue is full, is answered with ``poll(0.001)`` and a retry, as its docs recommend).
- ``kafka-python send()``: ``KafkaProducer.send(topic, value)`` per record, then ``flush()``
  (``--kp-records`` records: it is much slower).
- ``pybroker produce_batch() list`` / ``arrow``: ``produce_batch`` with the values as one Python
  list / one pyarrow binary Array per 100,000 records, then ``flush()``.

The clock runs from creating the producer until ``flush()`` returns; every record must be
acknowledged. The table shows medians of ``--runs`` runs, MB/s of values, and ratios to
confluent-kafka and kafka-python at the same batch-size setting ("default" rows compare each
client's defaults). Every loop is bounded; only the broker started here is stopped.

``--produce-versions 8,11`` runs each pybroker row once per Produce version cap (the highest
version our producer may negotiate), so old and new request versions are compared in one run.
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
MIB = 1048576
BULK_CHUNK = 100_000
POLL_EVERY = 10_000

CLIENTS = {
    "pybroker": "pybroker produce()",
    "confluent": "confluent produce()",
    "kafka-python": "kafka-python send()",
    "pybroker-list": "pybroker produce_batch() list",
    "pybroker-arrow": "pybroker produce_batch() arrow",
}
BATCHES = ("default", "1MiB")


def _value(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]


# ---- child processes ------------------------------------------------------------------------------

def run_client(kind: str, batch: str, bootstrap: str, topic: str, count: int, size: int) -> dict:
    kind, _, cap = kind.partition("@v")
    if cap:  # this row's Produce version cap
        from pybroker.client import producer_sender
        producer_sender.PRODUCE_RANGE = (producer_sender.PRODUCE_RANGE[0], int(cap))
    value = _value(size)
    deadline = time.monotonic() + MAX_SECONDS
    if kind.startswith("pybroker"):
        from pybroker.client import Producer
        conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "none"}
        if batch == "1MiB":
            conf["batch.size"] = MIB
        bulk = None
        if kind == "pybroker-arrow":
            import pyarrow as pa
            bulk = pa.array([value] * min(BULK_CHUNK, count), pa.binary())
        elif kind == "pybroker-list":
            bulk = [value] * min(BULK_CHUNK, count)
        start, cpu = time.perf_counter(), time.process_time()
        p = Producer(conf)
        if bulk is None:
            produce, poll = p.produce, p.poll
            for i in range(count):
                produce(topic, value)
                if i % POLL_EVERY == 0:
                    poll(0)
        else:
            futures, sent = [], 0
            while sent < count:
                n = min(len(bulk), count - sent)
                futures.append(p.produce_batch(topic, bulk if n == len(bulk) else bulk[:n]))
                sent += n
        left = p.flush(MAX_SECONDS)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        if bulk is not None:
            acked = sum(c for f in futures for _, _, c in f.result(60))
        else:
            acked = count - left
        errors = p.metrics()["record_errors"]
        p.close()
        return {"records": acked - errors, "bytes": (acked - errors) * size, "seconds": seconds, "cpu_seconds": cpu}
    if kind == "confluent":
        from confluent_kafka import Producer
        conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "none"}
        if batch == "1MiB":
            conf["batch.size"] = MIB
        failed = []

        def report(err, _msg):
            if err is not None:
                failed.append(err)

        start = time.perf_counter()
        p = Producer({**conf, "on_delivery": report})
        produce, poll = p.produce, p.poll
        for i in range(count):
            while True:
                try:
                    produce(topic, value)
                    break
                except BufferError:
                    poll(0.001)
                    if time.monotonic() > deadline:
                        raise TimeoutError("confluent-kafka's queue stayed full")
            if i % POLL_EVERY == 0:
                poll(0)
        left = p.flush(MAX_SECONDS)
        seconds = time.perf_counter() - start
        ok = count - left - len(failed)
        return {"records": ok, "bytes": ok * size, "seconds": seconds}
    if kind == "kafka-python":
        from kafka import KafkaProducer
        conf = {"bootstrap_servers": bootstrap, "acks": "all", "linger_ms": 5}
        if batch == "1MiB":
            conf["batch_size"] = MIB
        start = time.perf_counter()
        p = KafkaProducer(**conf)
        futures = [p.send(topic, value) for _ in range(count)]
        p.flush(MAX_SECONDS)
        seconds = time.perf_counter() - start
        ok = sum(1 for f in futures if f.succeeded())
        p.close(5)
        return {"records": ok, "bytes": ok * size, "seconds": seconds}
    raise ValueError(kind)


def broker_cpu_s(pid: int) -> float:
    """utime + stime of the broker process (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(*args) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "_client", *map(str, args)],
                         capture_output=True, text=True, timeout=MAX_SECONDS + 60)
    if out.returncode != 0:
        raise RuntimeError(f"{args[:2]} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def create_topic(bootstrap: str, topic: str) -> None:
    from pybroker.tools.wire import Client
    from pybroker.protocol import REQUESTS
    api = REQUESTS[19]
    with Client(bootstrap) as c:
        conn = c.any_conn()
        req = api(topics=[api.CreatableTopic(name=topic, num_partitions=1, replication_factor=1)], timeout_ms=30000)
        resp = conn.request(req)
        code = resp.topics[0].error_code
        if code not in (0, 36):  # 36: already exists
            raise RuntimeError(f"cannot create {topic}: error {code}")


# ---- the benchmark ---------------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_client":
        kind, batch, bootstrap, topic, count, size = sys.argv[2:8]
        print(json.dumps(run_client(kind, batch, bootstrap, topic, int(count), int(size))))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--kp-records", type=int, default=100_000, help="records for kafka-python")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--batches", default=",".join(BATCHES))
    ap.add_argument("--json", default=None)
    ap.add_argument("--produce-versions", default="", help="e.g. 8,11: pybroker rows per Produce version cap")
    args = ap.parse_args()
    kinds = [k for k in args.clients.split(",") if k]
    caps = [c for c in args.produce_versions.split(",") if c]
    if caps:
        kinds = [v for k in kinds for v in ([f"{k}@v{c}" for c in caps] if k.startswith("pybroker") else [k])]
        for k in kinds:
            base, _, cap = k.partition("@v")
            CLIENTS.setdefault(k, f"{CLIENTS[base]} v{cap}" if cap else CLIENTS[base])
    batches = [b for b in args.batches.split(",") if b]
    rows = [(k, b) for b in batches for k in kinds if not (k.startswith("pybroker-") and b == "default")]
    from tests.broker import BrokerProcess
    tmp = tempfile.mkdtemp(prefix="pybroker-producer-bench-")
    broker = BrokerProcess(os.path.join(tmp, "data"), {"log.segment.bytes": 1073741824,
                                                       "message.max.bytes": 10485760}).start()
    runs = {r: [] for r in rows}
    try:
        n = 0
        for i in range(args.runs):
            for kind, batch in rows:
                count = args.kp_records if kind == "kafka-python" else args.records
                n += 1
                topic = f"producer-bench-{n}"
                create_topic(broker.bootstrap, topic)
                cpu = broker_cpu_s(broker.proc.pid)
                r = child(kind, batch, broker.bootstrap, topic, count, args.size)
                r["broker_cpu_seconds"] = broker_cpu_s(broker.proc.pid) - cpu
                if r["records"] < count:
                    raise RuntimeError(f"{kind} ({batch}) delivered {r['records']} of {count} records")
                runs[(kind, batch)].append(r)
                print(f"  run {i + 1} {CLIENTS[kind]:32s} {batch:8s} {r['records'] / r['seconds']:12,.0f} records/s",
                      flush=True)
    finally:
        try:
            broker.stop()
        finally:
            broker.close()
            shutil.rmtree(tmp, ignore_errors=True)
    med = {r: {"records_s": statistics.median(x["records"] / x["seconds"] for x in v),
               "mb_s": statistics.median(x["bytes"] / x["seconds"] / 1e6 for x in v)} for r, v in runs.items()}
    print(f"\nproduce {args.records:,} x {args.size} B records (kafka-python: {args.kp_records:,}) to one partition, "
          f"acks=all, linger.ms=5; medians of {args.runs} runs")
    print(f"  {'client':32s} {'batch.size':10s} {'records/s':>12s} {'MB/s':>8s} {'vs confluent':>13s} "
          f"{'vs kafka-python':>16s}")
    for kind, batch in rows:
        m = med[(kind, batch)]
        conf = med.get(("confluent", batch))
        kp = med.get(("kafka-python", batch))
        vc = f"{m['records_s'] / conf['records_s']:.2f}x" if conf else "-"
        vk = f"{m['records_s'] / kp['records_s']:.1f}x" if kp else "-"
        print(f"  {CLIENTS[kind]:32s} {batch:10s} {m['records_s']:12,.0f} {m['mb_s']:8.1f} {vc:>13s} {vk:>16s}")
    for kind, batch in rows:  # the highest cap against the lowest, per pybroker row
        base, _, cap = kind.partition("@v")
        if cap and cap == caps[-1] and len(caps) > 1:
            old, new = runs[(f"{base}@v{caps[0]}", batch)], runs[(kind, batch)]
            # records per CPU second of the producer process: steadier than wall time on a busy host
            cpu_old = statistics.median(x["records"] / x["cpu_seconds"] for x in old)
            cpu_new = statistics.median(x["records"] / x["cpu_seconds"] for x in new)
            b_old = statistics.median(x["records"] / max(x["broker_cpu_seconds"], 1e-3) for x in old)
            b_new = statistics.median(x["records"] / max(x["broker_cpu_seconds"], 1e-3) for x in new)
            print(f"  {CLIENTS[base]:32s} {batch:10s} Produce v{cap} / v{caps[0]}: wall "
                  f"{med[(kind, batch)]['records_s'] / med[(f'{base}@v{caps[0]}', batch)]['records_s']:.3f}x, "
                  f"client CPU {cpu_new / cpu_old:.3f}x ({cpu_old:,.0f} -> {cpu_new:,.0f} records per CPU s), "
                  f"broker CPU {b_new / b_old:.3f}x ({b_old:,.0f} -> {b_new:,.0f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": {f"{k}/{b}": v for (k, b), v in runs.items()},
                       "median": {f"{k}/{b}": v for (k, b), v in med.items()}}, f, indent=2)


if __name__ == "__main__":
    main()
