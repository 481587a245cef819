"""CRC-32C: native vs pure twin vs known vectors (and the PyPI crc32c package when present)."""
import array
import mmap
import os

import pytest
from hypothesis import given, settings, strategies as st

from pybroker import core

native = core.load("crc", "native")
pure = core.load("crc", "pure")
IMPLS = [native, pure]

# RFC 3720 (iSCSI) appendix B.4 vectors, plus the usual check value
VECTORS = [
    (b"", 0),
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


def test_native_is_compiled():
    assert native.__file__.endswith((".so", ".pyd"))
    assert isinstance(native.HARDWARE, bool)


@pytest.mark.parametrize("impl", IMPLS, ids=["native", "pure"])
@pytest.mark.parametrize("data,expected", VECTORS)
def test_known_vectors(impl, data, expected):
    assert impl.crc32c(data) == expected


@pytest.mark.parametrize("data,expected", VECTORS)
def test_software_path_vectors(data, expected):
    assert native._crc32c_sw(data) == expected


def test_matches_pypi_crc32c_on_all_block_boundaries():
    ref = pytest.importorskip("crc32c")
    blob = os.urandom(3 * 4096 * 2 + 3 * 256 * 2 + 64)
    # lengths around the 3-way block sizes (3*256, 3*4096) and odd start addresses
    lengths = [0, 1, 7, 8, 9, 767, 768, 769, 1535, 1536, 12287, 12288, 12289, 13056, 24576,
               len(blob) - 8]
    for start in range(8):
        for n in lengths:
            data = memoryview(blob)[start:start + n]
            want = ref.crc32c(data)
            assert native.crc32c(data) == want, (start, n)
            assert native._crc32c_sw(data) == want, (start, n)
            assert native.crc32c(data, 0x12345678) == ref.crc32c(data, 0x12345678)


def test_long_input_releases_gil_and_agrees_with_pure():
    data = os.urandom(70_000)  # above the GIL-release threshold
    assert native.crc32c(data) == pure.crc32c(data)
    assert native.crc32c(data[1:]) == pure.crc32c(data[1:])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.integers(0, 3000), st.integers(0, 2**32 - 1))
def test_continuation_and_agreement(data, cut, seed):
    cut = min(cut, len(data))
    whole = native.crc32c(data, seed)
    assert whole == pure.crc32c(data, seed)
    assert whole == native._crc32c_sw(data, seed)
    for impl in IMPLS:
        assert impl.crc32c(data[cut:], impl.crc32c(data[:cut], seed)) == whole


@pytest.mark.parametrize("impl", IMPLS, ids=["native", "pure"])
def test_buffer_types(impl, tmp_path):
    data = bytes(range(256)) * 5
    want = pure.crc32c(data)
    assert impl.crc32c(bytearray(data)) == want
    assert impl.crc32c(memoryview(data)) == want
    assert impl.crc32c(memoryview(b"xx" + data)[2:]) == want
    words = array.array("I", data)  # multi-byte items are hashed as their raw bytes
    assert impl.crc32c(words) == want
    path = tmp_path / "blob"
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert impl.crc32c(m) == want


@pytest.mark.parametrize("impl", IMPLS, ids=["native", "pure"])
def test_bad_arguments(impl):
    with pytest.raises(TypeError):
        impl.crc32c("not bytes")
    with pytest.raises(TypeError):
        impl.crc32c(memoryview(b"abcdef")[::2])  # not contiguous
    with pytest.raises(OverflowError):
        impl.crc32c(b"a", -1)
    with pytest.raises(OverflowError):
        impl.crc32c(b"a", 2**32)
    with pytest.raises(TypeError):
        impl.crc32c(b"a", 1.5)
