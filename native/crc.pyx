"""CRC-32C (Castagnoli) of any buffer: the native twin of pybroker._pure.crc.

The C code in csrc/crc32c_hw.c uses the SSE4.2 crc32 instruction when the CPU has it
(``HARDWARE`` says which) and a slicing-by-8 table otherwise.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.number cimport PyNumber_Index
from libc.stdint cimport uint8_t, uint32_t

cdef extern from "crc32c_hw.h" nogil:
    uint32_t pb_crc32c(uint32_t crc, const uint8_t *p, size_t n)
    uint32_t pb_crc32c_sw(uint32_t crc, const uint8_t *p, size_t n)
    int pb_crc32c_hw()

cdef enum:
    NOGIL_MIN = 65536  # below this, dropping and retaking the GIL costs more than it frees

HARDWARE = bool(pb_crc32c_hw())


cdef inline uint32_t _u32(object value) except? 0xFFFFFFFF:
    return PyNumber_Index(value)  # integers only: a plain C argument would truncate floats


cdef int _acquire(object data, Py_buffer *view) except -1:
    try:
        PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    except BufferError as exc:  # same type as the pure twin's memoryview.cast failure
        raise TypeError(f"expected a contiguous buffer: {exc}") from None
    return 0


def crc32c(data, value=0):
    """CRC-32C of ``data`` (any contiguous buffer); pass a previous result as ``value`` to continue it."""
    cdef Py_buffer view
    cdef uint32_t crc = _u32(value)
    _acquire(data, &view)
    try:
        if view.len >= NOGIL_MIN:
            with nogil:
                crc = pb_crc32c(crc, <const uint8_t *>view.buf, <size_t>view.len)
        else:
            crc = pb_crc32c(crc, <const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return crc


def _crc32c_sw(data, value=0):
    """The portable table path alone (tests check it even where the hardware path is used)."""
    cdef Py_buffer view
    cdef uint32_t crc = _u32(value)
    _acquire(data, &view)
    try:
        crc = pb_crc32c_sw(crc, <const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return crc
