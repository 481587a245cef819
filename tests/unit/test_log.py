"""Log behaviour: append, read slices, rolling, retention, errors (runs on the selected core)."""
import os

import pytest

from pybroker.errors import (CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError,
                             RecordListTooLargeError, RecordTooLargeError)
from pybroker.log import Log, LogConfig
from pybroker.log.epochs import end_offset_for
from pybroker.records import CONTROL, Record, build_batch, value_batch
from tests.logutil import check_log_structure


def open_log(tmp_path, **cfg):
    cfg.setdefault("retention_ms", -1)
    return Log(str(tmp_path / "t-0"), "t", 0, LogConfig(**cfg))


def test_append_assigns_contiguous_offsets_and_reads_back(tmp_path):
    lg = open_log(tmp_path)
    stored = []
    for n in (1, 3, 2):
        buf = value_batch(n, 20, base_offset=999)  # the producer's base offset is overwritten
        info = lg.append(buf)
        assert (info.first_offset, info.record_count) == (sum(len(s) for s in stored), n)
        stored.append(list(range(info.first_offset, info.last_offset + 1)))
        assert lg.read(info.first_offset, 1).read() == bytes(buf)
        assert int.from_bytes(buf[:8], "big") == info.first_offset
    assert lg.log_end_offset == 6
    check_log_structure(lg)


def test_read_returns_one_whole_batch_even_when_max_bytes_is_smaller(tmp_path):
    lg = open_log(tmp_path)
    big = value_batch(10, 500)
    lg.append(big)
    lg.append(value_batch(1, 10))
    sl = lg.read(3, 10)  # offset inside the first batch
    assert sl.position == 0 and sl.length == len(big)
    assert sl.read() == bytes(big)
    whole = lg.read(0, 10**6)
    assert whole.length == lg.size


def test_read_is_bounded_by_max_offset_and_max_bytes(tmp_path):
    lg = open_log(tmp_path)
    sizes = [len(lg.append(value_batch(1, 100)) and b"") for _ in range(5)]
    one = len(value_batch(1, 100))
    assert lg.read(0, 10**6, max_offset=2).length == 2 * one   # high watermark at offset 2
    assert lg.read(2, 10**6, max_offset=2).length == 0
    assert lg.read(0, one * 2 + 5).length == one * 2 + 5      # cut mid-batch: clients drop the tail
    assert len(sizes) == 5


def test_read_out_of_range_names_the_valid_range(tmp_path):
    lg = open_log(tmp_path)
    lg.append(value_batch(2, 10))
    with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 2\]") as err:
        lg.read(3, 100)
    assert (err.value.offset, err.value.log_start_offset, err.value.log_end_offset) == (3, 0, 2)
    assert err.value.code == 1
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 100)
    assert lg.read(2, 100).length == 0  # the log end itself is a valid (empty) position


def test_corrupt_batch_rejected_with_reason_and_nothing_written(tmp_path):
    lg = open_log(tmp_path)
    good = value_batch(2, 50)
    bad = value_batch(2, 50)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC") as err:
        lg.append([good, bad])
    assert err.value.code == 2 and err.value.position == 0
    assert lg.log_end_offset == 0 and lg.size == 0
    with pytest.raises(CorruptRecordError, match="truncated"):
        lg.append(good[:-3])
    wrong_magic = bytearray(good)
    wrong_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        lg.append(wrong_magic)
    with pytest.raises(CorruptRecordError):
        lg.append(b"")
    assert lg.log_end_offset == 0 and lg.size == 0


def test_control_batches_only_when_allowed(tmp_path):
    lg = open_log(tmp_path)
    ctrl = build_batch([Record(key=b"\x00\x00\x00\x00", value=b"\x00\x00\x00\x00\x00\x00")], attributes=CONTROL | 0x10)
    with pytest.raises(InvalidRecordError) as err:
        lg.append(bytearray(ctrl))
    assert err.value.code == 87
    assert lg.append(bytearray(ctrl), allow_control=True).record_count == 1


