"""Record-batch view: native vs pure twin, explicit error reasons, rewrites, recovery scan."""
import struct

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from pybroker import core
from pybroker.contracts.batch import BatchModule
from pybroker.errors import CorruptRecordError, InvalidRecordError
from pybroker.records import Record, build_batch

native = core.load("batch", "native")
pure = core.load("batch", "pure")
IMPLS = [native, pure]
ids = ["native", "pure"]
crc32c = core.load("crc", "native").crc32c

DERIVED = ("size", "last_offset", "next_offset", "compression", "is_log_append_time",
           "is_transactional", "is_control")
# (offset in the header, struct format) of each field a corruption may overwrite
FIELDS = {
    "base_offset": (0, ">q"), "batch_length": (8, ">i"), "partition_leader_epoch": (12, ">i"),
    "magic": (16, ">b"), "crc": (17, ">I"), "attributes": (21, ">h"),
    "last_offset_delta": (23, ">i"), "base_timestamp": (27, ">q"), "max_timestamp": (35, ">q"),
    "producer_id": (43, ">q"), "producer_epoch": (51, ">h"), "base_sequence": (53, ">i"),
    "record_count": (57, ">i"),
}


def info_dict(info):
    d = info.as_dict()
    d.update((name, getattr(info, name)) for name in DERIVED)
    return d


def error_key(exc):
    return (type(exc), exc.reason, exc.offset, exc.position)


def outcome(fn, *args, **kwargs):
    """Comparable result of a call: normalised return value or the error's meaningful fields."""
    try:
        result = fn(*args, **kwargs)
    except CorruptRecordError as exc:
        return ("raised",) + error_key(exc)
    except (TypeError, ValueError, OverflowError) as exc:
        return ("raised", type(exc))
    if result is None:
        return ("ok", None)
    if hasattr(result, "offset_entries"):
        d = result.as_dict()
        d["error"] = None if d["error"] is None else error_key(d["error"])
        return ("ok", d)
    return ("ok", info_dict(result))


def same(name, *args, **kwargs):
    """Call ``name`` on both implementations and check they agree; return the outcome."""
    a = outcome(getattr(native, name), *args, **kwargs)
    b = outcome(getattr(pure, name), *args, **kwargs)
    assert a == b
    return a


def put(buf, field, value, pos=0):
    offset, fmt = FIELDS[field]
    struct.pack_into(fmt, buf, pos + offset, value)


def reseal(buf, pos=0):
    """Recompute the stored CRC after editing covered bytes."""
    size = struct.unpack_from(">i", buf, pos + 8)[0] + 12
    struct.pack_into(">I", buf, pos + 17, crc32c(memoryview(buf)[pos + 21:pos + size]))


def sample(**kw):
    return build_batch([b"a", b"bb", Record(b"ccc", key=b"k", timestamp=1700)],
                       base_timestamp=1000, **kw)


# --- strategies ------------------------------------------------------------------------

records_st = st.lists(
    st.builds(Record,
              value=st.none() | st.binary(max_size=24),
              key=st.none() | st.binary(max_size=8),
              headers=st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)),
                               max_size=2),
              timestamp=st.none() | st.integers(0, 2**42)),
    min_size=1, max_size=6)
attributes_st = st.sampled_from([0, 1, 2, 3, 4, 0x08, 0x10, 0x20, 0x30, 0x18]) | st.integers(0, 0x7F)


@st.composite
def batches(draw, base_offset=None):
    return build_batch(
        draw(records_st),
        base_offset=draw(st.integers(0, 2**40)) if base_offset is None else base_offset,
        base_timestamp=draw(st.integers(-1, 2**42)),
        attributes=draw(attributes_st),
        producer_id=draw(st.integers(-1, 2**40)),
        producer_epoch=draw(st.integers(-1, 2**15 - 1)),
        base_sequence=draw(st.integers(-1, 2**31 - 1)),
        partition_leader_epoch=draw(st.integers(-1, 2**31 - 1)))


def field_value(field):
    fmt = FIELDS[field][1]
    bits = struct.calcsize(fmt) * 8
    lo, hi = (0, 2**bits - 1) if fmt.endswith("I") else (-(2**(bits - 1)), 2**(bits - 1) - 1)
    interesting = [v for v in (lo, hi, -1, 0, 1, 2, 48, 49, 60, 61) if lo <= v <= hi]
    return st.sampled_from(interesting) | st.integers(lo, hi)


