"""Client record codec: native vs pure twin, against pybroker.records and kafka-python."""
import pickle
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.partitioner.default import murmur2 as kp_murmur2
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from pybroker import core, records
from pybroker.client import arrow
from pybroker.contracts import client_codec as contract
from pybroker.errors import CorruptRecordError
from pybroker.protocol import RESPONSES
from pybroker.records import Record, build_batch

native = core.load("client_codec", "native")
pure = core.load("client_codec", "pure")
IMPLS = [native, pure]
IDS = ["native", "pure"]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

impls = pytest.mark.parametrize("m", IMPLS, ids=IDS)

# ---------------------------------------------------------------- helpers

blobs = st.one_of(st.none(), st.binary(max_size=40))
header_keys = st.one_of(st.text(max_size=6), st.binary(max_size=6))
headers_st = st.one_of(st.none(), st.lists(st.tuples(header_keys, blobs), max_size=3))
timestamps = st.integers(min_value=-(1 << 40), max_value=1 << 45)
record_st = st.tuples(timestamps, blobs, blobs, headers_st)


def outcome(fn, *args, **kw):
    """A comparable result or error description of one call."""
    try:
        return ("ok", normalize(fn(*args, **kw)))
    except CorruptRecordError as exc:
        return ("corrupt", exc.reason, exc.offset, exc.position)
    except (ValueError, TypeError, OverflowError) as exc:
        return ("error", type(exc).__name__)


def normalize(result):
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], list):
        return [fields(r) for r in result[0]], result[1]
    if hasattr(result, "header_count"):
        return columns_dict(result)
    return result


def fields(r):
    return (r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
            [tuple(h) for h in r.headers], r.leader_epoch)


COLUMN_NAMES = ("count", "next_offset", "key_validity", "key_offsets", "key_data", "value_validity",
                "value_offsets", "value_data", "offsets", "timestamps", "timestamp_types", "header_offsets",
                "header_count", "header_key_offsets", "header_key_data", "header_value_validity",
                "header_value_offsets", "header_value_data")


def columns_dict(c):
    out = {}
    for name in COLUMN_NAMES:
        v = getattr(c, name)
        out[name] = v if v is None or isinstance(v, int) else bytes(v)
    return out


def build_with(m, recs, max_bytes=1 << 20, codec=0, **kw):
    b = m.BatchBuilder(max_bytes)
    for ts, key, value, headers in recs:
        assert b.append(ts, key, value, headers) >= 0
    return b.build(codec, **kw)


def header_text(k):
    return k if isinstance(k, str) else k.decode("utf-8", "replace")


def expected_headers(headers):
    return [(header_text(k), v) for k, v in headers or ()]


def control_batch(base_offset, producer_id, kind, epoch=0):
    """A transaction marker batch: key = version i16 + type i16 (0 abort, 1 commit)."""
    key = struct.pack(">hh", 0, kind)
    value = struct.pack(">hi", 0, 0)
    return build_batch([Record(value=value, key=key)], base_offset=base_offset,
                       attributes=records.TRANSACTIONAL | records.CONTROL, producer_id=producer_id,
                       producer_epoch=epoch)


def txn_batch(base_offset, producer_id, values, transactional=True):
    return build_batch(values, base_offset=base_offset, producer_id=producer_id, producer_epoch=0,
                       base_sequence=0, attributes=records.TRANSACTIONAL if transactional else 0)


AbortedTransaction = RESPONSES[1].AbortedTransaction


# ---------------------------------------------------------------- murmur2 / partitioning


def test_modules_satisfy_the_contract():
    for m in IMPLS:
        assert isinstance(m, contract.ClientCodecModule)
        assert isinstance(m.BatchBuilder(10), contract.BatchBuilderLike)
        b = m.BatchBuilder(100)
        b.append(1, None, b"v")
        rec = m.decode_records(b.build(0), "t", 0, 0)[0][0]
        assert isinstance(rec, contract.ConsumerRecordLike)
        assert isinstance(m.decode_columns(b.build(0), 0), contract.ColumnsLike)


def test_native_is_compiled():
    assert native.__file__.endswith(".so")


