"""Offset and time indexes: native vs pure vs a sorted-list model, on Kafka's file formats."""
import bisect
import io
import itertools
import os
import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from pybroker import core
from pybroker.errors import CorruptIndexError, IndexFullError

IMPLS = ("native", "pure")
MODS = {impl: core.load("index", impl) for impl in IMPLS}
U32_MAX = 2**32 - 1
I64_MAX = 2**63 - 1
MAX_BASE = I64_MAX - U32_MAX


@pytest.fixture(params=IMPLS)
def mod(request):
    return MODS[request.param]


def outcome(obj, name, *args):
    """('ok', result) or ('err', type, message with the file path masked)."""
    try:
        return ("ok", getattr(obj, name)(*args))
    except Exception as exc:  # compared across implementations, so every error counts
        return ("err", type(exc), str(exc).replace(obj.path, "<path>"))


def pack_offsets(base, entries):
    return b"".join(struct.pack(">II", o - base, p) for o, p in entries)


def pack_times(base, entries):
    return b"".join(struct.pack(">qI", t, o - base) for t, o in entries)


def test_native_really_loaded():
    native = MODS["native"]
    assert native.__name__ == "pybroker._native.index"
    assert native.__file__.endswith((".so", ".pyd"))
    assert MODS["pure"].__name__ == "pybroker._pure.index"


# -- differential state machines ----------------------------------------------------------------

