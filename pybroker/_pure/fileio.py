"""Pure twin of native/fileio.pyx: batched writes with os.pwritev; sync_file_range(2), which os has no
binding for, through cffi in ABI mode (the C library opened at run time: no compiler needed)."""
import errno
import os

from cffi import FFI

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


SYNC_FILE_RANGE_WRITE = 2
_ffi = FFI()
_ffi.cdef("int sync_file_range(int fd, int64_t offset, int64_t nbytes, unsigned int flags);")
_libc = _ffi.dlopen(None)  # the C library the interpreter already links


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """sync_file_range(2) with SYNC_FILE_RANGE_WRITE."""
    if _libc.sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) != 0:
        err = _ffi.errno
        raise OSError(err, os.strerror(err))


def _check_fd(fd: int) -> None:
    # os.* raise ValueError for a negative fd; the system call (and the native module) says EBADF
    if fd < 0:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))
