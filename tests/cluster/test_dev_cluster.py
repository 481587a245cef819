"""``pybroker dev-cluster``: a real ZooKeeper and broker processes, stopped in order."""
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from pybroker.tools.dev_cluster import port_free
from tests.broker import ROOT
from tests.cluster import free_ports, require_zookeeper


def consecutive_free_ports(n: int) -> int:
    for base in free_ports(20):
        if base + n < 65536 and all(port_free(p) for p in range(base, base + n)):
            return base
    raise RuntimeError(f"no {n} consecutive free ports found")




def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (a test's own tmp dir)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def dev_cluster(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pybroker", "dev-cluster", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def end(proc: subprocess.Popen) -> None:
    """SIGTERM (the command then stops its brokers and ZooKeeper), SIGKILL after a bound."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def lines_until(proc: subprocess.Popen, marker: str, timeout: float = 90) -> list[str]:
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen, deadline = [], time.monotonic() + timeout
    while not any(marker in line for line in seen):
        try:
            seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"no {marker!r} within {timeout} s; stdout so far: {seen}") from None
    return seen


def test_starts_and_stops_on_sigterm(tmp_path):
    require_zookeeper()
    base = consecutive_free_ports(2)
    proc = dev_cluster("--brokers", "2", "--dir", str(tmp_path / "c"), "--base-port", str(base))
    try:
        out = lines_until(proc, "Ctrl-C")
        assert out[0] == f"bootstrap.servers=127.0.0.1:{base},127.0.0.1:{base + 1}\n"
        assert out[1].startswith("broker 1: pid ") and out[2].startswith("broker 2: pid ")
        assert out[3].startswith("zookeeper.connect=127.0.0.1:")
        children = set(processes_mentioning(str(tmp_path / "c"))) - {proc.pid}
        assert len(children) == 3  # ZooKeeper and two brokers
        for port in (base, base + 1):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert processes_mentioning(str(tmp_path / "c")) == []
        assert os.path.exists(tmp_path / "c" / "zookeeper" / "zoo.cfg")
    finally:
        end(proc)


def test_a_broker_that_cannot_start_is_reported_and_everything_stops(tmp_path):
    require_zookeeper()
    directory = tmp_path / "c"
    directory.mkdir()
    (directory / "broker-1").write_text("a file where the broker's log dir should be")
    base = consecutive_free_ports(2)
    proc = dev_cluster("--brokers", "2", "--dir", str(directory), "--base-port", str(base))
    try:
        _, err = proc.communicate(timeout=90)
    finally:
        end(proc)
    assert proc.returncode == 1
    assert "broker 1 (pid " in err and "exited with status" in err and "broker-1.log" in err
    assert "pybroker: cannot start" in err or "invalid configuration" in err  # the log tail
    assert processes_mentioning(str(directory)) == []


def test_a_taken_port_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = dev_cluster("--brokers", "1", "--dir", str(tmp_path / "c"),
                           "--base-port", str(taken.getsockname()[1]))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "in use" in err
    assert not (tmp_path / "c" / "zookeeper").exists()


@pytest.mark.parametrize("args, message", [(["--brokers", "0"], "at least 1"),
                                           (["--base-port", "65535"], "no room")])
def test_bad_arguments(tmp_path, args, message):
    proc = dev_cluster("--dir", str(tmp_path / "c"), *args)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and message in err