@st.composite
def corrupt(draw, buf, starts):
    """Apply one random corruption to ``buf`` (batches begin at ``starts``); return it."""
    kind = draw(st.sampled_from(["none", "flip", "cut", "field", "field_resealed", "field_resealed"]))
    if kind == "flip":
        i = draw(st.integers(0, len(buf) - 1))
        buf[i] ^= draw(st.integers(1, 255))
    elif kind == "cut":
        del buf[draw(st.integers(0, len(buf))):]
    elif kind != "none":
        start = draw(st.sampled_from(starts))
        field = draw(st.sampled_from(sorted(FIELDS)))
        put(buf, field, draw(field_value(field)), start)
        if kind == "field_resealed":
            reseal(buf, start)  # so the checks after the CRC get exercised too
    return buf


# --- the module as a whole ---------------------------------------------------------------

def test_native_is_compiled():
    assert native.__file__.endswith((".so", ".pyd"))


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_satisfies_contract(impl):
    assert isinstance(impl, BatchModule)
    assert impl.HEADER_SIZE == 61


# --- parse_header / validate on good batches --------------------------------------------

@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_fields_of_a_known_batch(impl):
    buf = bytearray(7) + sample(base_offset=100, attributes=0x18, producer_id=42,
                                producer_epoch=3, base_sequence=9, partition_leader_epoch=5)
    info = impl.validate(buf, 7)
    assert info.position == 7
    assert (info.base_offset, info.partition_leader_epoch, info.magic) == (100, 5, 2)
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (42, 3, 9)
    assert (info.record_count, info.last_offset_delta) == (3, 2)
    assert (info.base_timestamp, info.max_timestamp) == (1000, 1700)
    assert info.size == len(buf) - 7 == info.batch_length + 12
    assert (info.last_offset, info.next_offset) == (102, 103)
    assert info.compression == 0
    assert info.is_log_append_time and info.is_transactional and not info.is_control
    assert info.crc == struct.unpack_from(">I", buf, 7 + 17)[0]
    assert impl.parse_header(buf, 7) == info
    assert set(info.as_dict()) == set(info._fields)


def test_batch_info_equality_and_immutability():
    buf = sample()
    for impl in IMPLS:
        a, b = impl.validate(buf), impl.parse_header(buf)
        assert a == b and hash(a) == hash(b)
        with pytest.raises(AttributeError):
            a.base_offset = 5
    assert native.validate(buf).as_dict() == pure.validate(buf).as_dict()
    assert repr(native.validate(buf)) == repr(pure.validate(buf))


@settings(max_examples=150, deadline=None)
@given(batches(), st.binary(max_size=5), st.binary(max_size=5))
def test_random_valid_batches_agree(batch, before, after):
    buf = bytes(before) + bytes(batch) + bytes(after)
    result = same("validate", buf, len(before), allow_control=True)
    assert result[0] == "ok" or "unknown compression codec" in result[2]
    if result[0] == "ok":
        assert result[1]["size"] == len(batch)
        same("parse_header", buf, len(before))
        same("validate", buf, len(before), allow_control=False)


# --- every error reason ---------------------------------------------------------------

def _set(field, value, seal=False):
    buf = sample(base_offset=7)
    put(buf, field, value)
    if seal:
        reseal(buf)
    return buf


