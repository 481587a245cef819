"""Background thread that fdatasyncs logs, so the appending thread (the event loop) never blocks on disk.

Logs ask for a flush when they pass ``flush.messages`` or roll a segment; every tick the
thread also flushes logs whose last flush is older than their ``flush.ms``, and calls
``on_tick`` (the LogManager's retention check).
"""
import logging
import threading
from concurrent.futures import Future

from pybroker.log.log import now_ms

log = logging.getLogger(__name__)


class Flusher:
    def __init__(self, logs_source, tick_ms: int = 200, on_tick=None, writeback_bytes: int = 0):
        self._logs_source = logs_source  # callable returning the logs to watch
        self._tick = tick_ms / 1000
        self._on_tick = on_tick
        self._writeback_bytes = writeback_bytes  # 0: the OS alone decides when dirty pages go out
        self._requested: dict[int, tuple] = {}  # id(log) -> (log, futures to complete after its flush)
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="pybroker-flusher", daemon=True)
        self.flushes = 0

    def start(self) -> None:
        self._thread.start()

    def request(self, log_) -> Future:
        """Flush ``log_`` soon; the future completes when a flush that began after this call is done."""
        done = Future()
        with self._cond:
            self._requested.setdefault(id(log_), (log_, []))[1].append(done)
            self._cond.notify()
        return done

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._requested and not self._stopping:
                    self._cond.wait(self._tick)
                if self._stopping:
                    for _, waiting in self._requested.values():
                        _finish(waiting, RuntimeError("the log flusher stopped"))
                    return
                batch = list(self._requested.values())
                self._requested.clear()
            now = now_ms()
            chosen = {id(lg) for lg, _ in batch}
            for lg in self._logs_source():
                if lg.unflushed_messages and now - lg.last_flush_ms >= lg.config.flush_ms and id(lg) not in chosen:
                    batch.append((lg, []))
            for lg, waiting in batch:
                _finish(waiting, self._flush(lg))
            if self._writeback_bytes:
                self._start_writeback()
            if self._on_tick is not None:
                try:
                    self._on_tick(now)
                except Exception:  # a failed retention pass must not kill flushing
                    log.exception("background log task failed")

    def _start_writeback(self) -> None:
        for lg in self._logs_source():
            try:
                lg.start_writeback(self._writeback_bytes)
            except Exception:  # the next flush reports a failing disk; writeback is only a head start
                log.exception("starting the writeback of %r failed", lg)

    def _flush(self, lg) -> Exception | None:
        try:
            lg.flush()
            self.flushes += 1
            return None
        except Exception as exc:
            log.exception("flush of %r failed", lg)
            return exc


def _finish(waiting: list, error: Exception | None) -> None:
    for done in waiting:
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)
