"""Pure twin of native/transfer.pyx: a file slice to a socket with os.sendfile and select.poll.

Same contract as the native module (see its docstring): send_slice never blocks on a
non-blocking socket and returns the bytes sent; send_slice_all waits for POLLOUT, each wait
bounded by timeout_ms; ValueError / EOFError / OSError(errno) / TimeoutError alike.
The slice helpers here are shared with pybroker/uring.py.
"""
import errno
import os
import select
import stat
import time

MAX_CHUNK = 0x7FFFF000  # Linux caps one sendfile at this many bytes anyway


def eof_error(offset: int, count: int, at: int) -> EOFError:
    return EOFError(
        f"file slice [{offset}, {offset + count}) runs past the end of the file at position {at}")


def check_slice(file_fd: int, offset: int, count: int) -> int:
    """Validate the slice; returns its end. EOFError if a regular file is too short."""
    if offset < 0 or count < 0:
        raise ValueError(
            f"file slice needs offset >= 0 and count >= 0, got offset={offset} count={count}")
    st = os.fstat(file_fd)
    if stat.S_ISREG(st.st_mode) and offset + count > st.st_size:
        raise eof_error(offset, count, st.st_size)
    return offset + count


def wait_writable(sock_fd: int, timeout_ms: int) -> bool:
    """poll for POLLOUT; False if one wait exceeded timeout_ms (negative: wait forever)."""
    poller = select.poll()
    poller.register(sock_fd, select.POLLOUT)
    deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms >= 0 else None
    while True:
        # select.poll retries EINTR itself (PEP 475), recomputing the timeout
        left = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
        events = poller.poll(left)
        if events:
            if events[0][1] & select.POLLNVAL:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))
            return True  # POLLERR/POLLHUP: the next sendfile reports the real error
        if deadline is None or time.monotonic() >= deadline:
            return False


DONE, WOULD_BLOCK, HIT_EOF = "done", "would_block", "eof"


def _pump(sock_fd: int, file_fd: int, pos: int, end: int) -> tuple[int, str]:
    """sendfile until end, EAGAIN or EOF; returns (new position, outcome)."""
    while pos < end:
        try:
            n = os.sendfile(sock_fd, file_fd, pos, min(end - pos, MAX_CHUNK))
        except BlockingIOError:
            return pos, WOULD_BLOCK
        except InterruptedError:
            continue
        if n == 0:
            return pos, HIT_EOF
        pos += n
    return pos, DONE


def send_slice(sock_fd: int, file_fd: int, offset: int, count: int) -> int:
    """Send file bytes [offset, offset+count) to a non-blocking socket without blocking.

    Returns the bytes sent: count, or less (possibly 0) when the socket buffer is full.
    """
    if count == 0 and offset >= 0:
        return 0
    end = check_slice(file_fd, offset, count)
    pos, outcome = _pump(sock_fd, file_fd, offset, end)
    if outcome == HIT_EOF:
        raise eof_error(offset, count, pos)
    return pos - offset


def send_slice_all(sock_fd: int, file_fd: int, offset: int, count: int, timeout_ms: int = -1) -> int:
    """Send all of file bytes [offset, offset+count), polling for POLLOUT when the socket is full.

    Returns count. TimeoutError if one wait for writability exceeds timeout_ms (< 0: no limit).
    """
    if count == 0 and offset >= 0:
        return 0
    end = check_slice(file_fd, offset, count)
    pos = offset
    while True:
        pos, outcome = _pump(sock_fd, file_fd, pos, end)
        if outcome == HIT_EOF:
            raise eof_error(offset, count, pos)
        if outcome == DONE:
            return count
        if not wait_writable(sock_fd, timeout_ms):
            raise TimeoutError(
                f"socket not writable for {timeout_ms} ms after {pos - offset} of {count} bytes")

