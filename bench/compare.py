"""Run one workload against several brokers side by side, at rising offered load.

    python bench/compare.py --workload bench/workloads/1-topic-1-partition-1kb.json \\
        --target pybroker=127.0.0.1:9092 --target other=HOST:PORT [--runs 3] \\
        [--rates 10,50,100,max] [--seconds 10] [--out bench/results/compare]
    python bench/compare.py --workload ... --target spawn:pybroker \\
        --target spawn:pybroker:PYBROKER_TRANSFER=io_uring

A target is ``[NAME=]HOST:PORT`` or ``[NAME=]spawn:pybroker[:KEY=VAL...]``: a fresh local
``pybroker serve`` per run (own data dir, stopped by PID after the run); KEYs that look like
environment variables (upper case) go to its environment, the rest are ``--override`` configs.

The workload file follows OpenMessaging Benchmark's shape (topics, partitionsPerTopic,
messageSize, producerRate in records/s with 0 = max, consumerPerSubscription) but its duration is
``testDurationSeconds``. Each run visits every target in turn (runs alternate targets, so all see
the same machine state), and for each it walks the offered-rate steps (MB/s) on a fresh topic per
step, stopping once a step achieves < 90% of what was offered (saturation). Every step runs a
producer and (unless consumerPerSubscription is 0) a consumer, each in its own process
(confluent-kafka on librdkafka): produce ack latency comes from librdkafka, end-to-end latency
from a send timestamp carried in each payload. Prints medians per target and step with ratios vs
the first target, writes a PNG of throughput and p99 latency vs offered load, and a JSON of all runs.
"""
import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MAX_SECONDS = 300  # no client runs longer than this, whatever happens
SATURATED = 0.90  # a step achieving less than this share of the offered rate ends the walk
DRAIN_SECONDS = 15  # how long a consumer may trail the producer's last record
STAMP = struct.Struct("<d")  # send time (time.time()) at the head of every payload


# ---------------------------------------------------------------- client processes

def _percentiles(values: list) -> dict:
    values.sort()
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))] if values else None  # noqa: E731
    return {"p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": values[-1] if values else None}


def worker_produce(spec: dict) -> dict:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": spec["bootstrap"], "acks": str(spec.get("acks", 1)), "linger.ms": 1,
                  "batch.size": 1048576, "queue.buffering.max.kbytes": 1048576,
                  "queue.buffering.max.messages": 1000000, "compression.type": "none",
                  "enable.idempotence": False})
    size, rate, seconds = spec["size"], spec["rate"], min(spec["seconds"], MAX_SECONDS)
    targets = [(t, part) for t in spec["topics"] for part in range(spec["partitions"])]
    filler = b"x" * max(0, size - STAMP.size)
    lat, errors = [], [0]

    def delivered(err, msg):
        if err is None:
            lat.append(msg.latency() * 1000)
        else:
            errors[0] += 1

    sent, start = 0, time.perf_counter()
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
        # paced by elapsed time (sleeps that overshoot catch up); unpaced sends a chunk per turn
        due = int(rate * elapsed) - sent if rate else 2000
        for _ in range(due):
            t, part = targets[sent % len(targets)]
            try:
                p.produce(t, STAMP.pack(time.time()) + filler, partition=part, on_delivery=delivered)
            except BufferError:
                p.poll(0.001)
                break
            sent += 1
        p.poll(0)
        if rate:
            time.sleep(0.0005)
    left = p.flush(60)
    elapsed = time.perf_counter() - start
    acked = len(lat)
    return {"sent": sent, "acked": acked, "unacked": left, "errors": errors[0], "seconds": elapsed,
            "mb_s": acked * size / elapsed / 1e6, "records_s": acked / elapsed, **_percentiles(lat)}


