"""Hand-written readers and writers of Kafka's protocol primitives (see protocol.html).

Readers take ``(buf, pos)`` and return ``(value, new_pos)``; ``buf`` is a memoryview of
unsigned bytes. Writers take ``(out, value)`` and append to the bytearray ``out``.

Wire forms:
  * STRING: int16 length + UTF-8 (-1 = null); COMPACT_STRING: uvarint (length + 1), 0 = null.
  * BYTES/records: int32 length (-1 = null); COMPACT_BYTES: uvarint (length + 1), 0 = null.
  * ARRAY: int32 count (-1 = null); COMPACT_ARRAY: uvarint (count + 1), 0 = null.
  * tagged fields (flexible versions): uvarint count, then per field uvarint tag,
    uvarint size and ``size`` bytes of value.
  * nullable struct: int8 marker (-1 = null, 1 = present) then the struct.
  * uuid: 16 raw bytes; decoded to ``uuid.UUID``, encoded from ``uuid.UUID`` or 16 bytes.

Bounds contract: every length or count is checked against the bytes left before anything
is sliced or allocated (array counts against ``count * min_element_size``), so hostile
input raises ``DecodeError``. Fixed-width fields are read with ``Struct.unpack_from``, which
raises ``struct.error`` when the buffer is short; ``Message.decode`` turns that (and bad
UTF-8) into ``DecodeError``, so callers only ever see ``DecodeError``.
"""
import struct
from operator import itemgetter
from struct import Struct
from uuid import UUID

__all__ = [
    "DecodeError", "EncodeError", "UnsupportedVersionError", "Message", "NOTSET", "ZERO_UUID",
    "S_i8", "S_i16", "S_i32", "S_i64",
    "rd_uvarint", "rd_uvarlong", "rd_varint", "rd_varlong", "wr_uvarint", "wr_varint",
    "rd_string", "rd_nstring", "rd_cstring", "rd_ncstring",
    "wr_string", "wr_nstring", "wr_cstring", "wr_ncstring",
    "rd_bytes", "rd_nbytes", "rd_cbytes", "rd_ncbytes",
    "wr_bytes", "wr_nbytes", "wr_cbytes", "wr_ncbytes",
    "rd_records", "rd_nrecords", "rd_crecords", "rd_ncrecords",
    "rd_uuid", "wr_uuid", "uuid_bytes",
    "rd_count", "rd_ncount", "rd_ccount", "rd_nccount",
    "rd_array", "rd_narray", "rd_carray", "rd_ncarray",
    "wr_array", "wr_narray", "wr_carray", "wr_ncarray",
    "rd_farray", "rd_nfarray", "rd_cfarray", "rd_ncfarray",
    "wr_farray", "wr_nfarray", "wr_cfarray", "wr_ncfarray",
    "rd_tags", "rd_tag_spans", "wr_tags", "wr_tagged",
]


class DecodeError(ValueError):
    """Bytes that are not a valid encoding (truncated, bad length, bad varint, bad UTF-8)."""


class EncodeError(ValueError):
    """A value that cannot be encoded at the requested version (null where not nullable,
    out-of-range integer, over-long string...). ``out`` may hold a partial encoding."""


class UnsupportedVersionError(DecodeError):
    """Unknown API key or a version outside the codec's range.

    ``header`` is the RequestHeader (decoded as v1) when one could be read, so a broker can
    still answer with UNSUPPORTED_VERSION and the right correlation id."""

    def __init__(self, what, api_key, api_version, header=None):
        super().__init__(f"{what}: unsupported version {api_version} (api key {api_key})")
        self.api_key = api_key
        self.api_version = api_version
        self.header = header


NOTSET = type("NotSet", (), {"__repr__": lambda self: "NOTSET", "__slots__": ()})()
ZERO_UUID = UUID(int=0)

S_i8 = Struct(">b")
S_i16 = Struct(">h")
S_i32 = Struct(">i")
S_i64 = Struct(">q")
_i16 = S_i16.unpack_from
_i32 = S_i32.unpack_from
_p16 = S_i16.pack
_p32 = S_i32.pack


def _short(what, pos, need, have):
    return DecodeError(f"{what} at offset {pos} needs {need} bytes, only {have} left")


# ---- varints ---------------------------------------------------------------------------

