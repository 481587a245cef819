"""The broker tier's tests (one broker process each) and, here, the harness they and the other tiers use:
Run a real ``pybroker serve`` process for tests: ephemeral port, own data dir, stopped by PID."""
import os
import signal
import subprocess
import sys
import time
import weakref

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT = 60
RUNNING: "weakref.WeakSet[BrokerProcess]" = weakref.WeakSet()  # started here, for dump_running_stacks


def dump_running_stacks(tail_lines: int = 120) -> list[tuple[str, str]]:
    """Ask every broker process still running to print its threads' stacks into its stderr file
    (``pybroker serve`` dumps them on SIGUSR1): called when a test fails, before its teardown.
    Returns (stderr file, its last ``tail_lines`` lines) per broker asked."""
    asked = []
    for b in list(RUNNING):
        if b.proc is not None and b.proc.poll() is None:
            try:
                os.kill(b.proc.pid, signal.SIGUSR1)
                asked.append(b)
            except ProcessLookupError:
                pass
    if asked:
        time.sleep(0.3)  # the dump is written by the broker's signal handler, asynchronously to us
    return [(b.stderr_path, "\n".join(b.stderr().splitlines()[-tail_lines:])) for b in asked]


class BrokerProcess:
    def __init__(self, data_dir: str, overrides: dict | None = None, port: int = 0,
                 command_prefix=(), host: str = "127.0.0.1"):
        """``command_prefix`` goes before the ``python -m pybroker serve`` argv (e.g. ``ip netns exec
        NS``: it must exec the broker, so that ``proc.pid`` is the broker's); ``host`` is the
        default listener's address and the one ``bootstrap`` names."""
        self.data_dir = data_dir
        self.host = host
        self.command_prefix = tuple(command_prefix)
        self.overrides = {"log.dirs": data_dir, "listeners": f"PLAINTEXT://{host}:{port}",
                          **(overrides or {})}
        self.proc = None
        self.port = None
        self.stderr_path = os.path.join(os.path.dirname(data_dir.rstrip("/")) or ".",
                                        os.path.basename(data_dir.rstrip("/")) + ".stderr")

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "BrokerProcess":
        args = [*self.command_prefix, sys.executable, "-m", "pybroker", "serve"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        self._stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        RUNNING.add(self)
        deadline = time.monotonic() + START_TIMEOUT
        line = self.proc.stdout.readline()  # the one ready line: "... listening on PLAINTEXT://host:port"
        if "listening on" not in line or time.monotonic() > deadline:
            self.kill()
            raise RuntimeError(f"broker did not start: {line!r}; stderr: {self.stderr()[-2000:]}")
        self.port = int(line.rsplit(":", 1)[1])
        return self

    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait: a clean shutdown."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def close(self) -> None:
        self.kill()
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        if getattr(self, "_stderr", None):
            self._stderr.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
