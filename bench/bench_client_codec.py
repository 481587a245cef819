"""Nanoseconds per record of the client record codec: native vs pure twin vs kafka-python.

    python bench/bench_client_codec.py [--records 20000] [--runs 5] [--value-size 100]

Rows (100-byte values, no key, no headers, 16 KiB batches):
  append          BatchBuilder.append, one Python call per record (build excluded)
  append+build    append until full, then build(codec 0), over all records
  append_many     BatchBuilder.append_many over a list of bytes, batch after batch
  append_arrow    BatchBuilder.append_arrow over a pyarrow binary array
  decode_records  decode_records of a fetch-like buffer of those batches
  decode_columns  decode_columns of the same buffer
  +to_arrow       decode_columns + arrow.to_record_batch
kafka-python's DefaultRecordBatchBuilder.append / DefaultRecordBatch iteration give the
comparison column. Each cell is the median of --runs timings of the whole loop.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402

from pybroker import core  # noqa: E402
from pybroker.client import arrow  # noqa: E402

BATCH_BYTES = 16384


def median_ns(fn, n, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / n


def bench_impl(m, values, runs):
    n = len(values)
    out = {}

    def append_only():
        b = m.BatchBuilder(1 << 30)
        append = b.append
        for v in values:
            append(1_700_000_000_000, None, v)
    out["append"] = median_ns(append_only, n, runs)

    def append_build():
        b = m.BatchBuilder(BATCH_BYTES)
        for v in values:
            if b.append(1_700_000_000_000, None, v) < 0:
                b.build(0)
                b = m.BatchBuilder(BATCH_BYTES)
                b.append(1_700_000_000_000, None, v)
        b.build(0)
    out["append+build"] = median_ns(append_build, n, runs)

    def append_many():
        i = 0
        while i < n:
            b = m.BatchBuilder(BATCH_BYTES)
            i = b.append_many(None, values, 1_700_000_000_000, i)
            b.build(0)
    out["append_many"] = median_ns(append_many, n, runs)

    arr = pa.array(values, type=pa.binary())
    validity, offsets, data = arr.buffers()

    def append_arrow():
        i = 0
        while i < n:
            b = m.BatchBuilder(BATCH_BYTES)
            i = b.append_arrow(None, None, None, validity, offsets, data, False, arr.offset, i, n,
                               1_700_000_000_000)
            b.build(0)
    out["append_arrow"] = median_ns(append_arrow, n, runs)

    buf = fetch_buffer(m, values)
    out["decode_records"] = median_ns(lambda: m.decode_records(buf, "topic", 0, 0), n, runs)
    out["decode_columns"] = median_ns(lambda: m.decode_columns(buf, 0), n, runs)
    out["+to_arrow"] = median_ns(lambda: arrow.to_record_batch(m.decode_columns(buf, 0), "topic", 0), n, runs)
    return out


def fetch_buffer(m, values):
    """The values as consecutive 16 KiB batches with increasing base offsets (like a fetch response)."""
    parts, i, n = [], 0, len(values)
    while i < n:
        b = m.BatchBuilder(BATCH_BYTES)
        j = b.append_many(None, values, 1_700_000_000_000, i)
        batch = bytearray(b.build(0))
        batch[0:8] = i.to_bytes(8, "big")  # baseOffset is outside the CRC
        parts.append(bytes(batch))
        i = j
    return b"".join(parts)


def bench_kafka_python(values, runs):
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    n = len(values)

    def builder():
        return DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                         producer_epoch=-1, base_sequence=-1, batch_size=BATCH_BYTES)
    out = {}

    def append_only():
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                      producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
        for i, v in enumerate(values):
            b.append(i, 1_700_000_000_000, None, v, [])
    out["append"] = median_ns(append_only, n, runs)

    def append_build():
        b, off = builder(), 0
        for v in values:
            if b.append(off, 1_700_000_000_000, None, v, []) is None:
                b.build()
                b, off = builder(), 0
                b.append(off, 1_700_000_000_000, None, v, [])
            off += 1
        b.build()
    out["append+build"] = median_ns(append_build, n, runs)

    native = core.load("client_codec", "native")
    buf = fetch_buffer(native, values)
    batches, pos = [], 0
    while pos < len(buf):
        size = int.from_bytes(buf[pos + 8:pos + 12], "big") + 12
        batches.append(bytearray(buf[pos:pos + size]))
        pos += size

    def decode():
        for raw in batches:
            for r in DefaultRecordBatch(raw):
                r.value
    out["decode_records"] = median_ns(decode, n, runs)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--value-size", type=int, default=100)
    args = ap.parse_args()
    payload = bytes(range(256)) * (args.value_size // 256 + 2)
    values = [payload[i % 256:i % 256 + args.value_size] for i in range(args.records)]
    results = {
        "native": bench_impl(core.load("client_codec", "native"), values, args.runs),
        "pure": bench_impl(core.load("client_codec", "pure"), values, max(1, args.runs // 2)),
    }
    try:
        results["kafka-python"] = bench_kafka_python(values, max(1, args.runs // 2))
    except ImportError:
        pass
    rows = list(results["native"])
    names = list(results)
    print(f"ns/record, {args.records} records of {args.value_size} B, median of {args.runs} runs")
    print(f"{'':16}" + "".join(f"{n:>14}" for n in names) + f"{'pure/native':>14}" + f"{'kp/native':>12}")
    for row in rows:
        cells = [results[n].get(row) for n in names]
        line = f"{row:16}" + "".join(f"{c:14.0f}" if c is not None else f"{'-':>14}" for c in cells)
        nat = results["native"][row]
        line += f"{results['pure'][row] / nat:14.1f}"
        kp = results.get("kafka-python", {}).get(row)
        line += f"{kp / nat:12.1f}" if kp else f"{'-':>12}"
        print(line)


if __name__ == "__main__":
    main()