@impls
def test_murmur2_known_values(m):
    # values from Java's Utils.murmur2 (as used by the default partitioner)
    assert m.murmur2(b"") == 275646681
    assert m.murmur2(b"hello") == 2132663229
    assert m.murmur2(b"21") == -973932308
    assert m.murmur2(b"foobar") == -790332482
    assert m.murmur2(b"a-little-bit-long-string") == -985981536
    assert m.murmur2(b"a-little-bit-longer-string") == -1486304829
    assert m.murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert m.murmur2(b"abc") == 479470107
    assert m.murmur2(bytearray(b"hello")) == m.murmur2(memoryview(b"xhello")[1:])


@SETTINGS
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_murmur2_matches_kafka_python(data, n):
    expected = kp_murmur2(data) & 0xFFFFFFFF
    assert native.murmur2(data) & 0xFFFFFFFF == expected
    assert pure.murmur2(data) == native.murmur2(data)
    assert -(1 << 31) <= native.murmur2(data) < (1 << 31)
    # kafka-python's DefaultPartitioner picks partitions exactly this way
    assert native.partition_for_key(data, n) == pure.partition_for_key(data, n) \
        == (kp_murmur2(data) & 0x7FFFFFFF) % n


@impls
def test_murmur2_rejects_bad_input(m):
    with pytest.raises(TypeError):
        m.murmur2("text")
    with pytest.raises(ValueError):
        m.partition_for_key(b"k", 0)


# ---------------------------------------------------------------- building

@SETTINGS
@given(st.lists(record_st, min_size=1, max_size=12), st.integers(min_value=0, max_value=600))
def test_builder_native_equals_pure(recs, max_bytes):
    builders = [native.BatchBuilder(max_bytes), pure.BatchBuilder(max_bytes)]
    kept = []
    for rec in recs:
        results = [b.append(*rec) for b in builders]
        assert results[0] == results[1]
        if results[0] >= 0:
            assert results[0] == len(kept)
            kept.append(rec)
        props = [(b.count, b.size_bytes, b.first_timestamp, b.max_timestamp) for b in builders]
        assert props[0] == props[1]
    assert builders[0].size_bytes <= max(max_bytes, builders[0].size_bytes if builders[0].count == 1 else 0)
    built = [b.build(0, 7, 3, 11) for b in builders]
    assert built[0] == built[1]
    assert len(built[0]) == builders[0].size_bytes
    # the pure reference decoder agrees with what was appended
    decoded = records.decode_records(built[0])
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decoded] == \
        [(i, ts, k, v) for i, (ts, k, v, _) in enumerate(kept)]
    assert [r.headers for r in decoded] == [expected_headers(h) for *_, h in kept]


@impls
def test_builder_matches_kafka_python_bytes(m):
    recs = [(1000, None, b"v" * 100, None), (1001, b"k", b"v2", [("a", b"b"), ("n", None)]),
            (999, b"", b"", []), (5000, b"key", None, None)]
    kb = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                   producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (ts, k, v, h) in enumerate(recs):
        assert kb.append(i, ts, k, v, h or []) is not None
    theirs = bytes(kb.build())
    ours = build_with(m, recs)
    # identical except partitionLeaderEpoch (kafka-python writes 0, Java clients -1)
    assert ours[:12] + ours[16:] == theirs[:12] + theirs[16:]
    assert struct.unpack_from(">i", ours, 12)[0] == -1


@impls
@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_codecs_round_trip_and_kafka_python_reads_them(m, codec):
    recs = [(1_700_000_000_000 + i, None if i % 3 else b"k%d" % i, b"value-%d" % i * 5,
             [("h", b"%d" % i)] if i % 4 == 0 else None) for i in range(50)]
    data = build_with(m, recs, codec=codec, producer_id=42, producer_epoch=1, base_sequence=100)
    assert data[21:23] == struct.pack(">h", codec)
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    assert batch.producer_id == 42 and batch.producer_epoch == 1 and batch.base_sequence == 100
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch] == \
        [(i, ts, k, v, expected_headers(h)) for i, (ts, k, v, h) in enumerate(recs)]
    for impl in IMPLS:
        got, nxt = impl.decode_records(data, "t", 0, 0)
        assert nxt == 50
        assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got] == \
            [(i, ts, k, v, expected_headers(h)) for i, (ts, k, v, h) in enumerate(recs)]


