"""What the tests' recording TCP proxies share: a listening socket on 127.0.0.1, their threads, and
an end to every loop when close() is called or the proxy's lifetime has passed."""
import socket
import threading
import time


class ThreadedProxy:
    def __init__(self, lifetime: float):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._deadline = time.monotonic() + lifetime
        self._threads, self._socks = [], [self.sock]
        self._target = None

    def start(self, target_port=None):
        """Forward to ``target_port`` (accepting starts now; subclasses define ``_accept``)."""
        self._target = target_port
        self._spawn(self._accept)
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._stop.set()
        for t in self._threads:
            t.join(5)
        for s in self._socks:
            s.close()

    def _spawn(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self._threads.append(t)

    def _running(self):
        return not self._stop.is_set() and time.monotonic() < self._deadline
