# The zigzag varint reader shared by the modules that walk Kafka records (client_codec, offset_map).
from libc.stdint cimport int64_t, uint8_t, uint64_t

cdef enum:
    VARINT_OK = 0
    VARINT_TRUNCATED = 1  # the buffer ends inside it
    VARINT_LONG = 2       # more than 10 bytes


cdef inline int read_zigzag(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) noexcept nogil:
    """The zigzag varint at pos[0] into out[0], pos[0] moved past it; VARINT_OK or the error."""
    cdef Py_ssize_t i = pos[0]
    cdef uint64_t z = 0
    cdef int shift = 0, k
    cdef uint8_t b
    if i < end and p[i] < 0x80:  # one-byte varints are the common case
        z = p[i]
        pos[0] = i + 1
        out[0] = <int64_t>((z >> 1) ^ (0 - (z & 1)))
        return VARINT_OK
    for k in range(10):
        if i >= end:
            return VARINT_TRUNCATED
        b = p[i]
        i += 1
        z |= <uint64_t>(b & 0x7F) << shift
        if not b & 0x80:
            pos[0] = i
            out[0] = <int64_t>((z >> 1) ^ (0 - (z & 1)))
            return VARINT_OK
        shift += 7
    return VARINT_LONG
