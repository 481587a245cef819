"""ListOffsets v0: up to ``max_num_offsets`` segment boundaries at or before a time, newest first.

The first version of the API knows offsets only at segment granularity, as Kafka 3.8 still serves
it: each segment contributes its base offset (not below the log start) stamped with its file's
modification time, and a non-empty active segment adds the log end offset stamped now. Latest (-1)
starts from the newest entry, earliest (-2, -4) from the oldest, and a time from the newest entry
modified at or before it; entries are taken backwards from there.
"""
import os
import time

LATEST, EARLIEST, EARLIEST_LOCAL = -1, -2, -4


def offsets_before(lg, timestamp: int, max_num_offsets: int) -> list[int]:
    """The offsets a v0 request is answered with, from the log alone (the caller caps them at the HW)."""
    with lg.lock:
        segments = list(lg.segments)
        entries = [(max(s.base_offset, lg.log_start_offset), os.fstat(s.fd).st_mtime_ns // 1_000_000)
                   for s in segments]
        if segments[-1].size > 0:
            entries.append((lg.log_end_offset, int(time.time() * 1000)))
    if timestamp == LATEST:
        start = len(entries) - 1
    elif timestamp in (EARLIEST, EARLIEST_LOCAL):
        start = 0
    else:
        start = len(entries) - 1
        while start >= 0 and entries[start][1] > timestamp:
            start -= 1
    count = min(max_num_offsets, start + 1)
    return sorted((entries[i][0] for i in range(start, start - count, -1)), reverse=True)


def cap_at_high_watermark(offsets: list[int], high_watermark: int) -> list[int]:
    """A consumer is never told an offset past the high watermark: those give way to the HW itself."""
    if not any(o > high_watermark for o in offsets):
        return offsets
    return [high_watermark] + [o for o in offsets if o <= high_watermark]
