"""A real broker for tests and notebooks: ``EmbeddedBroker`` (and a ZooKeeper-backed ``EmbeddedCluster``
in ``pybroker.embedded_cluster``).

::

    from pybroker import EmbeddedBroker

    with EmbeddedBroker() as broker:                 # its own process, 127.0.0.1, an ephemeral port
        broker.create_topic("events", partitions=3)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
        ...

    async with EmbeddedBroker(mode="inprocess") as broker:  # the broker's loop on a daemon thread
        ...

Modes:

* ``"process"`` (default): ``python -m pybroker serve`` as a child process, listening on
  ``PLAINTEXT://127.0.0.1:0``; the bound port is read from its ``--ready-file``. Its output goes
  to ``log_path`` (default: ``broker.log`` in a temporary directory, removed on ``close``). The child
  stops by itself when this process exits (``--stop-on-stdin-eof``: its stdin is a pipe from us).
* ``"inprocess"``: the same ``Broker`` on an event loop of its own, on a daemon thread of this
  process. Cheaper to start; shares the GIL with the tests, and its logging goes to this process's
  logging configuration.

Data: ``data_dir`` (kept) or a temporary directory (removed on ``close``). ``overrides`` are broker
settings by their Kafka names (``{"num.partitions": 3}``); ``listeners`` and ``log.dirs`` are set
for you unless given.

Lifecycle: ``start()`` (done by ``with``), ``stop()`` (clean shutdown), ``restart()`` (stop if
running, start again on the same data and, when it is free, the same port), ``kill()`` (a crash),
``close()`` (stop and remove what we created). ``kill()`` in process mode is SIGKILL. In-process it
is as close to a crash as a thread allows: the listeners are closed, the loop is abandoned and the
log files are closed without flushing, checkpoints or the clean-shutdown marker, so the next start
recovers the logs as after a crash; data the kernel already has (acknowledged appends) is kept in
both modes, as it is after a process crash.
"""
import asyncio
import concurrent.futures
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from pybroker.ready import read_ready_file, remove_ready_file

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
MODES = ("process", "inprocess")
_POLL_S = 0.002  # ready-file polling: startup is ~0.25 s, so a few ms of latency at most


class EmbeddedBrokerError(RuntimeError):
    """The broker did not start (its output, if any, is in the message)."""