def _rd_uv(buf, pos, maxlen, what):
    end = len(buf)
    start = pos
    result = 0
    shift = 0
    for _ in range(maxlen):
        if pos >= end:
            raise DecodeError(f"truncated {what} at offset {start}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise DecodeError(f"{what} at offset {start} is longer than {maxlen} bytes")


def rd_uvarint(buf, pos):
    """Unsigned varint of at most 5 bytes and 32 bits."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:  # the common one-byte case
            return b, pos + 1
    n, pos = _rd_uv(buf, pos, 5, "unsigned varint")
    if n > 0xFFFFFFFF:
        raise DecodeError(f"unsigned varint {n} exceeds 32 bits")
    return n, pos


def rd_uvarlong(buf, pos):
    """Unsigned varlong of at most 10 bytes and 64 bits."""
    n, pos = _rd_uv(buf, pos, 10, "unsigned varlong")
    if n > 0xFFFFFFFFFFFFFFFF:
        raise DecodeError(f"unsigned varlong {n} exceeds 64 bits")
    return n, pos


def rd_varint(buf, pos):
    """Zigzag signed varint (int32)."""
    n, pos = rd_uvarint(buf, pos)
    return (n >> 1) ^ -(n & 1), pos


def rd_varlong(buf, pos):
    """Zigzag signed varlong (int64)."""
    n, pos = rd_uvarlong(buf, pos)
    return (n >> 1) ^ -(n & 1), pos


def wr_uvarint(out, n):
    if n < 0x80:
        if n < 0:
            raise EncodeError(f"negative unsigned varint {n}")
        out.append(n)
        return
    if n > 0xFFFFFFFF:
        raise EncodeError(f"unsigned varint {n} exceeds 32 bits")
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def wr_varint(out, n):
    if not -0x80000000 <= n <= 0x7FFFFFFF:
        raise EncodeError(f"varint {n} outside int32")
    wr_uvarint(out, ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


# ---- strings ---------------------------------------------------------------------------

def rd_string(buf, pos):
    n = _i16(buf, pos)[0]
    if n < 0:
        raise DecodeError(f"non-nullable string at offset {pos} has length {n}")
    pos += 2
    end = pos + n
    if end > len(buf):
        raise _short("string", pos, n, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def rd_nstring(buf, pos):
    n = _i16(buf, pos)[0]
    if n < 0:
        if n == -1:
            return None, pos + 2
        raise DecodeError(f"nullable string at offset {pos} has length {n}")
    pos += 2
    end = pos + n
    if end > len(buf):
        raise _short("string", pos, n, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


MAX_STRING = 0x7FFF  # as Kafka's parsers: a string longer than an int16 length allows is refused


def rd_cstring(buf, pos):
    n, pos = rd_uvarint(buf, pos)
    if n == 0:
        raise DecodeError(f"non-nullable compact string at offset {pos - 1} is null")
    if n - 1 > MAX_STRING:
        raise DecodeError(f"compact string at offset {pos} has length {n - 1}, over {MAX_STRING}")
    end = pos + n - 1
    if end > len(buf):
        raise _short("compact string", pos, n - 1, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def rd_ncstring(buf, pos):
    n, pos = rd_uvarint(buf, pos)
    if n == 0:
        return None, pos
    if n - 1 > MAX_STRING:
        raise DecodeError(f"compact string at offset {pos} has length {n - 1}, over {MAX_STRING}")
    end = pos + n - 1
    if end > len(buf):
        raise _short("compact string", pos, n - 1, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def _utf8(s, limit):
    if s is None:
        raise EncodeError("null value for a non-nullable string")
    b = s.encode("utf-8")
    if len(b) > limit:
        raise EncodeError(f"string of {len(b)} bytes exceeds {limit}")
    return b


def wr_string(out, s):
    b = _utf8(s, 0x7FFF)
    out += _p16(len(b))
    out += b


def wr_nstring(out, s):
    if s is None:
        out += b"\xff\xff"
        return
    b = _utf8(s, 0x7FFF)
    out += _p16(len(b))
    out += b


def wr_cstring(out, s):
    b = _utf8(s, 0x7FFF)
    wr_uvarint(out, len(b) + 1)
    out += b


def wr_ncstring(out, s):
    if s is None:
        out.append(0)
        return
    b = _utf8(s, 0x7FFF)
    wr_uvarint(out, len(b) + 1)
    out += b


# ---- bytes and records -----------------------------------------------------------------
# ``bytes`` fields decode to ``bytes`` (a copy); ``records`` decode to a memoryview slice of
# the input (zero copy). Both encode from any buffer.

def _rd_span(buf, pos, nullable, compact, what):
    if compact:
        n, pos = rd_uvarint(buf, pos)
        if n == 0:
            if nullable:
                return None, pos
            raise DecodeError(f"non-nullable compact {what} at offset {pos - 1} is null")
        n -= 1
    else:
        n = _i32(buf, pos)[0]
        if n < 0:
            if n == -1 and nullable:
                return None, pos + 4
            raise DecodeError(f"{what} at offset {pos} has length {n}")
        pos += 4
    end = pos + n
    if end > len(buf):
        raise _short(what, pos, n, len(buf) - pos)
    return buf[pos:end], end


def rd_bytes(buf, pos):
    v, pos = _rd_span(buf, pos, False, False, "bytes")
    return bytes(v), pos


def rd_nbytes(buf, pos):
    v, pos = _rd_span(buf, pos, True, False, "bytes")
    return (None if v is None else bytes(v)), pos


def rd_cbytes(buf, pos):
    v, pos = _rd_span(buf, pos, False, True, "bytes")
    return bytes(v), pos


def rd_ncbytes(buf, pos):
    v, pos = _rd_span(buf, pos, True, True, "bytes")
    return (None if v is None else bytes(v)), pos


def rd_records(buf, pos):
    return _rd_span(buf, pos, False, False, "records")


def rd_nrecords(buf, pos):
    n = _i32(buf, pos)[0]
    pos += 4
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"records at offset {pos - 4} have length {n}")
    end = pos + n
    if end > len(buf):
        raise _short("records", pos, n, len(buf) - pos)
    return buf[pos:end], end


def rd_crecords(buf, pos):
    return _rd_span(buf, pos, False, True, "records")


def rd_ncrecords(buf, pos):
    n, pos = rd_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise _short("records", pos, n - 1, len(buf) - pos)
    return buf[pos:end], end


def _blen(b):
    if b is None:
        raise EncodeError("null value for non-nullable bytes")
    return b.nbytes if type(b) is memoryview else len(b)


def wr_bytes(out, b):
    out += _p32(_blen(b))
    out += b


def wr_nbytes(out, b):
    if b is None:
        out += b"\xff\xff\xff\xff"
        return
    out += _p32(_blen(b))
    out += b


def wr_cbytes(out, b):
    wr_uvarint(out, _blen(b) + 1)
    out += b


def wr_ncbytes(out, b):
    if b is None:
        out.append(0)
        return
    wr_uvarint(out, _blen(b) + 1)
    out += b


# ---- uuid ------------------------------------------------------------------------------

def rd_uuid(buf, pos):
    end = pos + 16
    if end > len(buf):
        raise _short("uuid", pos, 16, len(buf) - pos)
    return UUID(bytes=bytes(buf[pos:end])), end


def uuid_bytes(u):
    """16 raw bytes of a ``uuid.UUID`` or of a 16-byte buffer."""
    if type(u) is UUID:
        return u.bytes
    if u is None or len(u) != 16:
        raise EncodeError(f"uuid must be uuid.UUID or 16 bytes, got {u!r}")
    return bytes(u)


def wr_uuid(out, u):
    out += uuid_bytes(u)


# ---- arrays ----------------------------------------------------------------------------
# ``elem_min`` is a sound lower bound of one element's encoded size (>= 1), so a count is
# rejected before allocation when it cannot fit in the bytes left.

def _count(buf, pos, nullable, compact, elem_min):
    if compact:
        n, pos = rd_uvarint(buf, pos)
        if n == 0:
            if nullable:
                return None, pos
            raise DecodeError(f"non-nullable compact array at offset {pos - 1} is null")
        n -= 1
    else:
        n = _i32(buf, pos)[0]
        if n < 0:
            if n == -1 and nullable:
                return None, pos + 4
            raise DecodeError(f"array at offset {pos} has count {n}")
        pos += 4
    if n * elem_min > len(buf) - pos:
        raise _too_many(n, pos, len(buf) - pos)
    return n, pos


def _too_many(n, pos, left):
    return DecodeError(f"array count {n} at offset {pos} exceeds the {left} bytes left")


def rd_count(buf, pos, elem_min):
    n = _i32(buf, pos)[0]
    pos += 4
    if n < 0:
        raise DecodeError(f"array at offset {pos - 4} has count {n}")
    if n * elem_min > len(buf) - pos:
        raise _too_many(n, pos, len(buf) - pos)
    return n, pos


def rd_ncount(buf, pos, elem_min):
    return _count(buf, pos, True, False, elem_min)


def rd_ccount(buf, pos, elem_min):
    n, pos = rd_uvarint(buf, pos)
    if n == 0:
        raise DecodeError(f"non-nullable compact array at offset {pos - 1} is null")
    n -= 1
    if n * elem_min > len(buf) - pos:
        raise _too_many(n, pos, len(buf) - pos)
    return n, pos


def rd_nccount(buf, pos, elem_min):
    return _count(buf, pos, True, True, elem_min)


def _rd_list(buf, pos, n, reader):
    lst = []
    ap = lst.append
    for _ in range(n):
        v, pos = reader(buf, pos)
        ap(v)
    return lst, pos


def rd_array(buf, pos, elem_min, reader):
    n, pos = _count(buf, pos, False, False, elem_min)
    return _rd_list(buf, pos, n, reader)


def rd_narray(buf, pos, elem_min, reader):
    n, pos = _count(buf, pos, True, False, elem_min)
    if n is None:
        return None, pos
    return _rd_list(buf, pos, n, reader)


def rd_carray(buf, pos, elem_min, reader):
    n, pos = _count(buf, pos, False, True, elem_min)
    return _rd_list(buf, pos, n, reader)


def rd_ncarray(buf, pos, elem_min, reader):
    n, pos = _count(buf, pos, True, True, elem_min)
    if n is None:
        return None, pos
    return _rd_list(buf, pos, n, reader)


# Arrays of fixed-width numbers: one struct call for the whole array. ``code`` is a struct
# format letter, ``width`` its size.

def _rd_fixed(buf, pos, n, code, width):
    return list(struct.unpack_from(">%d%s" % (n, code), buf, pos)), pos + n * width


def rd_farray(buf, pos, code, width):
    n, pos = _count(buf, pos, False, False, width)
    return _rd_fixed(buf, pos, n, code, width)


def rd_nfarray(buf, pos, code, width):
    n, pos = _count(buf, pos, True, False, width)
    if n is None:
        return None, pos
    return _rd_fixed(buf, pos, n, code, width)


def rd_cfarray(buf, pos, code, width):
    n, pos = _count(buf, pos, False, True, width)
    return _rd_fixed(buf, pos, n, code, width)


def rd_ncfarray(buf, pos, code, width):
    n, pos = _count(buf, pos, True, True, width)
    if n is None:
        return None, pos
    return _rd_fixed(buf, pos, n, code, width)


def _null_array():
    return EncodeError("null value for a non-nullable array")


def wr_array(out, v, writer):
    if v is None:
        raise _null_array()
    out += _p32(len(v))
    for e in v:
        writer(out, e)


def wr_narray(out, v, writer):
    if v is None:
        out += b"\xff\xff\xff\xff"
        return
    out += _p32(len(v))
    for e in v:
        writer(out, e)


def wr_carray(out, v, writer):
    if v is None:
        raise _null_array()
    wr_uvarint(out, len(v) + 1)
    for e in v:
        writer(out, e)


def wr_ncarray(out, v, writer):
    if v is None:
        out.append(0)
        return
    wr_uvarint(out, len(v) + 1)
    for e in v:
        writer(out, e)


def wr_farray(out, v, code):
    if v is None:
        raise _null_array()
    out += _p32(len(v))
    out += struct.pack(">%d%s" % (len(v), code), *v)


def wr_nfarray(out, v, code):
    if v is None:
        out += b"\xff\xff\xff\xff"
        return
    out += _p32(len(v))
    out += struct.pack(">%d%s" % (len(v), code), *v)


def wr_cfarray(out, v, code):
    if v is None:
        raise _null_array()
    wr_uvarint(out, len(v) + 1)
    out += struct.pack(">%d%s" % (len(v), code), *v)


def wr_ncfarray(out, v, code):
    if v is None:
        out.append(0)
        return
    wr_uvarint(out, len(v) + 1)
    out += struct.pack(">%d%s" % (len(v), code), *v)


# ---- tagged fields ---------------------------------------------------------------------

def rd_tag_spans(buf, pos):
    """The tagged-field section as a list of (tag, start, end) spans, and the new pos."""
    n, pos = rd_uvarint(buf, pos)
    if n == 0:
        return (), pos
    left = len(buf) - pos
    if 2 * n > left:  # each tagged field takes at least its tag and size bytes
        raise DecodeError(f"{n} tagged fields at offset {pos} exceed the {left} bytes left")
    spans = []
    end = len(buf)
    for _ in range(n):
        tag, pos = rd_uvarint(buf, pos)
        size, pos = rd_uvarint(buf, pos)
        stop = pos + size
        if stop > end:
            raise _short(f"tagged field {tag}", pos, size, end - pos)
        spans.append((tag, pos, stop))
        pos = stop
    return spans, pos


def rd_tags(buf, pos):
    """A tagged-field section with no known tags: (list of (tag, bytes) or None, pos)."""
    if pos < len(buf) and buf[pos] == 0:  # the usual empty section
        return None, pos + 1
    spans, pos = rd_tag_spans(buf, pos)
    if not spans:
        return None, pos
    return [(tag, bytes(buf[s:e])) for tag, s, e in spans], pos


def wr_tags(out, unknown):
    """Write a tagged-field section holding only ``unknown`` (list of (tag, bytes) or None)."""
    if not unknown:
        out.append(0)
        return
    wr_tagged(out, (), unknown)


def wr_tagged(out, known, unknown):
    """Write known (tag, encoded bytes) fields merged with unknown ones in tag order."""
    fields = list(known)
    if unknown:
        fields.extend(unknown)
        fields.sort(key=itemgetter(0))
    wr_uvarint(out, len(fields))
    for tag, b in fields:
        wr_uvarint(out, tag)
        wr_uvarint(out, len(b))
        out += b


# ---- message base ----------------------------------------------------------------------

class Message:
    """Base of every generated message and struct class.

    Subclasses set ``__slots__`` (field names plus ``_unknown_tagged``), ``_NAME``,
    ``MIN_VERSION``/``MAX_VERSION`` and the per-version codec tables ``_DEC``/``_ENC``.
    ``_unknown_tagged`` is None or a list of (tag, bytes) kept from decoding and re-emitted.
    """
    __slots__ = ()
    __hash__ = None
    _NAME = "Message"
    _DEC = {}
    _ENC = {}

    @classmethod
    def decode(cls, buf, pos, version):
        """Decode one object from ``buf`` at ``pos``: (obj, new_pos). Raises DecodeError."""
        fn = cls._DEC.get(version)
        if fn is None:
            raise UnsupportedVersionError(cls._NAME, getattr(cls, "API_KEY", None), version)
        if type(buf) is not memoryview:
            buf = memoryview(buf)
        try:
            return fn(buf, pos)
        except struct.error as e:
            raise DecodeError(f"{cls._NAME} v{version}: truncated input ({e})") from None
        except UnicodeDecodeError as e:
            raise DecodeError(f"{cls._NAME} v{version}: invalid UTF-8 ({e})") from None

    def encode(self, version, out):
        """Append this object's encoding at ``version`` to the bytearray ``out``."""
        fn = self._ENC.get(version)
        if fn is None:
            raise UnsupportedVersionError(self._NAME, getattr(self, "API_KEY", None), version)
        try:
            fn(out, self)
        except (struct.error, OverflowError) as e:
            raise EncodeError(f"{self._NAME} v{version}: {e}") from None
        except (AttributeError, TypeError) as e:
            raise EncodeError(f"{self._NAME} v{version}: bad field value ({e})") from None

    def to_bytes(self, version):
        out = bytearray()
        self.encode(version, out)
        return bytes(out)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        for name in self.__slots__:
            a = getattr(self, name)
            b = getattr(other, name)
            if name == "_unknown_tagged":
                a = a or None
                b = b or None
            if a != b:
                return False
        return True

    def __repr__(self):
        parts = []
        for name in self.__slots__:
            v = getattr(self, name)
            if name == "_unknown_tagged" and not v:
                continue
            parts.append(f"{name}={v!r}")
        return f"{self._NAME}({', '.join(parts)})"
