"""Run a real standalone ZooKeeper server from Debian's ``zookeeper`` package, for tests and for
``pybroker dev-cluster``.

The server is a child JVM (``QuorumPeerMain`` with a generated ``zoo.cfg``) bound to 127.0.0.1,
with its data, its config and its output file (``zookeeper.log``) in one directory. ``start()``
returns once the server answers the four-letter words ``ruok`` (``imok``) and ``srvr`` (serving).
Every signal goes to this object's own child PID only.

The jars come from ``/usr/share/java`` (``apt-get install zookeeper``); set ``ZOOKEEPER_CLASSPATH``
to use others. ``java`` is looked up in ``JAVA_HOME/bin``, then on ``PATH``.
"""
import os
import shutil
import signal
import socket
import subprocess
import time

JAVA_DIR = "/usr/share/java"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# (alternatives) for each classpath entry; the first one found in JAVA_DIR is used
JARS = (("zookeeper",), ("zookeeper-jute",), ("slf4j-api",), ("slf4j-simple", "slf4j-nop"),
        ("netty-all",), ("metrics-core",), ("commons-cli",))


class ZooKeeperError(RuntimeError):
    """The ZooKeeper server could not be started or did not become ready."""


class ZooKeeperNotInstalled(ZooKeeperError):
    """No Java runtime, or no ZooKeeper jars."""


def find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else None
    java = java if java and os.access(java, os.X_OK) else shutil.which("java")
    if not java:
        raise ZooKeeperNotInstalled("no 'java' found (JAVA_HOME or PATH); ZooKeeper needs a Java runtime: "
                                    "apt-get install zookeeper (or openjdk-17-jre-headless)")
    return java


def _find_jar(name: str) -> str | None:
    path = os.path.join(JAVA_DIR, name + ".jar")  # Debian's unversioned link to the current jar
    return path if os.path.isfile(path) else None


def find_classpath() -> str:
    """The ZooKeeper server classpath: ``ZOOKEEPER_CLASSPATH``, else the Debian jars. Checks for java."""
    find_java()
    override = os.environ.get("ZOOKEEPER_CLASSPATH")
    if override:
        missing = [e for e in override.split(os.pathsep)
                   if not os.path.exists(e[:-2] if e.endswith("/*") else e)]
        if missing:
            raise ZooKeeperNotInstalled(f"ZOOKEEPER_CLASSPATH names entries that do not exist: {missing}")
        return override
    found, missing = [], []
    for alternatives in JARS:
        jar = next(filter(None, map(_find_jar, alternatives)), None)
        (found if jar else missing).append(jar or "|".join(alternatives))
    if missing:
        raise ZooKeeperNotInstalled(f"ZooKeeper jars not found in {JAVA_DIR} ({', '.join(missing)}): "
                                    "apt-get install zookeeper, or set ZOOKEEPER_CLASSPATH")
    return os.pathsep.join(found)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def four_letter_word(port: int, word: str, timeout: float = 2.0, host: str = "127.0.0.1") -> str:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def write_config(data_dir: str, host: str, port: int, tick_ms: int, max_session_timeout_ms: int) -> str:
    """A standalone server's zoo.cfg in ``data_dir`` (data in ``data_dir/data``), bound to host:port only."""
    os.makedirs(os.path.join(data_dir, "data"), exist_ok=True)
    config = os.path.join(data_dir, "zoo.cfg")
    with open(config, "w") as f:
        f.write(f"tickTime={tick_ms}\ndataDir={os.path.join(data_dir, 'data')}\n"
                f"clientPort={port}\nclientPortAddress={host}\n"
                f"minSessionTimeout=1000\nmaxSessionTimeout={max_session_timeout_ms}\n"
                "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr\n")
    return config


def wait_serving(proc, host: str, port: int, timeout: float) -> str | None:
    """Wait (bounded) until the ZooKeeper in ``proc`` serves on host:port; None, or why it does not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with status {proc.returncode} while starting"
        try:  # imok comes before it serves requests; srvr names its mode once it does
            if (four_letter_word(port, "ruok", host=host) == "imok"
                    and "Mode:" in four_letter_word(port, "srvr", host=host)):
                return None
        except OSError:
            pass
        time.sleep(0.1)
    return f"did not answer within {timeout} s"


def read_tail(path: str, chars: int = 4000, start: int = 0) -> str:
    """The last ``chars`` characters of a log file (from ``start`` at the earliest)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(start, os.path.getsize(path) - chars))
            return f.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"


def wait_stopped(pid: int, stopped: bool = True, timeout: float = 5.0) -> None:
    """Wait (bounded) until a SIGSTOP (or SIGCONT) has taken effect on ``pid`` (Linux ``/proc``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if (f.read().rsplit(")", 1)[1].split()[0] in "Tt") == stopped:
                    return
        except (OSError, IndexError):
            return  # no /proc, or the process is gone
        time.sleep(0.01)


class ZooKeeperServer:
    """``ZooKeeperServer(data_dir, port=0)``: ``start()``, then ``connect`` ("127.0.0.1:PORT") and
    ``pid``; ``stop()``, ``kill()``, ``pause()``/``resume()``; or use it as a context manager.
    Port 0 picks a free port once; a restart keeps it, and the data in ``data_dir``."""

    def __init__(self, data_dir, port: int = 0, tick_ms: int = 500, max_session_timeout_ms: int = 60000):
        self.data_dir = os.path.abspath(data_dir)
        self.port = port
        self.tick_ms = tick_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.log_path = os.path.join(self.data_dir, "zookeeper.log")
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60) -> "ZooKeeperServer":
        if self.alive():
            raise ZooKeeperError(f"ZooKeeper already running as pid {self.proc.pid}")
        java, classpath = find_java(), find_classpath()
        self.port = self.port or free_port()
        config = write_config(self.data_dir, "127.0.0.1", self.port, self.tick_ms, self.max_session_timeout_ms)
        with open(self.log_path, "ab") as out:
            self._log_start = out.tell()
            self.proc = subprocess.Popen(
                [java, "-Xmx128m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
                 "-cp", classpath, MAIN_CLASS, config],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.data_dir,
                start_new_session=True)  # a terminal's Ctrl-C is for our parent, which stops us in order
        failure = wait_serving(self.proc, "127.0.0.1", self.port, timeout)
        if failure is None:
            return self
        self.kill()
        raise ZooKeeperError(f"ZooKeeper {failure} on {self.connect}; its output:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        return read_tail(self.log_path, chars, getattr(self, "_log_start", 0))

    def _signal(self, sig) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
        if not self.alive():
            return
        self.resume()  # a stopped JVM cannot act on SIGTERM
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL: a crash."""
        self._signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def pause(self) -> None:
        """SIGSTOP: the server stops answering, its clients' sessions run towards expiry."""
        self._signal(signal.SIGSTOP)
        if self.alive():
            wait_stopped(self.proc.pid)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)
        if self.alive():
            wait_stopped(self.proc.pid, stopped=False)

    def __enter__(self) -> "ZooKeeperServer":
        return self.start() if not self.alive() else self

    def __exit__(self, *exc) -> None:
        self.stop()
