"""Pure twin of native/writer.pyx: stamp validated batches and write them with one pwritev."""
import struct

from pybroker._pure import crc, fileio

LOG_APPEND_TIME = 0x08


def write_batches(fd, position, views, first_offset, leader_epoch, log_append_time,
                  index_interval, bytes_since_index, max_timestamp, offset_of_max_timestamp):
    """Stamp and write; see the native module for the returned tuple."""
    bufs = [memoryview(v).cast("B") for v in views]
    for i, b in enumerate(bufs):
        if b.readonly:
            raise BufferError(f"buffer {i} is read-only")
        if len(b) < 61 or struct.unpack_from(">i", b, 8)[0] + 12 != len(b):
            raise ValueError(f"buffer {i} is not exactly one record batch ({len(b)} bytes)")
        if struct.unpack_from(">i", b, 23)[0] < 0:
            raise ValueError(f"buffer {i} has a negative lastOffsetDelta")
    offset, pos, records, first_ts, entries = first_offset, position, 0, -1, []
    for i, b in enumerate(bufs):
        struct.pack_into(">q", b, 0, offset)
        if leader_epoch >= 0:
            struct.pack_into(">i", b, 12, leader_epoch)
        if log_append_time >= 0:
            struct.pack_into(">q", b, 35, log_append_time)
            struct.pack_into(">h", b, 21, struct.unpack_from(">h", b, 21)[0] | LOG_APPEND_TIME)
            struct.pack_into(">I", b, 17, crc.crc32c(b[21:]))
        batch_ts = struct.unpack_from(">q", b, 35)[0]
        last = offset + struct.unpack_from(">i", b, 23)[0]
        if i == 0:
            first_ts = batch_ts
        if batch_ts > max_timestamp:
            max_timestamp, offset_of_max_timestamp = batch_ts, last
        if bytes_since_index > index_interval:
            entries.append((last, pos, max_timestamp, offset_of_max_timestamp))
            bytes_since_index = 0
        bytes_since_index += len(b)
        records += struct.unpack_from(">i", b, 57)[0]
        pos += len(b)
        offset = last + 1
    total = fileio.pwritev_all(fd, bufs, position)
    return (offset, records, total, first_ts, max_timestamp, offset_of_max_timestamp,
            bytes_since_index, entries)
