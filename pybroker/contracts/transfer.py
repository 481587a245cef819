"""Contract of the file-slice transfer module (native/transfer.pyx, pybroker/_pure/transfer.py)
and of the senders built on it (pybroker/sender.py, pybroker/uring.py)."""
from typing import Protocol


class Transfer(Protocol):
    def send_slice(self, sock_fd: int, file_fd: int, offset: int, count: int) -> int:
        """Send file bytes [offset, offset+count) to a non-blocking socket until done or it would
        block; return the bytes sent (0 if full at once). ValueError for negative arguments,
        EOFError if the slice runs past the end of the file, OSError(errno) on socket errors."""

    def send_slice_all(self, sock_fd: int, file_fd: int, offset: int, count: int,
                       timeout_ms: int = -1) -> int:
        """Send the whole slice, polling for POLLOUT when the socket is full; return count.
        TimeoutError if one wait exceeds timeout_ms (negative: no limit)."""


class Sender(Transfer, Protocol):
    """A transfer method chosen by pybroker.sender.get_sender; close() releases its resources."""
    name: str

    def close(self) -> None:
        ...