class EmbeddedBroker:
    def __init__(self, overrides: dict | None = None, *, mode: str = "process", data_dir: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, log_path: str | None = None,
                 start_timeout: float = START_TIMEOUT):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self.host = host
        self.overrides = {str(k): v for k, v in (overrides or {}).items()}
        self.start_timeout = start_timeout
        self._requested_port = port
        self.port: int | None = None  # bound port of the first listener, once started
        self.listeners: dict = {}  # listener name -> "host:port"
        self._workdir = tempfile.mkdtemp(prefix="pybroker-embedded-")
        self._own_data = data_dir is None
        self.data_dir = os.path.abspath(data_dir) if data_dir else os.path.join(self._workdir, "data")
        self.log_path = log_path or os.path.join(self._workdir, "broker.log")
        self.ready_file = os.path.join(self._workdir, "ready.json")
        self.proc: subprocess.Popen | None = None
        self._loop = self._thread = self._broker = None
        self._closed = False

    # ---- properties --------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the broker's first listener (Kafka's ``bootstrap.servers``)."""
        if self.port is None:
            raise EmbeddedBrokerError("the broker has not been started")
        return next(iter(self.listeners.values()))

    @property
    def running(self) -> bool:
        if self.mode == "process":
            return self.proc is not None and self.proc.poll() is None
        return self._thread is not None and self._thread.is_alive()

    @property
    def pid(self) -> int:
        """The broker's process id (this process's own in in-process mode)."""
        return self.proc.pid if self.mode == "process" and self.proc else os.getpid()

    def settings(self, port: int | None = None) -> dict:
        """The broker settings a start uses: ours (listeners, log.dirs), then the caller's overrides."""
        port = self._requested_port if port is None else port
        return {"listeners": f"PLAINTEXT://{self.host}:{port}", "log.dirs": self.data_dir, **self.overrides}

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "EmbeddedBroker":
        """Start and wait until the broker serves (bounded by ``start_timeout``)."""
        if self._closed:
            raise EmbeddedBrokerError("this EmbeddedBroker is closed")
        if self.running:
            return self
        port = self.port if self.port is not None and "listeners" not in self.overrides else None
        try:
            self._start(port)
        except _PortTaken:
            self._start(None)  # our old port went to someone else meanwhile: take a new one
        return self

    def _start(self, port) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        if self.mode == "process":
            self._start_process(self.settings(port), retry_port=port is not None)
        else:
            self._start_inprocess(self.settings(port), retry_port=port is not None)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """A clean shutdown (SIGTERM in process mode); SIGKILL if it takes longer than ``timeout``."""
        if self.mode == "process":
            if self.running:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.kill()
            self._reap()
        elif self._loop is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._broker.stop(timeout), self._loop).result(timeout + 5)
            finally:
                self._end_loop()

    def kill(self) -> None:
        """A crash: SIGKILL in process mode; in-process, see the module docstring."""
        if self.mode == "process":
            if self.running:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
            self._reap()
            remove_ready_file(self.ready_file)  # a killed broker cannot remove it
        elif self._loop is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._broker.abandon(), self._loop).result(STOP_TIMEOUT)
            finally:
                self._end_loop()

    def restart(self, timeout: float = STOP_TIMEOUT) -> "EmbeddedBroker":
        """Stop cleanly if running, then start on the same data dir (and the same port if free)."""
        self.stop(timeout)
        return self.start()

    def close(self) -> None:
        """Stop the broker and remove the temporary directories (a caller's ``data_dir`` is kept)."""
        if self._closed:
            return
        try:
            self.stop()
        finally:
            self._closed = True
            if self._own_data:
                shutil.rmtree(self.data_dir, ignore_errors=True)
            shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> "EmbeddedBroker":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    async def __aenter__(self) -> "EmbeddedBroker":
        return await asyncio.to_thread(self.__enter__)  # never block the caller's loop

    async def __aexit__(self, *exc) -> None:
        await asyncio.to_thread(self.close)

    def __repr__(self) -> str:
        where = self.bootstrap_servers if self.port is not None else "not started"
        return f"EmbeddedBroker({self.mode}, {where}, data_dir={self.data_dir!r})"

    # ---- admin -------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: dict | None = None,
                     replication_factor: int = -1, timeout: float = 30.0) -> str:
        """Create a topic (with pybroker's AdminClient) and wait until every partition has a
        leader; returns the name. -1 means the broker's default (``num.partitions``,
        ``default.replication.factor``)."""
        from pybroker.client import AdminClient, NewTopic
        with AdminClient({"bootstrap.servers": self.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic(name, partitions, replication_factor, dict(config or {}))])
            wait_for_leaders(admin, name, timeout)
        return name

    def admin(self):
        """A pybroker ``AdminClient`` for this broker (the caller closes it)."""
        from pybroker.client import AdminClient
        return AdminClient({"bootstrap.servers": self.bootstrap_servers})

    # ---- process mode ------------------------------------------------------------------------

    def _start_process(self, settings: dict, retry_port: bool) -> None:
        remove_ready_file(self.ready_file)
        args = [sys.executable, "-m", "pybroker", "serve", "--ready-file", self.ready_file, "--stop-on-stdin-eof"]
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        env = dict(os.environ)
        # the child runs this very pybroker, installed or not
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the directory holding pybroker/
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        with open(self.log_path, "ab") as out:
            self._log_start = out.tell()
            self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                         env=env, cwd=self._workdir, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while (info := read_ready_file(self.ready_file)) is None:
            if self.proc.poll() is not None:
                output = self.output()
                self._reap()
                if retry_port and "Address already in use" in output:
                    raise _PortTaken()
                raise EmbeddedBrokerError(f"the broker exited with status {self.proc.returncode} while "
                                          f"starting; its output:\n{output[-4000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise EmbeddedBrokerError(f"the broker was not ready within {self.start_timeout} s; "
                                          f"its output:\n{self.output()[-4000:]}")
            time.sleep(_POLL_S)
        self._set_listeners(info["listeners"])

    def output(self) -> str:
        """What the broker process printed during its current (or last) run."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(getattr(self, "_log_start", 0))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _reap(self) -> None:
        if self.proc is not None and self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def _set_listeners(self, listeners: dict) -> None:
        # the PLAINTEXT listener first: bootstrap_servers names it
        self.listeners = dict(sorted(listeners.items(), key=lambda kv: kv[0] != "PLAINTEXT"))
        self.port = int(next(iter(self.listeners.values())).rsplit(":", 1)[1])

    # ---- in-process mode ---------------------------------------------------------------------

    def _start_inprocess(self, settings: dict, retry_port: bool) -> None:
        from pybroker.broker import Broker
        from pybroker.config import BrokerConfig
        from pybroker.net.server import new_event_loop
        config = BrokerConfig.load(None, [f"{k}={v}" for k, v in settings.items()])
        loop = new_event_loop()
        thread = threading.Thread(target=_run_loop, args=(loop,), name="pybroker-embedded", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        broker = Broker(config)
        future = asyncio.run_coroutine_threadsafe(broker.start(), loop)
        try:
            self._broker = future.result(self.start_timeout)
        except BaseException as exc:
            if not future.done():
                future.cancel()
            try:  # a half-started broker may hold the log-dir locks: let go, or a retry finds them locked
                asyncio.run_coroutine_threadsafe(broker.abandon(), loop).result(STOP_TIMEOUT)
            except Exception:
                pass
            self._end_loop()
            if retry_port and isinstance(exc, OSError) and "in use" in str(exc):
                raise _PortTaken() from exc
            if isinstance(exc, concurrent.futures.TimeoutError):
                raise EmbeddedBrokerError(f"the broker was not ready within {self.start_timeout} s") from None
            raise
        self._set_listeners({s.listener_name: f"{s.host}:{s.port}" for s in self._broker.servers})

    def _end_loop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = self._broker = None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_TIMEOUT)


class _PortTaken(Exception):
    pass


def _run_loop(loop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:  # leftover tasks (timers, connections) end with the loop
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def wait_for_leaders(admin, topic: str, timeout: float) -> None:
    """Wait (bounded) until every partition of ``topic`` has a leader, as seen by ``admin``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            meta = admin.describe_topics([topic])[topic]
            if meta.partitions and all(p.leader >= 0 for p in meta.partitions.values()):
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise EmbeddedBrokerError(f"topic {topic!r} has partitions without a leader after {timeout} s")
        time.sleep(0.05)


