"""The cleaner's key -> last offset map: native vs pure twin vs a dict model, limits, bad input."""
import importlib
import os
import random
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from pybroker import core
from pybroker.contracts.offset_map import ENTRY_SIZE, FillResult, OffsetMap, OffsetMapModule
from pybroker.errors import CorruptRecordError
from pybroker.records import CONTROL, Record, build_batch

native = core.load("offset_map", "native")
pure = core.load("offset_map", "pure")
IMPLS = [native, pure]
ids = ["native", "pure"]


def test_native_really_loaded_where_it_can_be_built():
    # setup.py builds it wherever xxhash.h is found; CI installs libxxhash-dev, so there it must be native
    if not os.environ.get("CI") and not any(os.path.exists(d + "/xxhash.h") for d in ("/usr/include",
                                                                                      "/usr/local/include")):
        pytest.skip("xxhash.h is missing: only the pure twin exists here")
    assert native.__file__.endswith(".so") and os.sep + "_native" + os.sep in native.__file__
    assert isinstance(native, OffsetMapModule) and isinstance(pure, OffsetMapModule)
    assert isinstance(native.OffsetMap(100), OffsetMap) and isinstance(pure.OffsetMap(100), OffsetMap)
    assert native.ENTRY_SIZE == pure.ENTRY_SIZE == ENTRY_SIZE == 24


# ---------------------------------------------------------------- pybroker.core's fallback rule

def _missing(monkeypatch, exc_for):
    real = importlib.import_module

    def fake(name, *a):
        exc = exc_for(name)
        if exc is not None:
            raise exc
        return real(name, *a)
    monkeypatch.setattr(core.importlib, "import_module", fake)


def test_a_missing_native_module_is_an_error_not_a_silent_fallback(monkeypatch):
    _missing(monkeypatch, lambda n: ModuleNotFoundError(f"No module named {n!r}", name=n)
             if n.startswith("pybroker._native.") else None)
    for name in ("offset_map", "batch"):  # the xxHash header ships with the sources: every module is built
        with pytest.raises(ImportError, match=f"pybroker._native.{name} is not built"):
            core.load(name, "native")


def test_core_does_not_hide_a_broken_native_build(monkeypatch):
    _missing(monkeypatch, lambda n: ImportError("undefined symbol: XXH3_128bits")
             if n == "pybroker._native.offset_map" else None)
    with pytest.raises(ImportError, match="undefined symbol"):
        core.load("offset_map", "native")
    _missing(monkeypatch, lambda n: ModuleNotFoundError("No module named 'xxhash'", name="xxhash")
             if n == "pybroker._native.offset_map" else None)
    with pytest.raises(ImportError, match="xxhash"):
        core.load("offset_map", "native")


# ---------------------------------------------------------------- the table

@pytest.mark.parametrize("mod", IMPLS, ids=ids)
def test_put_get_replace_clear(mod):
    m = mod.OffsetMap(1000)
    assert (m.capacity, m.limit, m.size, m.full, m.latest_offset, m.memory_bytes) == (41, 36, 0, False, -1, 984)
    assert m.get(b"a") == -1
    assert m.put(b"a", 5) and m.get(b"a") == 5 and m.size == 1
    assert m.put(bytearray(b"a"), 9) and m.get(memoryview(b"a")) == 9 and m.size == 1
    assert m.put(b"a", 7) and m.get(b"a") == 9  # the later (larger) offset stays
    assert m.put(b"", 0) and m.get(b"") == 0 and m.size == 2  # an empty key is a key
    assert m.latest_offset == 9
    m.clear()
    assert (m.size, m.latest_offset, m.get(b"a"), m.get(b"")) == (0, -1, -1, -1)


@pytest.mark.parametrize("mod", IMPLS, ids=ids)
def test_fills_up_at_the_load_factor(mod):
    m = mod.OffsetMap(24 * 100, load_factor=0.5)
    assert (m.capacity, m.limit) == (100, 50)
    for i in range(50):
        assert m.put(b"k%d" % i, i)
    assert m.full and m.size == 50
    assert not m.put(b"new", 99) and m.get(b"new") == -1 and m.latest_offset == 49
    assert m.put(b"k3", 100) and m.get(b"k3") == 100  # an update still fits
    assert all(m.get(b"k%d" % i) == (100 if i == 3 else i) for i in range(50))
    full_table = mod.OffsetMap(24 * 10, load_factor=1.0)
    assert full_table.limit == 9  # one slot always stays empty, so a lookup always ends
    for i in range(9):
        assert full_table.put(b"%d" % i, i)
    assert not full_table.put(b"x", 1) and full_table.get(b"x") == -1