@impls
@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decodes_kafka_python_compressed_batches(m, codec):
    kb = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                   producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(40):
        kb.append(i, 5000 + i, None, b"payload %d" % i * 4, [("x", b"y")] if i == 3 else [])
    data = bytes(kb.build())
    got, nxt = m.decode_records(data, "t", 1, 0)
    assert nxt == 40
    assert [(r.offset, r.timestamp, r.value) for r in got] == [(i, 5000 + i, b"payload %d" % i * 4)
                                                               for i in range(40)]
    assert got[3].headers == [("x", b"y")]
    cols = m.decode_columns(data, 0)
    assert arrow.to_record_batch(cols, "t", 1).column("value").to_pylist() == [r.value for r in got]


@impls
def test_builder_limits(m):
    b = m.BatchBuilder(100)
    assert b.count == 0 and b.size_bytes == 61 and b.first_timestamp == -1 and b.max_timestamp == -1
    assert b.append(10, None, b"x" * 500) == 0  # an empty builder takes any one record
    assert b.append(11, None, b"y") == -1
    assert b.count == 1
    b = m.BatchBuilder(61 + 3 * 11)
    assert [b.append(5, None, b"abcd") for _ in range(4)] == [0, 1, 2, -1]  # 11 bytes per record
    assert b.size_bytes == 94
    with pytest.raises(ValueError):
        m.BatchBuilder(100).build(0)
    with pytest.raises(ValueError):
        b.build(5)
    assert b.build(0) == b.build(0)  # building leaves the builder usable
    with pytest.raises(TypeError):
        m.BatchBuilder(100).append(0, None, "text")
    with pytest.raises(TypeError):
        m.BatchBuilder(100).append(0, None, b"v", [(None, b"x")])
    with pytest.raises(TypeError):
        m.BatchBuilder(100).append(0, None, b"v", [("k", 5)])
    with pytest.raises(OverflowError):
        m.BatchBuilder(100).append(1 << 63, None, b"v")
    with pytest.raises(OverflowError):
        b.build(0, producer_epoch=1 << 15)


@SETTINGS
@given(st.lists(st.tuples(blobs, st.binary(max_size=30)), max_size=30), st.integers(0, 400),
       st.integers(0, 5), st.booleans())
def test_append_many_equals_append(pairs, max_bytes, start, with_keys):
    keys = [k for k, _ in pairs] if with_keys else None
    values = [v for _, v in pairs]
    start = min(start, len(values))
    results = []
    for m in IMPLS:
        ref, many = m.BatchBuilder(max_bytes), m.BatchBuilder(max_bytes)
        stop = many.append_many(keys, values, 77, start)
        i = start
        while i < len(values) and ref.append(77, keys[i] if keys else None, values[i]) >= 0:
            i += 1
        assert stop == i
        assert many.count == stop - start
        results.append((stop, many.build(0) if many.count else None))
        if many.count:
            assert many.build(0) == ref.build(0)
    assert results[0] == results[1]


@impls
def test_append_many_accepts_tuples_and_buffers(m):
    b = m.BatchBuilder(1 << 16)
    assert b.append_many((b"k", None, bytearray(b"kk")), (b"a", memoryview(b"bc"), b""), 1) == 3
    got, _ = m.decode_records(b.build(0), "t", 0, 0)
    assert [(r.key, r.value) for r in got] == [(b"k", b"a"), (None, b"bc"), (b"kk", b"")]
    with pytest.raises(ValueError):
        b.append_many([b"k"], [b"a", b"b"], 1)
    with pytest.raises(TypeError):
        b.append_many(None, ["text"], 1)


def arrow_args(keys, values):
    kb = keys.buffers() if keys is not None else [None, None, None]
    vb = values.buffers()
    wide = pa.types.is_large_binary(values.type)
    return (kb[0], kb[1], kb[2], vb[0], vb[1], vb[2], wide, values.offset)


@SETTINGS
@given(st.lists(st.tuples(blobs, blobs), min_size=1, max_size=30), st.booleans(), st.booleans(),
       st.integers(0, 10), st.integers(0, 400))
