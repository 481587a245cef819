"""File slice → socket through io_uring: splice file→pipe→socket, never via user space.

Same contract as pybroker.core.transfer (native/transfer.pyx): ``send_slice`` returns the
bytes sent without blocking on a non-blocking socket, ``send_slice_all`` polls for POLLOUT
with a per-wait ``timeout_ms``; ValueError / EOFError / OSError(errno) / TimeoutError alike.

How it works. Each submit queues one chain of linked SQEs (IOSQE_IO_LINK):
``splice(file@pos → pipe, n) → splice(pipe → socket, n) → splice(file@pos+n → pipe) → ...``
for up to ``chunks`` chunks of at most the pipe size (raised with F_SETPIPE_SZ, up to
/proc/sys/fs/pipe-max-size, 1 MiB by default). Chunk ends are page-aligned in the file, so a
chunk never needs more pipe slots than the pipe has. A link breaks at the first failed or
short request; the rest complete with -ECANCELED. The process waits for completions by
polling the ring fd (the GIL released), not in io_uring_wait_cqe, which holds the GIL.

io_uring and a non-blocking socket (measured on Linux 6.18): splice is always run by an
io-wq worker and io_uring does NOT arm an internal poll for it, so a full O_NONBLOCK socket
completes the splice at once with res=-EAGAIN (or a short count) in the CQE; the chain
breaks there. send_slice therefore never waits for socket space: it stops at the first
-EAGAIN and returns what reached the socket. (A blocking socket makes the worker block
inside splice; send_slice_all then cancels it with ASYNC_CANCEL when timeout_ms expires.)

Short splices and the pipe. A round can end with bytes spliced into the pipe that did not
reach the socket (short or -EAGAIN pipe→socket splice). Those pipe pages are only references
to the page cache, so they are discarded (spliced to /dev/null) before the call returns: the
pipe is empty between calls, the caller resumes at ``offset + sent`` and the bytes are read
from the file again. Nothing is lost or sent twice; the cost is re-reading at most one pipe
of page references each time the socket fills up.

One sender owns one ring and one pipe: use it from one thread at a time; close() it (or use
``with``) to release them.
"""
import errno
import fcntl
import os
import select
import time

from pybroker._pure.transfer import check_slice, eof_error

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
FIONREAD = 0x541B
PAGE = os.sysconf("SC_PAGE_SIZE")
CANCEL_TAG = 1 << 32  # user_data of our own cancel request, above any chunk index


class UringUnavailableError(RuntimeError):
    """io_uring cannot be used here (no liburing, disabled by sysctl, too old a kernel...)."""


