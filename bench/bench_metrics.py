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
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import measure  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402
from tests.cluster import free_ports  # noqa: E402

TOPIC = "bench-metrics"
MESSAGES_IN = re.compile(r'^kafka_server_brokertopicmetrics_messagesinpersec_total\{topic="%s"\} (\d+)$' % TOPIC, re.M)


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
        measure.create_topic(b.bootstrap, TOPIC)
        if metrics:
            scraper = Scraper(port, args.scrape_interval)
            scraper.start()
        r = measure.timed_produce(b, b.bootstrap, TOPIC, args.mb, args.size)
        result = {"metrics": metrics, "mb_s": r["mb_s"], "records": r["records"], "errors": r["errors"],
                  "seconds": r["seconds"], "cpu_s_per_gb": r["cpu_s_per_gb"]}
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


def run_line(r: dict) -> str:
    scrapes = f"  scrapes {r['scrapes']} ({r['scrape_ms']:.1f} ms each), counted {r['counted']}" if r["metrics"] else ""
    return measure.produce_line(r) + scrapes


def main() -> None:
    ap = argparse.ArgumentParser()
    measure.add_run_options(ap, runs=5, mb=200)
    ap.add_argument("--scrape-interval", type=float, default=1.0)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench-metrics-")
    runs = measure.on_off_runs(args.runs, lambda metrics: one_run(metrics, args, base), "metrics", run_line)
    summary = measure.on_off_summary(runs, "metrics", "metrics")
    measure.save_json(args.json, {"runs": runs, **summary, "args": vars(args)})
    os.rmdir(base)


if __name__ == "__main__":
    main()
