"""Contract of the crc module (pybroker._native.crc and pybroker._pure.crc)."""
from typing import Protocol, runtime_checkable


@runtime_checkable
class CrcModule(Protocol):
    def crc32c(self, data, value: int = 0) -> int:
        """CRC-32C (Castagnoli) of any contiguous buffer, continuing from ``value``.

        crc32c(b, crc32c(a)) == crc32c(a + b); crc32c(b"123456789") == 0xE3069283.
        ``value`` outside [0, 2**32) raises OverflowError; a non-buffer or non-contiguous
        buffer raises TypeError.
        """
