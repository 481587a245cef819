"""Produce throughput before and after flexible Produce versions (v9-v11), in the same run.

    python bench/bench_produce_versions.py [--before-tree DIR | --before-rev REV] [--runs 5]
                                           [--requests 20000] [--records 300000]

"before" is the broker of a previous revision: --before-tree names a checkout whose native core
is built; otherwise --before-rev (default 8b12237, the last revision before them) is exported
with ``git archive`` into a temporary directory and built in place there. "after" is this tree.
Each run starts a fresh broker of each kind, alternating, and measures:

* in-process: µs per Produce through the dispatcher (bench/produce_inprocess.py: header and body
  decode, validation, append to a real log, the answer encoded; one 1 KiB batch of 10 records,
  acks=1), no network, each case run in a fresh process from its tree; the fastest timing of
  each run, the least disturbed by the machine's other work. Before at v8; after at v8 and v11.
* wire: one connection pipelines pre-encoded Produce requests (one partition, one 1 KiB batch,
  acks=1) in windows of 64, and reads every answer: requests/s, and the broker's CPU time per
  request (utime + stime from /proc). Before at v8, its highest; after at v8 and at v11, what
  Kafka 3.8's Java producer sends (flexible request and response, KIP-951 fields).
* librdkafka: a confluent-kafka producer (it picks the highest Produce both sides know: v8
  before, v10+ after) sends 100 B records, acks=1, in small requests (linger.ms=1,
  batch.num.messages=100): records/s and broker CPU per 100 records.

In-process: the minimum over runs; wire and librdkafka: medians over runs. Ratios are
before / after for times and after / before for rates, so above 1 always means faster after.
The broker, the client and the machine's other work share the same cores: under load the wire
and librdkafka rates move a lot, the broker CPU per request and the in-process times much less.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pybroker.protocol import REQUESTS, encode_request  # noqa: E402
from pybroker.records import build_batch  # noqa: E402
from tests.kafka_wire import WireClient  # noqa: E402

Produce = REQUESTS[0]
SIZE = struct.Struct(">i")
WINDOW = 64  # requests in flight on the wire connection
TOPIC = "bench"
START_S = 60
TICK = os.sysconf("SC_CLK_TCK")


class Broker:
    """``pybroker serve`` run from ``tree`` (its own code and native core), stopped by PID."""

    def __init__(self, tree: str, data_dir: str, overrides: dict | None = None):
        extra = [a for k, v in (overrides or {}).items() for a in ("--override", f"{k}={v}")]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "serve", "--override", f"log.dirs={data_dir}",
             "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", "log.segment.bytes=1073741824",
             *extra],
            cwd=tree, env={**os.environ, "PYTHONPATH": tree}, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()  # "... listening on PLAINTEXT://host:port"
        if "listening on" not in line:
            self.close()
            raise RuntimeError(f"the broker in {tree} did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime

    def cpu_ns_s(self) -> float:
        """CPU seconds of the broker's live threads at nanosecond resolution (the clock ticks of ``cpu_s``
        are 10 ms: too coarse for a phase of a second); a thread that has exited is no longer counted."""
        total = 0
        for task in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            except FileNotFoundError:  # the thread ended meanwhile
                pass
        return total / 1e9

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.proc.stdout.close()


def _recv_exact(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def wire(broker: Broker, version: int, requests: int) -> dict:
    """Pipelined pre-encoded produces; requests/s and broker CPU µs per request."""
    batch = bytes(build_batch([bytes(1024)]))
    req = Produce(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[Produce.TopicProduceData(
        name=TOPIC, partition_data=[Produce.PartitionProduceData(index=0, records=batch)])])
    frame = bytes(encode_request(version, 1, "bench", req))
    window = (SIZE.pack(len(frame)) + frame) * WINDOW
    rounds = max(1, requests // WINDOW)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        cpu, start = broker.cpu_s(), time.perf_counter()
        for _ in range(rounds):
            sock.sendall(window)
            for _ in range(WINDOW):
                _recv_exact(sock, SIZE.unpack(_recv_exact(sock, 4))[0])
        seconds, cpu = time.perf_counter() - start, broker.cpu_s() - cpu
    n = rounds * WINDOW
    return {"requests_s": n / seconds, "cpu_us_per_request": cpu / n * 1e6}


def librdkafka(broker: Broker, records: int) -> dict:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "acks": "1", "linger.ms": 1,
                  "batch.num.messages": 100, "enable.idempotence": False, "compression.type": "none",
                  "queue.buffering.max.messages": 1000000})
    value, failed = b"x" * 100, []
    cpu, start = broker.cpu_s(), time.perf_counter()
    deadline = time.monotonic() + 300
    for i in range(records):
        while True:
            try:
                p.produce(TOPIC, value, partition=0, on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:
                p.poll(0.001)
                if time.monotonic() > deadline:
                    raise TimeoutError("the producer queue stayed full")
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(300) or failed:
        raise RuntimeError(f"undelivered: {p.flush(0)} left, errors {failed[:3]}")
    seconds, cpu = time.perf_counter() - start, broker.cpu_s() - cpu
    return {"records_s": records / seconds, "cpu_us_per_100_records": cpu / records * 100 * 1e6}


def in_process(tree: str, versions, args) -> dict:
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "produce_inprocess.py"), tree,
                           str(args.inprocess_runs), str(args.min_time), *map(str, versions)],
                          cwd=tree, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_run(tree: str, versions, args) -> dict:
    tmp = tempfile.mkdtemp(prefix="pybroker-bench-produce-")
    broker = Broker(tree, os.path.join(tmp, "data"))
    try:
        with WireClient(broker.port) as c:
            c.create_topic(TOPIC)
        wire(broker, versions[0], WINDOW * 20)  # warm up: connections, page cache, first segment
        out = {f"wire v{v}": wire(broker, v, args.requests) for v in versions}
        out["librdkafka"] = librdkafka(broker, args.records)
        out["in-process"] = in_process(tree, versions, args)
        return out
    finally:
        broker.close()
        shutil.rmtree(tmp, ignore_errors=True)


def export_before(rev: str) -> str:
    tree = tempfile.mkdtemp(prefix="pybroker-before-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=tree, check=True,
                   capture_output=True)
    return tree


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-tree", default=None)
    ap.add_argument("--before-rev", default="8b12237")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--records", type=int, default=300000)
    ap.add_argument("--inprocess-runs", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds per in-process timing")
    args = ap.parse_args()
    before = args.before_tree or export_before(args.before_rev)
    try:
        runs = {"before": [], "after": []}
        for _ in range(args.runs):
            runs["before"].append(one_run(before, (8,), args))
            runs["after"].append(one_run(ROOT, (8, 11), args))
    finally:
        if args.before_tree is None:
            shutil.rmtree(before, ignore_errors=True)

    def med(side, case, key):
        return statistics.median(r[case][key] for r in runs[side])

    print(f"Produce before ({args.before_tree or args.before_rev}) and after (this tree), {args.runs} runs, "
          f"load average {os.getloadavg()[0]:.1f}")
    fastest = {side: {v: min(r["in-process"][v][0] for r in runs[side]) for v in runs[side][0]["in-process"]}
               for side in runs}
    base = fastest["before"]["v8"]
    print(f"  {'in-process, dispatcher to answer':34} {'µs/req':>10} {'':>11} {'before/after':>13}")
    print(f"  {'before v8':34} {base:10.2f}")
    for v, us in fastest["after"].items():
        print(f"  {'after ' + v:34} {us:10.2f} {'':11} {base / us:12.2f}x")
    b = med("before", "wire v8", "requests_s")
    print(f"  {'wire, 1 KiB batch, acks=1':34} {'req/s':>10} {'CPU µs/req':>11} {'after/before':>13}")
    print(f"  {'before v8':34} {b:10.0f} {med('before', 'wire v8', 'cpu_us_per_request'):11.1f}")
    for v in (8, 11):
        a = med("after", f"wire v{v}", "requests_s")
        print(f"  {'after v%d' % v:34} {a:10.0f} {med('after', f'wire v{v}', 'cpu_us_per_request'):11.1f} "
              f"{a / b:12.2f}x")
    rb, ra = med("before", "librdkafka", "records_s"), med("after", "librdkafka", "records_s")
    print(f"  {'librdkafka 100 B records, acks=1':34} {'rec/s':>10} {'µs/100 rec':>11}")
    print(f"  {'before (Produce v8)':34} {rb:10.0f} {med('before', 'librdkafka', 'cpu_us_per_100_records'):11.1f}")
    print(f"  {'after (Produce v10+)':34} {ra:10.0f} {med('after', 'librdkafka', 'cpu_us_per_100_records'):11.1f} "
          f"{ra / rb:12.2f}x")


if __name__ == "__main__":
    main()
