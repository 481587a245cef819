# Declarations shared by the modules that write with pb_pwritev_all (native/csrc/pwritev_all.c).
cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len

cdef extern from "pwritev_all.h" nogil:
    int pb_pwritev_all(int fd, iovec *iov, long n, long long offset)
