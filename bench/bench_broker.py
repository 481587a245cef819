"""Broker throughput, latency and memory, with the clients in separate processes.

    python bench/bench_broker.py [--runs 3] [--mb 512] [--small-mb 200] [--latency-seconds 10]

One partition, a fresh `pybroker serve` per run. Throughput uses a C client on librdkafka
(bench/csrc/rdkafka_load.c, compiled at start; needs Debian's librdkafka-dev, else the
confluent-kafka Python client is used and the table says so): produce 1 KiB and 100 B records
with acks=1, consume 1 KiB records back from the page cache. Produce latency (p50/p99) at a
steady 50 MB/s comes from confluent-kafka's per-message delivery latency. The broker's peak RSS is sampled from
/proc throughout. Medians over the runs. The broker, the client and the machine's other work
share the same 2 cores.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.broker import BrokerProcess  # noqa: E402

CLIENTS = os.path.join(ROOT, "bench", "broker_clients.py")
TARGETS = {"produce_1k": 500, "produce_100b": 200, "consume_1k": 1000}  # MB/s, from the project's goals


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self._halt = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.05):
            try:
                self.peak = max(self.peak, rss_mb(self.pid))
            except OSError:
                return

    def stop(self) -> float:
        self._halt.set()
        self.join(5)
        return self.peak


def build_c_client(directory: str) -> str | None:
    exe = os.path.join(directory, "rdkafka_load")
    src = os.path.join(ROOT, "bench", "csrc", "rdkafka_load.c")
    done = subprocess.run(["cc", "-O2", "-o", exe, src, "-lrdkafka"], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"C client not built (install librdkafka-dev); using confluent-kafka: {done.stderr[-300:]}")
        return None
    return exe


def c_client(exe: str, *args) -> dict:
    out = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def throughput(exe, mode: str, bootstrap: str, topic: str, count: int, size: int = 0) -> dict:
    if exe is None:
        opts = {"count": count, "size": size, "acks": 1} if mode == "produce" else {"count": count}
        return client(mode, bootstrap, topic, **opts)
    if mode == "produce":
        return c_client(exe, "produce", bootstrap, topic, count, size, 1)
    return c_client(exe, "consume", bootstrap, topic, count)


def client(mode: str, bootstrap: str, topic: str, **opts) -> dict:
    args = [sys.executable, CLIENTS, mode, "--bootstrap", bootstrap, "--topic", topic]
    for k, v in opts.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def one_run(args, exe) -> dict:
    tmp = tempfile.mkdtemp(prefix="pybroker-bench-")
    broker = BrokerProcess(os.path.join(tmp, "data"),
                           {"log.segment.bytes": 1073741824, "message.max.bytes": 10485760,
                            "socket.request.max.bytes": 104857600}).start()
    sampler = RssSampler(broker.proc.pid)
    sampler.start()
    result = {}
    try:
        n1k = args.mb * 1_000_000 // 1024
        r = throughput(exe, "produce", broker.bootstrap, "big", n1k, 1024)
        result["produce_1k"] = r["bytes"] / r["seconds"] / 1e6
        r = throughput(exe, "consume", broker.bootstrap, "big", n1k)
        result["consume_1k"] = r["bytes"] / r["seconds"] / 1e6
        n100 = args.small_mb * 1_000_000 // 100
        r = throughput(exe, "produce", broker.bootstrap, "small", n100, 100)
        result["produce_100b"] = r["bytes"] / r["seconds"] / 1e6
        result["produce_100b_records_s"] = r["records"] / r["seconds"]
        r = client("latency", broker.bootstrap, "lat", rate_mb=50, size=1024, seconds=args.latency_seconds)
        result.update(latency_p50_ms=r["p50_ms"], latency_p99_ms=r["p99_ms"], latency_rate_mb=r["achieved_mb_s"])
        result["peak_rss_mb"] = sampler.stop()
    finally:
        try:
            sampler.stop()
        finally:  # the broker is stopped whatever else failed
            try:
                broker.stop()
            finally:
                broker.close()
                shutil.rmtree(tmp, ignore_errors=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=512, help="MB of 1 KiB records per run")
    ap.add_argument("--small-mb", type=int, default=200, help="MB of 100 B records per run")
    ap.add_argument("--latency-seconds", type=float, default=10)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    build_dir = tempfile.mkdtemp(prefix="pybroker-bench-bin-")
    try:
        exe = build_c_client(build_dir)
        runs = [one_run(args, exe) for _ in range(args.runs)]
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    who = "C client on librdkafka" if exe else "confluent-kafka (Python)"
    print(f"pybroker broker benchmark: medians of {args.runs} runs (throughput client: {who}, own process)")
    for key, label in (("produce_1k", "produce 1 KiB records, acks=1"),
                       ("produce_100b", "produce 100 B records, acks=1"),
                       ("consume_1k", "consume 1 KiB records (page cache)")):
        print(f"  {label:40s} {med[key]:8.0f} MB/s   target {TARGETS[key]} MB/s   ({med[key] / TARGETS[key]:.2f}x)")
    print(f"  {'100 B records/s':40s} {med['produce_100b_records_s']:8.0f}")
    print(f"  {'produce latency at %.0f MB/s, acks=1' % med['latency_rate_mb']:40s} p50 {med['latency_p50_ms']:.2f} ms"
          f"   p99 {med['latency_p99_ms']:.2f} ms")
    print(f"  {'broker peak RSS':40s} {med['peak_rss_mb']:8.0f} MB     target <= 200 MB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "median": med}, f, indent=2)


if __name__ == "__main__":
    main()
