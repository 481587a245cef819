"""Random operation sequences over a Log, checked against a model after every step.

Operations: append (one or several batches), roll, read, flush, truncate, retention,
clean close/reopen, a simulated crash with a torn or garbled unflushed tail, and a real
crash: a child process appending to the log is killed with SIGKILL mid-stream.
Invariants: offsets contiguous, every batch read back byte-identical to what was appended,
every flushed batch survives any crash, indexes agree with the log.
"""
import os
import signal
import subprocess
import sys

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pybroker.errors import OffsetOutOfRangeError
from pybroker.log import Log, LogConfig
from tests.logutil import batch_for, check_log_structure, stamped

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/, where the child scripts live
SEGMENT_BYTES = 2048
CONFIG = LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=256, retention_ms=-1,
                   retention_bytes=6000)
CHILD_TIMEOUT = 30


def _crc_covered(path: str, at: int) -> int:
    """``at``, or the batch's attributes byte when ``at`` is in its partition leader epoch: the one
    header field neither the CRC nor recovery checks, so damage there is undetectable (in Kafka too)."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + 12 <= len(data):
        end = pos + 12 + int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if pos + 12 <= at < pos + 16 and pos + 21 < len(data):
            return pos + 21
        if end <= pos or at < end:
            break
        pos = end
    return at


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        import tempfile
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "t-0")
        self.lg = Log(self.dir, "t", 0, CONFIG)
        self.model = []          # (first_offset, last_offset, stored bytes), contiguous
        self.flushed = 0         # offsets below this are durable
        self.seq = 0             # next deterministic batch number

    def teardown(self):
        self.lg.close()
        self.tmp.cleanup()

    # ---- model helpers --------------------------------------------------------------------

    @property
    def end(self) -> int:
        return self.model[-1][1] + 1 if self.model else self.lg.log_start_offset

    def _add(self, first, last, buf):
        assert first == self.end, (first, self.end)
        self.model.append((first, last, stamped(buf, first)))

    def _cut_model_to(self, new_end):
        self.model = [b for b in self.model if b[1] < new_end]
        assert self.end == new_end or (not self.model and new_end == self.lg.log_start_offset)
        self.flushed = min(self.flushed, new_end)

    # ---- operations -----------------------------------------------------------------------

    @rule(n=st.integers(1, 4))
    def append(self, n):
        bufs = [batch_for(self.seq + i) for i in range(n)]
        originals = [bytes(b) for b in bufs]
        info = self.lg.append(bufs)
        first = info.first_offset
        for raw in originals:
            count = int.from_bytes(raw[57:61], "big")
            self._add(first, first + count - 1, raw)
            first += count
        assert info.last_offset == first - 1
        self.seq += n

    @rule()
    def roll(self):
        self.lg.roll()

    @rule(pick=st.floats(0, 1), max_bytes=st.integers(1, 5000))
    def read(self, pick, max_bytes):
        start, end = self.lg.log_start_offset, self.lg.log_end_offset
        offset = start + int(pick * (end - start))
        sl = self.lg.read(offset, max_bytes)
        data = sl.read()
        if offset == end:
            assert data == b""
            return
        i = next(i for i, b in enumerate(self.model) if b[0] <= offset <= b[1])
        first = self.model[i][2]
        assert data[:len(first)] == first, "first batch must be whole and identical"
        assert len(data) <= max(max_bytes, len(first))
        pos = len(first)
        for _, _, stored in self.model[i + 1:]:  # whole batches that fit must match too
            if pos + len(stored) > len(data):
                break
            assert data[pos:pos + len(stored)] == stored
            pos += len(stored)

    @rule()
    def read_out_of_range(self):
        for bad in (self.lg.log_end_offset + 1, self.lg.log_start_offset - 1):
            if bad < 0:
                continue
            try:
                self.lg.read(bad, 100)
            except OffsetOutOfRangeError as exc:
                assert (exc.log_start_offset, exc.log_end_offset) == (self.lg.log_start_offset, self.lg.log_end_offset)
            else:
                raise AssertionError(f"read at {bad} should be out of range")

    @rule()
    def flush(self):
        assert self.lg.flush() == self.end
        self.flushed = self.end

    @rule(pick=st.floats(0, 1))
    def truncate(self, pick):
        if not self.model:
            return
        start = self.lg.log_start_offset
        target = start + int(pick * (self.end - start))
        new_end = self.lg.truncate_to(target)
        assert new_end <= max(target, start)
        self._cut_model_to(new_end)

    @rule()
    def retention(self):
        self.lg.delete_old_segments()
        start = self.lg.log_start_offset
        self.model = [b for b in self.model if b[1] >= start]
        assert self.lg.size - self.lg.segments[0].size < CONFIG.retention_bytes or len(self.lg.segments) == 1

    @rule()
    def close_and_reopen(self):
        rp, start = self.lg.recovery_point, self.lg.log_start_offset
        self.lg.close()
        self.lg = Log(self.dir, "t", 0, CONFIG, recovery_point=rp, log_start_offset=start, clean=True)

    @rule(damage=st.sampled_from(["none", "cut", "garble", "drop-indexes"]), where=st.floats(0, 1))
    def crash_and_recover(self, damage, where):
        """Close without flushing, damage only what was never flushed, recover."""
        start = self.lg.log_start_offset
        self.lg.close()
        active = self.lg.active_segment
        size = os.path.getsize(active.log_path)
        durable_pos = self._durable_position(active)
        if damage in ("cut", "garble") and size > durable_pos:
            at = durable_pos + int(where * (size - durable_pos - 1))
            with open(active.log_path, "r+b") as f:
                if damage == "cut":
                    f.truncate(at)
                else:
                    at = _crc_covered(active.log_path, at)
                    f.seek(at)
                    old = f.read(1)
                    f.seek(at)
                    f.write(bytes([old[0] ^ 0x5A]))
        if damage == "drop-indexes":
            os.remove(active.index_path)
        self._reopen_unclean(start)

    def _durable_position(self, segment) -> int:
        """Bytes of ``segment`` below the flushed offset."""
        pos = 0
        for first, last, stored in self.model:
            if first >= segment.base_offset and last < self.flushed:
                pos += len(stored)
        return pos

    def _reopen_unclean(self, start):
        self.lg = Log(self.dir, "t", 0, CONFIG, recovery_point=self.flushed, log_start_offset=start, clean=False)
        new_end = self.lg.log_end_offset
        assert new_end >= self.flushed, f"flushed data lost: end {new_end} < flushed {self.flushed}"
        self._cut_model_to(new_end)
        assert self.end == new_end

    @rule(kill_after=st.integers(0, 6), flush_every=st.integers(1, 3))
    def child_crash(self, kill_after, flush_every):
        """A child appends and flushes; SIGKILL after ``kill_after`` acks. Flushed acks must survive."""
        start = self.lg.log_start_offset
        self.lg.close()
        child = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "crash_child.py"), self.dir, str(self.flushed),
             str(self.seq), "8", str(flush_every), str(SEGMENT_BYTES)],
            stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
        acked, durable = [], self.flushed
        try:
            ready = child.stdout.readline().split()
            assert ready and ready[0] == "R", ready
            assert int(ready[1]) == self.end  # the child recovered exactly our log
            for _ in range(40):
                line = child.stdout.readline().split()
                if not line or line[0] == "D":
                    break
                if line[0] == "A":
                    acked.append((int(line[1]), int(line[2]), int(line[3])))
                    if len(acked) > kill_after:
                        break
                elif line[0] == "F":
                    durable = int(line[1])
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=CHILD_TIMEOUT)
            child.stdout.close()
            child.stdin.close()
        self.lg = Log(self.dir, "t", 0, CONFIG, recovery_point=durable, log_start_offset=start, clean=False)
        new_end = self.lg.log_end_offset
        # kill -9 leaves the page cache intact: every acked batch is there, and whatever the
        # child wrote after its last ack must be its next batches, whole, byte for byte
        for first, last, seq in acked:
            self._add(first, last, batch_for(seq))
        seq = acked[-1][2] + 1 if acked else self.seq
        while self.end < new_end:
            raw = batch_for(seq)
            count = int.from_bytes(raw[57:61], "big")
            self._add(self.end, self.end + count - 1, raw)
            seq += 1
        assert self.end == new_end, f"recovered end {new_end} is not a batch boundary ({self.end})"
        assert seq <= self.seq + 8
        self.seq += 8
        self.flushed = durable

    # ---- invariants -----------------------------------------------------------------------

    @invariant()
    def log_matches_model(self):
        assert self.lg.log_end_offset == self.end
        assert self.lg.recovery_point <= self.lg.log_end_offset
        check_log_structure(self.lg)
        for first, last, stored in self.model[-3:]:
            assert self.lg.read(first, 1).read() == stored


LogMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
TestLogStateMachine = LogMachine.TestCase
