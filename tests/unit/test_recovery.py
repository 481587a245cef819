"""Crash recovery and corruption: torn tails, flipped bytes, lost or garbled indexes and checkpoints."""
import os
import signal
import subprocess
import sys

import pytest

from pybroker.log import LogConfig, LogManager, checkpoint
from pybroker.log.manager import CLEAN_SHUTDOWN
from tests.logutil import batch_for, check_log_structure, stamped

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/, where the child scripts live
CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=300, retention_ms=-1)


def fill(log_dir, batches=60, flush_upto=None):
    """A manager with one log of ``batches`` batches; flushed up to ``flush_upto`` batches (all by default)."""
    m = LogManager([log_dir], CONFIG, background=False).startup()
    lg = m.get_or_create_log("t", 0)
    stored = []
    for seq in range(batches):
        if seq == flush_upto:
            lg.flush()
        info = lg.append(batch_for(seq))
        stored.append((info.first_offset, stamped(batch_for(seq), info.first_offset)))
    if flush_upto is None:
        lg.flush()
    return m, lg, stored


def crash(m):
    """What a kill -9 leaves: checkpoints as last written, no clean-shutdown marker, logs not closed."""
    m.checkpoint()
    for lg in m.logs.values():
        lg.close()
    for lock in m._locks:
        lock.close()


def reopen(log_dir):
    m = LogManager([log_dir], CONFIG, background=False).startup()
    return m, m.get_log("t", 0)


def assert_prefix(lg, stored, at_least):
    """The log holds exactly the first k stored batches, k >= at_least, byte-identical."""
    check_log_structure(lg)
    k = sum(1 for first, _ in stored if first < lg.log_end_offset)
    assert k >= at_least, f"only {k} batches survived, {at_least} were flushed"
    assert lg.log_end_offset == (stored[k][0] if k < len(stored) else lg.log_end_offset)
    for first, raw in stored[:k]:
        assert lg.read(first, 1).read()[:len(raw)] == raw


def test_clean_shutdown_marker_and_checkpoints_in_kafka_format(tmp_path):
    m, lg, stored = fill(str(tmp_path))
    m.shutdown()
    assert os.path.exists(tmp_path / CLEAN_SHUTDOWN)
    text = (tmp_path / checkpoint.RECOVERY_POINT).read_text()
    assert text == f"0\n1\nt 0 {lg.log_end_offset}\n"
    assert (tmp_path / checkpoint.LOG_START).read_text() == "0\n1\nt 0 0\n"
    m2, lg2 = reopen(str(tmp_path))
    assert m2.had_clean_shutdown and not os.path.exists(tmp_path / CLEAN_SHUTDOWN)
    assert_prefix(lg2, stored, len(stored))
    m2.shutdown()


@pytest.mark.parametrize("cut", [1, 30, 61, 200])
def test_torn_tail_is_truncated_and_flushed_data_kept(tmp_path, cut):
    m, lg, stored = fill(str(tmp_path), flush_upto=50)
    path = lg.active_segment.log_path
    crash(m)
    size = os.path.getsize(path)
    os.truncate(path, size - cut)
    m2, lg2 = reopen(str(tmp_path))
    assert not m2.had_clean_shutdown
    assert_prefix(lg2, stored, 50)
    assert lg2.log_end_offset < stored[-1][0] + 1  # the torn batch is gone
    m2.shutdown()


def test_flipped_byte_truncates_at_that_batch(tmp_path):
    m, lg, stored = fill(str(tmp_path), flush_upto=55)
    seg = lg.active_segment
    victim_first, victim_raw = stored[57]
    pos = lg.read(victim_first, 1).position
    crash(m)
    with open(seg.log_path, "r+b") as f:
        f.seek(pos + 40)
        byte = f.read(1)
        f.seek(pos + 40)
        f.write(bytes([byte[0] ^ 1]))
    m2, lg2 = reopen(str(tmp_path))
    assert lg2.log_end_offset == victim_first
    assert_prefix(lg2, stored, 57)
    m2.shutdown()


def test_deleted_and_garbled_indexes_are_rebuilt_identically(tmp_path):
    m, lg, stored = fill(str(tmp_path), batches=120)
    m.shutdown()
    seg_paths = [(s.index_path, s.timeindex_path) for s in lg.segments]
    originals = {p: open(p, "rb").read() for pair in seg_paths for p in pair}
    os.remove(seg_paths[0][0])
    os.remove(seg_paths[1][1])
    with open(seg_paths[2][0], "r+b") as f:  # garble: entries out of order
        f.seek(0)
        f.write(b"\xff" * 8)
    with open(seg_paths[3][1], "ab") as f:   # garble: not a whole number of entries
        f.write(b"\x01\x02\x03")
    m2, lg2 = reopen(str(tmp_path))
    assert_prefix(lg2, stored, len(stored))
    m2.shutdown()
    for p, raw in originals.items():
        assert open(p, "rb").read() == raw, f"{os.path.basename(p)} not rebuilt identically"


@pytest.mark.parametrize("damage", ["delete", "garble"])
def test_lost_recovery_checkpoint_means_full_recovery(tmp_path, damage):
    m, lg, stored = fill(str(tmp_path), batches=120)
    first_seg = lg.segments[0].log_path
    crash(m)
    cp = tmp_path / checkpoint.RECOVERY_POINT
    if damage == "delete":
        cp.unlink()
    else:
        cp.write_text("0\n7\nnonsense\n")
    with open(first_seg, "r+b") as f:  # corruption in the first segment is found only by a full scan
        f.seek(os.path.getsize(first_seg) - 5)
        f.write(b"XXXXX")
    m2, lg2 = reopen(str(tmp_path))
    assert lg2.log_end_offset < lg2.segments[0].base_offset + 100
    assert len(lg2.segments) == 1
    check_log_structure(lg2)
    m2.shutdown()


def test_garbled_log_start_checkpoint_falls_back_to_first_segment(tmp_path):
    m, lg, stored = fill(str(tmp_path))
    lg.maybe_increment_log_start_offset(10)
    m.shutdown()
    (tmp_path / checkpoint.LOG_START).write_text("garbage")
    m2, lg2 = reopen(str(tmp_path))
    assert lg2.log_start_offset == lg2.segments[0].base_offset
    assert_prefix(lg2, stored, len(stored))
    m2.shutdown()


def test_kill_9_during_produce_keeps_every_acknowledged_batch(tmp_path):
    """A real process appends with flush.messages=1 and is killed mid-stream."""
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "manager_child.py"), str(tmp_path), "100000"],
                             stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    acked = {}
    try:
        assert child.stdout.readline().strip() == "R"
        for _ in range(150):
            line = child.stdout.readline().split()
            assert line and line[0] == "A", line
            acked[int(line[1])] = int(line[2])
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        child.stdin.close()
    m = LogManager([str(tmp_path)], LogConfig(segment_bytes=4096, retention_ms=-1), background=False).startup()
    assert not m.had_clean_shutdown
    for p, last in acked.items():
        lg = m.get_log("orders", p)
        assert lg.log_end_offset > last, f"partition {p}: acked offset {last} lost"
        check_log_structure(lg)
        expect = 0
        for seq in range(p, 10**6, 3):  # every batch of this partition, in order, intact
            if expect >= lg.log_end_offset:
                break
            raw = stamped(batch_for(seq), expect)
            assert lg.read(expect, 1).read()[:len(raw)] == raw
            expect += int.from_bytes(raw[57:61], "big")
    m.shutdown()