class _Machine(RuleBasedStateMachine):
    """Drives one native and one pure index over separate files with the same operations.

    ``self.file`` models the file bytes: entries reach it only at a write-back point (write_back,
    flush, trim, resize, close), from the lowest slot changed since the last one (``self.dirty``).
    """

    root = None  # set by the test to its tmp_path
    ES = 0
    SUFFIX = ""
    _ids = itertools.count()

    def __init__(self):
        super().__init__()
        self.dir = self.root / f"m{next(self._ids)}"
        os.makedirs(self.dir / "native")
        os.makedirs(self.dir / "pure")
        self.idx = {}

    def path(self, impl):
        return str(self.dir / impl / f"00000000000000000000{self.SUFFIX}")

    def open_all(self, writable, max_size):
        for impl in IMPLS:
            self.idx[impl] = self.cls(impl)(self.path(impl), self.base, max_size, writable)
        self.writable = writable

    def both(self, name, *args):
        native = outcome(self.idx["native"], name, *args)
        pure = outcome(self.idx["pure"], name, *args)
        assert native == pure, (name, args)
        return native

    def expect_mutation(self, name, *args):
        """Run a mutating call on both; a read-only index must refuse it."""
        result = self.both(name, *args)
        if not self.writable:
            assert result[:2] == ("err", io.UnsupportedOperation)
            return False
        return result

    @initialize(base=st.sampled_from([0, 7, 2**40, MAX_BASE]), max_size=st.integers(0, 600))
    def start(self, base, max_size):
        self.base = base
        max_size = max(max_size, self.ES)
        self.model = []
        self.max_entries = max_size // self.ES
        self.file = bytearray(self.max_entries * self.ES)  # preallocated, all zero
        self.dirty = 0
        self.open_all(True, max_size)

    def model_write_back(self):
        n = len(self.model)
        self.file[self.dirty * self.ES:n * self.ES] = self.pack(self.model[self.dirty:])
        self.dirty = n

    def model_resize(self, max_entries):
        """Write back, then cut or zero-extend the file, as resize / trim do."""
        self.model_write_back()
        self.max_entries = max_entries
        del self.file[max_entries * self.ES:]
        self.file.extend(bytes(max_entries * self.ES - len(self.file)))

    def teardown(self):
        for ix in self.idx.values():
            ix.close()

    def targets(self):
        """Offsets near the model's entries plus the extremes."""
        near = self.model_offsets() + [self.base]
        return st.one_of(
            st.sampled_from(near).flatmap(lambda o: st.integers(o - 2, o + 2)),
            st.integers(-2**63, I64_MAX),
            st.sampled_from([self.base + U32_MAX, self.base + U32_MAX + 1, I64_MAX, -2**63]),
        ).map(lambda t: min(t, I64_MAX))  # lookup targets are int64

    @rule(data=st.data())
    def entry(self, data):
        n = data.draw(st.integers(-2, len(self.model) + 2))
        result = self.both("entry", n)
        if 0 <= n < len(self.model):
            assert result == ("ok", self.model[n])
        else:
            assert result[:2] == ("err", IndexError)

    @rule(data=st.data())
    def truncate_to(self, data):
        target = data.draw(self.targets())
        if self.expect_mutation("truncate_to", target):
            self.model = [e for e in self.model if self.offset_of(e) < target]
            self.dirty = min(self.dirty, len(self.model))

    @rule()
    def truncate(self):
        if self.expect_mutation("truncate"):
            self.model = []
            self.dirty = 0

    @rule()
    def trim(self):
        if self.expect_mutation("trim_to_valid_size"):
            self.model_resize(len(self.model))

    @rule(size=st.integers(-8, 700))
    def resize(self, size):
        result = self.expect_mutation("resize", size)
        if result:
            if max(size, 0) // self.ES < len(self.model):
                assert result[:2] == ("err", ValueError)
            else:
                assert result == ("ok", None)
                self.model_resize(max(size, 0) // self.ES)

    @rule()
    def flush(self):
        assert self.both("flush") == ("ok", None)
        if self.writable:
            self.model_write_back()

    @rule()
    def write_back(self):
        assert self.both("write_back") == ("ok", None)
        if self.writable:
            self.model_write_back()

    @rule()
    def sanity_check(self):
        result = self.both("sanity_check")
        if self.model_sane():
            assert result == ("ok", None)
        else:
            assert result[:2] == ("err", CorruptIndexError)

    @rule(writable=st.booleans(), max_size=st.integers(0, 600))
    def reopen(self, writable, max_size):
        for impl in IMPLS:
            self.idx[impl].close()
            self.idx[impl].close()  # idempotent
        files = [open(self.path(impl), "rb").read() for impl in IMPLS]
        assert files[0] == files[1]
        assert files[0] == self.pack(self.model)  # written back and trimmed on close
        max_size = max(max_size, self.ES)
        self.open_all(writable, max_size)
        n = len(self.model)
        self.max_entries = max(max_size // self.ES, n) if writable else n
        self.file = bytearray(files[0] + bytes((self.max_entries - n) * self.ES))
        self.dirty = n

    @invariant()
    def same_state(self):
        if not self.idx:
            return
        n, p = self.idx["native"], self.idx["pure"]
        for ix in (n, p):
            assert ix.entries == len(ix) == len(self.model)
            assert ix.max_entries == self.max_entries
            assert ix.base_offset == self.base
            assert ix.writable == self.writable
        assert n.is_full() == p.is_full() == self.model_full()
        self.check_last()
        files = [open(self.path(impl), "rb").read() for impl in IMPLS]
        assert files[0] == files[1]
        assert len(files[0]) == self.max_entries * self.ES  # preallocated while writable
        assert files[0] == self.file  # appends and truncations reach it only at a write-back


class OffsetMachine(_Machine):
    ES = 8
    SUFFIX = ".index"

    def cls(self, impl):
        return MODS[impl].OffsetIndex

    def model_offsets(self):
        return [o for o, _ in self.model]

    def offset_of(self, e):
        return e[0]

    def pack(self, entries):
        return pack_offsets(self.base, entries)

    def model_full(self):
        return len(self.model) >= self.max_entries

    def model_sane(self):
        # append does not check positions; only sanity_check does
        return all(a[1] <= b[1] for a, b in zip(self.model, self.model[1:]))

    def check_last(self):
        last = self.model[-1][0] if self.model else self.base
        assert self.idx["native"].last_offset == self.idx["pure"].last_offset == last

    @rule(data=st.data())
    def append(self, data):
        last_o, last_p = self.model[-1] if self.model else (self.base - 1, 0)
        offset = data.draw(st.one_of(
            st.integers(last_o + 1, last_o + 40),
            st.integers(last_o - 3, last_o + 1),
            st.sampled_from([self.base - 1, self.base + U32_MAX, self.base + U32_MAX + 1, 2**64, -2**64])))
        position = data.draw(st.one_of(st.integers(last_p, last_p + 5000),
                                       st.sampled_from([-1, 0, U32_MAX, U32_MAX + 1])))
        self.append_one(offset, position)

    def append_one(self, offset, position):
        """Append to both and check against the model; True if it was added."""
        last_o = self.model[-1][0] if self.model else None
        result = self.expect_mutation("append", offset, position)
        if not result:
            return False
        if len(self.model) >= self.max_entries:
            assert result[:2] == ("err", IndexFullError)
        elif (self.model and offset <= last_o) or not 0 <= offset - self.base <= U32_MAX \
                or not 0 <= position <= U32_MAX:
            assert result[:2] == ("err", CorruptIndexError)
        else:
            assert result == ("ok", None)
            self.model.append((offset, position))
            return True
        return False

    @rule(gaps=st.lists(st.tuples(st.integers(1, 9), st.integers(0, 900)), min_size=1, max_size=30))
    def append_run(self, gaps):
        for go, gp in gaps:
            last_o, last_p = self.model[-1] if self.model else (self.base - 1, 0)
            if last_o + go - self.base > U32_MAX:
                return
            if not self.append_one(last_o + go, last_p + gp):
                return

    @rule(data=st.data())
    def lookup(self, data):
        target = data.draw(self.targets())
        result = self.both("lookup", target)
        i = bisect.bisect_right(self.model_offsets(), target)
        assert result == ("ok", self.model[i - 1] if i else (self.base, 0))


class TimeMachine(_Machine):
    ES = 12
    SUFFIX = ".timeindex"

    def cls(self, impl):
        return MODS[impl].TimeIndex

    def model_offsets(self):
        return [o for _, o in self.model]

    def offset_of(self, e):
        return e[1]

    def pack(self, entries):
        return pack_times(self.base, entries)

    def model_full(self):
        return len(self.model) >= self.max_entries - 1

    def model_sane(self):
        return True

    def check_last(self):
        last = self.model[-1] if self.model else (-1, self.base)
        assert self.idx["native"].last_entry == self.idx["pure"].last_entry == last

    @rule(data=st.data(), skip=st.booleans())
    def maybe_append(self, data, skip):
        last_t, last_o = self.model[-1] if self.model else (-1, self.base)
        timestamp = data.draw(st.one_of(st.integers(last_t - 2, last_t + 1000),
                                        st.sampled_from([-5, I64_MAX, I64_MAX + 1, -2**64])))
        offset = data.draw(st.one_of(
            st.integers(last_o, last_o + 30), st.integers(last_o - 2, last_o),
            st.sampled_from([self.base - 1, self.base + U32_MAX, self.base + U32_MAX + 1, 2**64])))
        self.append_one(timestamp, offset, skip)

    @rule(gaps=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3)), min_size=1, max_size=30))
    def append_run(self, gaps):
        for gt, go in gaps:
            last_t, last_o = self.model[-1] if self.model else (-1, self.base)
            if last_o + go - self.base > U32_MAX:
                return
            if self.append_one(last_t + gt, last_o + go, False) is None:
                return

    def append_one(self, timestamp, offset, skip):
        """maybe_append to both and check against the model; None on an error."""
        last_t, last_o = self.model[-1] if self.model else (-1, self.base)
        result = self.expect_mutation("maybe_append", timestamp, offset, skip)
        if not result:
            return None
        n = len(self.model)
        if not skip and n >= self.max_entries - 1:
            assert result[:2] == ("err", IndexFullError)
        elif n and offset < last_o:
            assert result[:2] == ("err", CorruptIndexError)
        elif timestamp <= last_t:
            assert result == ("ok", False)
        elif timestamp > I64_MAX or not 0 <= offset - self.base <= U32_MAX:
            assert result[:2] == ("err", CorruptIndexError)
        elif n >= self.max_entries:
            assert result[:2] == ("err", IndexFullError)
        else:
            assert result == ("ok", True)
            self.model.append((timestamp, offset))
        return result[1] if result[0] == "ok" else None

    @rule(data=st.data())
    def lookup(self, data):
        stamps = [t for t, _ in self.model]
        target = data.draw(st.one_of(
            st.sampled_from(stamps + [-1, 0]).flatmap(lambda t: st.integers(t - 1, min(t + 1, I64_MAX))),
            st.integers(-2**63, I64_MAX)))
        result = self.both("lookup", target)
        i = bisect.bisect_right(stamps, target)
        assert result == ("ok", self.model[i - 1] if i else (-1, self.base))