@pytest.mark.parametrize("mod", IMPLS, ids=ids)
def test_argument_errors(mod):
    for mem in (0, -5, 24, 47):
        with pytest.raises(ValueError):
            mod.OffsetMap(mem)
    for lf in (0.0, -0.1, 1.01):
        with pytest.raises(ValueError):
            mod.OffsetMap(1000, lf)
    m = mod.OffsetMap(1000)
    with pytest.raises(ValueError):
        m.put(b"k", -1)
    with pytest.raises(OverflowError):
        m.put(b"k", 1 << 63)
    with pytest.raises(TypeError):
        m.put(None, 1)
    with pytest.raises(TypeError):
        m.put("text", 1)
    with pytest.raises(TypeError):
        m.get(None)
    for start, stop in ((-1, 5), (6, 5)):
        with pytest.raises(ValueError):
            m.add_batches(b"", start, stop)
    with pytest.raises(TypeError):
        m.add_batches(None, 0, 1)
    assert m.size == 0


def test_memory_bound():
    for mod in IMPLS:
        m = mod.OffsetMap(10_000_000)
        assert m.memory_bytes == m.capacity * ENTRY_SIZE <= 10_000_000 < m.memory_bytes + ENTRY_SIZE
    # the pure twin allocates its table once and never grows, however many keys come
    tracemalloc.start()
    m = pure.OffsetMap(24 * 2000)
    before = tracemalloc.get_traced_memory()[0]
    buf = b"".join(build_batch([Record(b"v" * 50, b"key-%d" % (i * 10 + j)) for j in range(10)],
                               base_offset=i * 10) for i in range(300))
    m.add_batches(buf, 0, 3000)
    del buf
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert m.full and after - before < 64 * 1024
    # the native table: its resident size grows by the table and not with the keys
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    if not os.path.exists("/proc/self/statm"):
        return
    base = rss()
    n = native.OffsetMap(64 << 20)
    allocated = rss() - base
    assert allocated >= (60 << 20)  # clear() touched every page of the table
    keys = [os.urandom(8) for _ in range(200_000)]
    mid = rss()
    for i, k in enumerate(keys):
        n.put(k, i)
    assert n.size == 200_000 and rss() - mid < (4 << 20)


# ---------------------------------------------------------------- add_batches vs a dict model

def model_fill(d, latest, limit, batches, start, stop):
    """What add_batches must do, over a dict: returns (FillResult, latest_offset)."""
    covered = start
    for b in batches:
        if b["base"] >= stop:
            break
        last = b["base"] + b["lod"]
        if last >= start and not b["control"]:
            for off, key in b["records"]:
                if key is None or not start <= off < stop:
                    continue
                if key not in d and len(d) >= limit:
                    return FillResult(off, True), max(latest, off - 1)
                d[key] = max(d.get(key, -1), off)
        covered = max(covered, last + 1)
    result = FillResult(min(stop, covered), False)
    return result, max(latest, result.next_offset - 1)


@st.composite
def logs(draw):
    """A segment's batches (with gaps, as after compaction) and their encoding."""
    pool = [b"k%d" % i for i in range(draw(st.integers(1, 40)))]
    offset = draw(st.integers(0, 50))
    batches, parts = [], []
    for _ in range(draw(st.integers(1, 8))):
        control = draw(st.booleans()) and draw(st.booleans())
        n = draw(st.integers(1, 12))
        deltas = sorted(draw(st.sets(st.integers(0, n + 4), min_size=n, max_size=n)))
        keys = [draw(st.sampled_from(pool + [None])) for _ in deltas]
        codec = 0 if control else draw(st.sampled_from([0, 0, 1, 2, 3, 4]))
        recs = [Record(b"v" * draw(st.integers(0, 30)), k) for k in keys]
        attributes = codec | (CONTROL if control else 0)
        # build_batch numbers records 0..n-1; a compacted batch has holes
        raw = build_batch(recs, base_offset=offset, attributes=attributes) if deltas == list(range(n)) \
            else build_batch_with_deltas(recs, deltas, offset, attributes)
        batches.append({"base": offset, "lod": deltas[-1], "control": control,
                        "records": [(offset + dl, k) for dl, k in zip(deltas, keys)]})
        parts.append(bytes(raw))
        offset += deltas[-1] + 1 + draw(st.sampled_from([0, 0, 0, 3]))
    return batches, b"".join(parts), pool


