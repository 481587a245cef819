"""Shared helpers for log tests: deterministic batches and a structural checker."""
import random

from pybroker import core
from pybroker.records import Record, build_batch


def batch_for(seq: int) -> bytearray:
    """The batch number ``seq``: 1-4 records of 0-300 bytes, same bytes every time."""
    rng = random.Random(seq)
    records = [Record(value=rng.randbytes(rng.randrange(0, 300)),
                      key=rng.randbytes(rng.randrange(0, 8)) if rng.random() < 0.5 else None,
                      timestamp=1_700_000_000_000 + seq * 10 + j)
               for j in range(rng.randrange(1, 5))]
    return build_batch(records, base_timestamp=1_700_000_000_000 + seq * 10)


def check_log_structure(lg) -> None:
    """Offsets contiguous across segments (only growing where the cleaner left gaps); every index
    entry agrees with the .log it indexes."""
    segments = lg.segments
    assert segments, "a log always has an active segment"
    for prev, seg in zip(segments, segments[1:]):
        if prev.gaps or seg.gaps:
            assert seg.base_offset >= prev.next_offset, (prev, seg)
        else:
            assert seg.base_offset == prev.next_offset, (prev, seg)
    for seg in segments:
        position, offset = 0, seg.base_offset
        batch_ends = {}
        while position < seg.size:
            header = seg.read_header(position)
            if seg.gaps:
                assert header.base_offset >= offset, (seg, position, header.base_offset, offset)
            else:
                assert header.base_offset == offset, (seg, position, header.base_offset, offset)
            batch_ends[position] = header.base_offset + header.last_offset_delta
            offset = batch_ends[position] + 1
            position += header.batch_length + 12
        assert position == seg.size and offset == seg.next_offset, seg
        last = -1
        for n in range(seg.offset_index.entries):
            entry_offset, entry_position = seg.offset_index.entry(n)
            assert batch_ends.get(entry_position) == entry_offset, (seg, n, entry_offset, entry_position)
            assert entry_offset > last
            last = entry_offset
        prev_ts = None
        for n in range(seg.time_index.entries):
            ts, ts_offset = seg.time_index.entry(n)
            assert seg.base_offset <= ts_offset < max(seg.next_offset, seg.base_offset + 1), (seg, n)
            assert prev_ts is None or ts > prev_ts
            prev_ts = ts


def stamped(buf, first_offset: int) -> bytes:
    """The bytes a log stores for ``buf`` appended at ``first_offset``."""
    out = bytearray(buf)
    core.batch.set_base_offset(out, 0, first_offset)
    return bytes(out)