MACHINE_SETTINGS = settings(max_examples=150, stateful_step_count=40, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.mark.parametrize("machine", [OffsetMachine, TimeMachine])
def test_differential_state_machine(machine, tmp_path):
    machine.root = tmp_path
    run_state_machine_as_test(machine, settings=MACHINE_SETTINGS)


# -- lookups -------------------------------------------------------------------------------------

def test_offset_lookup_edges(mod, tmp_path):
    with mod.OffsetIndex(str(tmp_path / "a.index"), 100, 4096) as ix:
        assert ix.lookup(0) == ix.lookup(100) == ix.lookup(I64_MAX) == (100, 0)  # empty
        assert ix.last_offset == 100
        for o, p in [(105, 0), (110, 500), (120, 900)]:
            ix.append(o, p)
        assert ix.lookup(104) == (100, 0)        # before the first entry
        assert ix.lookup(-2**63) == (100, 0)
        assert ix.lookup(105) == (105, 0)        # exact hits
        assert ix.lookup(110) == (110, 500)
        assert ix.lookup(115) == (110, 500)      # between
        assert ix.lookup(120) == (120, 900)
        assert ix.lookup(10**12) == (120, 900)   # after the last
        assert ix.lookup(I64_MAX) == (120, 900)
        with pytest.raises(TypeError):
            ix.lookup(110.0)
        with pytest.raises(OverflowError):
            ix.lookup(2**63)


def test_time_lookup_edges(mod, tmp_path):
    with mod.TimeIndex(str(tmp_path / "a.timeindex"), 100, 4096) as ix:
        assert ix.lookup(I64_MAX) == ix.lookup(0) == (-1, 100)  # empty
        assert ix.last_entry == (-1, 100)
        assert ix.maybe_append(1000, 101) is True
        assert ix.maybe_append(1000, 102) is False  # same timestamp: not indexed
        assert ix.maybe_append(999, 103) is False
        assert ix.maybe_append(2000, 103) is True
        assert ix.lookup(999) == (-1, 100)
        assert ix.lookup(1000) == (1000, 101)
        assert ix.lookup(1500) == (1000, 101)
        assert ix.lookup(2000) == (2000, 103)
        assert ix.lookup(I64_MAX) == (2000, 103)
        with pytest.raises(CorruptIndexError, match="102"):
            ix.maybe_append(3000, 102)  # offsets may not go backwards


@pytest.mark.parametrize("n", [1023, 1024, 1025, 1026, 2500])
def test_offset_lookup_warm_cold_boundary(tmp_path, n):
    """The warm tail is the last 1024 entries; every target around its edge matches the model."""
    base = 1000
    entries = [(base + 3 * i + (i % 2), 10 * i) for i in range(n)]
    offsets = [o for o, _ in entries]
    first_hot = max(0, n - 1 - 1024)
    targets = set(range(base - 2, base + 6))
    for slot in (first_hot - 1, first_hot, first_hot + 1, n - 2, n - 1, n // 2):
        if 0 <= slot < n:
            targets.update(range(offsets[slot] - 2, offsets[slot] + 3))
    targets.update(range(base, offsets[-1] + 3, 7))
    for impl in IMPLS:
        with MODS[impl].OffsetIndex(str(tmp_path / f"{impl}.index"), base, n * 8) as ix:
            for o, p in entries:
                ix.append(o, p)
            assert ix.is_full()
            for t in sorted(targets):
                i = bisect.bisect_right(offsets, t)
                assert ix.lookup(t) == (entries[i - 1] if i else (base, 0)), t


@pytest.mark.parametrize("n", [681, 682, 683, 684, 2000])
def test_time_lookup_warm_cold_boundary(tmp_path, n):
    """The time index's warm tail is 8192 // 12 = 682 entries."""
    entries = [(5 * i + 17, 50 + i // 2) for i in range(n)]
    stamps = [t for t, _ in entries]
    first_hot = max(0, n - 1 - 682)
    targets = set(range(10, 25))
    for slot in (first_hot - 1, first_hot, first_hot + 1, n - 1, n // 3):
        if 0 <= slot < n:
            targets.update(range(stamps[slot] - 2, stamps[slot] + 3))
    targets.update(range(0, stamps[-1] + 10, 11))
    for impl in IMPLS:
        with MODS[impl].TimeIndex(str(tmp_path / f"{impl}.timeindex"), 50, (n + 1) * 12) as ix:
            for t, o in entries:
                assert ix.maybe_append(t, o)
            for t in sorted(targets):
                i = bisect.bisect_right(stamps, t)
                assert ix.lookup(t) == (entries[i - 1] if i else (-1, 50)), t


@pytest.mark.parametrize("kind", ["offset", "time"])
def test_warm_tail_is_searched_first(tmp_path, kind):
    """Slot 0 holds a huge key, the rest ascend: only a search that tries the warm tail first
    (from slot entries-1-8192//entry_size, as Kafka) finds targets just above that slot."""
    n, es, warm = (2000, 8, 1024) if kind == "offset" else (2000, 12, 682)
    keys = [2 * i for i in range(n)]
    keys[0] = 10**6
    path = tmp_path / f"garbled.{kind}"
    if kind == "offset":
        path.write_bytes(b"".join(struct.pack(">II", k, 0) for k in keys))
    else:
        path.write_bytes(b"".join(struct.pack(">qI", k, 0) for k in keys))
    first_hot = n - 1 - warm
    for impl in IMPLS:
        cls = MODS[impl].OffsetIndex if kind == "offset" else MODS[impl].TimeIndex
        with cls(str(path), 0, writable=False) as ix:
            for target in range(keys[first_hot] - 3, keys[first_hot] + 4):
                found = ix.lookup(target)
                if target <= keys[first_hot]:
                    assert found == ((0, 0) if kind == "offset" else (-1, 0)), (impl, target)
                else:
                    assert found[0] == max(k for k in keys[1:] if k <= target)


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.integers(1, 5), min_size=0, max_size=2600),
       targets=st.lists(st.integers(-10, 14000), max_size=60), base=st.integers(0, 10))
def test_offset_lookup_matches_model(tmp_path_factory, gaps, targets, base):
    d = tmp_path_factory.mktemp("lk")
    offsets = [base + s for s in itertools.accumulate(gaps)]
    idx = {impl: MODS[impl].OffsetIndex(str(d / f"{impl}.index"), base, 8 * len(gaps) + 8) for impl in IMPLS}
    for i, o in enumerate(offsets):
        for ix in idx.values():
            ix.append(o, i)
    for t in targets:
        i = bisect.bisect_right(offsets, t)
        want = (offsets[i - 1], i - 1) if i else (base, 0)
        assert idx["native"].lookup(t) == idx["pure"].lookup(t) == want
    for ix in idx.values():
        ix.close()
    assert open(d / "native.index", "rb").read() == open(d / "pure.index", "rb").read()


# -- files across implementations ---------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.tuples(st.integers(1, 2**20), st.integers(0, 2**16)), max_size=300),
       writer=st.sampled_from(IMPLS))
def test_files_read_across_implementations(tmp_path_factory, gaps, writer):
    d = tmp_path_factory.mktemp("x")
    base = 2**33
    entries, o, p = [], base - 1, 0
    for go, gp in gaps:
        o, p = o + go, p + gp
        if o - base > U32_MAX:
            break
        entries.append((o, p))
    stamps = [(1_600_000_000_000 + 10 * i, o) for i, (o, _) in enumerate(entries)]
    with MODS[writer].OffsetIndex(str(d / "a.index"), base) as ix:
        for e in entries:
            ix.append(*e)
    with MODS[writer].TimeIndex(str(d / "a.timeindex"), base) as tx:
        for e in stamps:
            assert tx.maybe_append(*e)
    assert open(d / "a.index", "rb").read() == pack_offsets(base, entries)
    assert open(d / "a.timeindex", "rb").read() == pack_times(base, stamps)
    for impl in IMPLS:
        for writable in (False, True):
            with MODS[impl].OffsetIndex(str(d / "a.index"), base, writable=writable) as ix:
                assert len(ix) == len(entries)
                assert [ix.entry(i) for i in range(len(ix))] == entries
                ix.sanity_check()
            with MODS[impl].TimeIndex(str(d / "a.timeindex"), base, writable=writable) as tx:
                assert [tx.entry(i) for i in range(len(tx))] == stamps
                tx.sanity_check()
        assert os.path.getsize(d / "a.index") == 8 * len(entries)  # trimmed again on close


def test_kafka_golden_bytes(mod, tmp_path):
    with mod.OffsetIndex(str(tmp_path / "00000000000000000100.index"), 100, 64) as ix:
        ix.append(105, 4096)
        ix.append(100 + U32_MAX, U32_MAX)
    assert open(tmp_path / "00000000000000000100.index", "rb").read() == \
        b"\x00\x00\x00\x05\x00\x00\x10\x00" + b"\xff" * 8
    with mod.TimeIndex(str(tmp_path / "00000000000000000100.timeindex"), 100, 64) as tx:
        tx.maybe_append(0x0102030405060708, 0x1000064)
    assert open(tmp_path / "00000000000000000100.timeindex", "rb").read() == \
        bytes(range(1, 9)) + b"\x01\x00\x00\x00"


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=400), base=st.integers(0, 100),
       targets=st.lists(st.integers(-2**63, I64_MAX) | st.integers(-5, 300), max_size=20))
