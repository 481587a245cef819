"""Batched writes: native pwritev_all against its pure twin."""
import errno
import os

import pytest
from hypothesis import given, settings, strategies as st

from pybroker import core

IMPLS = {name: core.load("fileio", name) for name in ("native", "pure")}

buffers = st.lists(st.one_of(st.binary(max_size=300), st.binary(max_size=300).map(bytearray)), max_size=2100)


@settings(max_examples=60, deadline=None)
@given(bufs=buffers, offset=st.integers(0, 5000))
def test_pwritev_all_same_file_contents(tmp_path_factory, bufs, offset):
    tmp = tmp_path_factory.mktemp("w")
    results = {}
    for name, mod in IMPLS.items():
        path = tmp / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"\xee" * 10)  # bytes before offset must stay as they were
            n = mod.pwritev_all(fd, bufs, offset)
            mod.fdatasync(fd)
        finally:
            os.close(fd)
        results[name] = (n, path.read_bytes())
    expect = bytearray(b"\xee" * 10)
    end = offset + sum(len(b) for b in bufs)
    expect.extend(b"\0" * max(0, end - len(expect)))
    expect[offset:end] = b"".join(bytes(b) for b in bufs)
    if end == offset:
        expect = expect[:max(10, offset)] if offset <= 10 else bytearray(b"\xee" * 10)
    assert results["native"] == results["pure"]
    assert results["native"][0] == end - offset
    assert results["native"][1] == bytes(expect)


@pytest.mark.parametrize("name", IMPLS)
def test_bad_fd_raises_oserror(name):
    with pytest.raises(OSError):
        IMPLS[name].pwritev_all(-1, [b"abc"], 0)
    with pytest.raises(OSError):
        IMPLS[name].fdatasync(-1)


@pytest.mark.parametrize("name", IMPLS)
def test_non_buffer_is_a_type_error(name, tmp_path):
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(TypeError):
            IMPLS[name].pwritev_all(fd, [b"ok", 12], 0)
    finally:
        os.close(fd)


@pytest.mark.parametrize("name", IMPLS)
def test_start_writeback_keeps_contents_and_reports_errors(name, tmp_path):
    mod = IMPLS[name]
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        mod.pwritev_all(fd, [b"x" * 100_000], 0)
        assert mod.start_writeback(fd, 0, 100_000) is None
        assert mod.start_writeback(fd, 50_000, 0) is None  # 0: to the end of the file
        with pytest.raises(OSError) as bad_range:
            mod.start_writeback(fd, -1, 10)
        assert bad_range.value.errno == errno.EINVAL
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"x" * 100_000
    with pytest.raises(OSError) as closed:
        mod.start_writeback(fd, 0, 10)
    assert closed.value.errno == errno.EBADF


def test_start_writeback_twins_agree_on_every_outcome(tmp_path):
    """The pure twin reaches sync_file_range(2) through cffi: the same result or errno as the native call."""
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    read_end, write_end = os.pipe()
    try:
        os.write(fd, b"y" * 8192)
        cases = [(fd, 0, 8192), (fd, 4096, 0), (fd, -1, 1), (fd, 0, -1), (-1, 0, 1), (read_end, 0, 1), (99999, 0, 1)]
        outcomes = {}
        for name, mod in IMPLS.items():
            got = []
            for case in cases:
                try:
                    got.append(mod.start_writeback(*case))
                except OSError as exc:
                    got.append(exc.errno)
            outcomes[name] = got
    finally:
        for f in (fd, read_end, write_end):
            os.close(f)
    assert outcomes["native"] == outcomes["pure"]
    assert outcomes["pure"][:2] == [None, None] and errno.EINVAL in outcomes["pure"]
