#ifndef PB_PWRITEV_ALL_H
#define PB_PWRITEV_ALL_H
#include <sys/types.h>
#include <sys/uio.h>

/* Write all iovecs at offset, retrying short writes and EINTR, IOV_MAX at a time.
 * Advances the iovecs it consumes. Returns 0, or the errno of the failed call. */
int pb_pwritev_all(int fd, struct iovec *iov, long n, long long offset);

#endif