def test_garbled_files_read_identically(tmp_path_factory, data, base, targets):
    """Arbitrary bytes: both implementations agree on every read and never read past the entries."""
    d = tmp_path_factory.mktemp("g")
    for suffix, name, lookups in ((".index", "OffsetIndex", "lookup"), (".timeindex", "TimeIndex", "lookup")):
        path = d / f"f{suffix}"
        path.write_bytes(data)
        idx = [getattr(MODS[impl], name)(str(path), base, writable=False) for impl in IMPLS]
        es = 8 if suffix == ".index" else 12
        assert idx[0].entries == idx[1].entries == len(data) // es
        results = [[outcome(ix, "sanity_check")] + [outcome(ix, "entry", i) for i in range(-1, ix.entries + 1)]
                   + [outcome(ix, lookups, t) for t in targets] + [outcome(ix, "truncate_to", 5)]
                   for ix in idx]
        assert results[0] == results[1]
        if len(data) % es:
            assert results[0][0][:2] == ("err", CorruptIndexError)
        for ix in idx:
            ix.close()
        assert path.read_bytes() == data  # read-only: never modified


# -- full, sanity, reopen, errors ---------------------------------------------------------------

def test_full_offset_index(mod, tmp_path):
    with mod.OffsetIndex(str(tmp_path / "a.index"), 0, 8 * 10 + 7) as ix:
        assert ix.max_entries == 10
        assert os.path.getsize(tmp_path / "a.index") == 80  # preallocated, rounded down
        for i in range(10):
            assert not ix.is_full()
            ix.append(i, i)
        assert ix.is_full()
        with pytest.raises(IndexFullError):
            ix.append(10, 10)
        ix.resize(8 * 12)
        assert ix.max_entries == 12 and not ix.is_full()
        ix.append(10, 10)
        assert ix.lookup(10) == (10, 10)
        with pytest.raises(ValueError):
            ix.resize(8 * 10)  # below the 11 entries held