ERROR_CASES = [
    ("short prefix", sample(base_offset=7)[:11], 7, "truncated: 11 bytes left, fewer than the 12-byte"),
    ("short prefix no offset", sample()[:5], -1, "truncated: 5 bytes left"),
    ("short header", sample(base_offset=7)[:60], 7,
     "truncated: 60 bytes left, fewer than the 61-byte batch header"),
    ("length small", _set("batch_length", 48), 7,
     "batch length 48 out of range: the minimum is 49"),
    ("length negative", _set("batch_length", -1), 7, "batch length -1 out of range"),
    ("past end", sample(base_offset=7)[:-1], 7, "truncated: batch needs {n} bytes, {m} available"),
    ("magic", _set("magic", 1), 7, "unsupported magic 1"),
    ("crc", _set("max_timestamp", 5), 7, "CRC mismatch: stored 0x"),
    ("count negative", _set("record_count", -3, seal=True), 7, "record count -3 is negative"),
    ("count mismatch", _set("record_count", 2, seal=True), 7,
     "record count 2 does not match last offset delta 2 (expected 3 records)"),
    ("offset overflow", _set("base_offset", 2**63 - 3), 2**63 - 3,
     "offset overflow: base offset 9223372036854775805 + last offset delta 2"),
    ("codec", _set("attributes", 5, seal=True), 7, "unknown compression codec 5"),
]


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
@pytest.mark.parametrize("name,buf,offset,reason", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_validate_error_reasons(impl, name, buf, offset, reason):
    full = len(sample())
    reason = reason.format(n=full, m=full - 1)
    with pytest.raises(CorruptRecordError) as raised:
        impl.validate(bytearray(3) + buf, 3)
    err = raised.value
    assert type(err) is CorruptRecordError
    assert err.reason.startswith(reason), err.reason
    assert (err.offset, err.position) == (offset, 3)


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_compacted_batches_may_hold_fewer_records(impl):
    for count in (0, 2):  # the log cleaner removed records, kept the offsets
        fewer = _set("record_count", count, seal=True)
        assert impl.validate(fewer, compacted=True).record_count == count
        with pytest.raises(CorruptRecordError, match="does not match last offset delta"):
            impl.validate(fewer)
        assert impl.scan(fewer).error is None
    with pytest.raises(CorruptRecordError, match="record count 4 does not match"):
        impl.validate(_set("record_count", 4, seal=True), compacted=True)


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_crc_reason_names_both_values(impl):
    buf = _set("max_timestamp", 5)
    stored = struct.unpack_from(">I", buf, 17)[0]
    computed = crc32c(memoryview(buf)[21:])
    with pytest.raises(CorruptRecordError, match=f"stored 0x{stored:08x}, computed 0x{computed:08x}"):
        impl.validate(buf)


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_control_batches(impl):
    buf = sample(base_offset=4, attributes=0x20)
    assert impl.validate(buf).is_control
    with pytest.raises(InvalidRecordError) as raised:
        impl.validate(buf, allow_control=False)
    assert raised.value.reason == "control batches may not be produced"
    assert (raised.value.offset, raised.value.position) == (4, 0)


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_parse_header_checks_only_the_header(impl):
    assert impl.parse_header(_set("magic", 9)).magic == 9
    assert impl.parse_header(sample()[:61]).size == len(sample())
    with pytest.raises(CorruptRecordError, match="fewer than the 61-byte batch header"):
        impl.parse_header(sample()[:60])
    with pytest.raises(CorruptRecordError, match="batch length 10 out of range"):
        impl.parse_header(_set("batch_length", 10))
    with pytest.raises(CorruptRecordError, match="truncated: 0 bytes left"):
        impl.parse_header(sample(), 10_000)
    with pytest.raises(ValueError):
        impl.parse_header(sample(), -1)


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_argument_errors(impl):
    with pytest.raises(TypeError):
        impl.validate("text")
    with pytest.raises(TypeError):
        impl.validate(memoryview(bytes(sample()) * 2)[::2])
    with pytest.raises(TypeError):
        impl.validate(sample(), 0.0)
    with pytest.raises(ValueError):
        impl.validate(sample(), -5)
    with pytest.raises(OverflowError):
        impl.validate(sample(), 2**64)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), batches(), st.booleans())
def test_random_corruptions_agree(data, batch, allow_control):
    buf = data.draw(corrupt(bytearray(batch), [0]))
    same("parse_header", buf)
    result = same("validate", buf, allow_control=allow_control)
    event(result[2].split(":")[0].split(" ")[0] if result[0] == "raised" else "valid")
    same("validate", bytes(buf), allow_control=allow_control)


@settings(max_examples=150, deadline=None)
@given(batches(), st.sampled_from(["attributes", "last_offset_delta", "record_count",
                                   "base_offset", "magic"]), st.data())
def test_resealed_field_corruptions_agree(batch, field, data):
    """Bad values behind a correct CRC reach the count, overflow, codec and control checks."""
    buf = bytearray(batch)
    values = field_value(field) | st.integers(-3, 3)
    if field == "base_offset":
        values |= st.integers(2**63 - 10, 2**63 - 1) | st.integers(-(2**63), -(2**63) + 10)
    elif field == "attributes":
        values |= st.sampled_from([0x20, 0x25, 0x3C])
    put(buf, field, data.draw(values))
    reseal(buf)
    result = same("validate", buf, allow_control=data.draw(st.booleans()))
    event(result[2].split(":")[0].split(" ")[0] if result[0] == "raised" else "valid")


