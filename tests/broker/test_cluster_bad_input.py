"""A broker configured for ZooKeeper that cannot reach it stops with a clear message
(bad input to a running cluster: tests/cluster/test_cluster_bad_input.py)."""
import subprocess
import sys
import time

import pytest

from tests.broker import ROOT
from tests.cluster import free_ports


def test_unreachable_zookeeper_stops_the_broker_with_a_message(tmp_path):
    port = free_ports(1)[0]  # nothing listens there
    overrides = {"log.dirs": str(tmp_path / "logs"), "listeners": "PLAINTEXT://127.0.0.1:0", "broker.id": 1,
                 "zookeeper.connect": f"127.0.0.1:{port}", "zookeeper.session.timeout.ms": 3000}
    args = [sys.executable, "-m", "pybroker", "serve"]
    for key, value in overrides.items():
        args += ["--override", f"{key}={value}"]
    began = time.monotonic()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the broker still runs after 90 s; stderr tail: {err[-2000:]}")
    elapsed = time.monotonic() - began
    assert proc.returncode not in (0, None), (proc.returncode, err[-2000:])
    assert "listening on" not in out, out
    assert "cannot reach ZooKeeper" in err and f"127.0.0.1:{port}" in err, err[-2000:]
    assert elapsed < 60, f"took {elapsed:.1f} s to give up"