def test_full_time_index_keeps_roll_slot(mod, tmp_path):
    with mod.TimeIndex(str(tmp_path / "a.timeindex"), 0, 12 * 4) as tx:
        assert tx.max_entries == 4
        for i in range(3):
            assert not tx.is_full()
            assert tx.maybe_append(i + 1, i)
        assert tx.is_full()  # the last slot is reserved for the roll
        with pytest.raises(IndexFullError):
            tx.maybe_append(10, 5)
        assert tx.maybe_append(10, 5, skip_full_check=True)
        with pytest.raises(IndexFullError):
            tx.maybe_append(11, 6, skip_full_check=True)
        assert tx.maybe_append(10, 6, skip_full_check=True) is False  # not newer: nothing to add
        assert tx.last_entry == (10, 5)


@pytest.mark.parametrize("entries, size_extra, match", [
    ([(0, 0), (5, 10), (5, 20)], 0, "offset 105 at slot 2 is not above offset 105"),
    ([(0, 0), (5, 10), (3, 20)], 0, "offset 103 at slot 2 is not above"),
    ([(0, 0), (5, 10), (6, 9)], 0, "position 9 at slot 2 is below position 10"),
    ([(0, 0), (5, 10)], 3, "had 19 bytes when opened, not a multiple of 8"),
])
def test_offset_sanity_check(tmp_path, entries, size_extra, match):
    path = tmp_path / "a.index"
    path.write_bytes(b"".join(struct.pack(">II", o, p) for o, p in entries) + b"\x01" * size_extra)
    messages = []
    for impl in IMPLS:
        for writable in (False, True):
            with MODS[impl].OffsetIndex(str(path), 100, 4096, writable=writable) as ix:
                assert ix.entries == len(entries)
                with pytest.raises(CorruptIndexError, match=match) as info:
                    ix.sanity_check()
                messages.append(str(info.value))
                if writable:
                    ix.truncate()
                    ix.sanity_check()  # an emptied index is consistent again
        path.write_bytes(b"".join(struct.pack(">II", o, p) for o, p in entries) + b"\x01" * size_extra)
    assert len(set(messages)) == 1


@pytest.mark.parametrize("entries, size_extra, match", [
    ([(5, 0), (5, 1)], 0, "timestamp 5 at slot 1 is not above timestamp 5"),
    ([(5, 0), (4, 1)], 0, "timestamp 4 at slot 1 is not above"),
    ([(5, 3), (6, 2)], 0, "offset 102 at slot 1 is below offset 103"),
    ([(5, 0)], 5, "had 17 bytes when opened, not a multiple of 12"),
])
def test_time_sanity_check(tmp_path, entries, size_extra, match):
    path = tmp_path / "a.timeindex"
    path.write_bytes(b"".join(struct.pack(">qI", t, o) for t, o in entries) + b"\x00" * size_extra)
    messages = []
    for impl in IMPLS:
        with MODS[impl].TimeIndex(str(path), 100, writable=False) as tx:
            with pytest.raises(CorruptIndexError, match=match) as info:
                tx.sanity_check()
            messages.append(str(info.value))
    assert len(set(messages)) == 1


