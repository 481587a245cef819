"""Telling the producer's callers how their records fared: futures (asyncio or
concurrent.futures), delivery callbacks, and the per-run results of a ``produce_batch`` call."""
import asyncio
import concurrent.futures
import logging
import threading

log = logging.getLogger(__name__)


def settle_future(fut, result, err) -> None:
    """Complete an asyncio or concurrent.futures future with ``result`` or ``err``, unless its
    owner already completed or cancelled it."""
    if isinstance(fut, asyncio.Future) and fut.done():
        return
    try:
        if err is None:
            fut.set_result(result)
        else:
            fut.set_exception(err)
    except concurrent.futures.InvalidStateError:
        pass  # a concurrent.futures.Future cancelled by its owner


def deliver(target, err, md, report_callback) -> None:
    """Report one record's outcome to its future, or hand its callback to ``report_callback``."""
    if isinstance(target, (asyncio.Future, concurrent.futures.Future)):
        settle_future(target, md, err)
    else:
        report_callback(target, err, md)


def call_logged(cb, err, md) -> None:
    """Run a delivery callback; an exception in it is logged, not raised into the producer."""
    try:
        cb(err, md)
    except Exception:
        log.exception("a delivery callback raised")


class BulkHandle:
    """Collects the (partition, base_offset, count) of each run of a produce_batch call."""

    def __init__(self, settle):
        self._settle = settle  # settle(result_list, error) once everything is known
        self._lock = threading.Lock()
        self._results = {}
        self._error = None
        self._total = None
        self._done = False

    def chunk_done(self, index, partition, offset, count, err):
        with self._lock:
            self._results[index] = (partition, offset, count)
            if err is not None and self._error is None:
                self._error = err
            ready = self._ready()
        if ready:
            self._finish()

    def fail(self, err):
        with self._lock:
            if self._error is None:
                self._error = err

    def seal(self, total):
        """All runs are appended: ``total`` of them."""
        with self._lock:
            self._total = total
            ready = self._ready()
        if ready:
            self._finish()

    def _ready(self):
        if self._done or self._total is None or len(self._results) < self._total:
            return False
        self._done = True
        return True

    def _finish(self):
        results = [self._results[i] for i in range(self._total)]
        self._settle(results, self._error)
