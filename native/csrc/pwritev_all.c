#include "pwritev_all.h"

#include <errno.h>

#define PB_IOV_BATCH 1024 /* IOV_MAX on Linux */

int pb_pwritev_all(int fd, struct iovec *iov, long n, long long offset)
{
    long first = 0;
    while (first < n && iov[first].iov_len == 0)
        first++;
    while (first < n) {
        long count = n - first < PB_IOV_BATCH ? n - first : PB_IOV_BATCH;
        ssize_t wrote = pwritev(fd, &iov[first], (int)count, (off_t)offset);
        if (wrote < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        offset += wrote;
        /* skip fully written buffers, then trim a partly written one */
        while (first < n && (size_t)wrote >= iov[first].iov_len) {
            wrote -= (ssize_t)iov[first].iov_len;
            first++;
        }
        if (first < n && wrote > 0) {
            iov[first].iov_base = (char *)iov[first].iov_base + wrote;
            iov[first].iov_len -= (size_t)wrote;
        }
        while (first < n && iov[first].iov_len == 0)
            first++;
    }
    return 0;
}
