"""``pybroker dev-cluster``: a local cluster for development -- one ZooKeeper and N brokers.

ZooKeeper comes from Debian's ``zookeeper`` package (or ``--zookeeper HOST:PORT`` names a running
one). Broker ``i`` (1..N) listens on ``127.0.0.1:<base-port + i - 1>``, keeps its log dirs in
``DIR/broker-i`` and writes its output to ``DIR/broker-i.log``; ZooKeeper's data and output are in
``DIR/zookeeper``. Running the command again on the same DIR brings the same cluster back.

Ctrl-C or SIGTERM stops the brokers (SIGTERM, then SIGKILL after a bound), then ZooKeeper, and
exits 0. A broker that exits on its own is reported with the tail of its log, everything else is
stopped, and the exit status is 1.
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from pybroker.tools.wire import ToolError

START_TIMEOUT = 60  # seconds for every broker to print its ready line
STOP_TIMEOUT = 30   # seconds for the brokers to shut down cleanly before SIGKILL
READY = " listening on "  # in the one line ``pybroker serve`` prints when it is ready


class _Broker:
    def __init__(self, broker_id: int, port: int, directory: str, zk_connect: str, n: int):
        self.id, self.port = broker_id, port
        self.log_path = os.path.join(directory, f"broker-{broker_id}.log")
        replication = min(3, n)
        self.overrides = {
            "broker.id": broker_id, "zookeeper.connect": zk_connect,
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": os.path.join(directory, f"broker-{broker_id}"),
            "default.replication.factor": replication, "offsets.topic.replication.factor": replication,
            "min.insync.replicas": 1 if n < 3 else 2,
            # Ctrl-C stops every broker at once: the last ones have nowhere to move their leaders, so
            # their controlled shutdown retries; a second apart, not Kafka's five
            "controlled.shutdown.retry.backoff.ms": 1000,
        }
        self.proc: subprocess.Popen | None = None
        self.ready = False

    def start(self) -> None:
        args = [sys.executable, "-m", "pybroker", "serve"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        with open(self.log_path, "ab") as log:
            self.log_start = log.tell()  # only this run's output counts
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # Ctrl-C reaches us; we stop it in order

    def output(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_start)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.output().splitlines()[-lines:]) or "(no output)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _stop_brokers(brokers: list[_Broker]) -> None:
    running = [b for b in brokers if b.alive()]
    for b in running:
        os.kill(b.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for b in running:
        try:
            b.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"broker {b.id} did not stop within {STOP_TIMEOUT} s: killing pid {b.proc.pid}",
                  file=sys.stderr)
            os.kill(b.proc.pid, signal.SIGKILL)
            b.proc.wait(30)


def _died(b: _Broker) -> str:
    return (f"broker {b.id} (pid {b.proc.pid}) exited with status {b.proc.returncode}; "
            f"the end of {b.log_path}:\n{b.tail()}")


def run(args) -> int:
    n, base = args.brokers, args.base_port
    if n < 1:
        raise ToolError("--brokers must be at least 1")
    if not 1 <= base <= 65536 - n:
        raise ToolError(f"--base-port {base} leaves no room for {n} brokers")
    directory = os.path.abspath(args.dir)
    os.makedirs(directory, exist_ok=True)
    taken = [p for p in range(base, base + n) if not port_free(p)]
    if taken:
        raise ToolError(f"port(s) in use on 127.0.0.1: {', '.join(map(str, taken))}; choose --base-port")

    stopping = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    zk = brokers = None
    try:
        if args.zookeeper:
            zk_connect = args.zookeeper
        else:
            from pybroker.controller.zk_server import ZooKeeperError, ZooKeeperServer
            try:
                zk = ZooKeeperServer(os.path.join(directory, "zookeeper")).start()
            except ZooKeeperError as exc:
                raise ToolError(f"cannot start ZooKeeper: {exc}") from None
            zk_connect = zk.connect
        brokers = [_Broker(i, base + i - 1, directory, zk_connect, n) for i in range(1, n + 1)]
        for b in brokers:
            b.start()
        return _supervise(brokers, zk, zk_connect, stopping)
    finally:
        if brokers:
            _stop_brokers(brokers)
        if zk is not None:
            zk.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _supervise(brokers: list[_Broker], zk, zk_connect: str, stopping: threading.Event) -> int:
    deadline = time.monotonic() + START_TIMEOUT
    while not all(b.ready for b in brokers):
        if stopping.wait(0.1):
            return 0
        for b in brokers:
            if not b.alive():
                print(_died(b), file=sys.stderr)
                return 1
            b.ready = b.ready or any(line.startswith("pybroker ") and READY in line
                                     for line in b.output().splitlines())
        if time.monotonic() > deadline:
            late = [b for b in brokers if not b.ready]
            for b in late:
                print(f"broker {b.id} printed no ready line within {START_TIMEOUT} s; the end of "
                      f"{b.log_path}:\n{b.tail()}", file=sys.stderr)
            return 1
    print("bootstrap.servers=" + ",".join(f"127.0.0.1:{b.port}" for b in brokers))
    for b in brokers:
        print(f"broker {b.id}: pid {b.proc.pid}, log {b.log_path}")
    print(f"zookeeper.connect={zk_connect}" + (f" (pid {zk.pid}, log {zk.log_path})" if zk else ""))
    print("Ctrl-C stops the cluster", flush=True)
    while not stopping.wait(0.5):
        for b in brokers:
            if not b.alive():
                print(_died(b), file=sys.stderr)
                return 1
        if zk is not None and not zk.alive():
            print(f"ZooKeeper (pid {zk.pid}) exited; the end of {zk.log_path}:\n{zk.log_tail(2000)}",
                  file=sys.stderr)
            return 1
    print("stopping the cluster", file=sys.stderr, flush=True)
    return 0