# --- in-place rewrites ------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(batches(), st.integers(0, 9), st.integers(-(2**63), 2**63 - 1),
       st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_rewrites_agree_and_keep_batch_valid(batch, pad, offset, epoch, ts):
    original = bytearray(pad) + batch + bytearray(3)
    results = []
    for impl in IMPLS:
        buf = bytearray(original)
        impl.set_base_offset(buf, pad, offset)
        impl.set_partition_leader_epoch(buf, pad, epoch)
        impl.set_log_append_time(buf, pad, ts)
        results.append(bytes(buf))
    assert results[0] == results[1]
    buf = results[0]
    assert buf[:pad] == original[:pad] and buf[-3:] == b"\0\0\0"
    for impl in IMPLS:
        header = impl.parse_header(buf, pad)
        assert (header.base_offset, header.partition_leader_epoch) == (offset, epoch)
        assert header.max_timestamp == ts and header.is_log_append_time
        assert header.attributes == struct.unpack_from(">h", batch, 21)[0] | 0x08
    # the CRC is right again: validate passes whenever the original did (offset overflow aside)
    if outcome(pure.validate, original, pad)[0] == "ok" and offset <= 2**62:
        assert same("validate", buf, pad)[0] == "ok"


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_rewrites_leave_crc_alone_where_kafka_does(impl):
    buf = sample()
    before = impl.validate(buf)
    impl.set_base_offset(buf, 0, 12345)
    impl.set_partition_leader_epoch(buf, 0, 77)
    after = impl.validate(buf)  # outside the CRC: still valid with the old CRC
    assert after.crc == before.crc
    assert (after.base_offset, after.partition_leader_epoch) == (12345, 77)
    impl.set_log_append_time(buf, 0, 99)
    assert impl.validate(buf).crc != before.crc


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_rewrite_errors(impl):
    good = sample()
    for fn, value in ((impl.set_base_offset, 1), (impl.set_partition_leader_epoch, 1),
                      (impl.set_log_append_time, 1)):
        with pytest.raises(TypeError):
            fn(bytes(good), 0, value)  # read-only
        with pytest.raises(ValueError):
            fn(bytearray(good[:60]), 0, value)
        with pytest.raises(ValueError):
            fn(bytearray(good), len(good) - 60, value)
        with pytest.raises(ValueError):
            fn(bytearray(good), -1, value)
    with pytest.raises(OverflowError):
        impl.set_partition_leader_epoch(bytearray(good), 0, 2**31)
    with pytest.raises(OverflowError):
        impl.set_base_offset(bytearray(good), 0, 2**63)
    with pytest.raises(TypeError):
        impl.set_base_offset(bytearray(good), 0, 1.0)
    cut = bytearray(good[:-1])
    with pytest.raises(ValueError, match="needs"):
        impl.set_log_append_time(cut, 0, 5)
    assert cut == good[:-1]  # nothing written when refusing
    small = bytearray(good)
    put(small, "batch_length", 20)
    with pytest.raises(ValueError, match="batch length 20"):
        impl.set_log_append_time(small, 0, 5)


# --- scan ----------------------------------------------------------------------------------

