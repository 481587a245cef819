"""The schema registry served by the broker: registrations and id lookups per second, and what having
it on costs the broker's produce path.

    python bench/bench_registry.py [--schemas 1000] [--lookups 20000] [--clients 8]
                                   [--records 1000000] [--size 100] [--rounds 7] [--json FILE]

1. Registry: one broker process (``python -m pybroker serve``) with
   ``schema.registry.listeners=http://127.0.0.1:<free port>``. ``--clients`` threads, each with its own
   keep-alive HTTP connection (http.client), register ``--schemas`` distinct Avro schemas, each under
   a subject of its own (``POST /subjects/{s}/versions``: an acks=all append to ``_schemas`` and its
   application before the answer), then look up ``--lookups`` ids chosen at random among them
   (``GET /schemas/ids/{id}``). Per phase: operations per second over the wall time of the phase,
   and the p50/p99 of each request's latency.
2. Produce with the registry on vs off: rounds alternate a broker started with the registry on and
   one without (fresh data dir each, one at a time, so nothing else runs beside the broker measured).
   Per round a fresh client process sends ``--records`` records of ``--size`` bytes (no key) to partition 0
   of a fresh one-partition topic with pybroker's Producer.produce (the native path) and flushes;
   every client knob is set: acks=all, linger.ms=5, batch.size=16384, compression.type=none,
   enable.idempotence=true, max.in.flight.requests.per.connection=5, buffer.memory=32 MiB.
   The table shows the median records/s of each side and their ratio (target: within 2%).

Every loop is bounded; only the brokers started here are stopped.
"""
import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MAX_SECONDS = 300  # no phase or client runs longer than this
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
PRODUCER_CONF = {"acks": "all", "linger.ms": 5, "batch.size": 16384, "compression.type": "none",
                 "enable.idempotence": True, "max.in.flight.requests.per.connection": 5,
                 "buffer.memory": 32 * 1024 * 1024}
POLL_EVERY = 10_000


def schema_text(i: int) -> str:
    return json.dumps({"type": "record", "name": f"Bench{i}", "namespace": "bench",
                       "fields": [{"name": "id", "type": "long"}, {"name": f"f{i}", "type": "string"}]})


# ---- phase 1: the registry over HTTP ------------------------------------------------------------------

def run_clients(url: str, clients: int, jobs: list, request) -> dict:
    """Run ``jobs`` split over ``clients`` threads, each with one keep-alive connection; ``request(conn,
    job)`` does one request and returns its answer. Returns {ops_s, p50_ms, p99_ms, results}."""
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    shares = [jobs[i::clients] for i in range(clients)]
    latencies = [[] for _ in range(clients)]
    results = [[] for _ in range(clients)]
    errors = []
    deadline = time.monotonic() + MAX_SECONDS

    def work(n: int) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            for job in shares[n]:
                if time.monotonic() > deadline:
                    raise TimeoutError("the phase ran longer than its limit")
                t = time.perf_counter()
                results[n].append(request(conn, job))
                latencies[n].append(time.perf_counter() - t)
        except Exception as exc:  # reported after the phase
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(MAX_SECONDS + 30)
    seconds = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]!r}")
    lat = sorted(x for part in latencies for x in part)
    return {"ops_s": len(lat) / seconds, "p50_ms": lat[len(lat) // 2] * 1000,
            "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, "count": len(lat),
            "results": [r for part in results for r in part]}


def call(conn, method: str, path: str, body=None):
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})
    resp = conn.getresponse()
    text = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{method} {path}: HTTP {resp.status} {text[:300]!r}")
    return json.loads(text)


def bench_registry(url: str, schemas: int, lookups: int, clients: int) -> dict:
    register = run_clients(url, clients, list(range(schemas)),
                           lambda conn, i: call(conn, "POST", f"/subjects/bench-{i}/versions",
                                                {"schema": schema_text(i)})["id"])
    ids = register.pop("results")
    if len(set(ids)) != schemas:
        raise RuntimeError(f"{schemas} distinct schemas got {len(set(ids))} distinct ids")
    rng = random.Random(1)
    wanted = [rng.choice(ids) for _ in range(lookups)]
    lookup = run_clients(url, clients, wanted, lambda conn, i: call(conn, "GET", f"/schemas/ids/{i}"))
    if any("schema" not in r for r in lookup.pop("results")):
        raise RuntimeError("a lookup answered without a schema")
    return {"register": register, "lookup": lookup}


# ---- phase 2: produce with the registry on and off ----------------------------------------------------