def test_append_arrow_equals_append_many(pairs, wide, with_keys, cut, max_bytes):
    kind = pa.large_binary() if wide else pa.binary()
    keys_all = pa.array([k for k, _ in pairs], type=kind)
    values_all = pa.array([v for _, v in pairs], type=kind)
    cut = min(cut, len(pairs) - 1)
    keys, values = keys_all.slice(cut), values_all.slice(cut)  # non-zero array offsets
    n = len(values)
    built = []
    for m in IMPLS:
        a, b = m.BatchBuilder(max_bytes), m.BatchBuilder(max_bytes)
        stop = a.append_arrow(*arrow_args(keys if with_keys else None, values), 0, n, 99)
        assert stop == b.append_many(keys.to_pylist() if with_keys else None, values.to_pylist(), 99)
        assert a.count == b.count == stop
        if stop:
            assert a.build(0) == b.build(0)
            built.append(a.build(0))
    assert len(set(built)) <= 1


@impls
def test_append_arrow_rejects_bad_buffers(m):
    values = pa.array([b"ab", b"cd"])
    v, o, d = values.buffers()
    b = m.BatchBuilder(1 << 16)
    with pytest.raises(ValueError):  # offsets for 3 rows do not exist
        b.append_arrow(None, None, None, v, o, d, False, 0, 0, 3, 0)
    bad_offsets = struct.pack("<3i", 0, 2, 50)  # past the data
    with pytest.raises(ValueError):
        b.append_arrow(None, None, None, None, bad_offsets, d, False, 0, 0, 2, 0)
    assert b.count == 1  # the good row before the bad one stays
    with pytest.raises(ValueError):
        b.append_arrow(None, None, None, b"", o, d, False, 0, 0, 2, 0)  # validity too short
    with pytest.raises(ValueError):
        b.append_arrow(None, None, None, None, o, d, False, 0, 2, 1, 0)
    assert b.append_arrow(None, None, None, None, o, d, False, 0, 1, 1, 0) == 1


# ---------------------------------------------------------------- decoding

batch_st = st.tuples(
    st.lists(st.tuples(st.integers(-1000, 1000), blobs, blobs,
                       st.lists(st.tuples(st.text(max_size=5), blobs), max_size=2)), min_size=1, max_size=8),
    st.integers(0, 1 << 40),        # base offset
    st.integers(0, 1 << 42),        # base timestamp
    st.sampled_from([0, 1, 2, 3, 4, 0x08, 0x0A]),  # codec / LogAppendTime
    st.integers(-1, 50))            # partition leader epoch


def make_batch(spec):
    recs, base_offset, base_ts, attributes, epoch = spec
    return build_batch([Record(value=v, key=k, headers=h, timestamp=base_ts + d) for d, k, v, h in recs],
                       base_offset=base_offset, base_timestamp=base_ts, attributes=attributes,
                       partition_leader_epoch=epoch)


@SETTINGS
@given(st.lists(batch_st, min_size=1, max_size=3), st.integers(0, 12), st.integers(-1, 10))
def test_decode_matches_reference_and_twins(specs, skip, max_records):
    base = specs[0][1]
    batches, expected = [], []
    for i, spec in enumerate(specs):
        spec = (spec[0], base + 100 * i, *spec[2:])
        batch = make_batch(spec)
        batches.append(bytes(batch))
        log_append = spec[3] & 0x08
        max_ts = max(spec[2] + d for d, *_ in spec[0])
        expected += [("t", 5, r.offset, max_ts if log_append else r.timestamp, 1 if log_append else 0,
                      r.key, r.value, r.headers, spec[4]) for r in records.decode_records(batch)]
    buf = b"".join(batches)
    start = base + skip
    want = [e for e in expected if e[2] >= start]
    last = base + 100 * (len(specs) - 1) + len(specs[-1][0])
    got = [outcome(m.decode_records, buf, "t", 5, start) for m in IMPLS]
    assert got[0] == got[1] == ("ok", (want, max(last, start)))
    # max_records stops early; next_offset is then the first record left out
    limited = [outcome(m.decode_records, buf, "t", 5, start, max_records=max_records) for m in IMPLS]
    assert limited[0] == limited[1]
    if 0 <= max_records < len(want):
        assert limited[0] == ("ok", (want[:max_records], want[max_records][2]))
    # columns: twins give identical buffers; Arrow rows equal the records
    cols = [m.decode_columns(buf, start, max_records=max_records) for m in IMPLS]
    assert columns_dict(cols[0]) == columns_dict(cols[1])
    rows = arrow.to_record_batch(cols[0], "t", 5)
    rows.validate(full=True)
    assert rows.schema == arrow.SCHEMA
    recs_limited = limited[0][1][0]
    assert cols[0].next_offset == limited[0][1][1]
    assert rows.num_rows == len(recs_limited)
    assert rows.column("offset").to_pylist() == [r[2] for r in recs_limited]
    assert rows.column("timestamp").cast(pa.int64()).to_pylist() == [r[3] for r in recs_limited]
    assert rows.column("timestamp_type").to_pylist() == [r[4] for r in recs_limited]
    assert rows.column("key").to_pylist() == [r[5] for r in recs_limited]
    assert rows.column("value").to_pylist() == [r[6] for r in recs_limited]
    assert rows.column("headers").to_pylist() == [[{"key": k, "value": v} for k, v in r[7]] for r in recs_limited]
    assert set(rows.column("topic").to_pylist()) <= {"t"} and set(rows.column("partition").to_pylist()) <= {5}