def test_reopen_after_close_keeps_entries(mod, tmp_path):
    path = str(tmp_path / "a.index")
    with mod.OffsetIndex(path, 50, 4096) as ix:
        for i in range(20):
            ix.append(50 + 2 * i, 100 * i)
    assert os.path.getsize(path) == 20 * 8  # trimmed on close
    with mod.OffsetIndex(path, 50, writable=False) as ro:
        assert ro.entries == ro.max_entries == 20 and ro.is_full()
        assert ro.lookup(77) == (76, 1300)
        with pytest.raises(io.UnsupportedOperation):
            ro.append(200, 5000)
        with pytest.raises(io.UnsupportedOperation):
            ro.truncate_to(60)
    with mod.OffsetIndex(path, 50, 4096) as ix:
        assert ix.entries == 20 and ix.max_entries == 512  # preallocated again
        ix.append(200, 5000)
        assert ix.last_offset == 200
    assert os.path.getsize(path) == 21 * 8


def test_untrimmed_file_after_crash_counts_padding(mod, tmp_path):
    """An unclean shutdown leaves the preallocated file: every slot counts and the log rebuilds it."""
    path = tmp_path / "a.index"
    ix = mod.OffsetIndex(str(path), 0, 800)
    for i in range(5):
        ix.append(i + 1, i * 10)
    ix.flush()
    shutil.copy(path, tmp_path / "crash.index")  # the file as a crash would leave it
    ix.close()
    with mod.OffsetIndex(str(tmp_path / "crash.index"), 0, 800) as crashed:
        assert crashed.entries == 100
        assert crashed.entry(4) == (5, 40) and crashed.entry(5) == (0, 0)
        with pytest.raises(CorruptIndexError):
            crashed.sanity_check()
    tpath = tmp_path / "b.timeindex"
    tx = mod.TimeIndex(str(tpath), 0, 120)
    tx.maybe_append(7, 1)
    tx.flush()
    shutil.copy(tpath, tmp_path / "crash.timeindex")
    tx.close()
    with mod.TimeIndex(str(tmp_path / "crash.timeindex"), 0, writable=False) as crashed:
        assert crashed.entries == 10
        with pytest.raises(CorruptIndexError):
            crashed.sanity_check()


def test_truncate_to_and_trim(mod, tmp_path):
    path = str(tmp_path / "a.index")
    ix = mod.OffsetIndex(path, 10, 400)
    for i in range(10):
        ix.append(10 + 10 * i, i)
    ix.truncate_to(55)  # drops 60.. ; 55 itself is not an entry
    assert ix.last_offset == 50 and len(ix) == 5
    ix.truncate_to(50)  # drops the exact hit too
    assert ix.last_offset == 40 and len(ix) == 4
    ix.truncate_to(10**15)
    assert len(ix) == 4
    ix.trim_to_valid_size()
    assert os.path.getsize(path) == 32 and ix.is_full()
    assert ix.lookup(45) == (40, 3)  # still usable after the trim
    with pytest.raises(IndexFullError):
        ix.append(45, 9)
    ix.truncate_to(0)
    assert len(ix) == 0 and ix.last_offset == 10
    ix.trim_to_valid_size()  # empty: nothing mapped, still answers
    assert os.path.getsize(path) == 0 and ix.lookup(100) == (10, 0)
    ix.resize(80)
    ix.append(11, 0)
    ix.close()
    assert os.path.getsize(path) == 8


def test_time_truncate_to_with_repeated_offsets(mod, tmp_path):
    with mod.TimeIndex(str(tmp_path / "a.timeindex"), 0, 240) as tx:
        for ts, off in [(1, 5), (2, 5), (3, 5), (4, 8), (5, 9)]:
            assert tx.maybe_append(ts, off)
        tx.truncate_to(8)
        assert tx.last_entry == (3, 5) and len(tx) == 3
        tx.truncate_to(5)  # every entry at offset 5 goes
        assert len(tx) == 0 and tx.last_entry == (-1, 0)


def test_closed_and_bad_arguments(mod, tmp_path):
    path = str(tmp_path / "a.index")
    ix = mod.OffsetIndex(path, 0, 80)
    ix.append(1, 1)
    ix.close()
    ix.close()
    assert ix.entries == 1
    for call in (lambda: ix.lookup(1), lambda: ix.entry(0), lambda: ix.append(2, 2), ix.flush, ix.write_back,
                 ix.sanity_check, lambda: ix.last_offset, lambda: ix.resize(80)):
        with pytest.raises(ValueError, match="closed"):
            call()
    with mod.OffsetIndex(path, 0, 80) as ix:
        for bad in [("1", 2), (1.0, 2), (1, None)]:
            with pytest.raises(TypeError):
                ix.append(*bad)
        with pytest.raises(TypeError):
            ix.entry(0.0)
        assert len(ix) == 1
    with pytest.raises(ValueError):
        mod.OffsetIndex(path, -1, 80)
    with pytest.raises(ValueError):
        mod.OffsetIndex(path, MAX_BASE + 1, 80)
    with pytest.raises(ValueError):
        mod.TimeIndex(str(tmp_path / "b.timeindex"), 0, 11)
    with pytest.raises(FileNotFoundError):
        mod.OffsetIndex(str(tmp_path / "missing.index"), 0, writable=False)
    empty = tmp_path / "empty.index"
    empty.write_bytes(b"")
    with mod.OffsetIndex(str(empty), 0, writable=False) as ro:  # nothing to map
        assert ro.entries == ro.max_entries == 0
        assert ro.lookup(5) == (0, 0)
        ro.sanity_check()
        ro.flush()
        ro.write_back()
        with pytest.raises(IndexError):
            ro.entry(0)
    with mod.OffsetIndex(tmp_path / "pathlike.index", 0, 80) as px:  # os.PathLike accepted
        assert isinstance(px.path, str)