def test_size_limits(tmp_path):
    lg = open_log(tmp_path, max_message_bytes=1000, segment_bytes=100_000)
    with pytest.raises(RecordTooLargeError) as err:
        lg.append(value_batch(1, 2000))
    assert err.value.code == 10
    lg2 = Log(str(tmp_path / "u-0"), "u", 0, LogConfig(segment_bytes=500, retention_ms=-1))
    with pytest.raises(RecordListTooLargeError):
        lg2.append(value_batch(1, 600))
    assert lg.log_end_offset == lg2.log_end_offset == 0


def test_leader_epoch_and_log_append_time_are_stamped(tmp_path):
    lg = Log(str(tmp_path / "t-0"), "t", 0, LogConfig(message_timestamp_type="LogAppendTime", retention_ms=-1))
    buf = value_batch(3, 10, base_timestamp=5)
    info = lg.append(buf, leader_epoch=7, timestamp_ms=1_234_567)
    assert info.log_append_time == 1_234_567 and info.max_timestamp == 1_234_567
    data = lg.read(0, 1000).read()
    assert int.from_bytes(data[12:16], "big") == 7
    assert int.from_bytes(data[35:43], "big") == 1_234_567
    assert int.from_bytes(data[21:23], "big") & 0x08
    lg.append(value_batch(1, 10), leader_epoch=9)
    assert lg.epochs.entries == [(7, 0), (9, 3)]
    assert lg.epochs.end_offset_for(8, lg.log_end_offset) == (7, 3)


def test_roll_on_segment_bytes_and_segment_ms(tmp_path):
    lg = open_log(tmp_path, segment_bytes=1000, segment_ms=60_000)
    for i in range(10):
        lg.append(value_batch(1, 200, base_timestamp=1_000_000))
    assert len(lg.segments) > 2
    assert all(s.size <= 1000 for s in lg.segments)
    before = len(lg.segments)
    lg.append(value_batch(1, 10, base_timestamp=1_000_000 + 60_000))  # a minute after the first
    assert len(lg.segments) == before + 1
    check_log_structure(lg)


def test_sparse_index_entry_per_interval(tmp_path):
    lg = open_log(tmp_path, index_interval_bytes=1000)
    one = len(value_batch(1, 100))
    for _ in range(100):
        lg.append(value_batch(1, 100))
    entries = lg.active_segment.offset_index.entries
    assert 100 * one // (1000 + one) - 1 <= entries <= 100 * one // 1000
    check_log_structure(lg)


def test_retention_by_bytes_and_time_and_log_start(tmp_path):
    lg = open_log(tmp_path, segment_bytes=1000, retention_bytes=2500)
    for _ in range(30):
        lg.append(value_batch(1, 200, base_timestamp=1000))
    deleted = lg.delete_old_segments(now=2000)
    assert deleted > 0 and lg.size - lg.segments[0].size < 2500
    assert lg.log_start_offset == lg.segments[0].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)
    lg2 = Log(str(tmp_path / "u-0"), "u", 0, LogConfig(segment_bytes=1000, retention_ms=10_000))
    for ts in (1000, 1000, 50_000, 50_000):
        lg2.append(value_batch(1, 300, base_timestamp=ts))
    lg2.delete_old_segments(now=30_000)
    assert lg2.log_start_offset == 2  # the two old records went, the new ones stayed
    lg2.delete_old_segments(now=10**9)
    assert lg2.log_start_offset == lg2.log_end_offset == 4  # expired active segment rolled away


def test_delete_records_moves_log_start(tmp_path):
    lg = open_log(tmp_path, segment_bytes=1000)
    for _ in range(12):
        lg.append(value_batch(1, 200))
    assert lg.maybe_increment_log_start_offset(7)
    assert lg.log_start_offset == 7 and lg.segments[0].base_offset <= 7
    assert lg.read(7, 1).read()[:8] == (7).to_bytes(8, "big")
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(6, 100)
    with pytest.raises(OffsetOutOfRangeError):
        lg.maybe_increment_log_start_offset(100)


def test_truncate_to_batch_boundary_and_fully(tmp_path):
    lg = open_log(tmp_path, segment_bytes=1000)
    for _ in range(10):
        lg.append(value_batch(3, 100))
    assert lg.truncate_to(16) == 15  # offset 16 sits inside the batch 15..17
    assert lg.log_end_offset == 15
    check_log_structure(lg)
    lg.append(value_batch(1, 5))
    assert lg.log_end_offset == 16
    assert lg.truncate_to(0) == 0 and lg.size == 0 and len(lg.segments) == 1