def worker_consume(spec: dict) -> dict:
    """Reads every partition from 0 until told (on stdin) how many records to expect."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": "compare", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 10, "fetch.min.bytes": 1, "queued.max.messages.kbytes": 262144})
    c.assign([TopicPartition(t, part, 0) for t in spec["topics"] for part in range(spec["partitions"])])
    expected = [None]

    def wait_for_count():  # the parent writes the producer's acked count once it is done
        line = sys.stdin.readline()
        expected[0] = int(line) if line.strip() else 0

    threading.Thread(target=wait_for_count, daemon=True).start()
    c.consume(num_messages=1, timeout=0.5)  # first metadata + fetch round trip before "ready"
    print("ready", flush=True)
    lat, got, nbytes = [], 0, 0
    hard_deadline = time.monotonic() + MAX_SECONDS
    drain_deadline = None
    while time.monotonic() < hard_deadline:
        if expected[0] is not None:
            if got >= expected[0]:
                break
            drain_deadline = drain_deadline or time.monotonic() + DRAIN_SECONDS
            if time.monotonic() > drain_deadline:
                break
        # consume(n, timeout) waits for n records or the timeout: at low rates that wait would be
        # counted as latency, so drain what is queued without waiting and block only in poll()
        batch = c.consume(num_messages=10000, timeout=0)
        if not batch:
            first = c.poll(0.1)
            batch = [first] if first is not None else []
        for m in batch:
            if m.error():
                continue
            now = time.time()
            value = m.value()
            got += 1
            nbytes += len(value)
            if len(value) >= STAMP.size:
                lat.append((now - STAMP.unpack_from(value)[0]) * 1000)
    c.close()
    return {"received": got, "bytes": nbytes, **_percentiles(lat)}


# ---------------------------------------------------------------- targets

class Target:
    """A broker to measure: a fixed bootstrap address, or a fresh local pybroker per run."""

    def __init__(self, text: str):
        name, rest = None, text
        if not text.startswith("spawn:") and "=" in text.split(":", 1)[0]:
            name, rest = text.split("=", 1)
        self.spawn = rest.startswith("spawn:")
        self.env, self.overrides = {}, {}
        if self.spawn:
            parts = rest.split(":")
            if parts[1] != "pybroker":
                raise SystemExit(f"can only spawn pybroker, not {parts[1]!r}")
            for opt in parts[2:]:
                key, _, value = opt.partition("=")
                (self.env if key.isupper() else self.overrides)[key] = value
            self.name = name or "pybroker" + ("[" + ",".join(parts[2:]) + "]" if parts[2:] else "")
            self.address = None
        else:
            self.name, self.address = name or rest, rest
        self._broker = self._tmp = None

    def start(self) -> str:
        if not self.spawn:
            return self.address
        from tests.broker import BrokerProcess
        self._tmp = tempfile.mkdtemp(prefix="pybroker-compare-")
        self._broker = BrokerProcess(os.path.join(self._tmp, "data"),
                                     {"log.segment.bytes": 1073741824, **self.overrides})
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)  # Popen copies the environment at start: restore right after
        try:
            self._broker.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return self._broker.bootstrap

    def stop(self) -> None:
        if self._broker is not None:
            try:
                self._broker.stop()
            finally:
                self._broker.close()
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._broker = self._tmp = None


# ---------------------------------------------------------------- one step

def _spawn_worker(mode: str, spec: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", mode, json.dumps(spec)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def create_topics(bootstrap: str, topics: list, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics], request_timeout=30)
    for f in futures.values():
        f.result(60)


def run_step(bootstrap: str, workload: dict, rate_mb: float | None, seconds: float) -> dict:
    """One offered rate (MB/s; None = as fast as the producer can go) on fresh topics."""
    run_id = uuid.uuid4().hex[:8]
    topics = [f"cmp-{run_id}-{i}" for i in range(workload.get("topics", 1))]
    partitions, size = workload.get("partitionsPerTopic", 1), workload.get("messageSize", 1024)
    create_topics(bootstrap, topics, partitions)
    spec = {"bootstrap": bootstrap, "topics": topics, "partitions": partitions, "size": size,
            "seconds": seconds, "rate": int(rate_mb * 1e6 / size) if rate_mb else 0}
    consumer = None
    if workload.get("consumerPerSubscription", 1) > 0:
        consumer = _spawn_worker("consume", spec)
        if consumer.stdout.readline().strip() != "ready":
            consumer.kill()
            raise RuntimeError("consumer did not start")
    producer = _spawn_worker("produce", spec)
    out, _ = producer.communicate(timeout=MAX_SECONDS + 90)
    prod = _last_json(out)
    result = {"offered_mb_s": rate_mb, "mb_s": prod["mb_s"], "records_s": prod["records_s"],
              "produce_p50_ms": prod["p50_ms"], "produce_p99_ms": prod["p99_ms"],
              "acked": prod["acked"], "errors": prod["errors"]}
    if consumer is not None:
        out, _ = consumer.communicate(f"{prod['acked']}\n", timeout=MAX_SECONDS + 90)
        cons = _last_json(out)
        result.update(e2e_p50_ms=cons["p50_ms"], e2e_p99_ms=cons["p99_ms"], received=cons["received"])
    return result


def walk_rates(target: Target, workload: dict, rates: list, seconds: float) -> list:
    bootstrap = target.start()
    steps = []
    try:
        for rate in rates:
            step = run_step(bootstrap, workload, rate, seconds)
            steps.append(step)
            print(f"  {target.name:32s} offered {'max' if rate is None else rate:>6} MB/s -> "
                  f"{step['mb_s']:7.1f} MB/s  produce p99 {_fmt(step['produce_p99_ms'])} ms"
                  f"  e2e p99 {_fmt(step.get('e2e_p99_ms'))} ms", flush=True)
            if rate is not None and step["mb_s"] < SATURATED * rate:
                break  # saturated: higher offers only measure the queue
    finally:
        target.stop()
    return steps


# ---------------------------------------------------------------- report

def _fmt(v, spec=".2f") -> str:
    return "-" if v is None else format(v, spec)


def _med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(targets: list, runs: list, rates: list) -> list:
    """Median per (target, rate step) over the runs that reached that step."""
    rows = []
    for t in targets:
        for rate in rates:
            steps = [s for run in runs for s in run[t.name] if s["offered_mb_s"] == rate]
            if not steps:
                continue
            row = {"target": t.name, "offered_mb_s": rate, "n": len(steps)}
            for key in ("mb_s", "records_s", "produce_p50_ms", "produce_p99_ms", "e2e_p50_ms", "e2e_p99_ms"):
                row[key] = _med([s.get(key) for s in steps])
            rows.append(row)
    return rows


def print_table(rows: list, first: str) -> None:
    base = {r["offered_mb_s"]: r for r in rows if r["target"] == first}
    head = ("target", "offered", "MB/s", "rec/s", "prod p50", "prod p99", "e2e p50", "e2e p99", "MB/s x", "e2e p99 x")
    lines = [head]
    for r in rows:
        b = base.get(r["offered_mb_s"])
        ratio = lambda k: _fmt(r[k] / b[k]) + "x" if b and r[k] and b[k] else "-"  # noqa: E731
        lines.append((r["target"], "max" if r["offered_mb_s"] is None else f"{r['offered_mb_s']:g}",
                      _fmt(r["mb_s"], ".1f"), _fmt(r["records_s"], ".0f"),
                      _fmt(r["produce_p50_ms"]), _fmt(r["produce_p99_ms"]),
                      _fmt(r["e2e_p50_ms"]), _fmt(r["e2e_p99_ms"]),
                      ratio("mb_s"), ratio("e2e_p99_ms") if r["e2e_p99_ms"] else ratio("produce_p99_ms")))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))))


def plot(rows: list, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in dict.fromkeys(r["target"] for r in rows):
        mine = [r for r in rows if r["target"] == name]
        # the unpaced step has no offered rate: plot it at what it achieved
        xs = [r["offered_mb_s"] if r["offered_mb_s"] is not None else r["mb_s"] for r in mine]
        ax_t.plot(xs, [r["mb_s"] for r in mine], marker="o", label=name)
        p99 = [r["e2e_p99_ms"] if r["e2e_p99_ms"] is not None else r["produce_p99_ms"] for r in mine]
        ax_l.plot(xs, p99, marker="o", label=name)
    top = max([r["offered_mb_s"] or r["mb_s"] for r in rows] + [1])
    ax_t.plot([0, top], [0, top], ls=":", color="grey", label="offered")
    ax_t.set(xlabel="offered MB/s (max: plotted at achieved)", ylabel="achieved MB/s", title="throughput")
    ax_l.set(xlabel="offered MB/s", ylabel="p99 ms (end-to-end, else produce)", title="p99 latency", yscale="log")
    for ax in (ax_t, ax_l):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- main

def parse_rates(text: str) -> list:
    return [None if r.strip() == "max" else float(r) for r in text.split(",") if r.strip()]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--target", action="append", required=True, help="[NAME=]HOST:PORT or [NAME=]spawn:pybroker[:K=V]")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rates", default=None, help="offered MB/s steps, e.g. 10,50,100,max (default: the "
                                                  "workload's producerRate, or 10,50,100,200,max)")
    ap.add_argument("--seconds", type=float, default=None, help="per step (default: the workload's)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "compare"),
                    help="output prefix: OUT.png and OUT.json")
    args = ap.parse_args(argv)
    with open(args.workload) as f:
        workload = json.load(f)
    size = workload.get("messageSize", 1024)
    if args.rates:
        rates = parse_rates(args.rates)
    elif workload.get("producerRate"):
        rates = [workload["producerRate"] * size / 1e6]
    else:
        rates = [10, 50, 100, 200, None]
    seconds = args.seconds or workload.get("testDurationSeconds", 10)
    targets = [Target(t) for t in args.target]
    if len({t.name for t in targets}) != len(targets):
        raise SystemExit("target names must differ: use NAME=... to tell them apart")
    name = workload.get("name", os.path.splitext(os.path.basename(args.workload))[0])
    print(f"workload {name}: {workload.get('topics', 1)} topic(s) x {workload.get('partitionsPerTopic', 1)} "
          f"partition(s), {size} B records, {seconds:g} s per step, {args.runs} run(s)", flush=True)
    runs = []
    for i in range(args.runs):
        print(f"run {i + 1}/{args.runs}", flush=True)
        order = targets if i % 2 == 0 else targets[::-1]  # alternate who goes first as well
        runs.append({t.name: walk_rates(t, workload, rates, seconds) for t in order})
    rows = summarize(targets, runs, rates)
    print(f"\nmedians over {args.runs} run(s); ratios vs {targets[0].name} (MB/s: higher is better; "
          f"p99: lower is better); latency in ms")
    print_table(rows, targets[0].name)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    plot(rows, args.out + ".png", f"{name}: medians of {args.runs} run(s)")
    with open(args.out + ".json", "w") as f:
        json.dump({"workload": workload, "rates": rates, "seconds": seconds, "runs": runs, "median": rows}, f, indent=2)
    print(f"wrote {args.out}.png and {args.out}.json")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        fn = {"produce": worker_produce, "consume": worker_consume}[sys.argv[2]]
        print(json.dumps(fn(json.loads(sys.argv[3]))), flush=True)
    else:
        main()
