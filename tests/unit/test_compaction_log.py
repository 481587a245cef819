"""Log compaction on the storage layer: random keyed workloads and forced cleanings against a model.

The model is "latest record per key": after every cleaning, each key's latest record is still in
the log with its offset, timestamp, headers and value; every record below the cleaned end is the
latest of its key among the offsets below that end; nothing above it changed; a tombstone goes
only after a cleaning at least delete.retention.ms after an earlier cleaning saw it, and always
goes at the first cleaning after that. Reads from any offset start at the next surviving one.
"""
import dataclasses
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from pybroker.log import LogConfig
from pybroker.log.cleaner import Cleaner, CleanerSettings, Throttler
from pybroker.log.manager import LogManager
from pybroker.records import Record, build_batch, decode_records
from tests.logutil import check_log_structure

CODECS = (0, 1, 2, 3, 4)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def open_manager(directory, config):
    return LogManager([directory], config, background=False, cleaner=CleanerSettings()).startup()


def new_cleaner(map_bytes=1 << 20):
    return Cleaner(map_bytes, 0.9, Throttler(float("inf"), threading.Event()))


def records_on_disk(lg):
    """offset -> (key, value, timestamp, headers) of every record in the log's files, in order."""
    out = {}
    for seg in lg.segments:
        with open(seg.log_path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
            if int.from_bytes(data[pos + 57:pos + 61], "big"):
                for r in decode_records(data[pos:pos + size]):
                    assert r.offset not in out
                    out[r.offset] = (r.key, r.value, r.timestamp, r.headers)
            pos += size
    assert list(out) == sorted(out)
    return out


class Workload:
    """What was written at each offset, and the cleanings that ran (time, end offset)."""

    def __init__(self, rng, keys=30):
        self.rng = rng
        self.keys = [b"key-%d" % i for i in range(keys)]
        self.written = {}  # offset -> (key, value, timestamp, headers)
        self.cleanings = []  # (now, end): the cleaned section ended at ``end``

    def append(self, lg, batches, records_per_batch, codec, producer_id=-1):
        for _ in range(batches):
            recs, base = [], lg.log_end_offset
            for i in range(self.rng.randint(1, records_per_batch)):
                key = self.rng.choice(self.keys)
                value = None if self.rng.random() < 0.15 else os.urandom(self.rng.randint(0, 40))
                headers = [("h", b"%d" % (base + i))] if self.rng.random() < 0.5 else []
                ts = 1_000_000 + base + i + self.rng.randint(0, 5)
                recs.append(Record(value=value, key=key, headers=headers, timestamp=ts))
            batch = build_batch(recs, attributes=codec, producer_id=producer_id, producer_epoch=0,
                                base_sequence=base if producer_id >= 0 else -1)
            info = lg.append(batch)
            for i, r in enumerate(recs):
                self.written[info.first_offset + i] = (r.key, r.value, r.timestamp, [(k, v) for k, v in r.headers])

    def check(self, lg, delete_retention_ms):
        on_disk = records_on_disk(lg)
        for offset, rec in on_disk.items():
            assert rec == self.written[offset], f"offset {offset} changed"
        latest = {}
        for offset, (key, value, _, _) in self.written.items():
            latest[key] = (offset, value)
        for key, (offset, value) in latest.items():
            if value is not None:
                assert offset in on_disk, f"the latest value of {key!r} (offset {offset}) is gone"
        if not self.cleanings:
            assert set(on_disk) == set(self.written)
            return on_disk
        now, end = self.cleanings[-1]
        last_below = {}
        for offset, (key, _, _, _) in self.written.items():
            if offset < end:
                last_below[key] = offset
        for offset, (key, value, _, _) in on_disk.items():
            if offset < end:
                assert last_below[key] == offset, f"offset {offset} of {key!r} survived a later record"
        for offset in self.written:
            if offset >= end:
                assert offset in on_disk, f"offset {offset} above the cleaned end {end} is gone"
        for key, (offset, value) in latest.items():
            if value is not None or offset >= end:
                continue
            seen = [t for t, e in self.cleanings[:-1] if offset < e]
            if offset in on_disk:  # kept: no earlier cleaning saw it long enough ago
                assert not any(now > t + delete_retention_ms for t in seen), f"tombstone {offset} overstayed"
            else:  # removed: only after its delete horizon
                assert any(now > t + delete_retention_ms for t in seen), f"tombstone {offset} went early"
        return on_disk


def check_reads(lg, on_disk):
    """A read from any offset starts at the first batch that ends at or after it (records removed by
    the cleaner leave batches with fewer records, or no batch), and skips no surviving record."""
    for offset in range(lg.log_start_offset, lg.log_end_offset):
        data = lg.read(offset, 1 << 20).read()
        later = [o for o in on_disk if o >= offset]
        if not data:
            assert not later, (offset, later[:1])
            continue
        base = int.from_bytes(data[:8], "big")
        last = base + int.from_bytes(data[23:27], "big")
        assert base <= max(offset, base) and last >= offset, (offset, base, last)
        got = [r.offset for r in decode_records(data[:int.from_bytes(data[8:12], "big") + 12])]
        assert [o for o in later if o <= last] == [o for o in got if o >= offset], (offset, got)


@pytest.mark.parametrize("seed", range(12))
def test_random_workloads_match_the_latest_value_model(tmp_path, seed):
    rng = random.Random(seed)
    delete_retention = rng.choice([0, 50, 10_000])
    config = LogConfig(cleanup_policy="compact", segment_bytes=rng.choice([4000, 4000, 16000]),
                       index_interval_bytes=rng.choice([0, 256, 4096]), retention_ms=-1,
                       min_cleanable_dirty_ratio=0.0, delete_retention_ms=delete_retention)
    m = open_manager(str(tmp_path), config)
    lg = m.get_or_create_log("t", 0, config)
    work = Workload(rng, keys=rng.choice([3, 30, 300]))
    cleaner = new_cleaner(rng.choice([200, 1 << 20]))  # a tiny map fills up and cleans in several passes
    now = 0
    for _ in range(rng.randint(4, 9)):
        work.append(lg, rng.randint(1, 25), rng.choice([1, 5, 40]), rng.choice(CODECS))
        if rng.random() < 0.7:
            lg.roll()
        now += rng.choice([1, 30, 100, 20_000])
        cleaned = m.cleaner.clean_once(cleaner, now=now)
        if cleaned:
            work.cleanings.append((now, m.cleaner.first_dirty[("t", 0)]))
        on_disk = work.check(lg, delete_retention)
        check_log_structure(lg)
    check_reads(lg, on_disk)
    m.shutdown()
    m = open_manager(str(tmp_path), config)  # a clean restart keeps it all, gaps included
    lg = m.get_log("t", 0)
    assert records_on_disk(lg) == on_disk
    m.shutdown()


def test_unclean_restart_recovers_compacted_segments(tmp_path):
    rng = random.Random(7)
    config = LogConfig(cleanup_policy="compact", segment_bytes=1500, retention_ms=-1,
                       min_cleanable_dirty_ratio=0.0, delete_retention_ms=10**9)
    m = open_manager(str(tmp_path), config)
    lg = m.get_or_create_log("t", 0, config)
    work = Workload(rng, keys=5)
    work.append(lg, 40, 8, 0)
    lg.roll()
    assert m.cleaner.clean_once(new_cleaner(), now=1)
    before = records_on_disk(lg)
    paths = [(seg.index_path, seg.timeindex_path) for seg in lg.segments]
    m.shutdown()
    os.remove(os.path.join(str(tmp_path), ".kafka_cleanshutdown"))  # as after a crash
    for index_paths in paths:  # lost indexes: every segment is rebuilt from its .log
        for path in index_paths:
            os.remove(path)
    with open(os.path.join(str(tmp_path), "recovery-point-offset-checkpoint"), "w") as f:
        f.write("0\n1\nt 0 0\n")  # nothing counted as flushed: every segment is re-validated
    m2 = open_manager(str(tmp_path), config)
    assert records_on_disk(m2.get_log("t", 0)) == before
    m2.shutdown()


def test_idempotent_producers_last_batches_stay_even_when_emptied(tmp_path):
    config = LogConfig(cleanup_policy="compact", segment_bytes=10_000, retention_ms=-1, min_cleanable_dirty_ratio=0.0)
    m = open_manager(str(tmp_path), config)
    lg = m.get_or_create_log("t", 0, config)
    lg.append(build_batch([Record(b"old", b"k")], producer_id=9, producer_epoch=0, base_sequence=0))
    lg.append(build_batch([Record(b"new", b"k")], producer_id=10, producer_epoch=0, base_sequence=0))
    lg.append(build_batch([Record(b"newer", b"k")]))
    lg.roll()
    lg.last_batches_of_producers = lambda: {0}  # producer 9's last batch starts at offset 0
    assert m.cleaner.clean_once(new_cleaner(), now=1)
    headers = []
    with open(lg.segments[0].log_path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
        headers.append((int.from_bytes(data[pos:pos + 8], "big"), int.from_bytes(data[pos + 43:pos + 51], "big",
                                                                                 signed=True),
                        int.from_bytes(data[pos + 57:pos + 61], "big")))
        pos += size
    # producer 9's batch stays, empty; producer 10's superseded batch goes; the latest record stays
    assert headers == [(0, 9, 0), (2, -1, 1)]
    m.shutdown()


def test_compact_only_logs_ignore_time_and_size_retention(tmp_path):
    config = LogConfig(cleanup_policy="compact", segment_bytes=300, retention_ms=1, retention_bytes=1)
    m = open_manager(str(tmp_path), config)
    lg = m.get_or_create_log("t", 0, config)
    for i in range(10):
        lg.append(build_batch([Record(b"v" * 50, b"k%d" % i, timestamp=1)]))
    assert lg.delete_old_segments(now=10**12) == 0
    lg.update_config(LogConfig(cleanup_policy="compact,delete", segment_bytes=300, retention_ms=1))
    assert lg.delete_old_segments(now=10**12) > 0
    m.shutdown()


# ---- kill -9 while cleaning ---------------------------------------------------------------------

CHILD = os.path.join(ROOT, "tests", "cleaner_child.py")


def test_kill_9_during_cleaning_loses_nothing_the_model_keeps(tmp_path):
    """50 rounds: a child appends and cleans in a loop and is killed at a random moment; the log reopens
    consistent, every record is the one written at its offset, and each key's latest acknowledged record
    (or a later one of that key) is there."""
    from tests.cleaner_child import CONFIG, KEYS, record_for
    rng = random.Random(50)
    d = str(tmp_path)
    acked_last = {}  # key -> highest acknowledged offset
    mid_cleaning = 0
    for round_ in range(50):
        rate = rng.choice([100_000.0, 400_000.0, float("inf")])
        child = subprocess.Popen([sys.executable, CHILD, d, str(round_), str(rate)], stdout=subprocess.PIPE,
                                 text=True)
        try:
            assert child.stdout.readline().startswith("ready")
            lines, in_cleaning = rng.randint(5, 40), rng.random() < 0.7
            for i in range(200):  # a random moment: some appends and cleanings in, often inside a cleaning
                line = child.stdout.readline()
                if line.startswith("A "):
                    first, last = map(int, line.split()[1:])
                    for offset in range(first, last + 1):
                        acked_last[record_for(offset, round_).key] = offset
                if i >= lines and (not in_cleaning or line.startswith("C")):
                    break
            if in_cleaning:
                time.sleep(rng.uniform(0, 0.15))  # where in the (throttled) cleaning the kill lands
            mid_cleaning += any(n.endswith((".cleaned", ".swap")) for n in os.listdir(os.path.join(d, "t-0")))
            child.send_signal(signal.SIGKILL)
            child.wait(30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(30)
            child.stdout.close()
        m = open_manager(d, CONFIG)
        lg = m.get_log("t", 0)
        on_disk = records_on_disk(lg)
        latest_on_disk = {}
        for offset, (key, value, ts, _) in on_disk.items():
            written_round = int(value.split(b"-")[0][1:])
            assert (key, value, ts) == (lambda r: (r.key, r.value, r.timestamp))(record_for(offset, written_round))
            latest_on_disk[key] = offset
        for key, offset in acked_last.items():
            assert latest_on_disk.get(key, -1) >= offset, f"round {round_}: {key!r} lost offset {offset}"
        check_log_structure(lg)
        m.shutdown()
    assert len(acked_last) == KEYS
    assert mid_cleaning >= 5, f"only {mid_cleaning} of 50 kills landed while a cleaned segment was being written"


def test_reads_during_cleaning_always_see_whole_valid_batches(tmp_path):
    """A reader thread fetching from random offsets while cleanings swap segments under it."""
    from pybroker import core
    rng = random.Random(3)
    config = LogConfig(cleanup_policy="compact", segment_bytes=3000, retention_ms=-1,
                       min_cleanable_dirty_ratio=0.0, delete_retention_ms=0)
    m = open_manager(str(tmp_path), config)
    lg = m.get_or_create_log("t", 0, config)
    work = Workload(rng, keys=10)
    stop, problems, reads = threading.Event(), [], [0]

    def reader():
        local = random.Random(4)
        while not stop.is_set() and reads[0] < 200_000:
            end = lg.log_end_offset
            offset = local.randrange(lg.log_start_offset, end) if end > lg.log_start_offset else 0
            try:
                data = lg.read(offset, 4096).read()
                pos = 0
                while pos + 61 <= len(data):
                    info = core.batch.parse_header(data, pos)
                    if pos + info.size > len(data):
                        break  # the slice may cut the last batch, as clients expect
                    core.batch.validate(data, pos, True, True)
                    for r in decode_records(data[pos:pos + info.size]):
                        written = work.written.get(r.offset)  # None: appended, not yet noted by the writer
                        if written is not None and (r.key, r.value, r.timestamp, r.headers) != written:
                            problems.append((offset, r.offset))
                    pos += info.size
            except Exception as exc:  # noqa: BLE001 (any failure is a finding)
                if not isinstance(exc, OSError) or "closed" not in str(exc):
                    problems.append(repr(exc))
            reads[0] += 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        cleaner = new_cleaner()
        for round_ in range(30):
            work.append(lg, 10, 8, rng.choice(CODECS))
            lg.roll()
            m.cleaner.clean_once(cleaner, now=round_ * 1000)
    finally:
        stop.set()
        thread.join(60)
    assert not problems, problems[:5]
    assert reads[0] > 100
    m.shutdown()


def test_min_and_max_compaction_lag(tmp_path):
    """Records younger than min.compaction.lag.ms stay dirty; max.compaction.lag.ms forces a cleaning
    below min.cleanable.dirty.ratio and rolls an old active segment so that it can be cleaned."""
    config = LogConfig(cleanup_policy="compact", segment_bytes=1_000_000, retention_ms=-1,
                       min_cleanable_dirty_ratio=1.0, min_compaction_lag_ms=1000, delete_retention_ms=0)
    m = open_manager(str(tmp_path), config)
    lg = m.get_or_create_log("t", 0, config)
    for ts in (10_000, 10_001, 20_000):
        lg.append(build_batch([Record(b"v%d" % ts, b"k", timestamp=ts)]))
        lg.roll()
    cleaner = new_cleaner()
    assert not m.cleaner.clean_once(cleaner, now=20_500)  # ratio 1.0 needs every byte dirty... and is lagged
    lg.update_config(dataclasses.replace(config, min_cleanable_dirty_ratio=0.0))
    assert m.cleaner.clean_once(cleaner, now=20_500)
    # the segment with ts 20000 is younger than the lag at 20500: only the first two were cleaned
    assert m.cleaner.first_dirty[("t", 0)] == 2
    assert sorted(records_on_disk(lg)) == [1, 2]
    lg.update_config(dataclasses.replace(config, min_cleanable_dirty_ratio=1.0, min_compaction_lag_ms=0,
                                         max_compaction_lag_ms=5_000))
    lg.append(build_batch([Record(b"late", b"k", timestamp=21_000)]))  # in the active segment
    assert m.cleaner.clean_once(cleaner, now=30_000)  # overdue: cleaned below the ratio, active rolled
    assert sorted(records_on_disk(lg)) == [3]
    m.shutdown()