@impls
def test_decode_edges(m):
    a = bytes(records.value_batch(5, 10, base_timestamp=100))
    b = bytes(build_batch([b"x", b"y"], base_offset=5))
    buf = a + b
    recs, nxt = m.decode_records(buf, "t", 0, 3)
    assert [r.offset for r in recs] == [3, 4, 5, 6] and nxt == 7
    assert m.decode_records(buf + b[:30], "t", 0, 0)[1] == 7  # trailing partial batch ignored
    assert m.decode_records(buf + b[:5], "t", 0, 0)[1] == 7
    assert m.decode_records(b"", "t", 0, 9) == ([], 9)
    assert m.decode_records(buf, "t", 0, 100) == ([], 100)  # next offset never moves back
    assert m.decode_records(buf, "t", 0, 0, max_records=0) == ([], 0)
    cols = m.decode_columns(b"", 4)
    assert cols.count == 0 and cols.next_offset == 4
    assert arrow.to_record_batch(cols, "t", 0).num_rows == 0
    r = recs[0]
    assert r.topic == "t" and r.partition == 0 and r.leader_epoch == -1 and r.headers == ()
    with pytest.raises(AttributeError):
        r.value = b"other"
    assert pickle.loads(pickle.dumps(r)) == r
    assert "offset=3" in repr(r)
    assert m.ConsumerRecord("t", 0, 3, r.timestamp, 0, r.key, r.value, (), -1) == r
    # headers: the shared empty tuple when absent (no allocation), a list otherwise
    with_headers = build_batch([Record(b"v", headers=[("a", b"b")]), Record(b"w")])
    recs, _ = m.decode_records(with_headers, "t", 0, 0)
    assert recs[0].headers == [("a", b"b")] and recs[1].headers == ()


@impls
def test_log_append_time(m):
    batch = build_batch([Record(b"a", timestamp=5), Record(b"b", timestamp=9)], attributes=0x08)
    recs, _ = m.decode_records(batch, "t", 0, 0)
    assert [(r.timestamp, r.timestamp_type) for r in recs] == [(9, 1), (9, 1)]


@impls
def test_header_key_invalid_utf8_is_replaced(m):
    batch = bytes(build_batch([Record(b"v", headers=[("ok", b"1")])]))
    batch = batch.replace(b"\x04ok", b"\x04\xffk")
    recs, _ = m.decode_records(batch, "t", 0, 0, check_crcs=False)
    assert recs[0].headers == [("\ufffdk", b"1")]
    cols = m.decode_columns(batch, 0, check_crcs=False)
    assert arrow.to_record_batch(cols, "t", 0).column("headers").to_pylist() == [[{"key": "\ufffdk", "value": b"1"}]]


# ---------------------------------------------------------------- transactions