# -- write-back: entries live in memory until write_back / flush / trim / resize / close -------

WRITE_BACK_POINTS = {
    "write_back": lambda ix: ix.write_back(),
    "flush": lambda ix: ix.flush(),
    "trim": lambda ix: ix.trim_to_valid_size(),
    "resize": lambda ix: ix.resize(8 * 12 * 10),
    "close": lambda ix: ix.close(),
}


@pytest.mark.parametrize("point", sorted(WRITE_BACK_POINTS))
def test_appends_reach_the_file_only_at_a_write_back(mod, tmp_path, point):
    path = tmp_path / "a.index"
    tpath = tmp_path / "a.timeindex"
    ix = mod.OffsetIndex(str(path), 100, 8 * 12)
    tx = mod.TimeIndex(str(tpath), 100, 12 * 8)
    entries = [(100 + 3 * i, 50 * i) for i in range(6)]
    stamps = [(1000 + i, 100 + 3 * i) for i in range(6)]
    for e, t in zip(entries, stamps):
        ix.append(*e)
        assert tx.maybe_append(*t)
    assert path.read_bytes() == bytes(8 * 12)  # preallocated, nothing written yet
    assert tpath.read_bytes() == bytes(12 * 8)
    assert ix.lookup(110) == (109, 150) and tx.last_entry == (1005, 115)  # served from memory
    WRITE_BACK_POINTS[point](ix)
    WRITE_BACK_POINTS[point](tx)
    assert path.read_bytes()[:48] == pack_offsets(100, entries)
    assert tpath.read_bytes()[:72] == pack_times(100, stamps)
    if point in ("trim", "close"):
        assert path.read_bytes() == pack_offsets(100, entries)
        assert tpath.read_bytes() == pack_times(100, stamps)
    if point != "close":
        assert [ix.entry(i) for i in range(len(ix))] == entries  # still open and usable
        assert tx.lookup(1003) == (1003, 109)
        ix.close()
        tx.close()
    assert path.read_bytes() == pack_offsets(100, entries)
    assert tpath.read_bytes() == pack_times(100, stamps)


def test_write_back_writes_only_what_changed(mod, tmp_path):
    path = tmp_path / "a.index"
    ix = mod.OffsetIndex(str(path), 0, 80)
    for i in range(4):
        ix.append(i + 1, i)
    ix.write_back()
    assert path.read_bytes() == pack_offsets(0, [(1, 0), (2, 1), (3, 2), (4, 3)]) + bytes(48)
    ix.append(5, 4)
    path.write_bytes(b"\xee" * 80)  # not rewritten unless changed since the last write-back
    ix.write_back()
    assert path.read_bytes() == b"\xee" * 32 + pack_offsets(0, [(5, 4)]) + b"\xee" * 40
    ix.truncate_to(3)  # slot 2 is the lowest changed
    ix.append(7, 9)
    ix.flush()
    assert path.read_bytes() == (b"\xee" * 16 + pack_offsets(0, [(7, 9)]) + b"\xee" * 8
                                 + pack_offsets(0, [(5, 4)]) + b"\xee" * 40)  # stale slot 4 stays
    ix.truncate()
    ix.close()
    assert path.read_bytes() == b""


def test_truncate_to_then_trim_leaves_exactly_the_rest(mod, tmp_path):
    path = tmp_path / "a.index"
    tpath = tmp_path / "a.timeindex"
    ix = mod.OffsetIndex(str(path), 10, 800)
    tx = mod.TimeIndex(str(tpath), 10, 1200)
    for i in range(10):
        ix.append(10 + 10 * i, 100 * i)
        tx.maybe_append(5000 + i, 10 + 10 * i)
    ix.flush()
    tx.write_back()
    ix.truncate_to(45)
    tx.truncate_to(45)
    ix.trim_to_valid_size()
    tx.trim_to_valid_size()
    assert path.read_bytes() == pack_offsets(10, [(10 + 10 * i, 100 * i) for i in range(4)])
    assert tpath.read_bytes() == pack_times(10, [(5000 + i, 10 + 10 * i) for i in range(4)])
    # Not yet written back either: truncate, refill below the old end, trim.
    ix.resize(800)
    ix.truncate_to(20)
    ix.append(25, 7)
    ix.trim_to_valid_size()
    assert path.read_bytes() == pack_offsets(10, [(10, 0), (25, 7)])
    ix.close()
    tx.close()
    assert path.read_bytes() == pack_offsets(10, [(10, 0), (25, 7)])


