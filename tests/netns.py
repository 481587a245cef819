"""An isolated test network of Linux network namespaces, for real network cuts between brokers.

``TestNetwork(brokers=3)`` builds (as root, with iproute2):

* a "hub" namespace ``pbt-<tag>-hub`` holding a bridge ``br0`` with address ``10.233.N.1/24``;
  the ZooKeeper of ``start_zookeeper()`` runs there, bound to that address only;
* one namespace ``pbt-<tag>-b<id>`` per broker, its ``eth0`` (``10.233.N.<10+id>``) a veth whose
  peer ``b<id>`` is a port of the bridge, loopback up;
* a veth ``pbt<tag>`` in the root namespace (``10.233.N.254``), its peer a bridge port, so that the
  test process (clients, kazoo) reaches every namespace address.

``<tag>`` is random and ``N`` is chosen among /24s the root namespace does not route yet, so
parallel runs do not collide. Servers bind only to these namespace addresses, never to an
address of the root namespace.

``cut(id)`` makes the broker's link drop every packet, both ways, silently (a pulled cable / a
partition): ``netem loss 100%`` on both veth ends when the kernel has netem; else a ``pfifo``
qdisc of limit 0 (it holds no packet, so drops each one, and it disables the qdisc bypass); else,
as a last resort, the bridge side of the veth is set down. ``heal(id)`` undoes it.
``PYBROKER_NETNS_CUT=netem|drop|down`` forces a method.

``close()`` kills the processes this object started (by PID), deletes the root veth and every
namespace it created; it runs on a failed build too. Processes started by others inside the
namespaces (brokers) must be ended by their owner first; ``close()`` reports any left.
"""
import os
import random
import shutil
import subprocess
import uuid

from pybroker.controller.zk_server import (MAIN_CLASS, find_classpath, find_java, read_tail, wait_serving,
                                           write_config)

