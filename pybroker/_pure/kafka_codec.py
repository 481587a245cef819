"""Produce decode and Fetch encode for the hot paths, pure Python (twin of native/kafka_codec.pyx).

Wire layouts, zero-copy and error contract: pybroker/contracts/kafka_codec.py. Every length is
checked before use, so ``struct`` never sees a short buffer and errors carry our own messages.
"""
from struct import Struct

from pybroker.contracts.kafka_codec import (FETCH_MAX_VERSION, FETCH_MIN_VERSION, PRODUCE_MAX_VERSION,
                                            PRODUCE_MIN_VERSION, DecodeError, EncodeError,
                                            PartitionData, ProduceData, TopicData,
                                            UnsupportedVersionError)

_h = Struct(">h").unpack_from
_i = Struct(">i").unpack_from
_hi = Struct(">hi").unpack_from
_ii = Struct(">ii").unpack_from
_tuple_new = tuple.__new__


def _check_frame(frame):
    if type(frame) is not memoryview:
        frame = memoryview(frame)
    if frame.ndim != 1 or frame.itemsize != 1 or not frame.c_contiguous:
        raise TypeError("frame must be a contiguous one-dimensional buffer of bytes")
    return frame


def _short(version, what, pos, need, left):
    return DecodeError(f"ProduceRequest v{version}: {what} at offset {pos} needs {need} bytes, "
                       f"only {left} left")


def _string(frame, pos, end, version, what, nullable):
    """(str or None, new pos) for an int16-length string at ``pos``."""
    if end - pos < 2:
        raise _short(version, what + " length", pos, 2, end - pos)
    n = _h(frame, pos)[0]
    if n < 0:
        if n == -1 and nullable:
            return None, pos + 2
        raise DecodeError(f"ProduceRequest v{version}: {what} at offset {pos} has length {n}")
    pos += 2
    if end - pos < n:
        raise _short(version, what, pos, n, end - pos)
    try:
        return str(frame[pos:pos + n], "utf-8"), pos + n
    except UnicodeDecodeError:
        raise DecodeError(f"ProduceRequest v{version}: {what} at offset {pos} is not valid UTF-8") from None


def _count(frame, pos, end, version, what, elem_min):
    """(count, new pos) for an int32 array count, refused when it cannot fit in the bytes left."""
    if end - pos < 4:
        raise _short(version, what + " count", pos, 4, end - pos)
    n = _i(frame, pos)[0]
    if n < 0:
        raise DecodeError(f"ProduceRequest v{version}: {what} count at offset {pos} is {n}")
    pos += 4
    if n * elem_min > end - pos:
        raise DecodeError(f"ProduceRequest v{version}: {what} count {n} at offset {pos - 4} "
                          f"exceeds the {end - pos} bytes left")
    return n, pos


def decode_produce(frame, pos, version):
    if not PRODUCE_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        raise UnsupportedVersionError("ProduceRequest (hot path)", 0, version)
    frame = _check_frame(frame)
    end = len(frame)
    if not 0 <= pos <= end:
        raise DecodeError(f"ProduceRequest v{version}: body offset {pos} is outside the {end}-byte frame")
    transactional_id, pos = _string(frame, pos, end, version, "transactional_id", True)
    if end - pos < 6:
        raise _short(version, "acks and timeout_ms", pos, 6, end - pos)
    acks, timeout_ms = _hi(frame, pos)
    pos += 6
    ntopics, pos = _count(frame, pos, end, version, "topic", 6)  # name length + partition count
    topics = []
    for _ in range(ntopics):
        name, pos = _string(frame, pos, end, version, "topic name", False)
        nparts, pos = _count(frame, pos, end, version, "partition", 8)  # index + records length
        parts = []
        for _ in range(nparts):
            if end - pos < 8:
                raise _short(version, "partition index and records length", pos, 8, end - pos)
            index, n = _ii(frame, pos)
            pos += 8
            if n < 0:
                if n != -1:
                    raise DecodeError(f"ProduceRequest v{version}: records at offset {pos - 4} "
                                      f"have length {n}")
                records = None
            else:
                if end - pos < n:
                    raise _short(version, "records", pos, n, end - pos)
                records = frame[pos:pos + n]
                pos += n
            parts.append(_tuple_new(PartitionData, (index, records)))
        topics.append(_tuple_new(TopicData, (name, parts)))
    return _tuple_new(ProduceData, (transactional_id, acks, timeout_ms, topics))


# ---- Fetch response ------------------------------------------------------------------------

_I32 = Struct(">i").pack
_HEAD = Struct(">i").pack                # throttle_time_ms (v4-v6)
_HEAD7 = Struct(">ihi").pack             # throttle_time_ms, error_code, session_id (v7+)
_NAME = Struct(">h").pack
# partition index, error, high watermark, last stable offset[, log start offset], aborted
# count[, preferred read replica], records length: one pack per partition per version band
_PART4 = Struct(">ihqqii").pack
_PART5 = Struct(">ihqqqii").pack
_PART11 = Struct(">ihqqqiii").pack
# read_committed with aborted transactions: the head up to the aborted count, the entries, the tail
_HEAD4 = Struct(">ihqq").pack
_HEAD5 = Struct(">ihqqq").pack
_ABORTED = Struct(">qq").pack  # producer id, first offset
_TAIL11 = Struct(">ii").pack  # preferred read replica, records length

