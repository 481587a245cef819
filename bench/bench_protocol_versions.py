"""Produce and consume throughput before and after the current protocol versions, in the same run.

    python bench/bench_protocol_versions.py [--before-tree DIR | --before-rev 8b12237] [--runs 5]
                                            [--megabytes 200] [--partitions 1] [--wire-fetches 1000]

"before" is the broker of the revision before the new versions (Produce <= 8, Fetch <= 11), exported
with ``git archive`` and built in place (bench_produce_versions.export_before) unless --before-tree
names a built checkout; "after" is this tree. Every run starts a fresh broker of each kind, the order
alternating from run to run, each with its metrics listener on (both sides alike) so that the
Produce and Fetch versions the clients negotiated are read from the broker's request counters.

* librdkafka: a confluent-kafka producer process sends ``--megabytes`` of 1 KiB records (acks=1,
  linger.ms=5, batch.size=1000000, compression none, idempotence off), then a consumer process
  reads them all from the beginning (assign, fetch.max.bytes / max.partition.fetch.bytes set), and a
  second consumer process reads them all again (the first read follows the writes closely, so the
  broker's background work after them, checkpoints and flushes, falls into it more often; the
  group coordinator and its __consumer_offsets are made ready before any phase). MB/s
  as the client process times it, and the broker's CPU seconds per GB (the on-CPU nanoseconds of its
  threads from /proc/PID/task/*/schedstat, across the client process's whole life). librdkafka
  uses the highest version both sides know.
* wire: on each broker, holding what the producer wrote, one connection pipelines Fetch requests
  (``WINDOW`` in flight, offsets stepping through the log, 1 MiB per request): at v11 on both
  brokers (the same requests: the broker's own change), and at v11 and v17 (flexible, topic ids)
  in turns on the after broker: records/s and broker CPU per GB. The records go out as sendfile
  slices in all; v17 against v11 is the cost of the flexible encoding itself.

Medians over runs; ratios are after / before for rates and for CPU per GB (below 1: less CPU).
The machine is shared: the load average is printed with every figure.
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
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

TOPIC = "bench"
RECORD = 1024
WINDOW = 16  # wire fetches in flight
CLIENT_TIMEOUT_S = 600
PHASES = {"produce": "Produce", "consume": "Fetch", "consume again": "Fetch"}  # phase: the API it measures
PRODUCER = {"acks": "1", "linger.ms": 5, "batch.size": 1000000, "compression.type": "none",
            "enable.idempotence": False, "message.max.bytes": 1000000, "queue.buffering.max.kbytes": 1048576,
            "queue.buffering.max.messages": 1000000}
CONSUMER = {"fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 1048576, "fetch.wait.max.ms": 500,
            "fetch.min.bytes": 1, "queued.max.messages.kbytes": 65536, "enable.auto.commit": False,
            "check.crcs": False, "auto.offset.reset": "earliest"}


# ---- client processes (run as ``--role producer|consumer``): only confluent-kafka, no broker code ----

def produce_role(bootstrap: str, records: int, partitions: int, acks: str | None = None) -> dict:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER, **({"acks": acks} if acks else {})})
    value, failed = bytes(RECORD), []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(TOPIC, value, partition=i % partitions, on_delivery=lambda e, _m: e and failed.append(e))
                break
            except BufferError:
                p.poll(0.005)
                if time.monotonic() > deadline:
                    raise TimeoutError("the producer queue stayed full")
        if i % 5000 == 0:
            p.poll(0)
    left = p.flush(max(1.0, deadline - time.monotonic()))
    if left or failed:
        raise RuntimeError(f"undelivered: {left} left, errors {failed[:3]}")
    return {"seconds": time.perf_counter() - start}


def consume_role(bootstrap: str, records: int, partitions: int) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{os.getpid()}", **CONSUMER})
    got, bytes_ = 0, 0
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    start = time.perf_counter()
    c.assign([TopicPartition(TOPIC, i, OFFSET_BEGINNING) for i in range(partitions)])
    try:
        while got < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {got} of {records}")
            for m in c.consume(10000, 1.0):
                if m.error() is None:
                    got += 1
                    bytes_ += len(m.value())
    finally:
        seconds = time.perf_counter() - start
        c.close()
    return {"seconds": seconds, "records": got, "bytes": bytes_}


# ---- the driver ----

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request_versions(metrics_port: int) -> dict:
    """{"Produce": {version: count}, "Fetch": {...}} from the broker's request counters."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {"Produce": {}, "Fetch": {}}
    for line in text.splitlines():
        if line.startswith("kafka_network_requestmetrics_requestspersec_total{"):
            labels, value = line[line.index("{") + 1:line.index("}")], float(line.rsplit(" ", 1)[1])
            kv = dict(item.split("=", 1) for item in labels.split(","))
            name = kv.get("request", "").strip('"')
            if name in out:
                out[name][int(kv["version"].strip('"'))] = int(value)
    return out


