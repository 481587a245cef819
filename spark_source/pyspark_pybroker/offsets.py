"""Offset arithmetic: read ranges, their split into Spark partitions, per-trigger rate limits.

Pure functions on plain values, so the driver plans the same ranges for the same inputs and a
replayed micro-batch reads exactly the rows it read before. Offsets follow Kafka's position
convention: a range [start, end) ends just past its last record.
"""
import math
from typing import NamedTuple


class OffsetRange(NamedTuple):
    """Offsets [start, end) of one topic-partition: what one Spark task reads."""
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        # an estimate: compaction and transaction markers leave gaps
        return self.end - self.start


def _part_count(size: int, total: int, parts: int) -> int:
    # Scala's math.round (half up), not Python's round (half even)
    return max(int(math.floor(size / total * parts + 0.5)), 1)


def _divide(r: OffsetRange, parts: int) -> list:
    """``parts`` contiguous pieces of ``r``; the last absorbs the rounding."""
    out = []
    remaining = r.size
    start = r.start
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.end)
        out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return [p for p in out if p.size > 0]


def plan_ranges(ranges, min_partitions: int | None = None,
                max_records_per_partition: int | None = None) -> list:
    """Spark partitions for ``ranges``, as Spark's Kafka source plans them.

    One piece per non-empty topic-partition range; with ``maxRecordsPerPartition`` a range is
    cut into pieces of at most that many offsets; then, while there are fewer pieces than
    ``minPartitions``, the large ones are cut further in proportion to their size.
    """
    pieces = sorted(r for r in ranges if r.size > 0)
    if max_records_per_partition:
        pieces = [p for r in pieces
                  for p in _divide(r, -(-r.size // max_records_per_partition))]
    if not min_partitions or len(pieces) >= min_partitions:
        return pieces
    total = sum(p.size for p in pieces)
    unsplit = [_part_count(p.size, total, min_partitions) == 1 for p in pieces]
    split_total = total - sum(p.size for p, u in zip(pieces, unsplit) if u)
    split_min = max(min_partitions - sum(unsplit), 1)
    out = []
    for piece, keep in zip(pieces, unsplit):
        parts = 1 if keep else _part_count(piece.size, split_total, split_min)
        out.extend(_divide(piece, parts))
    return out


def _uncovered(start: dict, end: dict) -> None:
    missing = sorted(tp for tp in end if tp not in start)
    if missing:
        raise ValueError("no start offset for " + ", ".join(f"{t}-{p}" for t, p in missing)
                         + " (look up where a new partition's log starts first)")


def rate_limit(limit: int, start: dict, end: dict) -> dict:
    """End offsets that admit about ``limit`` records past ``start``, shared in proportion to
    each partition's backlog (Spark's maxOffsetsPerTrigger). ``start`` must cover every
    partition of ``end`` (a new partition: where its log starts). Small backlogs get at least
    one record each."""
    _uncovered(start, end)
    sizes = {}
    for tp, until in end.items():
        size = until - start[tp]
        if size > 0:
            sizes[tp] = size
    total = sum(sizes.values())
    if total < 1:
        return dict(end)
    out = {}
    for tp, until in end.items():
        if tp not in sizes:
            out[tp] = until
            continue
        share = limit * (sizes[tp] / total)
        share = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(until, start[tp] + share)
    return out


def backlog(start: dict, end: dict) -> int:
    """Offsets between ``start`` and ``end`` over all partitions (``start`` covers ``end``)."""
    _uncovered(start, end)
    return sum(max(until - start[tp], 0) for tp, until in end.items())


def to_json_dict(offsets: dict) -> dict:
    """{(topic, partition): offset} -> {"topic": {"partition": offset}}, sorted, so equal
    offsets always serialise to the same JSON text (Spark compares offsets as text)."""
    out: dict = {}
    for (topic, partition) in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json_dict(value: dict) -> dict:
    """The inverse of ``to_json_dict``."""
    out = {}
    for topic, parts in (value or {}).items():
        for partition, offset in parts.items():
            out[(topic, int(partition))] = int(offset)
    return out
