/* Baseline for bench/bench_transfer.py: the plainest blocking sendfile(2) loop, no Python. */
#include <errno.h>
#include <sys/sendfile.h>
#include <sys/types.h>

/* Send file bytes [offset, offset+count) to a blocking socket; returns count or -errno. */
long long sendfile_all(int sock_fd, int file_fd, long long offset, long long count)
{
    off_t pos = (off_t)offset;
    long long left = count;
    while (left > 0) {
        ssize_t n = sendfile(sock_fd, file_fd, &pos, left > 0x7ffff000 ? 0x7ffff000 : (size_t)left);
        if (n > 0) {
            left -= n;
        } else if (n == 0) {
            return -EIO; /* file shorter than the slice */
        } else if (errno != EINTR) {
            return -errno;
        }
    }
    return count;
}