def txn_log():
    """pid 1 commits, pid 2 aborts (interleaved), pid 3 is not transactional."""
    parts = [
        txn_batch(0, 1, [b"c0", b"c1"]),          # 0-1 committed
        txn_batch(2, 2, [b"a0"]),                 # 2 aborted
        txn_batch(3, 3, [b"p0"], transactional=False),
        txn_batch(4, 2, [b"a1", b"a2"]),          # 4-5 aborted
        control_batch(6, 1, 1),                   # commit pid 1
        control_batch(7, 2, 0),                   # abort pid 2
        txn_batch(8, 2, [b"n0"]),                 # 8 a later pid 2 transaction, committed
        control_batch(9, 2, 1),
    ]
    return b"".join(bytes(p) for p in parts), [(2, 2)]


@impls
def test_read_committed_skips_aborted(m):
    buf, aborted = txn_log()
    recs, nxt = m.decode_records(buf, "t", 0, 0, read_committed=True, aborted=aborted)
    assert [r.value for r in recs] == [b"c0", b"c1", b"p0", b"n0"] and nxt == 10
    recs, _ = m.decode_records(buf, "t", 0, 0)  # read_uncommitted: everything but markers
    assert [r.value for r in recs] == [b"c0", b"c1", b"a0", b"p0", b"a1", b"a2", b"n0"]
    cols = m.decode_columns(buf, 0, read_committed=True, aborted=aborted)
    assert arrow.to_record_batch(cols, "t", 0).column("value").to_pylist() == [b"c0", b"c1", b"p0", b"n0"]
    # starting after the aborted transaction began: the broker still lists it
    recs, _ = m.decode_records(buf[sum(len(txn_batch(o, p, v, t)) for o, p, v, t in
                                       [(0, 1, [b"c0", b"c1"], True), (2, 2, [b"a0"], True)]):],
                               "t", 0, 3, read_committed=True, aborted=aborted)
    assert [r.value for r in recs] == [b"p0", b"n0"]


@impls
def test_aborted_entries_from_a_fetch_response(m):
    buf, _ = txn_log()
    entry = AbortedTransaction(producer_id=2, first_offset=2)
    recs, _ = m.decode_records(buf, "t", 0, 0, read_committed=True, aborted=[entry])
    assert [r.value for r in recs] == [b"c0", b"c1", b"p0", b"n0"]


@impls
def test_read_committed_two_aborted_transactions(m):
    buf = b"".join(bytes(p) for p in [
        txn_batch(0, 7, [b"x"]), control_batch(1, 7, 0),
        txn_batch(2, 7, [b"y"]), control_batch(3, 7, 0),
        txn_batch(4, 7, [b"z"]), control_batch(5, 7, 1)])
    recs, nxt = m.decode_records(buf, "t", 0, 0, read_committed=True, aborted=[(7, 2), (7, 0)])
    assert [r.value for r in recs] == [b"z"] and nxt == 6


@impls
def test_short_control_key_is_corrupt(m):
    bad = build_batch([Record(value=b"", key=b"\x00")], base_offset=0,
                      attributes=records.TRANSACTIONAL | records.CONTROL, producer_id=1, producer_epoch=0)
    assert m.decode_records(bad, "t", 0, 0) == ([], 1)  # read_uncommitted never looks inside
    with pytest.raises(CorruptRecordError, match="control record key"):
        m.decode_records(bad, "t", 0, 0, read_committed=True, aborted=[])


# ---------------------------------------------------------------- corruption

def corrupt_outcomes(buf, **kw):
    got = [outcome(m.decode_records, buf, "t", 0, 0, **kw) for m in IMPLS]
    cols = [outcome(m.decode_columns, buf, 0, **kw) for m in IMPLS]
    assert got[0] == got[1]
    assert cols[0] == cols[1]
    return got[0]