SUBNET_PREFIX = "10.233"
CUT_METHODS = ("netem", "drop", "down")


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be created here (not root, no ``ip``, or no permission)."""


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def netns_unavailable_reason() -> str | None:
    """Why namespaces certainly cannot be created here, or None when they may be."""
    if os.geteuid() != 0:
        return "network namespaces need root (euid is %d)" % os.geteuid()
    if not shutil.which("ip"):
        return "no 'ip' command (iproute2)"
    if not shutil.which("tc"):
        return "no 'tc' command (iproute2)"
    return None


class NamespacedZooKeeper:
    """A standalone ZooKeeper run with ``ip netns exec NS java ...``, bound to ``host`` only.

    (``pybroker.controller.zk_server.ZooKeeperServer`` binds and probes 127.0.0.1, which inside a
    namespace only that namespace reaches.) ``ip netns exec`` execs java, so ``proc.pid`` is the
    JVM's own PID.
    """

    def __init__(self, data_dir, netns: str, host: str, port: int = 2181, tick_ms: int = 500,
                 max_session_timeout_ms: int = 60000):
        self.data_dir = os.path.abspath(str(data_dir))
        self.netns, self.host, self.port = netns, host, port
        self.tick_ms, self.max_session_timeout_ms = tick_ms, max_session_timeout_ms
        self.log_path = os.path.join(self.data_dir, "zookeeper.log")
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 120) -> "NamespacedZooKeeper":
        java, classpath = find_java(), find_classpath()
        config = write_config(self.data_dir, self.host, self.port, self.tick_ms, self.max_session_timeout_ms)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, java, "-Xmx128m", "-XX:+UseSerialGC",
                 "-Djava.net.preferIPv4Stack=true", "-cp", classpath, MAIN_CLASS, config],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.data_dir,
                start_new_session=True)
        failure = wait_serving(self.proc, self.host, self.port, timeout)
        if failure is None:
            return self
        self.kill()
        raise RuntimeError(f"ZooKeeper {failure} on {self.connect} (namespace {self.netns}); "
                           f"its output:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        return read_tail(self.log_path, chars)

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()  # SIGKILL to its own PID (a stopped JVM dies of it too)
        self.proc.wait(30)


class TestNetwork:
    """``TestNetwork(brokers=3)``: see the module docstring. Raises ``NetnsUnavailable`` when the
    first namespace cannot be created (nothing is left behind then)."""

    __test__ = False  # not a pytest test class

    def __init__(self, brokers: int = 3, cut_method: str | None = None):
        reason = netns_unavailable_reason()
        if reason:
            raise NetnsUnavailable(reason)
        self.tag = uuid.uuid4().hex[:8]
        self.hub = f"pbt-{self.tag}-hub"
        self.root_link = f"pbt{self.tag}"  # an interface name: at most 15 characters
        self.broker_ids = list(range(1, brokers + 1))
        self.namespaces: list[str] = []  # every namespace created, for close()
        self.processes: list = []  # objects with kill(), started here
        self.cut_links: set[int] = set()
        self.octet = None
        try:
            try:
                _run("ip", "netns", "add", self.hub)
            except RuntimeError as exc:
                raise NetnsUnavailable(f"cannot create a network namespace: {exc}") from exc
            self.namespaces.append(self.hub)
            self._build()
            self.cut_method = self._choose_cut_method(cut_method or os.environ.get("PYBROKER_NETNS_CUT"))
        except BaseException:
            self.close()
            raise

    # ---- addresses

    def namespace(self, broker_id: int) -> str:
        return f"pbt-{self.tag}-b{broker_id}"

    def address(self, last: int) -> str:
        return f"{SUBNET_PREFIX}.{self.octet}.{last}"

    @property
    def hub_host(self) -> str:
        return self.address(1)

    @property
    def root_host(self) -> str:
        return self.address(254)

    def host(self, broker_id: int) -> str:
        return self.address(10 + broker_id)

    @property
    def hosts(self) -> dict:
        """{broker id: its address} (Cluster's ``listener_host``)."""
        return {b: self.host(b) for b in self.broker_ids}

    def exec_prefix(self, netns: str) -> tuple:
        return ("ip", "netns", "exec", netns)

    @property
    def prefixes(self) -> dict:
        """{broker id: argv prefix running a command in its namespace} (Cluster's ``command_prefix``)."""
        return {b: self.exec_prefix(self.namespace(b)) for b in self.broker_ids}

    # ---- building

    def _ip(self, netns: str | None, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run("ip", *(("-n", netns) if netns else ()), *args, check=check)

    def _tc(self, netns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run("ip", "netns", "exec", netns, "tc", *args, check=check)

    def _used_octets(self) -> set:
        """Third octets of SUBNET_PREFIX.x.0/24 that the root namespace routes or has addresses in."""
        text = self._ip(None, "-4", "-o", "route", "show", "table", "all").stdout
        text += self._ip(None, "-4", "-o", "addr", "show").stdout
        used = set()
        for word in text.split():
            if word.startswith(SUBNET_PREFIX + "."):
                parts = word.split("/")[0].split(".")
                if len(parts) == 4 and parts[2].isdigit():
                    used.add(int(parts[2]))
        return used

    def _claim_subnet(self) -> None:
        """Create the root veth and give it an address in a /24 nobody routes; a /24 claimed by a
        parallel run at the same moment (two routes for it afterwards) is released and another
        one tried."""
        for _ in range(20):
            used = self._used_octets()
            free = [o for o in range(256) if o not in used]
            if not free:
                raise RuntimeError(f"no free {SUBNET_PREFIX}.x.0/24 in the root namespace")
            self.octet = random.choice(free)
            self._ip(None, "link", "add", "name", self.root_link, "type", "veth", "peer", "name", "root",
                     "netns", self.hub)
            self._ip(None, "addr", "add", f"{self.root_host}/24", "dev", self.root_link)
            self._ip(None, "link", "set", self.root_link, "up")
            routes = self._ip(None, "-4", "-o", "route", "show", "exact",
                              f"{SUBNET_PREFIX}.{self.octet}.0/24").stdout.splitlines()
            if len(routes) == 1:
                return
            self._ip(None, "link", "del", self.root_link)  # deletes its peer too
        raise RuntimeError(f"could not claim a free {SUBNET_PREFIX}.x.0/24")

    def _build(self) -> None:
        hub = self.hub
        self._ip(hub, "link", "set", "lo", "up")
        self._claim_subnet()
        self._ip(hub, "link", "add", "name", "br0", "type", "bridge")  # STP off: ports forward at once
        self._ip(hub, "addr", "add", f"{self.hub_host}/24", "dev", "br0")
        self._ip(hub, "link", "set", "br0", "up")
        self._ip(hub, "link", "set", "root", "master", "br0")
        self._ip(hub, "link", "set", "root", "up")
        for b in self.broker_ids:
            ns = self.namespace(b)
            self._ip(None, "netns", "add", ns)
            self.namespaces.append(ns)
            self._ip(ns, "link", "set", "lo", "up")
            self._ip(hub, "link", "add", "name", f"b{b}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._ip(hub, "link", "set", f"b{b}", "master", "br0")
            self._ip(hub, "link", "set", f"b{b}", "up")
            self._ip(ns, "addr", "add", f"{self.host(b)}/24", "dev", "eth0")
            self._ip(ns, "link", "set", "eth0", "up")

    QDISCS = {"netem": ("netem", "loss", "100%"), "drop": ("pfifo", "limit", "0")}

    def _choose_cut_method(self, wanted: str | None) -> str:
        """``wanted`` if it works here, else (None) netem if the kernel has it, else a pfifo that
        drops everything, else link down. Qdiscs are tried on the hub's loopback, which nothing uses."""
        if wanted is not None and wanted not in CUT_METHODS:
            raise ValueError(f"cut method {wanted!r}: one of {', '.join(CUT_METHODS)}")
        for method in ([wanted] if wanted else CUT_METHODS):
            if method == "down":
                return method
            r = self._tc(self.hub, "qdisc", "add", "dev", "lo", "root", *self.QDISCS[method], check=False)
            if r.returncode == 0:
                self._tc(self.hub, "qdisc", "del", "dev", "lo", "root")
                return method
            if wanted:
                raise RuntimeError(f"cut method {method} does not work here: tc: {r.stderr.strip()}")
        raise AssertionError("unreachable")

    # ---- processes

    def start_zookeeper(self, data_dir, timeout: float = 120) -> NamespacedZooKeeper:
        """A ZooKeeper in the hub namespace on ``hub_host:2181``; killed by ``close()``."""
        zk = NamespacedZooKeeper(data_dir, self.hub, self.hub_host)
        self.processes.append(zk)
        return zk.start(timeout)

    # ---- faults

    def _cut_ends(self, broker_id: int) -> list:
        """(namespace, device) of both ends of the broker's link: the bridge side's egress carries
        what goes to the broker, the broker side's egress what comes from it."""
        return [(self.hub, f"b{broker_id}"), (self.namespace(broker_id), "eth0")]

    def cut(self, broker_id: int) -> None:
        """From now on, every packet to or from the broker is lost (nothing is reset or refused)."""
        if broker_id in self.cut_links:
            raise RuntimeError(f"broker {broker_id}'s link is already cut")
        if self.cut_method == "down":
            self._ip(self.hub, "link", "set", f"b{broker_id}", "down")
        else:
            for ns, dev in self._cut_ends(broker_id):
                self._tc(ns, "qdisc", "add", "dev", dev, "root", *self.QDISCS[self.cut_method])
        self.cut_links.add(broker_id)

    def heal(self, broker_id: int) -> None:
        if broker_id not in self.cut_links:
            raise RuntimeError(f"broker {broker_id}'s link is not cut")
        if self.cut_method == "down":
            self._ip(self.hub, "link", "set", f"b{broker_id}", "up")
        else:
            for ns, dev in self._cut_ends(broker_id):
                self._tc(ns, "qdisc", "del", "dev", dev, "root")
        self.cut_links.discard(broker_id)

    # ---- teardown

    def close(self) -> None:
        """Kill this object's processes, delete the root veth and every namespace created.
        Every step is tried; the errors (and processes others left inside) are raised at the end."""
        errors = []
        for p in self.processes:
            try:
                p.kill()
            except Exception as exc:
                errors.append(f"killing {p!r}: {exc!r}")
        self.processes = []
        for ns in self.namespaces:
            left = _run("ip", "netns", "pids", ns, check=False).stdout.split()
            if left:
                errors.append(f"processes still in {ns}: {', '.join(left)} (not started here: not killed)")
        if self.octet is not None or self.namespaces:
            if _run("ip", "link", "show", "dev", self.root_link, check=False).returncode == 0:
                r = _run("ip", "link", "del", self.root_link, check=False)
                if r.returncode != 0:
                    errors.append(f"ip link del {self.root_link}: {r.stderr.strip()}")
        for ns in reversed(self.namespaces):
            r = _run("ip", "netns", "del", ns, check=False)
            if r.returncode != 0:
                errors.append(f"ip netns del {ns}: {r.stderr.strip()}")
        self.namespaces = []
        self.cut_links.clear()
        if errors:
            raise RuntimeError("test network teardown: " + "; ".join(errors))

    def __enter__(self) -> "TestNetwork":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
