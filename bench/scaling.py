"""Does a read cost more once the log is big? Kafka's design says no: O(1) in the data size.

    python bench/scaling.py [--gb 2] [--read-mb 64] [--runs 3]

- Writes GB of 1 KiB records once to one partition of a fresh local pybroker (C client on
  librdkafka when it builds, else confluent-kafka), then fetches READ_MB with confluent-kafka
  from the tail (offset end - READ_MB) and from the head (offset 0, GB back), alternating: time
  to the first record (seek + fetch latency) and MB/s. The head is read twice: as written (page
  cache warm: the data was just written) and after posix_fadvise(DONTNEED) on the segment files
  (cold, so it comes from the disk: that difference is the page cache, not the log's design).
- OffsetIndex.lookup at 1 k vs 1 M entries (bench_storage.bench_lookup): a binary search over
  a memory-mapped index, so it should grow only by log2.
Medians over the runs. The broker, the client and the machine's other work share 2 cores.
"""
import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_broker import build_c_client, throughput  # noqa: E402
from bench_storage import bench_lookup  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402

SIZE = 1024
TOPIC = "scale"
MAX_SECONDS = 120  # bound on any single read


def read_from(consumer, offset: int, count: int) -> tuple[float, float]:
    """(ms to the first record, MB/s over ``count`` records) reading partition 0 from ``offset``."""
    from confluent_kafka import TopicPartition
    consumer.assign([TopicPartition(TOPIC, 0, offset)])
    got = nbytes = 0
    first_ms = None
    start = time.perf_counter()
    deadline = time.monotonic() + MAX_SECONDS
    while got < count and time.monotonic() < deadline:
        # poll() returns as soon as one record is there; consume(n) would wait for n of them
        batch = consumer.consume(num_messages=min(10000, count - got), timeout=0) if got else []
        if not batch:
            m = consumer.poll(0.05)
            batch = [m] if m is not None else []
        for m in batch:
            if m.error():
                continue
            if first_ms is None:
                first_ms = (time.perf_counter() - start) * 1000
                if m.offset() != offset:
                    raise RuntimeError(f"asked for offset {offset}, got {m.offset()}")
            got += 1
            nbytes += len(m.value())
    seconds = time.perf_counter() - start
    consumer.unassign()
    if got < count:
        raise RuntimeError(f"read only {got} of {count} records from offset {offset}")
    return first_ms, nbytes / seconds / 1e6


def drop_cache(log_dir: str) -> None:
    """Ask the kernel to forget the partition's cached pages (no root needed for one's own files)."""
    for path in glob.glob(os.path.join(log_dir, f"{TOPIC}-0", "*")):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=2)
    ap.add_argument("--read-mb", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pybroker-scaling-", dir=args.dir)
    data = os.path.join(tmp, "data")
    broker = BrokerProcess(data, {"log.segment.bytes": 1073741824}).start()
    rows = []
    try:
        exe = build_c_client(tmp)
        total = int(args.gb * 1e9 // SIZE)
        t0 = time.perf_counter()
        written = throughput(exe, "produce", broker.bootstrap, TOPIC, total, SIZE)
        write_s = time.perf_counter() - t0
        if written["records"] != total:
            raise RuntimeError(f"wrote {written['records']} of {total} records")
        n = min(total, args.read_mb * 1_000_000 // SIZE)
        from confluent_kafka import Consumer
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "scaling",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                             "max.partition.fetch.bytes": 1048576, "fetch.max.bytes": 52428800})
        # 1 MiB per fetch (Kafka's default): the first record waits for the whole first response
        read_from(consumer, total - 1, 1)  # connect and fetch metadata outside the timings
        cases = {"tail (last %d MB)" % args.read_mb: [], "head, %.1f GB back, cached" % args.gb: [],
                 "head, %.1f GB back, cache dropped" % args.gb: []}
        tail, warm, cold = cases.values()
        for _ in range(args.runs):  # alternate so all see the same machine state
            tail.append(read_from(consumer, total - n, n))
            warm.append(read_from(consumer, 0, n))
            drop_cache(data)
            cold.append(read_from(consumer, 0, n))
            read_from(consumer, 0, n)  # bring the head back into the cache for the next round
        consumer.close()
        for label, results in cases.items():
            rows.append((f"fetch {label}", f"first record {statistics.median(r[0] for r in results):7.2f} ms",
                         f"{statistics.median(r[1] for r in results):7.1f} MB/s"))
        for entries in (1_000, 1_000_000):
            ns, loop_ns = bench_lookup(tmp, entries, lookups=200_000, runs=args.runs)
            rows.append((f"offset index lookup, {entries:>9,} entries", f"{ns:7.0f} ns/lookup",
                         f"(empty loop {loop_ns:.0f} ns)"))
    finally:
        broker.stop()
        broker.close()
        shutil.rmtree(tmp, ignore_errors=True)
    who = "C client on librdkafka" if exe else "confluent-kafka"
    print(f"pybroker scaling: {args.gb:g} GB of {SIZE} B records in one partition, written in {write_s:.1f} s "
          f"({written['bytes'] / write_s / 1e6:.0f} MB/s, {who}); {args.read_mb} MB per read; "
          f"medians of {args.runs} runs")
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
