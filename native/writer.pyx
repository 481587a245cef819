# cython: language_level=3
"""Append path of a segment: stamp validated batches and write them with one pwritev (native).

Each buffer holds exactly one batch that ``batch.validate`` accepted. In one call, with no
Python work per batch: set baseOffset (and partitionLeaderEpoch, and LogAppendTime with a new
CRC when asked), choose the sparse index entries by Kafka's rule (an entry when more than
``index_interval`` bytes went by since the last one, after counting the batch's timestamp),
and write everything at ``position``. Nothing is stamped or written unless every buffer is a
writable whole batch. The pure twin is pybroker/_pure/writer.py.
"""
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t
from libc.stdlib cimport free, malloc

from pwritev cimport iovec, pb_pwritev_all

cdef extern from "crc32c_hw.h" nogil:
    uint32_t pb_crc32c(uint32_t crc, const uint8_t *p, size_t n)

cdef extern from "bigendian.h" nogil:
    int64_t pb_get64(const uint8_t *p)
    int32_t pb_get32(const uint8_t *p)
    int16_t pb_get16(const uint8_t *p)
    void pb_put64(uint8_t *p, int64_t v)
    void pb_put32(uint8_t *p, uint32_t v)
    void pb_put16(uint8_t *p, uint16_t v)

cdef enum:
    HEADER = 61
    CRC_START = 21
    ATTR_LOG_APPEND_TIME = 0x08


def write_batches(int fd, long long position, views, long long first_offset, int leader_epoch,
                  long long log_append_time, long long index_interval, long long bytes_since_index,
                  long long max_timestamp, long long offset_of_max_timestamp):
    """Stamp and write; returns (next_offset, records, nbytes, first_max_timestamp, max_timestamp,
    offset_of_max_timestamp, bytes_since_index, entries) with entries a list of
    (offset, position, max_timestamp_so_far, its_offset) for the offset and time indexes.

    ``leader_epoch`` < 0 leaves the epoch as sent; ``log_append_time`` < 0 keeps CreateTime.
    """
    cdef Py_ssize_t n = len(views), i, held = 0
    cdef Py_buffer *bufs = <Py_buffer *>malloc(max(n, 1) * sizeof(Py_buffer))
    cdef iovec *iov = <iovec *>malloc(max(n, 1) * sizeof(iovec))
    cdef uint8_t *p
    cdef long long offset = first_offset, pos = position, total = 0, records = 0
    cdef long long batch_ts, last, first_ts = -1
    cdef int32_t delta
    cdef int err
    entries = []
    if bufs == NULL or iov == NULL:
        free(bufs); free(iov)
        raise MemoryError()
    try:
        for i in range(n):
            PyObject_GetBuffer(views[i], &bufs[i], PyBUF_WRITABLE)
            held += 1
            p = <uint8_t *>bufs[i].buf
            if bufs[i].len < HEADER or pb_get32(p + 8) + 12 != bufs[i].len:
                raise ValueError(f"buffer {i} is not exactly one record batch ({bufs[i].len} bytes)")
            if pb_get32(p + 23) < 0:
                raise ValueError(f"buffer {i} has a negative lastOffsetDelta")
        for i in range(n):
            p = <uint8_t *>bufs[i].buf
            delta = pb_get32(p + 23)
            pb_put64(p, offset)
            if leader_epoch >= 0:
                pb_put32(p + 12, <uint32_t>leader_epoch)
            if log_append_time >= 0:
                pb_put64(p + 35, log_append_time)
                pb_put16(p + 21, <uint16_t>(pb_get16(p + 21) | ATTR_LOG_APPEND_TIME))
                pb_put32(p + 17, pb_crc32c(0, p + CRC_START, <size_t>(bufs[i].len - CRC_START)))
            batch_ts = pb_get64(p + 35)
            last = offset + delta
            if i == 0:
                first_ts = batch_ts
            if batch_ts > max_timestamp:
                max_timestamp, offset_of_max_timestamp = batch_ts, last
            if bytes_since_index > index_interval:
                entries.append((last, pos, max_timestamp, offset_of_max_timestamp))
                bytes_since_index = 0
            bytes_since_index += bufs[i].len
            records += pb_get32(p + 57)
            iov[i].iov_base = p
            iov[i].iov_len = <size_t>bufs[i].len
            pos += bufs[i].len
            total += bufs[i].len
            offset = last + 1
        with nogil:
            err = pb_pwritev_all(fd, iov, n, position)
        if err:
            import os
            raise OSError(err, os.strerror(err))
        return (offset, records, total, first_ts, max_timestamp, offset_of_max_timestamp,
                bytes_since_index, entries)
    finally:
        for i in range(held):
            PyBuffer_Release(&bufs[i])
        free(bufs)
        free(iov)
