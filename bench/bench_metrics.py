"""Produce throughput of one pybroker with metrics on (metrics.listener set, scraped) vs off.

    python bench/bench_metrics.py [--runs 5] [--mb 200] [--size 1024] [--scrape-interval 1]
                                  [--json out.json]

Each run starts a fresh single-node broker twice, once per mode, in alternating order (off/on,
then on/off, ...), creates a topic of 3 partitions and times one librdkafka producer
(bench/cluster_clients.py ``produce``, its own process) sending --mb MB of --size-byte records
with acks=1, linger.ms=5, batch.size=1000000. With metrics on, a thread scrapes /metrics every
--scrape-interval seconds throughout (Prometheus' default is 15 s: this is harsher), and the
scrape is checked to count every record. Prints each run, the medians and on/off; the broker,
the client and the machine's other work share the same cores, so it is a same-run comparison.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.broker import BrokerProcess  # noqa: E402
from tests.cluster import free_ports  # noqa: E402

CLIENTS = os.path.join(ROOT, "bench", "cluster_clients.py")
PRODUCER = {"acks": "1", "linger.ms": 5, "batch.size": 1000000, "compression.type": "none",
            "enable.idempotence": False, "queue.buffering.max.kbytes": 1048576,
            "queue.buffering.max.messages": 1000000, "batch.num.messages": 100000}
TOPIC = "bench-metrics"
MESSAGES_IN = re.compile(r'^kafka_server_brokertopicmetrics_messagesinpersec_total\{topic="%s"\} (\d+)$' % TOPIC, re.M)


def client(*args, timeout: float = 600) -> dict:
    out = subprocess.run([sys.executable, CLIENTS, *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"client {args[0]} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class Scraper(threading.Thread):
    def __init__(self, port: int, interval: float):
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval = interval
        self.stop_event = threading.Event()
        self.scrapes = 0
        self.seconds = 0.0
        self.last = ""

    def scrape(self) -> str:
        start = time.perf_counter()
        with urllib.request.urlopen(self.url, timeout=10) as resp:
            body = resp.read().decode()
        self.seconds += time.perf_counter() - start
        self.scrapes += 1
        return body

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self.last = self.scrape()


def cpu_seconds(pid: int) -> float:
    """The broker's user + system CPU time (/proc/<pid>/stat utime, stime)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(metrics: bool, args, base: str) -> dict:
    data = tempfile.mkdtemp(prefix="metrics-on-" if metrics else "metrics-off-", dir=base)
    overrides = {"num.partitions": 3}
    port = None
    if metrics:
        port, = free_ports(1)
        overrides["metrics.listener"] = f"http://127.0.0.1:{port}"
    b = BrokerProcess(os.path.join(data, "data"), overrides).start()
    scraper = None
    try:
        client("create-topic", "--bootstrap", b.bootstrap, "--topic", TOPIC, "--partitions", "3")
        if metrics:
            scraper = Scraper(port, args.scrape_interval)
            scraper.start()
        count = args.mb * (1 << 20) // args.size
        cpu = cpu_seconds(b.proc.pid)
        r = client("produce", "--bootstrap", b.bootstrap, "--topic", TOPIC, "--partitions", "3",
                   "--count", str(count), "--size", str(args.size), "--config", json.dumps(PRODUCER))
        cpu = cpu_seconds(b.proc.pid) - cpu
        result = {"metrics": metrics, "mb_s": r["bytes"] / r["seconds"] / 1e6, "records": r["records"],
                  "errors": r["errors"], "seconds": r["seconds"], "cpu_s_per_gb": cpu / (r["bytes"] / 1e9)}
        if scraper is not None:
            scraper.stop_event.set()
            scraper.join(30)
            counted = int(MESSAGES_IN.search(scraper.scrape()).group(1))
            result.update(scrapes=scraper.scrapes, scrape_ms=1000 * scraper.seconds / max(scraper.scrapes, 1),
                          counted=counted)
            if counted != r["records"] + 3:  # + the warm-up record per partition
                raise AssertionError(f"metrics counted {counted} records, the client had {r['records']} + 3 acked")
        return result
    finally:
        if scraper is not None:
            scraper.stop_event.set()
        b.stop()
        b.close()
        subprocess.run(["rm", "-rf", data])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--scrape-interval", type=float, default=1.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench-metrics-")
    runs = []
    for i in range(args.runs):
        for metrics in ((False, True) if i % 2 == 0 else (True, False)):
            r = one_run(metrics, args, base)
            runs.append(r)
            extra = (f"  scrapes {r['scrapes']} ({r['scrape_ms']:.1f} ms each), counted {r['counted']}"
                     if metrics else "")
            print(f"run {i + 1} metrics {'on ' if metrics else 'off'}: {r['mb_s']:7.1f} MB/s "
                  f"({r['records']} records in {r['seconds']:.2f} s), broker CPU {r['cpu_s_per_gb']:.2f} s/GB{extra}",
                  flush=True)
    off = statistics.median(r["mb_s"] for r in runs if not r["metrics"])
    on = statistics.median(r["mb_s"] for r in runs if r["metrics"])
    print(f"median over {args.runs} runs: off {off:.1f} MB/s, on {on:.1f} MB/s, on/off {on / off:.3f} "
          f"({(on / off - 1) * 100:+.1f}%)")
    cpu_off = statistics.median(r["cpu_s_per_gb"] for r in runs if not r["metrics"])
    cpu_on = statistics.median(r["cpu_s_per_gb"] for r in runs if r["metrics"])
    print(f"broker CPU per GB produced (median): off {cpu_off:.3f} s, on {cpu_on:.3f} s, "
          f"on/off {cpu_on / cpu_off:.3f} ({(cpu_on / cpu_off - 1) * 100:+.1f}%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "off_mb_s": off, "on_mb_s": on, "ratio": on / off, "cpu_s_per_gb_off": cpu_off,
                       "cpu_s_per_gb_on": cpu_on, "args": vars(args)}, f,
                      indent=2)
    os.rmdir(base)


if __name__ == "__main__":
    main()
