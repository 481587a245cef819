"""Broker-side recompression (a topic's compression.type): the same records and header fields in the
new codec, with a valid CRC, from and to every codec."""
import struct

import pytest

from pybroker.records import HEADER, Record, build_batch, decode_records, recompressed

CODECS = range(5)  # none, gzip, snappy, lz4, zstd


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", CODECS)
def test_recompressed_keeps_records_and_producer_fields(source, target):
    records = [Record(b"value-%d" % i * 7, b"k%d" % (i % 3), [("h", b"x")], 1_700_000_000_000 + i)
               for i in range(50)]
    batch = build_batch(records, base_offset=0, base_timestamp=1_700_000_000_000, attributes=source | 0x10,
                        producer_id=42, producer_epoch=3, base_sequence=7)
    out = recompressed(batch, target, 5 if target in (1, 4) else None)
    before, after = HEADER.unpack_from(batch, 0), HEADER.unpack_from(out, 0)
    assert after[5] == (before[5] & ~0x07) | target  # attributes: the codec changed, transactional kept
    assert [a for i, a in enumerate(after) if i not in (1, 4, 5)] == \
        [b for i, b in enumerate(before) if i not in (1, 4, 5)]  # all but length, CRC and attributes
    assert after[1] == len(out) - 12
    from pybroker import core
    assert struct.unpack_from(">I", out, 17)[0] == core.crc.crc32c(memoryview(out)[21:])
    assert decode_records(out) == decode_records(batch)
