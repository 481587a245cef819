"""What the A-vs-B broker benchmarks share (ACLs, metrics, TLS, SASL, our clients' security).

Clients run in their own processes: bench/cluster_clients.py (librdkafka) creates topics and
produces; this file's ``consume`` mode reads back with a librdkafka consumer:

    python bench/measure.py consume --bootstrap H:P --topic T --partitions 3 --count N [--config JSON]

The broker's cost is its CPU time (utime + stime from /proc, steadier than wall clock on a shared
machine) over the transfer. Modes alternate run by run so neither always goes first; results are
medians over runs, compared as ratios measured in the same invocation.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
CLIENTS = os.path.join(BENCH, "cluster_clients.py")
# the throughput producer: acks=1, linger.ms=5, batches of up to 1 MB, no compression, no idempotence
PRODUCER = {"acks": "1", "linger.ms": 5, "batch.size": 1000000, "compression.type": "none",
            "enable.idempotence": False, "queue.buffering.max.kbytes": 1048576,
            "queue.buffering.max.messages": 1000000, "batch.num.messages": 100000}
PARTITIONS = 3
MAX_SECONDS = 300  # no client run goes on longer than this


def add_run_options(ap: argparse.ArgumentParser, runs: int, mb: int) -> None:
    """--runs, --mb, --size and --json, as every throughput benchmark here takes them."""
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--mb", type=int, default=mb, help="MB sent per run and mode")
    ap.add_argument("--size", type=int, default=1024, help="record size in bytes")
    ap.add_argument("--json", help="also write the runs and medians to this file")


def in_turn(modes, run: int) -> list:
    """``modes`` in order on even runs, reversed on odd ones."""
    return list(modes) if run % 2 == 0 else list(reversed(list(modes)))


def run_json(*argv, timeout: float = 600) -> dict:
    """Run a Python client script; its last stdout line is its JSON result."""
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"client {argv[:2]} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time (/proc/<pid>/stat utime, stime)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    run_json(CLIENTS, "create-topic", "--bootstrap", bootstrap, "--topic", topic, "--partitions", str(partitions))


def timed_produce(broker, bootstrap: str, topic: str, mb: int, size: int, client_conf: dict | None = None,
                  partitions: int = PARTITIONS) -> dict:
    """``mb`` MB of ``size``-byte records from one librdkafka producer process into ``topic``:
    its result plus ``mb_s`` and the broker's ``cpu_s_per_gb``."""
    count = mb * (1 << 20) // size
    cpu = cpu_seconds(broker.proc.pid)
    config = json.dumps({**PRODUCER, **(client_conf or {})})
    r = run_json(CLIENTS, "produce", "--bootstrap", bootstrap, "--topic", topic, "--partitions", str(partitions),
                 "--count", str(count), "--size", str(size), "--config", config)
    cpu = cpu_seconds(broker.proc.pid) - cpu
    return {**r, "mb_s": r["bytes"] / r["seconds"] / 1e6, "cpu_s_per_gb": cpu / (r["bytes"] / 1e9)}


def timed_consume(broker, bootstrap: str, topic: str, count: int, client_conf: dict | None = None,
                  partitions: int = PARTITIONS) -> dict:
    """Read ``count`` records back with one librdkafka consumer process: its result plus ``mb_s``
    and the broker's ``cpu_s_per_gb``."""
    cpu = cpu_seconds(broker.proc.pid)
    r = run_json(__file__, "consume", "--bootstrap", bootstrap, "--topic", topic, "--partitions", str(partitions),
                 "--count", str(count), "--config", json.dumps(client_conf or {}))
    cpu = cpu_seconds(broker.proc.pid) - cpu
    if r["records"] != count:
        raise AssertionError(f"{topic}: consumed {r['records']} of {count} records")
    return {**r, "mb_s": r["bytes"] / r["seconds"] / 1e6, "cpu_s_per_gb": cpu / (r["bytes"] / 1e9)}


