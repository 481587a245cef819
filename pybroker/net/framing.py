"""Kafka's wire framing: every request and response is a 4-byte big-endian signed size, then
that many bytes. A request holds at least its header (api_key int16, api_version int16,
correlation_id int32: 8 bytes).

A response handed to the network layer is a list of parts, each a bytes-like object or a file
slice (``.fd`` or ``.file.fileno()``, ``.position``, ``.length``, e.g. pybroker.log.FetchSlice);
``encode_response`` turns it into write-queue entries: the size prefix, then the parts in order.
"""
import struct

SIZE = struct.Struct(">i")
SIZE_BYTES = SIZE.size
MIN_REQUEST_BYTES = 8  # api_key + api_version + correlation_id
MAX_RESPONSE_BYTES = 2**31 - 1  # the size prefix is a signed int32


class PreAuthFrameLimit(int):
    """The request size limit of a SASL listener until the client has authenticated; the refusal
    names its setting (a plain int limit is socket.request.max.bytes)."""
    __slots__ = ()
    setting = "sasl.server.max.receive.size"


def frame_size_error(size: int, max_request_bytes: int) -> str | None:
    """Why a request of ``size`` bytes is refused (checked before any allocation), or None."""
    if size < 0:
        return f"negative request size {size}"
    if size < MIN_REQUEST_BYTES:
        return f"request size {size} is too small to hold a request header"
    if size > max_request_bytes:
        setting = getattr(max_request_bytes, "setting", "socket.request.max.bytes")
        return f"request size {size} is larger than {setting} ({int(max_request_bytes)})"
    return None


class SliceCursor:
    """A file slice being sent: the next file position and the bytes left to send."""
    __slots__ = ("ref", "fd", "position", "remaining")

    def __init__(self, ref, fd: int, position: int, remaining: int):
        self.ref = ref  # keeps the file object (hence the descriptor) alive until sent
        self.fd = fd
        self.position = position
        self.remaining = remaining


def _slice_fd(part) -> int:
    fd = getattr(part, "fd", None)
    return part.file.fileno() if fd is None else fd


def encode_response(parts) -> tuple[list, int]:
    """Write-queue entries for one response (memoryviews of 'B' and SliceCursors, empty parts
    dropped) and the bytes held in memory. TypeError/ValueError for a malformed response."""
    entries = [None]  # placeholder for the size prefix
    total = 0
    in_memory = SIZE_BYTES
    for part in parts:
        if isinstance(part, (bytes, bytearray, memoryview)):
            view = memoryview(part).cast("B") if not isinstance(part, bytes) else memoryview(part)
            n = view.nbytes
            if n:
                entries.append(view)
                in_memory += n
        elif hasattr(part, "length") and hasattr(part, "position"):
            n = part.length
            if n < 0 or part.position < 0:
                raise ValueError(f"bad file slice position={part.position} length={n}")
            if n:
                entries.append(SliceCursor(part, _slice_fd(part), part.position, n))
        else:
            raise TypeError(f"response part of type {type(part).__name__} is neither "
                            "bytes-like nor a file slice")
        total += n
    if total > MAX_RESPONSE_BYTES:
        raise ValueError(f"response of {total} bytes does not fit a 4-byte size")
    entries[0] = memoryview(SIZE.pack(total))
    return entries, in_memory
