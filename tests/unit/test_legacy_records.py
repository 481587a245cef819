"""Message sets of magic 0 and 1 to and from v2 batches (pybroker/legacy_records.py), checked against
kafka-python's own magic 0/1 builder and reader (an independent implementation of the format)."""
import struct
import zlib

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from pybroker import legacy_records as L
from pybroker.errors import CorruptRecordError
from pybroker.records import (TIMESTAMP_LOG_APPEND, Record, build_batch, build_control_batch, decode_records)

CODECS = {0: 0, 1: 1, 2: 2, 3: 3}  # none, gzip, snappy, lz4: the same ids in both formats


def legacy_set(magic: int, codec: int, items, base_offset: int = 0) -> bytes:
    """A message set as kafka-python's producer writes it: (key, value, timestamp) items."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i, (key, value, ts) in enumerate(items):
        builder.append(base_offset + i, timestamp=ts if magic else None, key=key, value=value)
    return bytes(builder.build())


def read_set(data: bytes):
    """[(offset, timestamp, key, value)] as kafka-python's consumer reads a message set."""
    records = MemoryRecords(data)
    out = []
    while (batch := records.next_batch()) is not None:
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value))
    return out


ITEMS = [(b"k0", b"v0", 1000), (None, b"v1", 1001), (b"k2", None, 1005), (b"", b"x" * 3000, 1002)]


