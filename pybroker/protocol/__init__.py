"""Kafka wire protocol: generated request/response codecs plus framing helpers.

Frames here are the bytes AFTER Kafka's 4-byte size prefix; the network layer owns that
prefix. Codecs live in ``pybroker.protocol.messages`` (generated from Kafka's JSON specs by
``python -m pybroker.protocol.generate``; committed, so no specs are needed at run time).

Header versions follow Kafka: a request uses header v2 when its API version is flexible,
else v1 (v0 only for ControlledShutdown v0); a response uses header v1 when flexible, else
v0, except ApiVersions responses which always use v0 (clients parse them before they know
the broker's versions).

Value mapping: ints/bools/floats as Python scalars; string -> str; bytes -> bytes (a copy);
records -> memoryview slice of the input frame (zero copy; None when null; encodes from any
buffer); uuid -> uuid.UUID (encodes from uuid.UUID or 16 bytes); nullable fields may be None;
unknown tagged fields are kept in ``obj._unknown_tagged`` and written back. A field absent at
a version is not written and decodes to its default. Kafka's "ignorable" check (refusing to
drop a non-default field the version cannot carry) is not enforced: such values are dropped.
"""
from struct import Struct

from pybroker.protocol.primitives import DecodeError, EncodeError, UnsupportedVersionError

__all__ = [
    "API_NAMES", "REQUESTS", "RESPONSES", "RequestHeader", "ResponseHeader", "ErrorCode",
    "DecodeError", "EncodeError", "UnsupportedVersionError",
    "request_header_version", "response_header_version",
    "decode_request", "encode_request", "decode_response", "encode_response",
]

# The generated modules load on first use so that the generator (run as
# ``python -m pybroker.protocol.generate``) still works when they are missing or broken.
_LAZY = ("API_NAMES", "REQUESTS", "RESPONSES", "RequestHeader", "ResponseHeader", "ErrorCode")
_REQ = _RESP = _NAMES = _RH = None


def _load():
    global _REQ, _RESP, _NAMES, _RH
    from pybroker.protocol import messages
    from pybroker.protocol.errors import ErrorCode
    g = globals()
    g.update(API_NAMES=messages.API_NAMES, REQUESTS=messages.REQUESTS,
             RESPONSES=messages.RESPONSES, RequestHeader=messages.RequestHeader,
             ResponseHeader=messages.ResponseHeader, ErrorCode=ErrorCode)
    _NAMES, _RESP, _RH = messages.API_NAMES, messages.RESPONSES, messages.RequestHeader
    _REQ = messages.REQUESTS


def __getattr__(name):
    if name in _LAZY:
        _load()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7
_S_hh = Struct(">hh")
_S_i = Struct(">i")


def _check(table, api_key, api_version, what):
    if _REQ is None:
        _load()
    cls = (_REQ if table == "request" else _RESP).get(api_key)
    if cls is None or not cls.MIN_VERSION <= api_version <= cls.MAX_VERSION:
        raise UnsupportedVersionError(what, api_key, api_version)
    return cls


def request_header_version(api_key, api_version):
    """RequestHeader version (0, 1 or 2) used by requests of this API version."""
    cls = _check("request", api_key, api_version, "request")
    if cls.FLEXIBLE_MIN is not None and api_version >= cls.FLEXIBLE_MIN:
        return 2
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 1


def response_header_version(api_key, api_version):
    """ResponseHeader version (0 or 1) used by responses of this API version."""
    cls = _check("response", api_key, api_version, "response")
    if api_key == API_VERSIONS_KEY:
        return 0
    if cls.FLEXIBLE_MIN is not None and api_version >= cls.FLEXIBLE_MIN:
        return 1
    return 0


def decode_request(frame):
    """Decode a request frame (no size prefix) into (RequestHeader, request object).

    Raises UnsupportedVersionError (carrying the v1-decoded header when readable) for an
    unknown API key or version, DecodeError for malformed bytes. Bytes after the body are
    ignored, as Kafka does."""
    if type(frame) is not memoryview:
        frame = memoryview(frame)
    if len(frame) < 8:
        raise DecodeError(f"request frame of {len(frame)} bytes is shorter than a header")
    api_key, api_version = _S_hh.unpack_from(frame, 0)
    if _REQ is None:
        _load()
    cls = _REQ.get(api_key)
    if cls is None or not cls.MIN_VERSION <= api_version <= cls.MAX_VERSION:
        header = None
        try:
            header = _RH.decode(frame, 0, 1)[0]
        except DecodeError:
            pass
        raise UnsupportedVersionError(_NAMES.get(api_key, "request"), api_key,
                                      api_version, header)
    header, pos = _RH.decode(frame, 0, request_header_version(api_key, api_version))
    body, _ = cls.decode(frame, pos, api_version)
    return header, body


def encode_response(header_version, correlation_id, response_obj, version):
    """Response header + body as a bytearray, WITHOUT the 4-byte size prefix."""
    out = bytearray(_S_i.pack(correlation_id))
    if header_version >= 1:
        out.append(0)  # empty tagged-field section
    response_obj.encode(version, out)
    return out


def encode_request(api_version, correlation_id, client_id, request_obj):
    """Request header + body as a bytearray, WITHOUT the size prefix (client side, tests)."""
    api_key = request_obj.API_KEY
    header_version = request_header_version(api_key, api_version)  # also loads the codecs
    header = _RH(request_api_key=api_key, request_api_version=api_version,
                 correlation_id=correlation_id, client_id=client_id)
    out = bytearray()
    header.encode(header_version, out)
    request_obj.encode(api_version, out)
    return out


def _load_rh():
    if _REQ is None:
        _load()
    return globals()["ResponseHeader"]


def decode_response(frame, api_key, api_version):
    """Decode a response frame (no size prefix) into (ResponseHeader, response object)."""
    if type(frame) is not memoryview:
        frame = memoryview(frame)
    cls = _check("response", api_key, api_version, "response")
    header, pos = _load_rh().decode(frame, 0, response_header_version(api_key, api_version))
    body, _ = cls.decode(frame, pos, api_version)
    return header, body