def _pipe_max_size() -> int:
    try:
        with open("/proc/sys/fs/pipe-max-size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20


class UringSender:
    """Moves file slices to sockets with linked io_uring splices; see the module docstring."""

    name = "io_uring"

    def __init__(self, pipe_size: int = 1 << 20, chunks: int = 8):
        try:
            import liburing
        except ImportError as exc:
            raise UringUnavailableError(f"io_uring needs the liburing package: {exc}") from exc
        self._L = liburing
        self._ring = None
        self._r = self._w = self._null = -1
        self._chunks = max(1, chunks)
        ring = liburing.Ring()
        try:
            liburing.io_uring_queue_init(max(8, 4 * self._chunks), ring)
        except OSError as exc:
            raise UringUnavailableError(
                f"io_uring setup failed ({exc}); is kernel.io_uring_disabled set?") from exc
        self._ring = ring
        try:
            probe = liburing.probe() or {}
            if not probe.get("IORING_OP_SPLICE"):
                raise UringUnavailableError("this kernel's io_uring has no IORING_OP_SPLICE")
            self._r, self._w = os.pipe2(os.O_CLOEXEC)
            try:
                fcntl.fcntl(self._w, F_SETPIPE_SZ, min(pipe_size, _pipe_max_size()))
            except OSError:
                pass  # over the per-user pipe limit: keep the default size
            self.pipe_size = fcntl.fcntl(self._w, F_GETPIPE_SZ)
            self._null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        except BaseException:
            self.close()
            raise
        self._cqe = liburing.Cqe()
        self._poller = select.poll()
        self._poller.register(ring.ring_fd, select.POLLIN)

    # -- public API ------------------------------------------------------------------------

    def send_slice(self, sock_fd: int, file_fd: int, offset: int, count: int) -> int:
        """Send file bytes [offset, offset+count) to a non-blocking socket without blocking.

        Returns the bytes sent: count, or less (possibly 0) when the socket buffer is full.
        """
        if count == 0 and offset >= 0:
            return 0
        end = check_slice(file_fd, offset, count)
        pos, _ = self._pump(sock_fd, file_fd, offset, offset, end, -1)
        return pos - offset

    def send_slice_all(self, sock_fd: int, file_fd: int, offset: int, count: int,
                       timeout_ms: int = -1) -> int:
        """Send all of file bytes [offset, offset+count), polling for POLLOUT when the socket
        is full. Returns count. TimeoutError if one wait exceeds timeout_ms (< 0: no limit)."""
        if count == 0 and offset >= 0:
            return 0
        end = check_slice(file_fd, offset, count)
        pos = offset
        sock_poller = None
        while True:
            pos, blocked = self._pump(sock_fd, file_fd, offset, pos, end, timeout_ms)
            if not blocked:
                return count
            if sock_poller is None:
                sock_poller = select.poll()
                sock_poller.register(sock_fd, select.POLLOUT)
            events = sock_poller.poll(timeout_ms if timeout_ms >= 0 else None)
            if not events:
                raise TimeoutError(
                    f"socket not writable for {timeout_ms} ms after {pos - offset} of {count} bytes")
            if events[0][1] & select.POLLNVAL:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    def close(self) -> None:
        """Release the ring, the pipe and /dev/null; idempotent."""
        if self._ring is not None:
            self._L.io_uring_queue_exit(self._ring)
            self._ring = None
        for name in ("_r", "_w", "_null"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_ring", None) is not None:
            self.close()

    # -- internals -------------------------------------------------------------------------

    def _pump(self, sock_fd: int, file_fd: int, offset: int, pos: int, end: int, timeout_ms: int):
        """Rounds from pos until end or the socket is full; returns (new position, socket_full)."""
        if self._ring is None:
            raise ValueError("I/O operation on a closed UringSender")
        stalled = 0
        while pos < end:
            sent, blocked, short_file, timed_out = self._round(sock_fd, file_fd, pos, end, timeout_ms)
            pos += sent
            if timed_out:
                raise TimeoutError(
                    f"splice to the socket stalled for {timeout_ms} ms at position {pos}")
            if blocked:
                return pos, True
            if short_file:
                # the file ended early (concurrent truncate?) or a splice came back short
                size = os.fstat(file_fd).st_size
                stalled = stalled + 1 if sent == 0 else 0
                if size < end or stalled > 1:
                    raise eof_error(offset, end - offset, size if size < end else pos)
        return pos, False

    def _round(self, sock_fd: int, file_fd: int, pos: int, end: int, timeout_ms: int):
        """One linked chain of chunks; returns (sent, socket_full, short_file, timed_out)."""
        L = self._L
        ring = self._ring
        sizes = []
        p = pos
        while p < end and len(sizes) < self._chunks:
            # end chunks on page boundaries so one chunk never needs more slots than the pipe has
            n = min(self.pipe_size - p % PAGE, end - p)
            sizes.append(n)
            p += n
        last = len(sizes) - 1
        p = pos
        for i, n in enumerate(sizes):
            sqe = L.io_uring_get_sqe(ring)
            L.io_uring_prep_splice(sqe, file_fd, p, self._w, -1, n, 0)
            sqe.flags = L.IOSQE_IO_LINK
            sqe.user_data = 2 * i
            sqe = L.io_uring_get_sqe(ring)
            more = L.SPLICE_F_MORE if p + n < end else 0  # more of this slice follows
            L.io_uring_prep_splice(sqe, self._r, -1, sock_fd, -1, n, more)
            sqe.flags = L.IOSQE_IO_LINK if i < last else 0
            sqe.user_data = 2 * i + 1
            p += n
        L.io_uring_submit(ring)
        try:
            res, timed_out = self._reap(2 * len(sizes), sock_fd, timeout_ms)
        except BaseException:
            # requests may still be in flight: tearing the ring down waits for them
            self.close()
            raise

        sent = piped = 0
        blocked = short_file = False
        err = 0
        for i, n in enumerate(sizes):
            a, b = res[2 * i], res[2 * i + 1]
            if a >= 0:
                piped += a
                short_file |= a < n
            elif a not in (-errno.ECANCELED, -errno.EINTR):  # cut by the link or our cancel
                err = err or -a
            if b >= 0:
                sent += b
            elif b == -errno.EAGAIN:
                blocked = True
            elif b not in (-errno.ECANCELED, -errno.EINTR):
                err = err or -b
        if piped != sent or timed_out:
            self._drain_pipe()
        if err:
            raise OSError(err, os.strerror(err))
        return sent, blocked, short_file, timed_out

    def _reap(self, expected: int, sock_fd: int, timeout_ms: int):
        """Collect the chain's CQEs by user_data; cancel the chain if a wait exceeds timeout_ms."""
        L = self._L
        ring = self._ring
        cqe = self._cqe
        res = [None] * expected
        got = 0
        want = expected
        canceled = False
        deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms >= 0 else None
        while got < want:
            ready = L.io_uring_cq_ready(ring)
            if not ready:
                left = -1
                if deadline is not None and not canceled:
                    left = max(0, int((deadline - time.monotonic()) * 1000))
                if not self._poller.poll(left) and left >= 0 and time.monotonic() >= deadline:
                    # a blocking socket keeps the io-wq worker in splice: interrupt it
                    sqe = L.io_uring_get_sqe(ring)
                    L.io_uring_prep_cancel_fd(sqe, sock_fd, 0)
                    sqe.user_data = CANCEL_TAG
                    L.io_uring_submit(ring)
                    canceled = True
                    want += 1  # the cancel request completes too
                continue
            for _ in range(ready):
                # one CQE per peek: the binding's cqe[i] for i > 0 does not wrap around the CQ ring
                L.io_uring_peek_cqe(ring, cqe)
                entry = cqe[0]
                tag = entry.user_data
                try:
                    value = entry.res
                except OSError as exc:  # the binding raises for res < 0
                    value = -exc.errno
                L.io_uring_cq_advance(ring, 1)
                if tag < expected:
                    res[tag] = value
                got += 1
        if None in res:
            raise RuntimeError(f"io_uring lost a completion: {res}")
        return res, canceled

    def _drain_pipe(self) -> None:
        """Throw away what is left in the pipe (page references; the file still has the bytes)."""
        for _ in range(1 << 16):
            left = int.from_bytes(fcntl.ioctl(self._r, FIONREAD, b"\0\0\0\0"), "little")
            if not left:
                return
            os.splice(self._r, self._null, left, flags=os.SPLICE_F_NONBLOCK)
        raise RuntimeError("io_uring pipe would not drain")