def run_producer(bootstrap: str, topic: str, count: int, size: int) -> dict:
    """(Child process.) Produce ``count`` records and flush; records/s from creating the producer."""
    from pybroker.client import Producer
    value = (bytes(range(256)) * (size // 256 + 1))[:size]
    start, cpu = time.perf_counter(), time.process_time()
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    produce, poll = p.produce, p.poll
    for i in range(count):
        produce(topic, value, partition=0)
        if i % POLL_EVERY == 0:
            poll(0)
    left = p.flush(MAX_SECONDS)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    errors = p.metrics()["record_errors"]
    p.close()
    return {"records": count - left - errors, "seconds": seconds, "cpu_seconds": cpu}


def broker_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce_round(tmp: str, n: int, registry_on: bool, records: int, size: int) -> dict:
    from bench.bench_client_producer import create_topic
    from tests.broker import BrokerProcess
    from tests.registryutil import start_registry_broker
    data = os.path.join(tmp, f"round{n}")
    overrides = {"log.segment.bytes": 1073741824}
    if registry_on:
        broker, _ = start_registry_broker(data, overrides)
    else:
        broker = BrokerProcess(data, overrides).start()
    try:
        topic = f"produce-{n}"
        create_topic(broker.bootstrap, topic)
        cpu = broker_cpu_s(broker.proc.pid)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "_producer", broker.bootstrap, topic,
                              str(records), str(size)], capture_output=True, text=True, timeout=MAX_SECONDS + 60)
        if out.returncode != 0:
            raise RuntimeError(f"the producer failed: {out.stderr[-2000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        r["broker_cpu_seconds"] = broker_cpu_s(broker.proc.pid) - cpu
        if r["records"] < records:
            raise RuntimeError(f"{r['records']} of {records} records delivered")
        return r
    finally:
        try:
            broker.stop()
        finally:
            broker.close()
            shutil.rmtree(data, ignore_errors=True)


# ---- the benchmark ---------------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_producer":
        bootstrap, topic, count, size = sys.argv[2:6]
        print(json.dumps(run_producer(bootstrap, topic, int(count), int(size))))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schemas", type=int, default=1000)
    ap.add_argument("--lookups", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7, help="produce rounds per side (on, off alternating)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from tests.registryutil import start_registry_broker
    tmp = tempfile.mkdtemp(prefix="pybroker-registry-bench-")
    try:
        broker, url = start_registry_broker(os.path.join(tmp, "registry"))
        try:
            reg = bench_registry(url, args.schemas, args.lookups, args.clients)
        finally:
            try:
                broker.stop()
            finally:
                broker.close()
        print(f"registry: {args.clients} clients (keep-alive connections), {args.schemas} distinct Avro schemas")
        print(f"  {'operation':28s} {'requests':>9s} {'per s':>10s} {'p50 ms':>8s} {'p99 ms':>8s}")
        for name, key in (("POST /subjects/{s}/versions", "register"), ("GET /schemas/ids/{id}", "lookup")):
            r = reg[key]
            print(f"  {name:28s} {r['count']:9d} {r['ops_s']:10,.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f}",
                  flush=True)
        runs = {True: [], False: []}
        n = 0
        for i in range(args.rounds):
            for on in ((True, False) if i % 2 == 0 else (False, True)):  # alternate which side goes first
                n += 1
                r = produce_round(tmp, n, on, args.records, args.size)
                runs[on].append(r)
                side = "on " if on else "off"
                print(f"  round {i + 1} registry {side} {r['records'] / r['seconds']:12,.0f} records/s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {on: statistics.median(x["records"] / x["seconds"] for x in v) for on, v in runs.items()}
    bcpu = {on: statistics.median(x["records"] / max(x["broker_cpu_seconds"], 1e-3) for x in v)
            for on, v in runs.items()}
    knobs = ", ".join(f"{k}={v}" for k, v in PRODUCER_CONF.items())
    print(f"\nproduce {args.records:,} x {args.size} B records to one partition ({knobs}); "
          f"medians of {args.rounds} rounds per side")
    print(f"  {'':14s} {'records/s':>12s} {'records per broker CPU s':>26s}")
    print(f"  {'registry on':14s} {med[True]:12,.0f} {bcpu[True]:26,.0f}")
    print(f"  {'registry off':14s} {med[False]:12,.0f} {bcpu[False]:26,.0f}")
    print(f"  {'on / off':14s} {med[True] / med[False]:12.3f} {bcpu[True] / bcpu[False]:26.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "registry": reg,
                       "produce": {"on": runs[True], "off": runs[False],
                                   "median_records_s": {"on": med[True], "off": med[False]}}}, f, indent=2)


if __name__ == "__main__":
    main()