def test_reopen_after_close_keeps_everything(tmp_path):
    lg = open_log(tmp_path, segment_bytes=2000, index_interval_bytes=100)
    data = [bytes(lg.append(b) and b) for b in (value_batch(2, 90) for _ in range(40))]
    lg.flush()
    rp = lg.recovery_point
    lg.close()
    again = Log(str(tmp_path / "t-0"), "t", 0, LogConfig(segment_bytes=2000, index_interval_bytes=100, retention_ms=-1),
                recovery_point=rp)
    assert again.log_end_offset == 80 and rp == 80
    for i, raw in enumerate(data):
        assert again.read(2 * i, 1).read() == raw
    check_log_structure(again)


def test_unwritable_log_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError):
        Log(str(blocker / "t-0"), "t", 0, LogConfig())
    assert not os.path.exists(str(blocker) + "/t-0")


def test_fetch_slice_outlives_the_deletion_of_its_segment(tmp_path):
    lg = open_log(tmp_path, segment_bytes=1000, retention_bytes=0)
    first = value_batch(1, 300)
    lg.append(first)
    for _ in range(8):
        lg.append(value_batch(1, 300))
    sl = lg.read(0, 10**6)
    old_path = lg.segments[0].log_path
    assert lg.delete_old_segments() > 0 and not os.path.exists(old_path)
    assert sl.read()[:len(first)] == bytes(first)  # the open file keeps the bytes readable
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)


def test_cleanup_policy_values():
    assert LogConfig.from_properties({"cleanup.policy": "delete"}).cleanup_policy == "delete"
    both = LogConfig.from_properties({"cleanup.policy": " compact , delete"})
    assert both.cleanup_policy == "compact,delete" and both.compact and both.delete
    for bad in ("compacted", "", "delete,delete"):
        with pytest.raises(ValueError, match="cleanup.policy"):
            LogConfig.from_properties({"cleanup.policy": bad})
    for bad in ("1.5", "-0.1"):
        with pytest.raises(ValueError, match="min.cleanable.dirty.ratio"):
            LogConfig.from_properties({"min.cleanable.dirty.ratio": bad})
    with pytest.raises(ValueError, match="max.compaction.lag.ms"):
        LogConfig.from_properties({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_size_is_checked_before_the_crc(tmp_path):
    lg = open_log(tmp_path, max_message_bytes=1000)
    big = value_batch(1, 2000)
    big[-1] ^= 0xFF  # also a bad CRC: the size still decides, as in Kafka
    with pytest.raises(RecordTooLargeError):
        lg.append(big)
    small = value_batch(1, 10)
    small[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        lg.append(small)


def test_writeback_starts_once_enough_new_bytes_piled_up(tmp_path):
    lg = open_log(tmp_path, segment_bytes=100_000)
    lg.append(value_batch(5, 1000))
    active = lg.segments[-1]
    lg.start_writeback(min_bytes=10_000)  # ~5 kB new: not yet
    assert active.writeback_from == 0
    for _ in range(2):
        lg.append(value_batch(5, 1000))
    lg.start_writeback(min_bytes=10_000)
    assert active.writeback_from == active.size > 10_000
    lg.truncate_to(5)  # a follower cutting its log: the next writeback starts at the new end
    assert active.writeback_from == active.size
    lg.append(value_batch(5, 1000))
    lg.start_writeback(min_bytes=1)
    assert active.writeback_from == active.size
    lg.close()


def test_epoch_end_offset_as_kafka():
    entries = [(0, 0), (2, 10), (5, 30)]
    assert end_offset_for(entries, 5, 42) == (5, 42)
    assert end_offset_for(entries, 3, 42) == (2, 30)
    assert end_offset_for(entries, 2, 42) == (2, 30)
    assert end_offset_for([(3, 5)], 1, 42) == (1, 5)  # older than any: ends where the first starts
    assert end_offset_for(entries, 7, 42) == (-1, -1)  # newer than any: unknown
    assert end_offset_for(entries, -1, 42) == (-1, -1)
    assert end_offset_for([], 0, 42) == (-1, -1)