class AsyncEmbeddedBroker:
    """``EmbeddedBroker`` with coroutine methods (each runs the blocking one on a worker thread)::

        async with AsyncEmbeddedBroker() as broker:
            await broker.create_topic("events")
            ... broker.bootstrap_servers ...
    """

    def __init__(self, overrides: dict | None = None, **kwargs):
        self.sync = EmbeddedBroker(overrides, **kwargs)

    @property
    def bootstrap_servers(self) -> str:
        return self.sync.bootstrap_servers

    def __getattr__(self, name):  # read-only attributes: mode, port, data_dir, listeners...
        return getattr(self.sync, name)

    async def start(self) -> "AsyncEmbeddedBroker":
        await asyncio.to_thread(self.sync.start)
        return self

    async def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        await asyncio.to_thread(self.sync.stop, timeout)

    async def restart(self, timeout: float = STOP_TIMEOUT) -> "AsyncEmbeddedBroker":
        await asyncio.to_thread(self.sync.restart, timeout)
        return self

    async def kill(self) -> None:
        await asyncio.to_thread(self.sync.kill)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def create_topic(self, name: str, partitions: int = 1, config: dict | None = None,
                           replication_factor: int = -1, timeout: float = 30.0) -> str:
        return await asyncio.to_thread(self.sync.create_topic, name, partitions, config, replication_factor, timeout)

    async def __aenter__(self) -> "AsyncEmbeddedBroker":
        await self.sync.__aenter__()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