def build_batch_with_deltas(recs, deltas, base, attributes):
    """build_batch, then the records' offset deltas and lastOffsetDelta replaced (re-encoded)."""
    from pybroker import records as R
    from pybroker.compression import compress
    body = b"".join(R._encode_record(r, dl, 0) for r, dl in zip(recs, deltas))
    if attributes & 7:
        body = compress(attributes & 7, body)
    batch = bytearray(R.HEADER.size + len(body))
    R.HEADER.pack_into(batch, 0, base, len(batch) - 12, -1, 2, 0, attributes, deltas[-1], 0, 0,
                       -1, -1, -1, len(recs))
    batch[R.HEADER.size:] = body
    struct.pack_into(">I", batch, 17, core.crc.crc32c(memoryview(batch)[R.CRC_START:]))
    return batch


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.integers(0, 60), st.integers(0, 140), st.integers(2, 30), st.booleans())
def test_add_batches_matches_the_model(log, start, span, slots, twice):
    batches, buf, pool = log
    stop = start + span
    maps = [mod.OffsetMap(24 * slots) for mod in IMPLS]
    limit = maps[0].limit
    d, latest = {}, -1
    ranges = [(start, stop)]
    if twice:  # the cleaner's second call picks up where the first stopped (another segment, or the same)
        ranges.append(None)
    for rng in ranges:
        if rng is None:
            rng = (want.next_offset, want.next_offset + 50)  # noqa: F821  (set by the first round)
            if want.full:  # noqa: F821
                for m in maps:
                    m.clear()
                d, latest = {}, -1
        want, latest = model_fill(d, latest, limit, batches, *rng)
        event(f"full={want.full}, keys={len(d)}")
        for m in maps:
            got = m.add_batches(buf, *rng)
            assert type(got) is FillResult and got == want
            assert (m.size, m.full, m.latest_offset) == (len(d), len(d) >= limit, latest)
            assert [m.get(k) for k in pool] == [d.get(k, -1) for k in pool]