@pytest.mark.parametrize("codec", [0, 1, 2, 3], ids=["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
def test_upconvert_reads_what_an_old_producer_wrote(magic, codec):
    batch = L.upconvert(legacy_set(magic, codec, ITEMS))
    assert struct.unpack_from(">q", batch, 0)[0] == 0 and batch[16] == 2
    assert struct.unpack_from(">h", batch, 21)[0] & 0x07 == codec  # the producer's codec is kept
    records = decode_records(batch)
    assert [(r.offset, r.key, r.value) for r in records] == [(i, k, v) for i, (k, v, _) in enumerate(ITEMS)]
    expected_ts = [ts for _, _, ts in ITEMS] if magic == 1 else [L.NO_TIMESTAMP] * len(ITEMS)
    assert [r.timestamp for r in records] == expected_ts


def test_upconvert_takes_several_messages_and_wrappers():
    data = legacy_set(1, 0, ITEMS[:2]) + legacy_set(1, 1, ITEMS[2:], base_offset=2)
    records = decode_records(L.upconvert(data))
    assert [r.value for r in records] == [v for _, v, _ in ITEMS]
    assert [r.offset for r in records] == [0, 1, 2, 3]


def test_upconvert_ignores_a_partial_tail_and_refuses_bad_messages():
    good = legacy_set(1, 0, ITEMS[:1])
    assert decode_records(L.upconvert(good + good[:20]))[0].value == b"v0"
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        L.upconvert(bytes(bad_crc))
    with pytest.raises(CorruptRecordError, match="without messages"):
        L.upconvert(b"")
    with pytest.raises(CorruptRecordError, match="minimum"):
        L.upconvert(struct.pack(">qi", 0, 3) + b"\x00" * 3)
    # a key length past the message: found before anything is allocated
    body = bytes((1, 0)) + struct.pack(">q", 0) + struct.pack(">i", 1 << 30) + struct.pack(">i", -1)
    msg = struct.pack(">qi", 0, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + body
    with pytest.raises(CorruptRecordError, match="field"):
        L.upconvert(msg)
    # magic 2 is not a message
    body = bytes((2, 0)) + struct.pack(">q", 0) + struct.pack(">ii", -1, -1)
    msg = struct.pack(">qi", 0, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + body
    with pytest.raises(CorruptRecordError, match="magic 2"):
        L.upconvert(msg)


def test_upconvert_refuses_a_wrapper_that_does_not_decompress():
    body = bytes((1, 1)) + struct.pack(">q", 0) + struct.pack(">i", -1) + struct.pack(">i", 5) + b"notgz"
    msg = struct.pack(">qi", 0, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + body
    with pytest.raises(CorruptRecordError, match="decompress"):
        L.upconvert(msg)


def _v2_log(codec: int):
    """Three batches as a log holds them: 0-1, a commit marker at 2, 3-5 with headers."""
    first = build_batch([Record(b"a", key=b"ka", timestamp=500), Record(b"b", timestamp=501)], base_offset=0,
                        attributes=codec)
    marker = build_control_batch(7, 0, True, 0, 502, base_offset=2)
    third = build_batch([Record(b"c", headers=[("h", b"v")], timestamp=503), Record(None, key=b"kd", timestamp=504),
                         Record(b"e", timestamp=505)], base_offset=3, attributes=codec)
    return bytes(first + marker + third)


@pytest.mark.parametrize("codec", [0, 1, 2, 3], ids=["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
def test_downconvert_is_read_by_an_old_consumer(magic, codec):
    data = L.downconvert(_v2_log(codec), magic, 0)
    got = read_set(data)
    ts = (lambda t: t) if magic == 1 else (lambda t: None)
    assert got == [(0, ts(500), b"ka", b"a"), (1, ts(501), None, b"b"), (3, ts(503), None, b"c"),
                   (4, ts(504), b"kd", None), (5, ts(505), None, b"e")]
    first = struct.unpack_from(">qi", data, 0)
    if codec:  # one wrapper per batch, at its last offset, with the batch's codec
        assert first[0] == 1 and data[16] == magic and data[17] & 0x07 == codec
    else:
        assert first[0] == 0 and data[16] == magic and data[17] == 0


def test_downconvert_starts_uncompressed_batches_at_the_fetch_offset():
    log = _v2_log(0)
    assert [o for o, *_ in read_set(L.downconvert(log, 1, 4))] == [4, 5]
    # a compressed batch stays whole (one wrapper): the client skips what lies before its offset
    assert [o for o, *_ in read_set(L.downconvert(_v2_log(1), 1, 4))] == [0, 1, 3, 4, 5]


def test_downconvert_drops_a_cut_batch_and_keeps_log_append_time():
    batch = build_batch([Record(b"x", timestamp=10), Record(b"y", timestamp=20)], base_timestamp=10,
                        attributes=TIMESTAMP_LOG_APPEND)
    full = L.downconvert(bytes(batch), 1, 0)
    assert L.downconvert(bytes(batch) + bytes(batch)[:70], 1, 0) == full
    assert full[17] & TIMESTAMP_LOG_APPEND  # the timestamp type bit of magic 1
    assert [t for _, t, _, _ in read_set(full)] == [20, 20]  # the batch's max timestamp, as a log-append time


def test_downconvert_refuses_zstd_and_garbage():
    with pytest.raises(L.UnsupportedCompressionError):
        L.downconvert(bytes(build_batch([b"z"], attributes=4)), 1, 0)
    broken = bytearray(build_batch([b"z"]))
    struct.pack_into(">i", broken, 8, 5)
    with pytest.raises(CorruptRecordError):
        L.downconvert(bytes(broken), 1, 0)
    assert L.downconvert(b"", 0, 0) == b""


def test_round_trip_through_both_conversions():
    for magic in (0, 1):
        for codec in (0, 1, 2, 3):
            converted = L.downconvert(L.upconvert(legacy_set(magic, codec, ITEMS)), magic, 0)
            assert [(k, v) for _, _, k, v in read_set(converted)] == [(k, v) for k, v, _ in ITEMS]


def test_xxh32_matches_the_reference():
    xxhash = pytest.importorskip("xxhash")
    for n in (0, 1, 3, 4, 7, 15, 16, 17, 33, 100):
        data = bytes(range(n))
        assert L.xxh32(data) == xxhash.xxh32_intdigest(data), n
