"""Contract of the batched-write module (native/fileio.pyx, pybroker/_pure/fileio.py)."""
from typing import Protocol, Sequence


class FileIO(Protocol):
    def pwritev_all(self, fd: int, buffers: Sequence, offset: int) -> int:
        """Write all buffers in order at offset (short writes retried); return bytes written."""

    def fdatasync(self, fd: int) -> None:
        """Flush the file's data to stable storage."""

    def start_writeback(self, fd: int, offset: int, nbytes: int) -> None:
        """Start writing the range's dirty pages to disk; return without waiting for the disk."""
