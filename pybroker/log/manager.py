"""All the logs of a broker across its log dirs, their checkpoint files and the shutdown marker.

Each log dir holds ``<topic>-<partition>/`` directories, the offset checkpoints
(recovery point, replication = high watermark, log start) and, after a clean shutdown,
``.kafka_cleanshutdown``. Its ``.lock`` is held while the manager runs, so two brokers can
never share a log dir. Without the marker, every log is recovered from its recovery point.
"""
import fcntl
import logging
import os
import re
import shutil
from collections import defaultdict

from pybroker.errors import LogDirError
from pybroker.log import checkpoint
from pybroker.log.config import LogConfig
from pybroker.log.cleaner import CHECKPOINT as CLEANER_CHECKPOINT
from pybroker.log.flusher import Flusher
from pybroker.log.log import Log, now_ms

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
LOCK = ".lock"
LOG_DIR_NAME = re.compile(r"^(.+)-(\d+)$")


class LogManager:
    def __init__(self, log_dirs, config: LogConfig | None = None, *,
                 retention_check_interval_ms: int = 300_000, background: bool = True,
                 writeback_bytes: int = 0, cleaner=None):
        """``cleaner``: CleanerSettings of the log cleaner (pybroker/log/cleaner.py); None: no cleaner."""
        if isinstance(log_dirs, str):
            log_dirs = [log_dirs]
        if not log_dirs:
            raise LogDirError("no log dir configured (log.dirs)")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.config = config or LogConfig()
        self.logs: dict[tuple[str, int], Log] = {}
        self.high_watermarks: dict[tuple[str, int], int] = {}  # kept up to date by the replica layer
        self.loaded_high_watermarks: dict[tuple[str, int], int] = {}
        self.had_clean_shutdown = True
        self._locks = []
        self._retention_interval = retention_check_interval_ms
        self._last_retention = now_ms()
        self._background = background
        self._writeback_bytes = writeback_bytes
        self.flusher = None
        self._cleaner_settings = cleaner
        self.cleaner = None

    # ---- start ----------------------------------------------------------------------------

    def startup(self) -> "LogManager":
        for d in self.log_dirs:
            self._prepare_dir(d)
        for d in self.log_dirs:
            self._load_dir(d)
        if self._background:
            self.flusher = Flusher(lambda: list(self.logs.values()), on_tick=self._maybe_retention,
                                   writeback_bytes=self._writeback_bytes)
            for lg in self.logs.values():
                lg.flusher = self.flusher
            self.flusher.start()
        if self._cleaner_settings is not None:
            from pybroker.log.cleaner import LogCleaner
            self.cleaner = LogCleaner(self, self._cleaner_settings)
            if self._background:
                self.cleaner.start()
        return self

    def _prepare_dir(self, d: str) -> None:
        try:
            os.makedirs(d, exist_ok=True)
            probe = os.path.join(d, ".write-probe")
            with open(probe, "wb") as f:
                f.write(b"ok")
                f.flush()
                os.fsync(f.fileno())
            os.remove(probe)
            lock = open(os.path.join(d, LOCK), "a+b")
        except OSError as exc:
            raise LogDirError(f"log dir {d} is not usable: {exc.strerror or exc}") from None
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise LogDirError(f"log dir {d} is locked by another running broker") from None
        self._locks.append(lock)

    def _read_checkpoint(self, d: str, name: str) -> dict | None:
        try:
            return checkpoint.read_offsets(os.path.join(d, name))
        except checkpoint.CheckpointError as exc:
            log.warning("ignoring %s: %s", name, exc)
            return None

    def _load_dir(self, d: str) -> None:
        marker = os.path.join(d, CLEAN_SHUTDOWN)
        clean = os.path.exists(marker)
        self.had_clean_shutdown &= clean
        recovery = self._read_checkpoint(d, checkpoint.RECOVERY_POINT)
        if recovery is None:  # unreadable recovery points: every segment must be re-validated
            clean, recovery = False, {}
        starts = self._read_checkpoint(d, checkpoint.LOG_START) or {}
        dirty = self._read_checkpoint(d, CLEANER_CHECKPOINT)
        if dirty is None:  # unknown: any segment may have been compacted, so recovery allows offset gaps
            dirty = defaultdict(lambda: 2**63 - 1)
        self.loaded_high_watermarks.update(self._read_checkpoint(d, checkpoint.REPLICATION) or {})
        for name in sorted(os.listdir(d)):
            m = LOG_DIR_NAME.match(name)
            path = os.path.join(d, name)
            if not m or not os.path.isdir(path):
                continue
            tp = (m.group(1), int(m.group(2)))
            if tp in self.logs:
                raise LogDirError(f"partition {tp[0]}-{tp[1]} found in two log dirs")
            self.logs[tp] = Log(path, tp[0], tp[1], self.config, recovery_point=recovery.get(tp, 0),
                                log_start_offset=starts.get(tp, 0), clean=clean,
                                first_dirty_offset=dirty.get(tp, 0))
        if os.path.exists(marker):
            os.remove(marker)  # from now on a crash must be detectable
            checkpoint.fsync_dir(d)

    # ---- logs -----------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        tp = (topic, partition)
        if tp not in self.logs:
            d = min(self.log_dirs, key=lambda x: sum(1 for lg in self.logs.values()
                                                     if os.path.dirname(lg.directory) == x))
            self.logs[tp] = Log(os.path.join(d, f"{topic}-{partition}"), topic, partition,
                                config or self.config, flusher=self.flusher)
        return self.logs[tp]

    def delete_log(self, topic: str, partition: int) -> None:
        lg = self.logs.pop((topic, partition), None)
        if lg is not None:
            lg.close()
            shutil.rmtree(lg.directory, ignore_errors=True)
        self.high_watermarks.pop((topic, partition), None)
        if self.cleaner is not None:
            self.cleaner.forget(topic, partition)

    # ---- background work ------------------------------------------------------------------

    def _maybe_retention(self, now: int) -> None:
        if now - self._last_retention >= self._retention_interval:
            self._last_retention = now
            self.cleanup(now)

    def cleanup(self, now: int | None = None) -> int:
        """Retention over every log; returns the number of segments deleted."""
        return sum(lg.delete_old_segments(now) for lg in list(self.logs.values()))

    def checkpoint(self) -> None:
        """Write the three offset checkpoints of every log dir."""
        for d in self.log_dirs:
            mine = {tp: lg for tp, lg in self.logs.items() if os.path.dirname(lg.directory) == d}
            checkpoint.write_offsets(os.path.join(d, checkpoint.RECOVERY_POINT),
                                     {tp: lg.recovery_point for tp, lg in mine.items()})
            checkpoint.write_offsets(os.path.join(d, checkpoint.LOG_START),
                                     {tp: lg.log_start_offset for tp, lg in mine.items()})
            checkpoint.write_offsets(os.path.join(d, checkpoint.REPLICATION),
                                     {tp: self.high_watermarks[tp] for tp in mine if tp in self.high_watermarks})

    # ---- stop -----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush everything, write checkpoints, close the logs, then mark the shutdown clean."""
        if self.cleaner is not None:
            self.cleaner.stop()
        if self.flusher is not None:
            self.flusher.stop()
        for lg in self.logs.values():
            lg.flush()
        self.checkpoint()
        for lg in self.logs.values():
            lg.close()
        for d in self.log_dirs:
            with open(os.path.join(d, CLEAN_SHUTDOWN), "wb") as f:
                os.fsync(f.fileno())
            checkpoint.fsync_dir(d)
        for lock in self._locks:
            lock.close()
        self._locks.clear()
