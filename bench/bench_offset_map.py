"""The log cleaner's key -> last offset map: MB/s of segment scanned, bytes of map per key.

Writes (once, then reuses) a log of uncompressed v2 batches of 100 records with 100-byte values and
11-byte keys drawn uniformly from 1 M distinct keys, then times, on the warm page cache:
  read        a plain read of the file into a 1 MiB buffer (the ceiling)
  offset map  OffsetMap.add_batches over the mmap'd file (the cleaner's first pass)

    python bench/bench_offset_map.py               # 1 GiB log, native
    python bench/bench_offset_map.py --size-mb 256 --impl native,pure
"""
import argparse
import mmap
import os
import random
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pybroker import core  # noqa: E402
from pybroker.records import CRC_START, Record, build_batch  # noqa: E402

PER_BATCH = 100


def write_log(path: str, size: int, keys: int, seed: int = 1) -> None:
    """Batches built from one template: the keys are fixed-width, so each batch patches its keys in place."""
    rng = random.Random(seed)
    value = bytes(range(100))
    template = build_batch([Record(value, b"key-%07d" % i) for i in range(PER_BATCH)])
    spots = [template.index(b"key-%07d" % i) for i in range(PER_BATCH)]
    crc32c = core.crc.crc32c
    offset = written = 0
    with open(path + ".tmp", "wb") as f:
        while written < size:
            batch = bytearray(template)
            for pos, k in zip(spots, rng.choices(range(keys), k=PER_BATCH)):
                batch[pos:pos + 11] = b"key-%07d" % k
            struct.pack_into(">q", batch, 0, offset)
            struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_START:]))
            f.write(batch)
            offset += PER_BATCH
            written += len(batch)
    os.replace(path + ".tmp", path)


def plain_read(path: str) -> float:
    buf = bytearray(1 << 20)
    t = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return time.perf_counter() - t


def build_map(path: str, impl: str, memory: int):
    m = core.load("offset_map", impl).OffsetMap(memory)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        t = time.perf_counter()
        result = m.add_batches(view, 0, 1 << 62)
        elapsed = time.perf_counter() - t
        view.release()
    return elapsed, result, m


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--map-mb", type=int, default=32, help="log.cleaner.dedupe.buffer.size (Kafka's default: 128)")
    ap.add_argument("--impl", default="native", help="native, pure or native,pure")
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    path = os.path.join(args.dir, f"pybroker-offset-map-{args.size_mb}m-{args.keys}k.log")
    if not os.path.exists(path):
        t = time.perf_counter()
        write_log(path, args.size_mb << 20, args.keys)
        print(f"wrote {path} in {time.perf_counter() - t:.1f} s")
    size = os.path.getsize(path)
    mb = size / 1e6
    plain_read(path)  # warm the page cache
    best = min(plain_read(path) for _ in range(args.repeat))
    print(f"log {size / 2**20:.0f} MiB, {args.keys} distinct keys, batches of {PER_BATCH} x 100-byte values")
    print(f"{'read (ceiling)':<22} {mb / best:8.0f} MB/s")
    for impl in args.impl.split(","):
        runs = [build_map(path, impl, args.map_mb << 20) for _ in range(args.repeat if impl == "native" else 1)]
        elapsed, result, m = min(runs, key=lambda r: r[0])
        print(f"{'offset map ' + impl:<22} {mb / elapsed:8.0f} MB/s  {result}  keys {m.size}  "
              f"map {m.memory_bytes / 2**20:.0f} MiB = {m.memory_bytes / m.size:.1f} B/key "
              f"(load {m.size / m.capacity:.2f}; {m.memory_bytes / m.limit:.1f} B/key when full)")


if __name__ == "__main__":
    main()