def produce_then_consume(broker, protocol: str, bootstrap: str, client_conf: dict, args, run: int) -> dict:
    """One run on one listener: a fresh topic, --mb MB produced, then all of it consumed."""
    topic = f"bench-{protocol.lower()}-{run}"
    create_topic(broker.bootstrap, topic)
    p = timed_produce(broker, bootstrap, topic, args.mb, args.size, client_conf)
    total = p["records"] + PARTITIONS  # + the producer's warm-up record per partition
    c = timed_consume(broker, bootstrap, topic, total, client_conf)
    return {"protocol": protocol, "produce_mb_s": p["mb_s"], "consume_mb_s": c["mb_s"],
            "produce_cpu_s_per_gb": p["cpu_s_per_gb"], "consume_cpu_s_per_gb": c["cpu_s_per_gb"],
            "errors": p["errors"]}


THROUGHPUT_KEYS = ("produce_mb_s", "consume_mb_s", "produce_cpu_s_per_gb", "consume_cpu_s_per_gb")


def throughput_line(r: dict) -> str:
    """One produce_then_consume result as a line."""
    return (f"produce {r['produce_mb_s']:7.1f} MB/s (broker {r['produce_cpu_s_per_gb']:.2f} CPU-s/GB), "
            f"consume {r['consume_mb_s']:7.1f} MB/s (broker {r['consume_cpu_s_per_gb']:.2f} CPU-s/GB)")


def medians(runs: list, group: str, keys) -> dict:
    """{(value of ``group``, key): median over the runs with that value}."""
    values = dict.fromkeys(r[group] for r in runs)
    return {(v, k): statistics.median(r[k] for r in runs if r[group] == v) for v in values for k in keys}


def produce_line(r: dict) -> str:
    """One timed_produce result as a line."""
    return (f"{r['mb_s']:7.1f} MB/s ({r['records']} records in {r['seconds']:.2f} s), "
            f"broker CPU {r['cpu_s_per_gb']:.3f} s/GB")


def on_off_runs(count: int, run, label: str, line=produce_line) -> list:
    """``count`` runs of ``run(on)`` with a setting off and on, in turn; each result printed with ``line``."""
    runs = []
    for i in range(count):
        for on in in_turn((False, True), i):
            r = run(on)
            runs.append(r)
            print(f"run {i + 1} {label} {'on ' if on else 'off'}: {line(r)}", flush=True)
    return runs


def on_off_summary(runs: list, flag: str, label: str) -> dict:
    """Print and return the medians of MB/s and broker CPU-s/GB with ``flag`` off and on, and on/off."""
    med = medians(runs, flag, ("mb_s", "cpu_s_per_gb"))
    off, on = med[False, "mb_s"], med[True, "mb_s"]
    cpu_off, cpu_on = med[False, "cpu_s_per_gb"], med[True, "cpu_s_per_gb"]
    print(f"median over {len(runs) // 2} runs: {label} off {off:.1f} MB/s, on {on:.1f} MB/s, on/off {on / off:.3f} "
          f"({(on / off - 1) * 100:+.1f}%)")
    print(f"broker CPU per GB produced (median): off {cpu_off:.3f} s, on {cpu_on:.3f} s, "
          f"on/off {cpu_on / cpu_off:.3f} ({(cpu_on / cpu_off - 1) * 100:+.1f}%)")
    return {"off_mb_s": off, "on_mb_s": on, "ratio": on / off, "cpu_s_per_gb_off": cpu_off, "cpu_s_per_gb_on": cpu_on}


def save_json(path: str | None, obj) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=2)


def consume(bootstrap: str, topic: str, partitions: int, count: int, config: dict) -> dict:
    """Read ``count`` records of ``topic`` (every partition, from offset 0); the clock starts at the first."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                  **config})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = size = 0
    start = None
    deadline = time.monotonic() + MAX_SECONDS
    while got < count and time.monotonic() < deadline:
        for m in c.consume(100000, 0.5):
            if m.error() is None:
                if start is None:
                    start = time.perf_counter()
                got += 1
                size += len(m)
    seconds = time.perf_counter() - start if start is not None else 0.0
    c.close()
    return {"records": got, "bytes": size, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("consume",))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--config", default="{}", help="consumer settings as JSON (security, ...)")
    args = ap.parse_args()
    print(json.dumps(consume(args.bootstrap, args.topic, args.partitions, args.count, json.loads(args.config))))


if __name__ == "__main__":
    main()
