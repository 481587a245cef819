"""The broker process as Prometheus' standard ``process_*`` series, and the event loop's lag.

Read from /proc at scrape time (Linux); elsewhere only what ``resource`` and ``os`` give.
The lag probe is one timer on the loop: it asks to wake after ``interval`` seconds and records
how late it woke — the time some callback held the loop.
"""
import asyncio
import os
import resource

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def process_stats() -> dict:
    """name -> value for the process_* series that can be read here."""
    out = {}
    t = os.times()
    out["process_cpu_seconds_total"] = t.user + t.system
    try:
        with open("/proc/self/statm", "rb") as f:
            size, resident = f.read().split()[:2]
        out["process_virtual_memory_bytes"] = int(size) * _PAGE
        out["process_resident_memory_bytes"] = int(resident) * _PAGE
    except (OSError, ValueError):
        out["process_resident_memory_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        out["process_open_fds"] = len(os.listdir("/proc/self/fd"))
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        out["process_max_fds"] = soft
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        boot = _boot_time()
        if boot is not None:
            out["process_start_time_seconds"] = boot + int(fields[19]) / _TICKS  # field 22: starttime
    except (OSError, IndexError, ValueError):
        pass
    return out


class LoopLagProbe:
    """Records into ``metrics.loop_lag`` how late a timer of ``interval`` seconds fires."""

    def __init__(self, metrics, interval: float = 0.25):
        self.metrics = metrics
        self.interval = interval
        self._loop = None
        self._handle = None
        self._due = 0.0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._schedule()

    def _schedule(self) -> None:
        self._due = self._loop.time() + self.interval
        self._handle = self._loop.call_at(self._due, self._fired)

    def _fired(self) -> None:
        lag = max(self._loop.time() - self._due, 0.0)
        self.metrics.loop_lag.observe(lag)
        self.metrics.loop_lag_last = lag
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