def client(role: str, broker, records: int, partitions: int) -> dict:
    """Run one client process; its own timing, and the broker's CPU across its life."""
    cpu = broker.cpu_ns_s()
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--role", role, "--bootstrap",
                           f"127.0.0.1:{broker.port}", "--records", str(records), "--partitions", str(partitions)],
                          capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S + 60)
    if done.returncode:
        raise RuntimeError(f"{role} failed: {done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["broker_cpu_s"] = broker.cpu_ns_s() - cpu
    return out


def batch_records(records) -> int:
    """Records in the whole batches of a partition's records (a last, cut batch is not counted)."""
    n, pos, end = 0, 0, len(records)
    while end - pos >= 61:
        size = 12 + int.from_bytes(records[pos + 8:pos + 12], "big")
        if size > end - pos:
            break
        n += int.from_bytes(records[pos + 57:pos + 61], "big")
        pos += size
    return n


def wire_fetch(broker, version: int, topic_id, end_offset: int, fetches: int) -> dict:
    """Pipelined Fetch requests stepping through the log: records/s, MB/s and broker CPU s/GB."""
    from pybroker.protocol import REQUESTS, decode_response, encode_request
    F = REQUESTS[1]
    step = max(1, (1 << 20) // (RECORD + 8))  # about one request's worth of records

    def frame(i, offset):
        req = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[F.FetchTopic(
                    topic=TOPIC, topic_id=topic_id, partitions=[F.FetchPartition(
                        partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                        log_start_offset=-1, partition_max_bytes=1 << 20)])])
        body = bytes(encode_request(version, i, "bench-wire", req))
        return struct.pack(">i", len(body)) + body
    frames = [frame(i, (i * step) % max(1, end_offset - step)) for i in range(fetches)]
    records = bytes_ = 0
    with socket.create_connection(("127.0.0.1", broker.port), timeout=60) as sock:
        reader = sock.makefile("rb", buffering=1 << 20)
        cpu, start = broker.cpu_ns_s(), time.perf_counter()
        for lo in range(0, fetches, WINDOW):
            sock.sendall(b"".join(frames[lo:lo + WINDOW]))
            for _ in frames[lo:lo + WINDOW]:
                size = struct.unpack(">i", reader.read(4))[0]
                body = reader.read(size)
                resp = decode_response(body, 1, version)[1]
                for t in resp.responses:
                    for p in t.partitions:
                        if p.error_code:
                            raise RuntimeError(f"Fetch v{version} answered error {p.error_code}")
                        if p.records is not None:
                            records += batch_records(p.records)
                            bytes_ += len(p.records)
        seconds, cpu = time.perf_counter() - start, broker.cpu_ns_s() - cpu
    return {"records_s": records / seconds, "mb_s": bytes_ / seconds / 1e6, "cpu_s_per_gb": cpu / (bytes_ / 1e9)}


def topic_id_and_end(port: int, with_id: bool):
    """(the topic's id, or None when not asked: the before broker knows Metadata <= 8; its end offset)."""
    from tests.kafka_wire import WireClient
    with WireClient(port) as w:
        topic_id = w.metadata([TOPIC], version=12).topics[0].topic_id if with_id else None
        return topic_id, w.list_offset(TOPIC, 0)


def wait_for_coordinator(port: int, timeout_s: float = 60) -> None:
    """FindCoordinator until it answers (the first one creates __consumer_offsets, 50 partitions: done
    here, outside every measured phase, rather than in the first consumer's)."""
    from pybroker.protocol import REQUESTS
    from tests.kafka_wire import WireClient
    find = REQUESTS[10]
    deadline = time.monotonic() + timeout_s
    with WireClient(port, timeout=timeout_s) as w:
        while w.request(find(key="bench", key_type=0), 2).error_code:
            if time.monotonic() > deadline:
                raise TimeoutError("no group coordinator")
            time.sleep(0.1)


def one_side(tree: str, args, wire: tuple) -> dict:
    from bench_produce_versions import Broker
    from tests.kafka_wire import WireClient
    tmp = tempfile.mkdtemp(prefix="pybroker-bench-versions-")
    metrics_port = free_port()
    broker = Broker(tree, os.path.join(tmp, "data"), {"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    try:
        with WireClient(broker.port) as c:
            c.create_topic(TOPIC, args.partitions)
        wait_for_coordinator(broker.port)
        out = {"load": os.getloadavg()[0]}
        out["produce"] = client("producer", broker, args.records, args.partitions)
        out["consume"] = client("consumer", broker, args.records, args.partitions)
        out["consume again"] = client("consumer", broker, args.records, args.partitions)
        out["versions"] = request_versions(metrics_port)
        topic_id, end = topic_id_and_end(broker.port, with_id=max(wire) >= 13)
        for v in wire:  # in turns; the second of each counts (page cache and code warm)
            out[f"wire v{v}"] = wire_fetch(broker, v, topic_id, end, args.wire_fetches)
        return out
    finally:
        broker.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-tree", default=None)
    ap.add_argument("--before-rev", default="8b12237")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--megabytes", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--wire-fetches", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--role", choices=("producer", "consumer"), help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--records", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        role = produce_role if args.role == "producer" else consume_role
        print(json.dumps(role(args.bootstrap, args.records, args.partitions)))
        return
    args.records = args.megabytes * 1000 * 1000 // RECORD
    from bench_produce_versions import export_before
    print(f"load before: {os.getloadavg()}")
    print(f"producer: {PRODUCER}\nconsumer: {CONSUMER}\nrecords: {args.records} x {RECORD} B, "
          f"{args.partitions} partition(s); wire: {args.wire_fetches} fetches of 1 MiB, {WINDOW} in flight", flush=True)
    before = args.before_tree or export_before(args.before_rev)
    runs = {"before": [], "after": []}
    try:
        for n in range(args.runs):
            order = ("before", "after") if n % 2 == 0 else ("after", "before")
            for side in order:
                runs[side].append(one_side(before if side == "before" else ROOT, args,
                                           wire=(11, 11) if side == "before" else (11, 17, 11, 17)))
                r = runs[side][-1]
                print(f"  run {n + 1} {side:6} load {r['load']:.2f}: " + ", ".join(
                    f"{phase} {args.megabytes / r[phase]['seconds']:.1f} MB/s {r[phase]['broker_cpu_s']:.2f} CPU s"
                    for phase in PHASES) + f"; requests per version {r['versions']}", flush=True)
    finally:
        if args.before_tree is None:
            shutil.rmtree(before, ignore_errors=True)
    if args.json:
        print(json.dumps({"runs": runs, "args": vars(args)}, indent=2, default=str))
    med = statistics.median
    gb = args.records * RECORD / 1e9
    print(f"\nmedians of {args.runs} runs, {args.megabytes} MB of 1 KiB records, load average now "
          f"{os.getloadavg()[0]:.2f} (during runs: {min(r['load'] for s in runs.values() for r in s):.2f}-"
          f"{max(r['load'] for s in runs.values() for r in s):.2f})")
    print(f"  {'librdkafka':28} {'MB/s':>8} {'CPU s/GB':>9}   versions")
    figures = {}
    for phase, api in PHASES.items():
        for side in ("before", "after"):
            rate = med(args.megabytes / r[phase]["seconds"] for r in runs[side])
            cpu = med(r[phase]["broker_cpu_s"] / gb for r in runs[side])
            versions = sorted({v for r in runs[side] for v in r["versions"][api]})
            figures[phase, side] = (rate, cpu)
            print(f"  {phase + ' ' + side:28} {rate:8.1f} {cpu:9.2f}   {api} v{versions}")
        (rb, cb), (ra, ca) = figures[phase, "before"], figures[phase, "after"]
        print(f"  {phase + ' after/before':28} {ra / rb:7.3f}x {ca / cb:8.3f}x")
    print(f"  {'wire Fetch':28} {'rec/s':>8} {'MB/s':>8} {'CPU s/GB':>9}")
    w = {(side, v): [r[f"wire v{v}"] for r in runs[side]] for side, v in (("before", 11), ("after", 11), ("after", 17))}
    for (side, v), xs in w.items():
        print(f"  {side + ' broker v%d' % v:28} {med(x['records_s'] for x in xs):8.0f} "
              f"{med(x['mb_s'] for x in xs):8.1f} {med(x['cpu_s_per_gb'] for x in xs):9.2f}")
    for label, a, b in (("after v11 / before v11", ("after", 11), ("before", 11)),
                        ("after v17 / after v11", ("after", 17), ("after", 11)),
                        ("after v17 / before v11", ("after", 17), ("before", 11))):
        print(f"  {label:28} {med(x['records_s'] for x in w[a]) / med(x['records_s'] for x in w[b]):7.3f}x "
              f"{'':8} {med(x['cpu_s_per_gb'] for x in w[a]) / med(x['cpu_s_per_gb'] for x in w[b]):8.3f}x")


if __name__ == "__main__":
    main()
