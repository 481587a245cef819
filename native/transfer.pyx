# cython: language_level=3
"""Zero-copy transfer of a file slice to a socket with sendfile(2), the GIL released.

Contract (shared with pybroker/_pure/transfer.py and pybroker/uring.py):
- ``send_slice(sock_fd, file_fd, offset, count)`` is for a NON-BLOCKING socket: it sends
  file bytes [offset, offset+count) until all are sent or the socket would block, and returns
  the bytes sent (0 if it would block at once). Resume with ``offset + sent``.
- ``send_slice_all(..., timeout_ms=-1)`` sends everything, waiting with poll(2) for POLLOUT
  whenever the socket is full; a single wait longer than ``timeout_ms`` raises TimeoutError
  (negative = wait forever).
- The file position of ``file_fd`` is never moved (explicit offsets), so it may be shared.
- Errors: ValueError for a negative offset/count; EOFError when the slice runs past the end of
  the file (checked up front with fstat, and again if sendfile hits EOF mid-way, e.g. after a
  concurrent truncate); OSError with errno for anything else (EPIPE, ECONNRESET, EBADF...).
- With a blocking socket, sendfile(2) itself blocks: send_slice then behaves like send_slice_all
  without a timeout.
"""
from libc.errno cimport errno, EINTR, EAGAIN, EBADF
from posix.types cimport off_t
from posix.stat cimport struct_stat, fstat, S_ISREG
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from cpython.exc cimport PyErr_CheckSignals

cdef extern from "<errno.h>" nogil:
    int EWOULDBLOCK

cdef extern from "<sys/sendfile.h>" nogil:
    ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum:
        POLLOUT
        POLLNVAL

cdef enum:
    # Linux caps one sendfile at 0x7ffff000 bytes anyway
    MAX_CHUNK = 0x7ffff000

cdef enum Outcome:
    DONE = 0
    WOULD_BLOCK = 1
    HIT_EOF = 2
    FAILED = 3
    TIMED_OUT = 4
    INTERRUPTED = 5


cdef long long _check_slice(int file_fd, long long offset, long long count) except -1:
    """Validate the slice; returns its end. EOFError if a regular file is too short."""
    cdef struct_stat st
    if offset < 0 or count < 0:
        raise ValueError(f"file slice needs offset >= 0 and count >= 0, got offset={offset} count={count}")
    if fstat(file_fd, &st) != 0:
        _raise_errno(errno)
    if S_ISREG(st.st_mode) and offset + count > st.st_size:
        raise _eof_error(offset, count, st.st_size)
    return offset + count


def _eof_error(long long offset, long long count, long long at):
    return EOFError(f"file slice [{offset}, {offset + count}) runs past the end of the file at position {at}")


cdef int _raise_errno(int err) except -1:
    import os
    raise OSError(err, os.strerror(err))


cdef Outcome _pump(int sock_fd, int file_fd, long long *pos, long long end, int *err) noexcept nogil:
    """sendfile until end, EAGAIN, EOF or an error; advances pos by what was sent."""
    cdef off_t off
    cdef ssize_t n
    cdef long long want
    while pos[0] < end:
        want = end - pos[0]
        if want > MAX_CHUNK:
            want = MAX_CHUNK
        off = <off_t>pos[0]
        n = sendfile(sock_fd, file_fd, &off, <size_t>want)
        if n > 0:
            pos[0] += n
        elif n == 0:
            return HIT_EOF
        elif errno == EINTR:
            continue
        elif errno == EAGAIN or errno == EWOULDBLOCK:
            return WOULD_BLOCK
        else:
            err[0] = errno
            return FAILED
    return DONE


cdef long long _now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef Outcome _wait_writable(int sock_fd, long long deadline, int *err) noexcept nogil:
    """One poll for POLLOUT until the monotonic deadline in ms (negative: forever)."""
    cdef pollfd p
    cdef int rc, left = -1
    if deadline >= 0:
        left = <int>max(deadline - _now_ms(), 0)
    p.fd = sock_fd
    p.events = POLLOUT
    p.revents = 0
    rc = poll(&p, 1, left)
    if rc > 0:
        if p.revents & POLLNVAL:
            err[0] = EBADF
            return FAILED
        # POLLERR/POLLHUP: the next sendfile reports the real error
        return DONE
    if rc == 0:
        return TIMED_OUT
    if errno == EINTR:
        return INTERRUPTED
    err[0] = errno
    return FAILED


def send_slice(int sock_fd, int file_fd, long long offset, long long count):
    """Send file bytes [offset, offset+count) to a non-blocking socket without blocking.

    Returns the bytes sent: count, or less (possibly 0) when the socket buffer is full.
    """
    cdef long long end, pos = offset
    cdef int err = 0
    cdef Outcome out
    if count == 0 and offset >= 0:
        return 0
    end = _check_slice(file_fd, offset, count)
    with nogil:
        out = _pump(sock_fd, file_fd, &pos, end, &err)
    if out == FAILED:
        _raise_errno(err)
    if out == HIT_EOF:
        raise _eof_error(offset, count, pos)
    return pos - offset


def send_slice_all(int sock_fd, int file_fd, long long offset, long long count, int timeout_ms=-1):
    """Send all of file bytes [offset, offset+count), polling for POLLOUT when the socket is full.

    Returns count. TimeoutError if one wait for writability exceeds timeout_ms (< 0: no limit).
    """
    cdef long long end, deadline, pos = offset
    cdef int err = 0
    cdef Outcome out
    if count == 0 and offset >= 0:
        return 0
    end = _check_slice(file_fd, offset, count)
    while True:
        with nogil:
            out = _pump(sock_fd, file_fd, &pos, end, &err)
        if out != WOULD_BLOCK:
            break
        deadline = _now_ms() + timeout_ms if timeout_ms >= 0 else -1
        while True:
            with nogil:
                out = _wait_writable(sock_fd, deadline, &err)
            if out != INTERRUPTED:
                break
            # let Python signal handlers run (KeyboardInterrupt...), as the pure twin does
            PyErr_CheckSignals()
        if out != DONE:
            break
    if out == FAILED:
        _raise_errno(err)
    if out == HIT_EOF:
        raise _eof_error(offset, count, pos)
    if out == TIMED_OUT:
        raise TimeoutError(f"socket not writable for {timeout_ms} ms after {pos - offset} of {count} bytes")
    return count