def test_corruptions_are_reported_the_same():
    good = bytes(records.value_batch(3, 20, base_timestamp=1))
    flipped = bytearray(good)
    flipped[-1] ^= 1
    res = corrupt_outcomes(bytes(flipped))
    assert res[0] == "corrupt" and res[1].startswith("crc mismatch") and res[2:] == (0, 0)
    res = corrupt_outcomes(good[:8] + struct.pack(">i", 20) + good[12:])
    assert res == ("corrupt", "batch length 20 is smaller than 49", 0, 0)
    magic = bytearray(good)
    magic[16] = 1
    assert corrupt_outcomes(bytes(magic))[1] == "unsupported magic 1"
    # header count says 4 records, 3 are there
    more = bytearray(good)
    struct.pack_into(">i", more, 57, 4)
    assert corrupt_outcomes(bytes(more), check_crcs=False)[1] == "record count 4 exceeds the records in the batch"
    fewer = bytearray(good)
    struct.pack_into(">i", fewer, 57, 2)
    assert corrupt_outcomes(bytes(fewer), check_crcs=False)[1].endswith("bytes left after 2 records")
    overrun = bytearray(good)
    overrun[61:] = b"\xff" * (len(good) - 61)
    assert corrupt_outcomes(bytes(overrun), check_crcs=False)[1] == "record 0: varint longer than 10 bytes"
    codec = bytearray(good)
    codec[22] = 6
    assert corrupt_outcomes(bytes(codec), check_crcs=False)[1] == "unknown compression codec 6"
    squashed = bytearray(build_batch([b"hello"], attributes=1))
    squashed[70:] = bytes(len(squashed) - 70)
    assert corrupt_outcomes(bytes(squashed), check_crcs=False)[1].startswith("decompression failed")
    # a corrupt second batch reports its own offset and position
    second = bytearray(bytes(build_batch([b"z"], base_offset=3)))
    second[-1] ^= 0x40
    res = corrupt_outcomes(good + bytes(second))
    assert res[0] == "corrupt" and res[2:] == (3, len(good))


def mutate(data: bytes, edits):
    buf = bytearray(data)
    for pos, value in edits:
        if buf:
            buf[pos % len(buf)] = value
    return bytes(buf)


@FUZZ
@given(batch_st, st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(-1, 40), st.booleans())
def test_fuzz_mutated_batches(spec, edits, cut, read_committed):
    good = bytes(make_batch(spec))
    bad = mutate(good, edits)
    if cut >= 0:
        bad = bad[:len(bad) - cut]
    for check in (True, False):
        res = corrupt_outcomes(bad, check_crcs=check, read_committed=read_committed, aborted=[(-1, 0)])
        assert res[0] in ("ok", "corrupt")


@FUZZ
@given(st.binary(min_size=12, max_size=300), st.booleans())
def test_fuzz_random_bytes(data, fit_length):
    if fit_length:  # a batch length that spans the buffer, so the header checks pass more often
        data = data[:8] + struct.pack(">i", len(data) - 12) + data[12:16] + b"\x02" + data[17:]
    for check in (True, False):
        assert corrupt_outcomes(data, check_crcs=check)[0] in ("ok", "corrupt")


@FUZZ
@given(st.binary(min_size=0, max_size=200), st.integers(0, 255), st.integers(0, 20))
def test_fuzz_random_records_section(section, count, extra):
    """A valid header (right CRC) over random record bytes reaches every record-level check."""
    header = bytearray(61)
    struct.pack_into(">qiibIhiqqqhii", header, 0, 5, 49 + len(section), 0, 2, 0, 0, count, 0, 0, -1, -1, -1, count)
    batch = bytearray(header + section)
    struct.pack_into(">I", batch, 17, core.crc.crc32c(memoryview(batch)[21:]))
    res = corrupt_outcomes(bytes(batch) + bytes(extra))
    assert res[0] in ("ok", "corrupt")


@impls
def test_frame_buffer_is_a_writable_bytearray_of_the_size_asked(m):
    for size in (0, 1, 4096, 3 << 20):
        buf = m.frame_buffer(size)
        assert type(buf) is bytearray and len(buf) == size
        buf[-1:] = b"x" if size else b""
    with pytest.raises(ValueError):
        m.frame_buffer(-1)


def test_arrow_conversion_does_not_import_pandas():
    # pandas costs ~0.4 s to import: short-lived readers (Spark tasks) must not pay it
    import subprocess
    import sys
    probe = ("import sys; from pybroker import core; from pybroker.client import arrow; "
             "from pybroker.records import build_batch; "
             "c = core.client_codec.decode_columns(build_batch([b'a', b'b']), 0); "
             "arrow.to_record_batch(c, 't', 3); arrow.empty_batch(); "
             "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
