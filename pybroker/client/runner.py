"""An asyncio event loop on a daemon thread, for the synchronous clients.

``LoopThread().run(coro, timeout)`` runs a coroutine on the loop and blocks the calling thread
for its result (its exception is raised in the caller; on timeout the coroutine is cancelled and
KafkaTimeoutError raised). ``LoopThread.shared()`` is one process-wide loop that sync clients
share unless given their own. uvloop is used when importable.
"""
import asyncio
import concurrent.futures
import threading

from pybroker.client.errors import KafkaTimeoutError

_shared = None
_shared_lock = threading.Lock()


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """A daemon thread running one event loop until ``stop()``."""

    def __init__(self, name: str = "pybroker-client-loop"):
        self.loop = new_event_loop()
        self._started = threading.Event()
        self._stopped = False
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._started.wait()

    @classmethod
    def shared(cls) -> "LoopThread":
        """The process-wide loop thread (started on first use; never stopped by ``stop()``
        called through a client, only by ``LoopThread.stop_shared()``)."""
        global _shared
        with _shared_lock:
            if _shared is None or not _shared.running:
                _shared = cls("pybroker-client-shared-loop")
            return _shared

    @classmethod
    def stop_shared(cls, timeout: float = 5.0) -> None:
        global _shared
        with _shared_lock:
            loop, _shared = _shared, None
        if loop is not None:
            loop.stop(timeout)

    def _main(self):
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                tasks = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for t in tasks:
                    t.cancel()
                if tasks:
                    self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    @property
    def running(self) -> bool:
        return not self._stopped and self.thread.is_alive()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def submit(self, coro) -> concurrent.futures.Future:
        """Schedule ``coro`` on the loop; a concurrent.futures.Future of its result."""
        if not self.running:
            coro.close()
            raise RuntimeError("the client's event loop thread is stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro, timeout: float | None = None):
        """Run ``coro`` on the loop and wait (at most ``timeout`` seconds) for its result."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("a synchronous client method was called from its own event loop "
                               "(use the async client there)")
        fut = self.submit(coro)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise KafkaTimeoutError(f"the operation did not complete within {timeout:g} s") from None
        except concurrent.futures.CancelledError:
            raise KafkaTimeoutError("the operation was cancelled (the client is closing)") from None
        except BaseException as exc:
            if not fut.done():  # KeyboardInterrupt and the like in the waiting thread
                fut.cancel()
            if isinstance(exc, asyncio.CancelledError):
                raise KafkaTimeoutError("the operation was cancelled") from None
            raise

    def call_soon(self, fn, *args) -> None:
        """Call ``fn(*args)`` on the loop thread (thread-safe)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop (pending tasks are cancelled) and join the thread. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self.in_loop_thread():
            self.loop.stop()
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            pass  # already closed
        self.thread.join(timeout)