_I16_RANGE = (-(1 << 15), (1 << 15) - 1)
_I32_RANGE = (-(1 << 31), (1 << 31) - 1)
_I64_RANGE = (-(1 << 63), (1 << 63) - 1)


def _int_field(value, what, bounds):
    """Our own range/type check; used only after struct refused a value, to name the culprit."""
    try:
        v = value.__index__()
    except (AttributeError, TypeError):
        raise EncodeError(f"FetchResponse: {what} must be an integer, not {type(value).__name__}") from None
    lo, hi = bounds
    if not lo <= v <= hi:
        raise EncodeError(f"FetchResponse: {what} {v} is out of range [{lo}, {hi}]")


def _explain(p, r, version):
    """Raise the EncodeError naming the first bad field of one partition (same order as native)."""
    _int_field(p.partition, "partition index", _I32_RANGE)
    _int_field(r.error, "error code", _I16_RANGE)
    _int_field(r.high_watermark, "high watermark", _I64_RANGE)
    _int_field(r.last_stable_offset, "last stable offset", _I64_RANGE)
    if version >= 5:
        _int_field(r.log_start_offset, "log start offset", _I64_RANGE)
    if r.records is not None:
        _int_field(r.records.length, "records length", (0, _I32_RANGE[1]))
    txns = getattr(r, "aborted_transactions", None)
    if txns:
        for pid, first in txns:
            _int_field(pid, "aborted producer id", _I64_RANGE)
            _int_field(first, "aborted first offset", _I64_RANGE)
    raise EncodeError("FetchResponse: a partition field cannot be encoded")  # not reached


def _with_aborted(version, p, r, txns, length):
    """One partition's fixed part with a non-empty aborted-transaction list (read_committed only)."""
    if version >= 5:
        out = _HEAD5(p.partition, r.error, r.high_watermark, r.last_stable_offset, r.log_start_offset)
    else:
        out = _HEAD4(p.partition, r.error, r.high_watermark, r.last_stable_offset)
    out += _I32(len(txns)) + b"".join(_ABORTED(pid, first) for pid, first in txns)
    return out + (_TAIL11(-1, length) if version >= 11 else _I32(length))


def _topic_name(name):
    if type(name) is not str:
        raise EncodeError(f"FetchResponse: topic name must be a str, not {type(name).__name__}")
    try:
        b = name.encode("utf-8")
    except UnicodeEncodeError:
        raise EncodeError(f"FetchResponse: topic name {name!r} is not encodable as UTF-8") from None
    if len(b) > 0x7FFF:
        raise EncodeError(f"FetchResponse: topic name of {len(b)} bytes exceeds 32767")
    return b


def encode_fetch(version, topics, results, committed_only):
    if not FETCH_MIN_VERSION <= version <= FETCH_MAX_VERSION:
        raise EncodeError(f"FetchResponse: version {version} is not supported "
                          f"({FETCH_MIN_VERSION}-{FETCH_MAX_VERSION})")
    total = 0
    for t in topics:
        total += len(t.partitions)
    if total != len(results):
        raise EncodeError(f"FetchResponse: {len(results)} results for {total} requested partitions")
    aborted = 0 if committed_only else -1  # empty array / null: this broker has no transactions
    out = []
    buf = bytearray(_HEAD7(0, 0, 0) if version >= 7 else _HEAD(0))
    buf += _I32(len(topics))
    k = 0
    for t in topics:
        name = _topic_name(t.topic)
        parts = t.partitions
        buf += _NAME(len(name))
        buf += name
        buf += _I32(len(parts))
        for p in parts:
            r = results[k]
            k += 1
            records = r.records
            try:
                length = 0 if records is None else records.length
                if committed_only and r.aborted_transactions:
                    buf += _with_aborted(version, p, r, r.aborted_transactions, length)
                elif version >= 11:
                    buf += _PART11(p.partition, r.error, r.high_watermark, r.last_stable_offset,
                                   r.log_start_offset, aborted, -1, length)
                elif version >= 5:
                    buf += _PART5(p.partition, r.error, r.high_watermark, r.last_stable_offset,
                                  r.log_start_offset, aborted, length)
                else:
                    buf += _PART4(p.partition, r.error, r.high_watermark, r.last_stable_offset,
                                  aborted, length)
                if length < 0:
                    raise OverflowError  # struct took it as int32; the wire length must not be negative
            except Exception:
                _explain(p, r, version)
            if records is not None:
                out.append(bytes(buf))
                out.append(records)
                buf = bytearray()
    if buf:
        out.append(bytes(buf))
    return out
