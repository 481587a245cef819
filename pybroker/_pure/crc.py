"""CRC-32C (Castagnoli), table-driven: the pure twin of the native hardware CRC."""

_POLY = 0x82F63B78  # reflected Castagnoli polynomial


def _make_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _make_table()


def crc32c(data, value: int = 0) -> int:
    """CRC-32C of ``data``; pass a previous result as ``value`` to continue it."""
    if not 0 <= value <= 0xFFFFFFFF:  # the native twin takes a uint32_t
        raise OverflowError(f"CRC value {value} is not a 32-bit unsigned integer")
    crc = value ^ 0xFFFFFFFF
    table = _TABLE
    for byte in memoryview(data).cast("B"):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
