# cython: language_level=3
"""Batched file writes: many buffers to one file position with pwritev(2), the GIL released.

Durability contract: pwritev_all returns once the bytes are in the page cache; they survive a
process crash but not a power loss until fdatasync (run off the event loop by the log flusher).
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.errno cimport errno
from libc.stdlib cimport malloc, free

from pwritev cimport iovec, pb_pwritev_all

cdef extern from "<unistd.h>" nogil:
    int c_fdatasync "fdatasync"(int fd)

cdef extern from "<fcntl.h>" nogil:  # Python.h has defined _GNU_SOURCE, which sync_file_range needs
    int c_sync_file_range "sync_file_range"(int fd, long long offset, long long nbytes, unsigned int flags)
    unsigned int SYNC_FILE_RANGE_WRITE


def pwritev_all(int fd, buffers, long long offset):
    """Write every buffer in order at ``offset``; retries short writes. Returns the bytes written."""
    cdef Py_ssize_t n = len(buffers), i, held = 0
    cdef Py_buffer *views = <Py_buffer *>malloc(max(n, 1) * sizeof(Py_buffer))
    cdef iovec *iov = <iovec *>malloc(max(n, 1) * sizeof(iovec))
    cdef long long total = 0
    cdef int err
    if views == NULL or iov == NULL:
        free(views); free(iov)
        raise MemoryError()
    try:
        for i in range(n):
            PyObject_GetBuffer(buffers[i], &views[i], PyBUF_SIMPLE)
            held += 1
            iov[i].iov_base = views[i].buf
            iov[i].iov_len = <size_t>views[i].len
            total += views[i].len
        with nogil:
            err = pb_pwritev_all(fd, iov, n, offset)
        if err:
            import os
            raise OSError(err, os.strerror(err))
        return total
    finally:
        for i in range(held):
            PyBuffer_Release(&views[i])
        free(views)
        free(iov)


def fdatasync(int fd):
    """fdatasync(2) with the GIL released."""
    cdef int rc
    with nogil:
        rc = c_fdatasync(fd)
    if rc != 0:
        import os
        raise OSError(errno, os.strerror(errno))


def start_writeback(int fd, long long offset, long long nbytes):
    """Start writing a range's dirty pages to disk without waiting for it (sync_file_range(2)
    with SYNC_FILE_RANGE_WRITE), the GIL released. Durability still needs fdatasync."""
    cdef int rc
    with nogil:
        rc = c_sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)
    if rc != 0:
        import os
        raise OSError(errno, os.strerror(errno))
