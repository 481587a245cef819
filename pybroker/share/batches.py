"""What a share-partition leader needs of the record batches it read: each batch's offsets, and which
ones a share consumer must never get (control batches; aborted transactions under read_committed)."""
from __future__ import annotations

import struct
from dataclasses import dataclass

_HEAD = struct.Struct(">qi")  # base offset, batch length
_ATTRIBUTES = struct.Struct(">h")  # at byte 21
_LAST_DELTA = struct.Struct(">i")  # at byte 23
_PRODUCER = struct.Struct(">q")  # at byte 43
TRANSACTIONAL = 0x10
CONTROL = 0x20
HEADER_BYTES = 61


@dataclass(frozen=True)
class Span:
    base: int
    last: int
    end: int  # the byte position after the batch
    control: bool
    transactional: bool
    producer_id: int
    abort_marker: bool = False


def spans(data) -> list[Span]:
    """The whole v2 batches at the start of ``data`` (a trailing partial batch is left out)."""
    out, pos, n = [], 0, len(data)
    while pos + HEADER_BYTES <= n:
        base, length = _HEAD.unpack_from(data, pos)
        end = pos + 12 + length
        if length < HEADER_BYTES - 12 or end > n:
            break
        attrs = _ATTRIBUTES.unpack_from(data, pos + 21)[0]
        last = base + _LAST_DELTA.unpack_from(data, pos + 23)[0]
        control = bool(attrs & CONTROL)
        # a control record's key: version (int16), type (int16: 0 abort, 1 commit); read after the record's
        # length, attributes, timestamp and offset deltas and key length varints of the first record
        out.append(Span(base, last, end, control, bool(attrs & TRANSACTIONAL), _PRODUCER.unpack_from(data, pos + 43)[0],
                        control and _control_type(data, pos + HEADER_BYTES) == 0))
        pos = end
    return out


def _control_type(data, pos: int) -> int:
    for _ in range(5):  # record length, attributes (1 byte), timestamp delta, offset delta, key length
        pos = _skip_varint(data, pos) if _ != 1 else pos + 1
    return struct.unpack_from(">h", data, pos + 2)[0]


def _skip_varint(data, pos: int) -> int:
    while data[pos] & 0x80:
        pos += 1
    return pos + 1


def never_delivered(batches: list[Span], aborted: list[tuple[int, int]], committed_only: bool) -> list[tuple[int, int]]:
    """Offset ranges to archive at once: control batches, and under read_committed the batches of aborted
    transactions (``aborted``: (producer id, first offset) as the log lists them)."""
    skip = []
    open_aborts: dict[int, int] = {}  # producer id -> first offset of its aborted transaction now open
    pending = sorted(aborted, key=lambda a: a[1])
    i = 0
    for b in batches:
        while committed_only and i < len(pending) and pending[i][1] <= b.last:
            open_aborts[pending[i][0]] = pending[i][1]
            i += 1
        if b.control:
            skip.append((b.base, b.last))
            if b.abort_marker:
                open_aborts.pop(b.producer_id, None)
        elif committed_only and b.transactional and b.producer_id in open_aborts:
            skip.append((b.base, b.last))
    return skip
