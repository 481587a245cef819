"""Segment writer: native write_batches against its pure twin."""
import os

import pytest
from hypothesis import given, settings, strategies as st

from pybroker import core
from pybroker.records import Record, build_batch

IMPLS = {name: core.load("writer", name) for name in ("native", "pure")}

batch_specs = st.lists(st.tuples(st.integers(1, 5), st.integers(0, 400), st.integers(-1, 2**40)),
                       min_size=1, max_size=12)


def make(specs):
    return [build_batch([Record(value=b"v" * size, timestamp=ts + i) for i in range(count)], base_timestamp=ts,
                        base_offset=12345)
            for count, size, ts in specs]


def run(name, tmp, specs, args):
    bufs = make(specs)
    path = tmp / name
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        result = IMPLS[name].write_batches(fd, args["position"], bufs, args["first_offset"], args["epoch"],
                                           args["lat"], args["interval"], args["since"], args["max_ts"],
                                           args["max_ts_offset"])
    finally:
        os.close(fd)
    return result, path.read_bytes(), [bytes(b) for b in bufs]


@settings(max_examples=150, deadline=None)
@given(specs=batch_specs, position=st.integers(0, 300), first_offset=st.integers(0, 2**40),
       epoch=st.integers(-1, 2**31 - 1), lat=st.sampled_from([-1, 0, 1_700_000_000_123]),
       interval=st.integers(0, 3000), since=st.integers(0, 5000), max_ts=st.integers(-1, 2**41),
       max_ts_offset=st.integers(-1, 100))
def test_native_and_pure_write_the_same(tmp_path_factory, specs, **args):
    tmp = tmp_path_factory.mktemp("w")
    native = run("native", tmp, specs, args)
    pure = run("pure", tmp, specs, args)
    assert native == pure
    result, data, stamped = native
    next_offset, records, nbytes, first_ts, *_ = result
    assert records == sum(c for c, _, _ in specs)
    assert next_offset == args["first_offset"] + records
    assert data[args["position"]:] == b"".join(stamped) and nbytes == len(b"".join(stamped))
    offset = args["first_offset"]
    for raw in stamped:  # every stamped batch still validates and starts where it should
        info = core.batch.validate(raw)
        assert info.base_offset == offset
        if args["epoch"] >= 0:
            assert info.partition_leader_epoch == args["epoch"]
        if args["lat"] >= 0:
            assert info.max_timestamp == args["lat"] and info.is_log_append_time
        offset = info.next_offset


@pytest.mark.parametrize("name", IMPLS)
def test_refuses_without_writing_or_stamping(tmp_path, name):
    good = build_batch([b"a"], base_offset=7)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(ValueError, match="not exactly one record batch"):
            IMPLS[name].write_batches(fd, 0, [good, good + b"x"], 0, -1, -1, 4096, 0, -1, -1)
        with pytest.raises(ValueError):
            IMPLS[name].write_batches(fd, 0, [bytearray(10)], 0, -1, -1, 4096, 0, -1, -1)
        with pytest.raises(BufferError):
            IMPLS[name].write_batches(fd, 0, [bytes(good)], 0, -1, -1, 4096, 0, -1, -1)
        assert int.from_bytes(good[:8], "big") == 7  # refused calls stamp nothing
        with pytest.raises(OSError):
            IMPLS[name].write_batches(-1, 0, [good], 0, -1, -1, 4096, 0, -1, -1)
    finally:
        os.close(fd)
    assert os.path.getsize(tmp_path / "f") == 0
