"""A few of the asv micro benchmarks (bench/benchmarks/) under pytest-benchmark, so they run in
the normal suite. No assertion on time: each checks that what it ran gave the right answer."""
import os
import sys

import crc32c as reference_crc  # independent CRC-32C
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

from benchmarks import micro_codecs, micro_core  # noqa: E402
from pybroker.records import decode_records  # noqa: E402


@pytest.mark.parametrize("size", [4096, 1 << 20])
def test_crc32c(benchmark, size):
    case = micro_core.Crc()
    case.setup(size)
    assert benchmark(case.time_crc32c, size) == reference_crc.crc32c(case.data)


def test_validate(benchmark):
    case = micro_core.Batch()
    case.setup(16 * 1024)
    info = benchmark(case.time_validate, 16 * 1024)
    assert info.size == len(case.buf)
    assert info.record_count == len(decode_records(case.buf)) > 1


def test_rewrite_keeps_batch_valid(benchmark):
    case = micro_core.Batch()
    case.setup(16 * 1024)
    benchmark(case.time_rewrite_log_append_time, 16 * 1024)
    case.time_rewrite_offset_epoch(16 * 1024)
    info = case.batch.validate(case.buf)  # the CRC was rewritten, so the batch still checks out
    assert (info.base_offset, info.partition_leader_epoch, info.max_timestamp) == (12345, 7, 1_700_000_000_000)
    assert info.is_log_append_time


@pytest.mark.parametrize("impl", ["native", "pure", "generated"])
def test_decode_produce(benchmark, impl):
    case = micro_codecs.DecodeProduce()
    case.setup(impl, "10x10")
    got = benchmark(case.time_decode_produce, impl, "10x10")
    if impl == "generated":  # (ProduceRequest, end position)
        got, end = got
        assert end == len(case.frame)
        topics = [(t.name, [(p.index, bytes(p.records)) for p in t.partition_data]) for t in got.topic_data]
    else:
        assert (got.acks, got.timeout_ms) == (-1, 30000)
        topics = [(t.name, [(p.index, bytes(p.records)) for p in t.partitions]) for t in got.topics]
    assert topics == [(f"topic-{t}", [(p, bytes(1024)) for p in range(10)]) for t in range(10)]


@pytest.mark.parametrize("impl", ["native", "pure"])
def test_encode_fetch_matches_current(benchmark, impl):
    case = micro_codecs.EncodeFetch()
    case.setup(impl, 16)
    benchmark(case.time_encode_fetch, impl, 16)
    current = micro_codecs.EncodeFetch()
    current.setup("current", 16)
    ours = case.encode(11, case.topics, case.results, False)
    theirs = current.encode(11, current.topics, current.results, False)
    flat = lambda parts: [p if isinstance(p, bytes) else ("slice", p.length) for p in parts]  # noqa: E731
    assert flat(ours) == flat(theirs)
    assert [p for p in flat(ours) if isinstance(p, tuple)] == [("slice", 4096)] * 16