@pytest.mark.parametrize("mod", IMPLS, ids=ids)
def test_add_batches_walk(mod):
    b0 = build_batch([Record(b"a", b"x"), Record(b"b", None), Record(b"c", b"y")], base_offset=0)
    ctl = build_batch([Record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00")], base_offset=3, attributes=CONTROL)
    b1 = build_batch([Record(b"d", b"x"), Record(b"e", b"z")], base_offset=4, attributes=4)
    buf = bytes(b0 + ctl + b1)
    m = mod.OffsetMap(24 * 100)
    assert m.add_batches(buf, 0, 100) == (6, False)
    assert (m.get(b"x"), m.get(b"y"), m.get(b"z"), m.get(b"\x00" * 4), m.size) == (4, 2, 5, -1, 3)
    m.clear()
    assert m.add_batches(buf, 2, 5) == (5, False) and (m.get(b"x"), m.get(b"y"), m.get(b"z")) == (4, 2, -1)
    m.clear()
    assert m.add_batches(buf, 6, 9) == (6, False) and m.size == 0 and m.latest_offset == 5
    assert m.add_batches(b"", 7, 9) == (7, False) and m.latest_offset == 6
    small = mod.OffsetMap(24 * 3)  # limit 2
    assert small.add_batches(buf, 0, 100) == (5, True)  # "z" at 5 is the third key
    assert (small.latest_offset, small.get(b"x"), small.get(b"z")) == (4, 4, -1)


# ---------------------------------------------------------------- bad input

def outcome(mod, buf, start=0, stop=1 << 40, slots=64):
    m = mod.OffsetMap(24 * slots)
    try:
        return ("ok", tuple(m.add_batches(buf, start, stop)), m.size)
    except CorruptRecordError as exc:
        return ("raised", exc.reason, exc.offset, exc.position, m.size)


def same(buf, **kw):
    a, b = outcome(native, buf, **kw), outcome(pure, buf, **kw)
    assert a == b
    return a


def sample_log():
    rng = random.Random(7)
    parts = []
    for i, codec in enumerate([0, 1, 0, 2, 3, 4, 0]):
        recs = [Record(bytes(rng.randrange(256) for _ in range(rng.randrange(20))),
                       None if rng.random() < 0.2 else b"key%d" % rng.randrange(10)) for _ in range(5)]
        parts.append(bytes(build_batch(recs, base_offset=i * 5, attributes=codec)))
    return parts


def test_truncated_buffers():
    parts = sample_log()
    buf = b"".join(parts)
    bounds = {sum(map(len, parts[:i])) for i in range(len(parts) + 1)}
    for cut in range(len(buf)):
        got = same(buf[:cut])
        if cut in bounds:
            assert got[0] == "ok"
        else:
            assert got[0] == "raised" and got[1].startswith("truncated batch"), (cut, got)
    assert same(b"") == ("ok", (0, False), 0)
    assert same(buf[:5]) == ("raised", "truncated batch: 12 bytes needed, 5 left", -1, 0, 0)


def patched(buf, pos, fmt, value):
    out = bytearray(buf)
    struct.pack_into(fmt, out, pos, value)
    return bytes(out)


def test_bad_headers_and_records():
    batch = bytes(build_batch([Record(b"v", b"k"), Record(b"w", b"j")], base_offset=7))
    long_key = bytes(build_batch([Record(b"v", b"k" * 30)], base_offset=7))
    cases = {
        "batch length -1 is smaller than 49": patched(batch, 8, ">i", -1),
        "batch length 48 is smaller than 49": patched(batch, 8, ">i", 48),
        f"truncated batch: {0x7FFFFFFF + 12} bytes needed, {len(batch)} left": patched(batch, 8, ">i", 0x7FFFFFFF),
        "unsupported magic 1": patched(batch, 16, ">b", 1),
        "unknown compression codec 5": patched(batch, 21, ">h", 5),
        "negative last offset delta -1": patched(batch, 23, ">i", -1),
        "negative record count -2": patched(batch, 57, ">i", -2),
        "base offset -3 out of range": patched(batch, 0, ">q", -3),
        "base offset 9223372036854775807 out of range": patched(batch, 0, ">q", (1 << 63) - 1),
        "record 2: truncated varint": patched(batch, 57, ">i", 3),
        "9 bytes after the last of 1 records": patched(batch, 57, ">i", 1),
        "record 0: length 60 out of range": patched(batch, 61, ">B", 120),
        "record 0: offset delta 5 outside the batch (last offset delta 1)": patched(batch, 64, ">B", 10),
        "record 0: key length 60 out of range": patched(batch, 65, ">B", 120),
        "record 0: varint longer than 10 bytes": long_key[:63] + b"\xff" * 10 + long_key[73:],
    }
    for reason, bad in cases.items():
        got = same(bad)
        assert got[:2] == ("raised", reason), (reason, got)
        if not reason.startswith("base offset"):
            assert got[2] == 7 and got[3] == 0
    # the error names the batch it is in; records put before it stay put
    got = same(batch + patched(batch, 57, ">i", 1), stop=100)
    assert got == ("raised", "9 bytes after the last of 1 records", 7, len(batch), 2)
    # a damaged compressed section is reported, not decoded
    comp = bytearray(build_batch([Record(b"v" * 40, b"k")] * 3, base_offset=0, attributes=4))
    comp[61:65] = b"\x00" * 4  # the zstd frame's magic
    got = same(bytes(comp))
    assert got[0] == "raised" and got[1].startswith("decompression failed"), got
    # batches past stop and before start are not examined beyond their headers
    assert same(batch + patched(batch, 57, ">i", 3)[:-1], stop=8)[0] == "raised"  # still truncated
    assert same(patched(batch, 57, ">i", 3), start=9)[0] == "ok"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_damage_never_crashes_and_both_agree(data):
    parts = sample_log()
    buf = bytearray(b"".join(parts))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    start = data.draw(st.integers(0, 40))
    same(bytes(buf), start=start, stop=start + data.draw(st.integers(0, 40)), slots=data.draw(st.integers(2, 20)))


# ---------------------------------------------------------------- produce's record check (check_records)

def _outcome(impl, buf):
    try:
        impl.check_records(buf)
        return None
    except CorruptRecordError as exc:
        return str(exc)


headers = st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=6)), max_size=3)
records = st.lists(st.builds(Record, st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=5), headers),
                   min_size=1, max_size=4)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(records, st.lists(st.tuples(st.integers(61, 400), st.integers(0, 255)), max_size=3))
