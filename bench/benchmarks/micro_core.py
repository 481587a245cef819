"""Native storage core: batch validate / rewrite, CRC-32C, offset index lookup, segment append,
recovery scan. The time_* cases time one call; the track_* cases reuse bench/bench_storage.py's
measurements (small sizes here: the history suite must stay a few minutes long)."""
import shutil
import tempfile

from . import INSTALLED  # noqa: F401  sets up the import paths first

import bench_storage  # noqa: E402
from pybroker import core  # noqa: E402

KiB, MiB = 1024, 1024 * 1024


class Batch:
    """One batch of 1 KiB records (100 B records in the 16 KiB batch), as a producer sends it."""
    params = [16 * KiB, MiB]
    param_names = ["batch_bytes"]

    def setup(self, batch_bytes):
        self.batch = core.batch  # resolved here: core imports its modules lazily, on first use
        self.buf = bench_storage.one_batch(batch_bytes)

    def time_validate(self, batch_bytes):
        return self.batch.validate(self.buf)  # header, CRC over the batch, record count

    def time_rewrite_offset_epoch(self, batch_bytes):
        self.batch.set_base_offset(self.buf, 0, 12345)  # outside the CRC: no checksum work
        self.batch.set_partition_leader_epoch(self.buf, 0, 7)

    def time_rewrite_log_append_time(self, batch_bytes):
        self.batch.set_log_append_time(self.buf, 0, 1_700_000_000_000)  # rewrites the CRC


class Crc:
    params = [4 * KiB, MiB]
    param_names = ["bytes"]

    def setup(self, size):
        self.crc32c = core.crc.crc32c  # resolved here, not in the timed call
        self.data = bytes(range(256)) * (size // 256)

    def time_crc32c(self, size):
        return self.crc32c(self.data)


class Storage:
    """Index lookup, segment append and recovery, through bench_storage's own timing code."""
    timeout = 120
    rounds = 1
    repeat = 1

    def setup(self):
        self.dir = tempfile.mkdtemp(prefix="pybroker-asv-")

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def track_index_lookup_ns(self):
        ns, _loop_ns = bench_storage.bench_lookup(self.dir, 100_000, lookups=200_000, runs=3)
        return ns
    track_index_lookup_ns.unit = "ns"

    def track_segment_append_gbps(self):
        _base, ours, _checked, _size = bench_storage.bench_append(self.dir, 32, 3, MiB)
        return ours / 1e9
    track_segment_append_gbps.unit = "GB/s"

    def track_validate_and_append_16k_gbps(self):
        _base, _ours, checked, _size = bench_storage.bench_append(self.dir, 16, 3, 16 * KiB, per_call=16)
        return checked / 1e9
    track_validate_and_append_16k_gbps.unit = "GB/s"

    def track_recovery_scan_gbps(self):
        recover, _scan, _size = bench_storage.bench_recovery(self.dir, 32, 3, 16 * KiB)
        return recover / 1e9
    track_recovery_scan_gbps.unit = "GB/s"
