"""The pybroker command line."""
import os
import subprocess
import sys

from pybroker.log import Log, LogConfig
from pybroker.records import value_batch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args):
    return subprocess.run([sys.executable, "-m", "pybroker", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_serve_refuses_bad_configuration_clearly(tmp_path):
    out = cli("serve", "--override", "log.segmnet.bytes=100")
    assert out.returncode == 2
    assert "unknown config key 'log.segmnet.bytes'" in out.stderr and "log.segment.bytes" in out.stderr
    out = cli("serve", "--override", "num.partitions=zero")
    assert out.returncode == 2 and "num.partitions" in out.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = cli("serve", "--override", f"log.dirs={blocker}", "--override", "listeners=PLAINTEXT://127.0.0.1:0")
    assert out.returncode == 1 and "not usable" in out.stderr


def test_dump_log_lists_batches_and_index_entries(tmp_path):
    lg = Log(str(tmp_path / "t-0"), "t", 0, LogConfig(index_interval_bytes=100, retention_ms=-1))
    for _ in range(5):
        lg.append(value_batch(2, 80, base_timestamp=42))
    seg = lg.active_segment
    lg.close()
    out = cli("dump-log", seg.log_path, seg.index_path, seg.timeindex_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert sum(1 for line in lines if line.startswith("baseOffset:")) == 5
    assert "baseOffset: 8 lastOffset: 9 count: 2" in out.stdout
    assert any(line.startswith("offset: ") for line in lines)
    assert "timestamp: 42 offset:" in out.stdout


def test_dump_log_reports_a_corrupt_tail(tmp_path):
    lg = Log(str(tmp_path / "t-0"), "t", 0, LogConfig(retention_ms=-1))
    lg.append(value_batch(1, 10))
    lg.append(value_batch(1, 10))
    path = lg.active_segment.log_path
    lg.close()
    with open(path, "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)[0]
        f.seek(-1, 2)
        f.write(bytes([last ^ 0xFF]))
    out = cli("dump-log", path)
    assert out.returncode == 1
    assert "CRC mismatch" in out.stdout and out.stdout.count("baseOffset:") == 1
