"""Pure twin of native/fileio.pyx: batched writes with os.pwritev."""
import errno
import os

IOV_BATCH = 1024  # IOV_MAX on Linux


def pwritev_all(fd: int, buffers, offset: int) -> int:
    """Write every buffer in order at ``offset``; retries short writes. Returns the bytes written."""
    _check_fd(fd)
    pending = [memoryview(b).cast("B") for b in buffers]
    pending = [v for v in pending if len(v)]
    total = sum(len(v) for v in pending)
    pos = offset
    while pending:
        wrote = os.pwritev(fd, pending[:IOV_BATCH], pos)
        pos += wrote
        while pending and wrote >= len(pending[0]):
            wrote -= len(pending.pop(0))
        if pending and wrote:
            pending[0] = pending[0][wrote:]
    return total


def fdatasync(fd: int) -> None:
    _check_fd(fd)
    os.fdatasync(fd)


def _check_fd(fd: int) -> None:
    # os.* raise ValueError for a negative fd; the system call (and the native module) says EBADF
    if fd < 0:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))