def test_check_records_twins_agree_on_whole_and_damaged_records(recs, damage):
    """A well-formed batch passes both; bytes overwritten in its records section fail both alike."""
    buf = bytearray(build_batch(recs))
    assert _outcome(native, buf) is None and _outcome(pure, buf) is None
    for pos, value in damage:
        if pos < len(buf):
            buf[pos] = value
    assert _outcome(native, buf) == _outcome(pure, buf)


@pytest.mark.parametrize("impl", IMPLS, ids=ids)
def test_check_records_names_what_kafka_refuses(impl):
    """A negative header count, a negative header key length, bytes left after the headers: each refused."""
    def damaged(tail: bytes) -> bytearray:
        body = b"\x00" + b"\x00" + b"\x00" + b"\x01" + b"\x02" + b"v" + tail  # attrs, ts, delta, key null, value "v"
        rec = bytes([len(body) << 1]) + body
        batch = bytearray(build_batch([Record(b"v")]))
        return batch[:61] + rec if len(rec) else batch
    good = damaged(b"\x00")
    struct.pack_into(">i", good, 8, len(good) - 12)
    assert _outcome(impl, good) is None
    for tail, why in ((b"\x01", "header count -1"), (b"\x02\x01", "header key length -1"),
                      (b"\x00\x07", "1 bytes after its last header")):
        buf = damaged(tail)
        struct.pack_into(">i", buf, 8, len(buf) - 12)
        assert why in _outcome(impl, buf)
    compressed = bytearray(build_batch([Record(b"v")], attributes=1))
    impl.check_records(compressed)  # not opened: compressed batches are checked by their readers


# ---------------------------------------------------------------- the idle-priority helper

SCHED_OTHER, SCHED_IDLE = 0, 5


def _policies() -> dict:
    """{thread id: scheduling policy} of this process's threads (/proc: stat field 41)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                out[int(tid)] = int(f.read().rsplit(")", 1)[1].split()[38])
        except (OSError, IndexError, ValueError):
            pass  # a thread that just ended
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_walks_on_the_idle_helper_agree_and_the_caller_keeps_its_priority():
    """The cleaner thread takes the GIL, so only its GIL-free walks may run at SCHED_IDLE: on a helper thread
    that exists between start and stop, while the calling thread stays SCHED_OTHER."""
    import threading
    buf = b"".join(sample_log()[:1] + [bytes(build_batch([Record(b"v%d" % i, b"k%d" % (i % 7)) for i in range(50)],
                                                         base_offset=5))])
    inline = native.OffsetMap(24 * 100)
    filled = tuple(inline.add_batches(buf, 0, 100))
    expected = (filled, inline.size, tuple(native.OffsetMap(24 * 100).retain(buf, 0, 0)))
    seen = {}

    def on_a_cleaner_thread():
        me = threading.get_native_id()
        before = set(_policies())
        native.start_idle_helper()
        native.start_idle_helper()  # a second start keeps the one helper
        try:
            helpers = {t: p for t, p in _policies().items() if t not in before}
            m = native.OffsetMap(24 * 100)
            filled = tuple(m.add_batches(buf, 0, 100))
            # retain on a fresh map over the same keys, as a cleaning does after its map pass
            seen["walks"] = (filled, m.size, tuple(native.OffsetMap(24 * 100).retain(buf, 0, 0)))
            seen["helpers"], seen["caller"] = helpers, _policies()[me]
        finally:
            native.stop_idle_helper()
        seen["after"] = {t for t in _policies() if t not in before and t != me}

    t = threading.Thread(target=on_a_cleaner_thread)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert seen["walks"] == expected
    assert list(seen["helpers"].values()) == [SCHED_IDLE] and seen["caller"] == SCHED_OTHER
    assert seen["after"] == set()  # stop ended the helper
    pure.start_idle_helper()  # the pure twin's walks hold the GIL: nothing to start or stop
    pure.stop_idle_helper()
