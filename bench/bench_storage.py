"""Storage-core benchmarks, each against a baseline measured in the same run.

    python bench/bench_storage.py [--size-mb 512] [--runs 5] [--dir DIR] [--json out.json]

- append: Log.append_validated of 1 MiB and 16 KiB batches (stamp offsets + pwritev + index:
  the log's part of the produce path, after validation) and Log.append (validate with CRC,
  then append) vs plain os.write of the same bytes to a file in the same directory; runs
  alternate.
- lookup: OffsetIndex.lookup from a Python loop, 1 k and 1 M entries (ns per lookup).
- recovery: LogSegment.recover over a page-cached segment (CRC check of every batch +
  index rebuild), and the bare batch scan, in GB/s.
Figures are medians over the runs; the machine is shared, so compare ratios, not absolutes.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pybroker import core  # noqa: E402
from pybroker.log import Log, LogConfig  # noqa: E402
from pybroker.log.segment import LogSegment  # noqa: E402
from pybroker.records import value_batch  # noqa: E402

MiB = 1024 * 1024


def one_batch(batch_bytes: int) -> bytearray:
    """A valid batch of about ``batch_bytes`` made of 1 KiB records (100 B for small batches)."""
    record = 1024 if batch_bytes >= 64 * 1024 else 100
    count = max(1, batch_bytes // (record + 10))
    return value_batch(count, record)


def time_os_write(directory: str, data: bytearray, n: int) -> float:
    path = os.path.join(directory, "baseline.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.perf_counter()
    for _ in range(n):
        os.write(fd, data)
    elapsed = time.perf_counter() - t0
    os.close(fd)
    os.remove(path)
    return elapsed


def time_log_append(directory: str, data: bytearray, n: int, per_call: int, validate: bool) -> float:
    path = os.path.join(directory, "bench-0")
    lg = Log(path, "bench", 0, LogConfig(segment_bytes=2**31 - 1, retention_ms=-1))
    bufs = [bytearray(data) for _ in range(per_call)]
    batches = lg.validate(bufs)  # offsets are outside the CRC: these stay valid when restamped
    t0 = time.perf_counter()
    if validate:
        for _ in range(n // per_call):
            lg.append(bufs)
    else:
        for _ in range(n // per_call):
            lg.append_validated(batches)
    elapsed = time.perf_counter() - t0
    lg.close()
    shutil.rmtree(path)
    return elapsed


def bench_append(directory, size_mb, runs, batch_bytes, per_call=1):
    data = one_batch(batch_bytes)
    n = max(per_call, size_mb * MiB // len(data) // per_call * per_call)
    total = n * len(data)
    base, ours, checked = [], [], []
    for _ in range(runs):  # alternate so all see the same machine state
        base.append(total / time_os_write(directory, data, n))
        ours.append(total / time_log_append(directory, data, n, per_call, validate=False))
        checked.append(total / time_log_append(directory, data, n, per_call, validate=True))
    return statistics.median(base), statistics.median(ours), statistics.median(checked), len(data)


def bench_lookup(directory, entries, lookups=1_000_000, runs=5):
    path = os.path.join(directory, f"lookup-{entries}.index")
    index = core.index.OffsetIndex(path, 0, (entries + 1) * 8, True)
    for i in range(entries):
        index.append(i * 10, i * 100)
    rng = random.Random(1)
    targets = [rng.randrange(0, entries * 10) for _ in range(lookups)]
    lookup = index.lookup
    results = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for t in targets:
            lookup(t)
        results.append((time.perf_counter() - t0) / lookups * 1e9)
    empty = []
    for _ in range(runs):  # the bare Python loop, to show what the lookup itself costs
        t0 = time.perf_counter()
        for t in targets:
            pass
        empty.append((time.perf_counter() - t0) / lookups * 1e9)
    index.close()
    os.remove(path)
    return statistics.median(results), statistics.median(empty)


def bench_recovery(directory, size_mb, runs, batch_bytes):
    import mmap
    path = os.path.join(directory, "recover-0")
    config = LogConfig(segment_bytes=2**31 - 1, retention_ms=-1)
    lg = Log(path, "recover", 0, config)
    data = one_batch(batch_bytes)
    for _ in range(size_mb * MiB // len(data)):
        lg.append(data)
    lg.close()
    seg_size = os.path.getsize(os.path.join(path, "00000000000000000000.log"))
    recover, scan = [], []
    for _ in range(runs):
        seg = LogSegment(path, 0, config, active=True)
        t0 = time.perf_counter()
        truncated = seg.recover()
        recover.append(seg_size / (time.perf_counter() - t0))
        assert truncated == 0 and seg.size == seg_size
        with mmap.mmap(seg.fd, seg.size, prot=mmap.PROT_READ) as view:
            t0 = time.perf_counter()
            result = core.batch.scan(view, index_interval=4096)
            scan.append(seg_size / (time.perf_counter() - t0))
            assert result.error is None
        seg.close()
    shutil.rmtree(path)
    return statistics.median(recover), statistics.median(scan), seg_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=512, help="data written per append run")
    ap.add_argument("--recovery-mb", type=int, default=1024, help="segment size for the recovery scan")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    directory = tempfile.mkdtemp(prefix="pybroker-bench-", dir=args.dir)
    rows, results = [], {"impl": core.IMPL}
    try:
        for label, batch_bytes, per_call, target in (("1 MiB batches", MiB, 1, 0.90),
                                                       ("16 KiB batches", 16 * 1024, 1, 0.75),
                                                       ("16 KiB batches, 16 per append", 16 * 1024, 16, 0.75)):
            base, ours, checked, size = bench_append(directory, args.size_mb, args.runs, batch_bytes, per_call)
            rows.append((f"append {label} ({size} B)", f"{ours / 1e9:.2f} GB/s",
                         f"os.write {base / 1e9:.2f} GB/s", f"{ours / base:.2f}x", f">= {target:.2f}x"))
            rows.append((f"  validate + append, {label}", f"{checked / 1e9:.2f} GB/s",
                         f"os.write {base / 1e9:.2f} GB/s", f"{checked / base:.2f}x", ""))
            results[f"append_{batch_bytes}_{per_call}"] = {"ours_Bps": ours, "validated_Bps": checked,
                                                           "baseline_Bps": base}
        for entries in (1_000, 1_000_000):
            ns, loop_ns = bench_lookup(directory, entries)
            rows.append((f"offset lookup, {entries:,} entries", f"{ns:.0f} ns", f"empty loop {loop_ns:.0f} ns",
                         "", "<= 1000 ns"))
            results[f"lookup_{entries}"] = {"ns": ns, "loop_ns": loop_ns}
        for batch_bytes in (16 * 1024, 1024):
            rec, scan, size = bench_recovery(directory, args.recovery_mb, args.runs, batch_bytes)
            rows.append((f"recovery, {size / MiB:.0f} MiB of {len(one_batch(batch_bytes))} B batches",
                         f"{rec / 1e9:.2f} GB/s", f"bare scan {scan / 1e9:.2f} GB/s", "", ">= 1 GB/s"))
            results[f"recovery_{batch_bytes}"] = {"recover_Bps": rec, "scan_Bps": scan}
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"storage core: {core.IMPL}; medians of {args.runs} runs")
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
