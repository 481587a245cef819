"""Produce decode and Fetch encode for the hot paths, pure Python (twin of native/kafka_codec.pyx).

Wire layouts, zero-copy and error contract: pybroker/contracts/kafka_codec.py. Every length is
checked before use, so ``struct`` never sees a short buffer and errors carry our own messages.
"""
from struct import Struct

from pybroker.contracts.kafka_codec import (FETCH_MAX_VERSION, FETCH_MIN_VERSION, MAX_STRING,
                                            PRODUCE_FIRST_FLEXIBLE_VERSION, PRODUCE_MAX_VERSION,
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
    if version >= PRODUCE_FIRST_FLEXIBLE_VERSION:
        return _decode_flexible(frame, pos, end, version)
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


# ---- Produce request, flexible versions (v9+): compact strings/arrays/records, tagged fields ----
# ``what`` names the field in error messages; callers pass literals so no text is built per call.

def _uvarint(frame, pos, end, version, what):
    """(value, new pos) for an unsigned varint of at most 5 bytes and 32 bits."""
    if pos < end and frame[pos] < 0x80:  # the usual one-byte case
        return frame[pos], pos + 1
    start, value, shift = pos, 0, 0
    for _ in range(5):
        if pos >= end:
            raise DecodeError(f"ProduceRequest v{version}: {what} at offset {start} is a truncated varint")
        b = frame[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value > 0xFFFFFFFF:
                raise DecodeError(f"ProduceRequest v{version}: {what} at offset {start} is a varint over 32 bits")
            return value, pos
        shift += 7
    raise DecodeError(f"ProduceRequest v{version}: {what} at offset {start} is a varint longer than 5 bytes")


def _compact_string(frame, pos, end, version, what, nullable):
    """(str or None, new pos) for a compact string (uvarint length + 1, 0 = null) at ``pos``."""
    n, at = _uvarint(frame, pos, end, version, what)
    if n == 0:
        if nullable:
            return None, at
        raise DecodeError(f"ProduceRequest v{version}: {what} at offset {pos} is null")
    n -= 1
    if n > MAX_STRING:
        raise DecodeError(f"ProduceRequest v{version}: {what} at offset {at} has length {n}, over {MAX_STRING}")
    if end - at < n:
        raise _short(version, what, at, n, end - at)
    try:
        return str(frame[at:at + n], "utf-8"), at + n
    except UnicodeDecodeError:
        raise DecodeError(f"ProduceRequest v{version}: {what} at offset {at} is not valid UTF-8") from None


def _compact_count(frame, pos, end, version, what, elem_min):
    """(count, new pos) for a non-nullable compact array count, refused when it cannot fit."""
    n, at = _uvarint(frame, pos, end, version, what)
    if n == 0:
        raise DecodeError(f"ProduceRequest v{version}: {what} at offset {pos} is null")
    n -= 1
    if n * elem_min > end - at:
        raise DecodeError(f"ProduceRequest v{version}: {what} {n} at offset {pos} exceeds the {end - at} bytes left")
    return n, at


def _skip_tags(frame, pos, end, version, what):
    """The pos after a tagged-field section: Produce requests define no tags, so each is skipped."""
    if pos < end and frame[pos] == 0:  # the usual empty section
        return pos + 1
    n, pos = _uvarint(frame, pos, end, version, what)
    if 2 * n > end - pos:  # each field takes at least its tag and size bytes
        raise DecodeError(f"ProduceRequest v{version}: {n} {what} at offset {pos} exceed the {end - pos} bytes left")
    for _ in range(n):
        _, pos = _uvarint(frame, pos, end, version, what)
        size, pos = _uvarint(frame, pos, end, version, what)
        if end - pos < size:
            raise _short(version, what, pos, size, end - pos)
        pos += size
    return pos


def _decode_flexible(frame, pos, end, version):
    transactional_id, pos = _compact_string(frame, pos, end, version, "transactional_id", True)
    if end - pos < 6:
        raise _short(version, "acks and timeout_ms", pos, 6, end - pos)
    acks, timeout_ms = _hi(frame, pos)
    pos += 6
    ntopics, pos = _compact_count(frame, pos, end, version, "topic count", 3)  # name + partitions + tags
    topics = []
    for _ in range(ntopics):
        name, pos = _compact_string(frame, pos, end, version, "topic name", False)
        nparts, pos = _compact_count(frame, pos, end, version, "partition count", 6)  # index + records + tags
        parts = []
        for _ in range(nparts):
            if end - pos < 4:
                raise _short(version, "partition index", pos, 4, end - pos)
            index = _i(frame, pos)[0]
            n, pos = _uvarint(frame, pos + 4, end, version, "records")
            if n == 0:
                records = None
            else:
                n -= 1
                if end - pos < n:
                    raise _short(version, "records", pos, n, end - pos)
                records = frame[pos:pos + n]
                pos += n
            if pos < end and frame[pos] == 0:  # no tagged fields: the usual case, without a call
                pos += 1
            else:
                pos = _skip_tags(frame, pos, end, version, "partition tagged fields")
            parts.append(_tuple_new(PartitionData, (index, records)))
        if pos < end and frame[pos] == 0:
            pos += 1
        else:
            pos = _skip_tags(frame, pos, end, version, "topic tagged fields")
        topics.append(_tuple_new(TopicData, (name, parts)))
    _skip_tags(frame, pos, end, version, "request tagged fields")
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


def _checked(value, what, bounds):
    """``value`` as an int within ``bounds`` (the native encoder's check, same message)."""
    _int_field(value, what, bounds)
    return value.__index__()


def encode_fetch(version, topics, results, committed_only, session_id=0, error_code=0, node_endpoints=None,
                 tagged=True):
    if not FETCH_MIN_VERSION <= version <= FETCH_MAX_VERSION:
        raise EncodeError(f"FetchResponse: version {version} is not supported "
                          f"({FETCH_MIN_VERSION}-{FETCH_MAX_VERSION})")
    total = 0
    for t in topics:
        total += len(t.partitions)
    if total != len(results):
        raise EncodeError(f"FetchResponse: {len(results)} results for {total} requested partitions")
    session_id = _checked(session_id, "session id", _I32_RANGE)
    error_code = _checked(error_code, "error code", _I16_RANGE)
    if version >= FIRST_FLEXIBLE:
        return _encode_flexible(version, topics, results, committed_only, session_id, error_code, node_endpoints,
                                tagged)
    aborted = 0 if committed_only else -1  # empty array / null: this broker has no transactions
    out = []
    buf = bytearray(_HEAD7(0, error_code, session_id) if version >= 7 else _HEAD(0))
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
                empty = 0 if r.error != 0 and r.aborted_transactions is not None else aborted  # answered unread
                if committed_only and r.aborted_transactions:
                    buf += _with_aborted(version, p, r, r.aborted_transactions, length)
                elif version >= 11:
                    buf += _PART11(p.partition, r.error, r.high_watermark, r.last_stable_offset,
                                   r.log_start_offset, empty, -1, length)
                elif version >= 5:
                    buf += _PART5(p.partition, r.error, r.high_watermark, r.last_stable_offset,
                                  r.log_start_offset, empty, length)
                else:
                    buf += _PART4(p.partition, r.error, r.high_watermark, r.last_stable_offset,
                                  empty, length)
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


# ---- Fetch response, flexible versions (v12+): compact arrays/strings/records, tagged fields,
# topic ids instead of names from v13, node endpoints (response tag 0) from v16 ----------------

FIRST_FLEXIBLE, FIRST_TOPIC_ID, FIRST_NODE_ENDPOINTS = 12, 13, 16
_FLEX_PART = Struct(">ihqqq").pack  # partition index, error, high watermark, last stable, log start
_DIVERGING = Struct(">BBiqB").pack   # tag 0, size 13, epoch, end offset, empty tagged fields
_LEADER = Struct(">BBiiB").pack      # tag 1, size 9, leader id, leader epoch, empty tagged fields
_ABORTED_FLEX = Struct(">qqB").pack  # producer id, first offset, empty tagged fields
_I32_1 = Struct(">i").pack


def _uv(n):
    """An unsigned varint."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _topic_id(tid):
    if type(tid) is bytes and len(tid) == 16:
        return tid
    try:
        b = tid.bytes
    except AttributeError:
        raise EncodeError(f"FetchResponse: topic id must be a UUID or 16 bytes, not {type(tid).__name__}") from None
    if type(b) is not bytes or len(b) != 16:
        raise EncodeError(f"FetchResponse: topic id must be a UUID or 16 bytes, not {type(tid).__name__}")
    return b


def _flex_partition(p, r, committed_only, buf):
    """One partition up to its records length; (records, length). Checks in the native order."""
    records = r.records
    try:
        length = 0 if records is None else records.length
        head = _FLEX_PART(p.partition, r.error, r.high_watermark, r.last_stable_offset, r.log_start_offset)
        if length < 0 or length > _I32_RANGE[1]:
            raise OverflowError
    except Exception:
        _explain(p, r, 12)
    buf += head
    txns = r.aborted_transactions if committed_only else None
    if txns:
        buf += _uv(len(txns) + 1)
        for tpid, tfirst in txns:
            pid = _checked(tpid, "aborted producer id", _I64_RANGE)
            first = _checked(tfirst, "aborted first offset", _I64_RANGE)
            buf += _ABORTED_FLEX(pid, first, 0)
    else:  # compact: empty array / null (read_uncommitted), empty for an error answered unread
        buf.append(1 if committed_only or (r.error != 0 and r.aborted_transactions is not None) else 0)
    buf += _I32_1(-1)  # preferred read replica
    buf += _uv(length + 1)
    return records


def _flex_tags(r, buf):
    diverging, leader = r.diverging_epoch, r.current_leader
    buf.append((diverging is not None) + (leader is not None))
    if diverging is not None:
        de, dend = diverging
        buf += _DIVERGING(0, 13, _checked(de, "diverging epoch", _I32_RANGE),
                          _checked(dend, "diverging end offset", _I64_RANGE), 0)
    if leader is not None:
        lid, lepoch = leader
        buf += _LEADER(1, 9, _checked(lid, "current leader id", _I32_RANGE),
                       _checked(lepoch, "current leader epoch", _I32_RANGE), 0)


def _utf8(s, what, nullable):
    if s is None and nullable:
        return None
    if type(s) is not str:
        raise EncodeError(f"FetchResponse: {what} must be a str, not {type(s).__name__}")
    return _topic_name(s)


def _node_endpoints(endpoints, buf):
    if not endpoints:
        buf.append(0)
        return
    body = bytearray(_uv(len(endpoints) + 1))
    rows = []
    for nid, host, nport, rack in endpoints:
        node_id = _checked(nid, "node id", _I32_RANGE)
        port = _checked(nport, "node port", _I32_RANGE)
        rows.append((node_id, _utf8(host, "node host", False), port, _utf8(rack, "node rack", True)))
    for node_id, h, port, rb in rows:
        body += _I32_1(node_id) + _uv(len(h) + 1) + h + _I32_1(port)
        body += b"\x00" if rb is None else _uv(len(rb) + 1) + rb
        body.append(0)  # the endpoint's tagged fields
    buf += b"\x01\x00" + _uv(len(body)) + body  # one tagged field: tag 0, its size, the array


def _encode_flexible(version, topics, results, committed_only, session_id, error_code, node_endpoints, tagged):
    out = []
    buf = bytearray(_HEAD7(0, error_code, session_id))
    buf += _uv(len(topics) + 1)
    k = 0
    by_id = version >= FIRST_TOPIC_ID
    for t in topics:
        if by_id:
            buf += _topic_id(t.topic_id)
        else:
            name = _topic_name(t.topic)
            buf += _uv(len(name) + 1)
            buf += name
        parts = t.partitions
        buf += _uv(len(parts) + 1)
        for p in parts:
            r = results[k]
            k += 1
            records = _flex_partition(p, r, committed_only, buf)
            if records is not None:
                out.append(bytes(buf))
                out.append(records)
                buf = bytearray()
            if tagged:
                _flex_tags(r, buf)
            else:
                buf.append(0)  # no result carries a tagged field: an empty section, nothing read
        buf.append(0)  # the topic's tagged fields
    _node_endpoints(node_endpoints if version >= FIRST_NODE_ENDPOINTS else None, buf)
    out.append(bytes(buf))
    return out
