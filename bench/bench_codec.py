"""Microseconds per call of the hot-path codecs: native vs pure twin vs the code they replace.

    python bench/bench_codec.py [--runs 7] [--min-time 0.2]

decode_produce (ProduceRequest v8 and v11 (flexible) bodies, 1 KiB batch per partition,
topics x partitions):
  native     pybroker._native.kafka_codec.decode_produce
  pure       pybroker._pure.kafka_codec.decode_produce
  generated  ProduceRequest.decode (pybroker.protocol.messages, what the dispatcher runs today)
encode_fetch (FetchResponse v11, every partition with a records slice):
  native / pure as above; current = pybroker.api.fetch.encode.
Each cell is the median of --runs timings, each timing a loop sized to last about --min-time
seconds. Ratios are the replaced code's time divided by each implementation's time.
"""
import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loop_timing import call_samples_us  # noqa: E402
from pybroker import core  # noqa: E402
from pybroker.api import fetch as fetch_api  # noqa: E402
from pybroker.protocol.messages import REQUESTS  # noqa: E402

ProduceRequest, FetchRequest = REQUESTS[0], REQUESTS[1]


def load(impl):
    if "kafka_codec" in core.MODULES:
        return core.load("kafka_codec", impl)
    import importlib  # until pybroker.core lists the module
    return importlib.import_module(("pybroker._native" if impl == "native" else "pybroker._pure")
                                   + ".kafka_codec")


def per_call_us(fn, runs, min_time):
    return statistics.median(call_samples_us(fn, runs, min_time, max_loop=1 << 24))


def produce_frame(ntopics, nparts, version=8):
    batch = bytes(1024)
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name=f"topic-{t}", partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=batch) for p in range(nparts)])
        for t in range(ntopics)])
    head = b"\x00\x00" + version.to_bytes(2, "big") + b"\x00\x00\x00\x01\x00\x06client"  # RequestHeader v1
    if version >= 9:
        head += b"\x00"  # RequestHeader v2: no tagged fields
    return memoryview(bytearray(head + req.to_bytes(version))), len(head)


@dataclass
class Slice:
    length: int


@dataclass
class Result:
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: object


def fetch_case(nparts):
    topics = [FetchRequest.FetchTopic(topic="topic-0", partitions=[
        FetchRequest.FetchPartition(partition=p) for p in range(nparts)])]
    results = [Result(0, 1000 + p, 1000 + p, 0, Slice(4096)) for p in range(nparts)]
    return topics, results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.2)
    args = ap.parse_args()
    native, pure = load("native"), load("pure")
    rows = []
    for version in (8, 11):
        for ntopics, nparts in ((1, 1), (1, 10), (10, 10)):
            frame, pos = produce_frame(ntopics, nparts, version)
            assert native.decode_produce(frame, pos, version) == pure.decode_produce(frame, pos, version)
            cells = [per_call_us(lambda m=m: m.decode_produce(frame, pos, version), args.runs, args.min_time)
                     for m in (native, pure)]
            cells.append(per_call_us(lambda: ProduceRequest.decode(frame, pos, version), args.runs, args.min_time))
            rows.append((f"decode_produce v{version} {ntopics}x{nparts} x 1 KiB", "generated", *cells))
    for nparts in (1, 16):
        topics, results = fetch_case(nparts)
        cells = [per_call_us(lambda m=m: m.encode_fetch(11, topics, results, False), args.runs, args.min_time)
                 for m in (native, pure)]
        cells.append(per_call_us(lambda: fetch_api.encode(11, topics, results, False), args.runs,
                                 args.min_time))
        rows.append((f"encode_fetch v11 {nparts} partition{'s' if nparts > 1 else ''}", "current", *cells))
    print(f"{'case':34} {'native µs':>10} {'pure µs':>10} {'old µs':>10} {'old/native':>11} "
          f"{'old/pure':>9}  old =")
    for name, old_name, n, p, o in rows:
        print(f"{name:34} {n:10.3f} {p:10.3f} {o:10.3f} {o / n:10.1f}x {o / p:8.2f}x  {old_name}")


if __name__ == "__main__":
    main()