def segment(sizes_and_stamps, base_offset=0):
    """Concatenate batches with consecutive offsets; each entry is (record count, max ts)."""
    buf, offset, starts = bytearray(), base_offset, []
    for count, stamp in sizes_and_stamps:
        starts.append(len(buf))
        buf += build_batch([b"x" * 10] * count, base_offset=offset, base_timestamp=stamp)
        offset += count
    return buf, starts


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_scan_index_entries_follow_log_segment(impl):
    buf, starts = segment([(1, 10)] * 5)
    size = starts[1]
    result = impl.scan(buf, index_interval=size)
    # an entry needs more than `size` bytes since the last one: batches 2 and 4
    assert result.offset_entries == [(2, starts[2]), (4, starts[4])]
    assert result.time_entries == [(10, 0), (10, 0)]  # ties keep the earliest offset
    assert impl.scan(buf, index_interval=0).offset_entries == [(i, starts[i]) for i in range(1, 5)]
    assert impl.scan(buf, index_interval=10**9).offset_entries == []


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_scan_tracks_max_timestamp(impl):
    buf, starts = segment([(2, 10), (3, 30), (1, 20), (2, 30), (1, 5)], base_offset=100)
    result = impl.scan(buf, index_interval=0, base_position=1000, expected_offset=100)
    assert result.error is None
    assert (result.batch_count, result.next_offset, result.valid_end) == (5, 109, 1000 + len(buf))
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (30, 104)
    # the max includes the batch being indexed, as LogSegment updates it before the entry
    assert result.time_entries == [(30, 104), (30, 104), (30, 104), (30, 104)]
    assert result.offset_entries == [(104, 1000 + starts[1]), (105, 1000 + starts[2]),
                                     (107, 1000 + starts[3]), (108, 1000 + starts[4])]


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_scan_stops_and_reports(impl):
    buf, starts = segment([(1, 1)] * 4)
    empty = impl.scan(b"")
    assert (empty.error, empty.valid_end, empty.batch_count, empty.next_offset,
            empty.max_timestamp, empty.offset_of_max_timestamp) == (None, 0, 0, -1, -1, -1)
    assert impl.scan(b"", expected_offset=9).next_offset == 9
    tail = impl.scan(buf + b"\0" * 5, base_position=50)
    assert (tail.batch_count, tail.valid_end) == (4, 50 + len(buf))
    assert tail.error.reason.startswith("truncated: 5 bytes left") and tail.error.position == 50 + len(buf)
    torn = impl.scan(buf[:-3])
    assert (torn.batch_count, torn.valid_end, torn.next_offset) == (3, starts[3], 3)
    assert torn.error.reason == f"truncated: batch needs {starts[1]} bytes, {starts[1] - 3} available"
    gap = impl.scan(buf, start=starts[1], expected_offset=2)
    assert (gap.batch_count, gap.valid_end, gap.next_offset) == (0, starts[1], 2)
    assert gap.error.reason == "offset gap: expected 2, found 1" and gap.error.offset == 1
    skipped = impl.scan(buf, start=starts[1], expected_offset=0, gaps=True)  # the cleaner removed offset 0
    assert (skipped.error, skipped.batch_count, skipped.next_offset) == (None, 3, 4)
    back = impl.scan(buf, start=starts[1], expected_offset=2, gaps=True)
    assert back.error.reason == "offset goes back: expected at least 2, found 1"
    far_buf = bytearray(buf)
    put(far_buf, "base_offset", 2**31, pos=starts[1])  # outside the CRC
    far = impl.scan(far_buf, start=starts[1], expected_offset=0, gaps=True)
    assert far.error.reason == f"offset {2**31} is beyond the 32-bit range of relative offsets from 0"
    part = impl.scan(buf, start=starts[1], end=starts[3])
    assert (part.error, part.batch_count, part.valid_end, part.next_offset) == (None, 2, starts[3], 3)
    corrupt_crc = bytearray(buf)
    corrupt_crc[starts[2] + 70] ^= 1
    bad = impl.scan(corrupt_crc)
    assert bad.batch_count == 2 and bad.error.reason.startswith("CRC mismatch")
    assert (bad.error.offset, bad.error.position) == (2, starts[2])
    control, _ = segment([(1, 1)])
    put(control, "attributes", 0x20)
    reseal(control)
    assert impl.scan(control).error is None  # recovery accepts control batches


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_scan_argument_errors(impl):
    buf, _ = segment([(1, 1)])
    for kwargs in ({"start": -1}, {"end": len(buf) + 1}, {"start": 5, "end": 4},
                   {"base_position": -1}, {"base_position": 2**63 - 2}):
        with pytest.raises(ValueError):
            impl.scan(buf, **kwargs)
    with pytest.raises(OverflowError):
        impl.scan(buf, expected_offset=2**63)
    with pytest.raises(TypeError):
        impl.scan(buf, index_interval=1.5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(batches(base_offset=0), min_size=1, max_size=6))
def test_random_scans_agree(data, parts):
    buf, starts, offset = bytearray(), [], data.draw(st.integers(0, 2**40))
    for part in parts:
        starts.append(len(buf))
        part = bytearray(part)
        put(part, "base_offset", offset)  # outside the CRC: still valid
        offset += struct.unpack_from(">i", part, 23)[0] + 1
        buf += part
    clean = bytes(buf)
    if starts:
        buf = data.draw(corrupt(buf, starts))
    start = data.draw(st.sampled_from([0] + starts)) if len(buf) else 0
    start = min(start, len(buf))
    end = data.draw(st.none() | st.integers(start, len(buf)))
    expected = data.draw(st.sampled_from([-1, -1, struct.unpack_from(">q", clean, start)[0]
                                          if start + 8 <= len(clean) else 0, 3]))
    base_position = data.draw(st.integers(0, 2**40))
    interval = data.draw(st.integers(-1, 200) | st.sampled_from([0, 4096]))
    result = same("scan", buf, start=start, end=end, base_position=base_position,
                  index_interval=interval, expected_offset=expected)
    error = result[1]["error"] if result[0] == "ok" else None
    event("clean end" if error is None else error[1].split(":")[0].split(" ")[0])
    event(f"{len(result[1]['offset_entries'])} index entries" if result[0] == "ok" else "raised")
    if bytes(buf) == clean and end is None and expected == -1 and all(p[22] & 7 <= 4 for p in parts):
        assert error is None  # untouched batches with known codecs scan to the end
        assert result[1]["batch_count"] == len(starts) - (starts.index(start) if starts else 0)
        assert result[1]["valid_end"] == base_position + len(clean)