@pytest.mark.parametrize("writer, reader", list(itertools.product(IMPLS, IMPLS)))
def test_reopen_after_close_has_every_entry(tmp_path, writer, reader):
    path, tpath = str(tmp_path / "a.index"), str(tmp_path / "a.timeindex")
    entries = [(2**33 + 5 * i, 40 * i) for i in range(300)]
    stamps = [(10**12 + 7 * i, 2**33 + 5 * i) for i in range(300)]
    with MODS[writer].OffsetIndex(path, 2**33) as ix, MODS[writer].TimeIndex(tpath, 2**33) as tx:
        for e, t in zip(entries[:200], stamps[:200]):
            ix.append(*e)
            tx.maybe_append(*t)
        ix.write_back()  # part written back early, the rest only by close
        for e, t in zip(entries[200:], stamps[200:]):
            ix.append(*e)
            tx.maybe_append(*t)
    with MODS[reader].OffsetIndex(path, 2**33) as ix, MODS[reader].TimeIndex(tpath, 2**33) as tx:
        assert [ix.entry(i) for i in range(len(ix))] == entries  # loaded into memory
        assert [tx.entry(i) for i in range(len(tx))] == stamps
        ix.sanity_check()
        tx.sanity_check()
        ix.append(2**33 + 5000, 99999)
        assert tx.maybe_append(10**13, 2**33 + 5000)
    with MODS[writer].OffsetIndex(path, 2**33, writable=False) as ro:
        assert ro.entries == 301 and ro.entry(300) == (2**33 + 5000, 99999)
    with MODS[writer].TimeIndex(tpath, 2**33, writable=False) as ro:
        assert ro.last_entry == (10**13, 2**33 + 5000)
    assert open(path, "rb").read() == pack_offsets(2**33, entries + [(2**33 + 5000, 99999)])


def test_failed_write_back_keeps_entries_dirty(mod, tmp_path):
    path = tmp_path / "a.index"
    ix = mod.OffsetIndex(str(path), 0, 80)
    ix.append(1, 10)
    ix.write_back()
    ix.append(2, 20)
    os.remove(path)
    with pytest.raises(FileNotFoundError):
        ix.write_back()
    with pytest.raises(FileNotFoundError):
        ix.flush()
    path.write_bytes(b"")
    ix.write_back()  # retried from the same slot: only the second entry
    assert path.read_bytes() == bytes(8) + pack_offsets(0, [(2, 20)])
    assert ix.entries == 2 and ix.lookup(5) == (2, 20)
    ix.close()
    assert path.read_bytes() == bytes(8) + pack_offsets(0, [(2, 20)])


def test_open_loads_existing_entries_into_memory(mod, tmp_path):
    path = tmp_path / "a.index"
    old = [(3, 0), (9, 4096)]
    path.write_bytes(pack_offsets(0, old))
    ix = mod.OffsetIndex(str(path), 0, 64)
    assert path.read_bytes() == pack_offsets(0, old) + bytes(48)  # preallocated
    path.write_bytes(b"\xff" * 64)  # later changes to the file are not seen: the entries are in memory
    assert [ix.entry(i) for i in range(2)] == old and ix.lookup(10) == (9, 4096)
    ix.append(12, 5000)
    ix.close()
    assert path.read_bytes() == b"\xff" * 16 + pack_offsets(0, [(12, 5000)])


def test_write_back_concurrent_with_mutations(mod, tmp_path):
    """write_back runs without the GIL: appends, truncations and remaps meanwhile lose nothing."""
    import threading
    path = tmp_path / "a.index"
    ix = mod.OffsetIndex(str(path), 0, 8 * 64)
    errors = []
    done = threading.Event()

    def writer():
        try:
            for i in range(400):
                # flush's fdatasync keeps the memory pinned for a while: remaps land meanwhile.
                ix.flush() if i % 4 == 0 else ix.write_back()
                if done.is_set():
                    break
        except Exception as exc:  # reported by the main thread's assertion
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    model = []
    try:
        for step in range(300):
            if len(model) < ix.max_entries:
                o = model[-1][0] + 1 + step % 3 if model else 0
                ix.append(o, step)
                model.append((o, step))
            if step % 7 == 3 and model:
                cut = model[len(model) // 2][0]
                ix.truncate_to(cut)
                model = [e for e in model if e[0] < cut]
            if step % 11 == 5:
                ix.resize(8 * (len(model) + 1 + step % 50))  # a remap while the writer may be pinned
            if step % 29 == 0:
                ix.trim_to_valid_size()
                ix.resize(8 * 64)
    finally:
        done.set()
        thread.join()
    assert errors == []
    assert [ix.entry(i) for i in range(len(ix))] == model
    ix.close()
    assert path.read_bytes() == pack_offsets(0, model)


def test_remap_during_a_long_write_back(mod, tmp_path):
    """Resizes swap the memory while another thread pwrites megabytes from it (without the GIL):
    the write-back neither fails nor loses an entry, and the resizes see no dirty entries left."""
    import threading
    n = 1_000_000
    path = tmp_path / "a.index"
    ix = mod.OffsetIndex(str(path), 0, 8 * (n + 2))
    for i in range(n):
        ix.append(i, i)
    errors = []
    started = threading.Event()

    def writer():
        try:
            started.set()
            ix.write_back()  # one pwrite of 8 MB without the GIL, which the main thread then takes
        except BaseException as exc:  # reported by the main thread's assertion
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    assert started.wait(60)
    for k in range(1, 7):  # each copies the entries to new, twice as large memory and drops the old
        ix.resize(8 * (n + 2) << k)  # (so the dropped range is not simply reused by the next one)
    ix.resize(8 * (n + 1))
    thread.join()
    assert errors == []
    ix.append(n + 5, 7)
    ix.close()
    data = path.read_bytes()
    assert len(data) == 8 * (n + 1)
    assert data[-16:] == struct.pack(">IIII", n - 1, n - 1, n + 5, 7)
    assert data[:8 * n] == b"".join(struct.pack(">II", i, i) for i in range(n))
