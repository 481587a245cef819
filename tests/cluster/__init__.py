"""The cluster tier's tests (ZooKeeper and brokers) and, here, the harness they and the other tiers use:
A real multi-broker cluster for tests: one ZooKeeper, N ``pybroker serve`` processes.

Each broker keeps one fixed port, chosen when the cluster is built, so a restarted broker comes
back at the same address, as a real cluster member does. Every process is ended by its own PID.
Reads of the cluster's state go straight to ZooKeeper (Kafka's znode layout) through kazoo.
"""
import json
import os
import signal
import socket
import struct
import threading
import time
import uuid

import pytest

from pybroker.controller.zk_server import (ZooKeeperNotInstalled, ZooKeeperServer, find_classpath,
                                           wait_stopped)
from tests.broker import BrokerProcess
from tests.kafka_wire import WireClient

START_TIMEOUT = 60
DEFAULTS = {"zookeeper.session.timeout.ms": 6000, "replica.lag.time.max.ms": 3000}


def require_zookeeper() -> None:
    """Skip the test when no Java or no ZooKeeper jars are installed; under CI that is a failure."""
    try:
        find_classpath()
    except ZooKeeperNotInstalled as exc:
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(f"ZooKeeper is required under CI: {exc}", pytrace=False)
        pytest.skip(f"ZooKeeper is not installed: {exc}")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports on 127.0.0.1 (all held open together while choosing)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def answers_requests(port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> None:
    """One ApiVersions v0 round trip: the broker's loop is serving, so its signal handlers are
    installed (they are installed just after the ready line is printed)."""
    with WireClient(port, host=host, timeout=timeout) as c:
        c.send_frame(struct.pack(">hhih", 18, 0, 1, 7) + b"cluster")
        c.recv_frame()


def start_all(brokers: list[BrokerProcess], timeout: float = START_TIMEOUT) -> None:
    """Start brokers in parallel and wait until each answers a request; one that has not printed
    its ready line in time is killed."""
    errors = {}

    def run(b):
        try:
            b.start()  # its error ends with the broker's stderr
        except Exception as exc:  # reported below, with the others
            errors[b] = exc
            return
        try:
            answers_requests(b.port, host=b.host)
        except Exception as exc:
            errors[b] = RuntimeError(f"no answer to ApiVersions: {exc!r}; stderr: {b.stderr()[-2000:]}")

    threads = [threading.Thread(target=run, args=(b,), daemon=True) for b in brokers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for b, t in zip(brokers, threads):
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():  # stuck before its ready line: kill it so that its readline returns
            if b.proc is not None and b.proc.poll() is None:
                b.proc.kill()
                b.proc.wait(30)
            t.join(30)
            errors[b] = RuntimeError(f"no ready line within {timeout} s; stderr: {b.stderr()[-2000:]}")
    if errors:
        raise RuntimeError("brokers did not start:\n" + "\n".join(
            f"broker {b.overrides.get('broker.id')}: {exc}" for b, exc in errors.items()))


class Cluster:
    """``Cluster(base_dir, brokers=3, zk=None, overrides=None, broker_overrides=None)``.

    ``zk`` is a running ``ZooKeeperServer``, a ``host:port`` connect string, or None to start
    a ZooKeeper in ``base_dir/zookeeper``. The cluster lives under a fresh chroot, so clusters can
    share one ZooKeeper. ``overrides`` apply to every broker, ``broker_overrides[id]`` to one.
    ``listener_host`` (a host for all brokers, or ``{id: host}``) replaces 127.0.0.1 as the address
    a broker binds and is reached at; ``command_prefix`` (``{id: argv prefix}``) runs a broker
    through e.g. ``ip netns exec NS`` (tests/netns.py).
    """

    def __init__(self, base_dir, brokers: int = 3, zk=None, overrides: dict | None = None,
                 broker_overrides: dict | None = None, listener_host: str | dict | None = None,
                 command_prefix: dict | None = None):
        self.base_dir = str(base_dir)
        self._own_zk = None
        self._client = None
        self.brokers: dict[int, BrokerProcess] = {}
        try:
            if zk is None:
                zk = self._own_zk = ZooKeeperServer(os.path.join(self.base_dir, "zookeeper")).start()
            self.zk_connect = zk.connect if isinstance(zk, ZooKeeperServer) else str(zk)
            self.chroot = f"/pybroker-{uuid.uuid4().hex[:8]}"
            self._create_chroot()
            ports = free_ports(brokers)
            for broker_id, port in zip(range(1, brokers + 1), ports):
                settings = {**DEFAULTS, "broker.id": broker_id,
                            "zookeeper.connect": self.zk_connect + self.chroot,
                            **(overrides or {}), **(broker_overrides or {}).get(broker_id, {})}
                host = (listener_host.get(broker_id) if isinstance(listener_host, dict)
                        else listener_host) or "127.0.0.1"
                self.brokers[broker_id] = BrokerProcess(
                    os.path.join(self.base_dir, f"broker-{broker_id}"), settings, port,
                    command_prefix=(command_prefix or {}).get(broker_id, ()), host=host)
            start_all(list(self.brokers.values()))
            if self.brokers:
                self.wait_formed()
        except BaseException:
            self.close()
            raise

    # ---- processes

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{b.host}:{self._port(b)}" for b in self.brokers.values())

    @staticmethod
    def _port(b: BrokerProcess) -> int:
        return b.port or int(b.overrides["listeners"].rsplit(":", 1)[1])

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    def kill(self, broker_id: int) -> None:
        """kill -9: a crash."""
        self.brokers[broker_id].kill()

    def stop(self, broker_id: int, timeout: float = 30) -> int:
        """SIGTERM and wait: a controlled shutdown."""
        b = self.brokers[broker_id]
        if b.alive():
            os.kill(b.proc.pid, signal.SIGCONT)  # a paused broker cannot act on SIGTERM
        return b.stop(timeout)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP, returning once it is stopped: the broker hangs (its ZooKeeper session runs
        towards expiry)."""
        self._signal(broker_id, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        self._signal(broker_id, signal.SIGCONT)

    def _signal(self, broker_id: int, sig) -> None:
        b = self.brokers[broker_id]
        if not b.alive():
            raise RuntimeError(f"broker {broker_id} is not running")
        os.kill(b.proc.pid, sig)
        wait_stopped(b.proc.pid, stopped=sig == signal.SIGSTOP)

    def restart(self, broker_id: int, timeout: float = START_TIMEOUT) -> BrokerProcess:
        """Start a broker again with its data dir and port; a running one is stopped first."""
        b = self.brokers[broker_id]
        if b.alive():
            self.stop(broker_id)
        b.close()  # the old process's pipe and stderr file
        start_all([b], timeout)
        return b

    def wait_formed(self, timeout: float = START_TIMEOUT) -> None:
        """Every broker registered and a controller elected: admin requests can be served."""
        want = sorted(self.brokers)
        self.wait_for(lambda: self.live_brokers() == want and self.controller_id() in want, timeout,
                      f"brokers {want} registered and a controller elected")

    # ---- ZooKeeper state

    def zk(self):
        """A started kazoo client on this cluster's chroot (one per cluster)."""
        if self._client is None:
            from kazoo.client import KazooClient
            client = KazooClient(hosts=self.zk_connect + self.chroot, timeout=10.0)
            client.start(timeout=30)
            self._client = client
        return self._client

    def _create_chroot(self) -> None:
        from pybroker.controller.zk import ensure_chroot
        ensure_chroot(self.zk_connect, self.chroot, 30)

    def _get(self, path: str) -> bytes | None:
        from kazoo.exceptions import NoNodeError
        try:
            return self.zk().get(path)[0]
        except NoNodeError:
            return None

    def controller_id(self) -> int | None:
        data = self._get("/controller")
        return json.loads(data)["brokerid"] if data else None

    def controller_epoch(self) -> int | None:
        data = self._get("/controller_epoch")
        return int(data) if data else None

    def partition_state(self, topic: str, partition: int) -> dict | None:
        data = self._get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return json.loads(data) if data else None

    def leader(self, topic: str, partition: int) -> int | None:
        state = self.partition_state(topic, partition)
        return state["leader"] if state else None

    def live_brokers(self) -> list[int]:
        from kazoo.exceptions import NoNodeError
        try:
            return sorted(int(c) for c in self.zk().get_children("/brokers/ids"))
        except NoNodeError:
            return []

    @staticmethod
    def wait_for(predicate, timeout: float = 60, what: str = "condition", interval: float = 0.1):
        """Poll ``predicate()`` until it returns a truthy value, and return that value.

        An exception from the predicate counts as "not yet"; the last value or exception is
        named in the AssertionError raised after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        last, error = None, None
        while True:
            try:
                last, error = predicate(), None
                if last:
                    return last
            except Exception as exc:
                error = exc
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; last "
                                     + (f"error: {error!r}" if error else f"value: {last!r}")) from error
            time.sleep(interval)

    # ---- teardown

    def close(self) -> None:
        """Kill every broker, then the ZooKeeper this cluster started; stop the kazoo client."""
        for b in self.brokers.values():
            b.close()
        if self._client is not None:
            try:
                self._client.stop()
                self._client.close()
            finally:
                self._client = None
        if self._own_zk is not None:
            self._own_zk.kill()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
