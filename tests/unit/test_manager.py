"""LogManager: log dirs, locking, placement, background flushing and retention."""
import os
import time

import pytest

from pybroker.errors import LogDirError
from pybroker.log import LogConfig, LogManager
from pybroker.records import value_batch


def test_log_dir_that_is_a_file_is_a_clear_error(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(LogDirError, match="not usable") as err:
        LogManager([str(blocker)]).startup()
    assert err.value.code == 56
    with pytest.raises(LogDirError):
        LogManager([str(blocker / "below")]).startup()
    with pytest.raises(LogDirError, match="no log dir"):
        LogManager([])


def test_second_manager_on_the_same_dir_is_refused(tmp_path):
    m = LogManager([str(tmp_path)]).startup()
    with pytest.raises(LogDirError, match="locked"):
        LogManager([str(tmp_path)]).startup()
    m.shutdown()
    LogManager([str(tmp_path)]).startup().shutdown()  # free again after shutdown


def test_partitions_spread_over_log_dirs_and_reload(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, LogConfig(retention_ms=-1)).startup()
    for p in range(6):
        m.get_or_create_log("events", p).append(value_batch(p + 1, 10))
    counts = [len([n for n in os.listdir(d) if n.startswith("events-")]) for d in dirs]
    assert counts == [3, 3]
    m.high_watermarks[("events", 0)] = 1
    m.shutdown()
    m2 = LogManager(dirs, LogConfig(retention_ms=-1)).startup()
    assert {tp: lg.log_end_offset for tp, lg in m2.logs.items()} == {("events", p): p + 1 for p in range(6)}
    assert m2.loaded_high_watermarks == {("events", 0): 1}
    m2.delete_log("events", 5)
    assert not any(os.path.exists(os.path.join(d, "events-5")) for d in dirs)
    m2.shutdown()


def test_flush_messages_triggers_background_fdatasync(tmp_path):
    m = LogManager([str(tmp_path)], LogConfig(flush_messages=3, retention_ms=-1)).startup()
    lg = m.get_or_create_log("t", 0)
    lg.append(value_batch(2, 10))
    assert lg.recovery_point == 0
    lg.append(value_batch(2, 10))  # 4 unflushed records >= 3: the flusher takes it
    deadline = time.monotonic() + 10
    while lg.recovery_point < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lg.recovery_point == 4 and m.flusher.flushes >= 1
    m.shutdown()


def test_flush_ms_flushes_idle_logs(tmp_path):
    m = LogManager([str(tmp_path)], LogConfig(flush_ms=50, retention_ms=-1)).startup()
    lg = m.get_or_create_log("t", 0)
    lg.append(value_batch(1, 10))
    deadline = time.monotonic() + 10
    while lg.recovery_point < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lg.recovery_point == 1
    m.shutdown()


def test_background_retention(tmp_path):
    m = LogManager([str(tmp_path)], LogConfig(segment_bytes=500, retention_bytes=600, retention_ms=-1),
                   retention_check_interval_ms=0).startup()
    lg = m.get_or_create_log("t", 0)
    for _ in range(20):
        lg.append(value_batch(1, 200))
    deadline = time.monotonic() + 10
    while lg.log_start_offset == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lg.log_start_offset > 0
    m.shutdown()


def test_append_that_reaches_flush_messages_gets_a_future_of_its_flush(tmp_path):
    m = LogManager([str(tmp_path)], LogConfig(flush_messages=2, retention_ms=-1)).startup()
    lg = m.get_or_create_log("t", 0)
    first = lg.append(value_batch(1, 10))
    assert first.flushed is None  # below flush.messages: no flush asked for
    second = lg.append(value_batch(1, 10))
    second.flushed.result(timeout=30)  # completes only after an fdatasync that covers it
    assert lg.recovery_point >= second.last_offset + 1
    m.shutdown()


def test_flusher_starts_the_writeback_of_new_data(tmp_path):
    m = LogManager([str(tmp_path)], LogConfig(retention_ms=-1), writeback_bytes=4096).startup()
    lg = m.get_or_create_log("t", 0)
    lg.append(value_batch(10, 1000))
    active = lg.segments[-1]
    deadline = time.monotonic() + 10
    while active.writeback_from < active.size and time.monotonic() < deadline:
        time.sleep(0.01)
    assert active.writeback_from == active.size
    m.shutdown()
