"""The Produce response with a one-pass encoder: the answer on the produce hot path.

``ProduceResponse`` is the generated ProduceResponse (same fields, so quotas and tests read it
as before) whose ``encode`` writes versions 5-11 directly, byte for byte as the generated codec
does: fixed fields packed per partition, the empty ``record_errors`` (v8+) as a constant, and in
flexible versions (v9+) the tagged fields written only when set, as Kafka does (v10+: a partition's
``current_leader`` unless it is (-1, -1), the response's ``node_endpoints`` unless empty, KIP-951).
What this path does not write (v0-4, record errors, unknown tagged fields) and any value the
generated codec would refuse go to the generated encoder, which writes or refuses it.
"""
from struct import Struct

from pybroker.protocol.messages import RESPONSES
from pybroker.protocol.primitives import wr_uvarint

FIRST_FAST_VERSION = 5  # log_start_offset: the fixed part of every version from here on is the same
FIRST_RECORD_ERRORS_VERSION = 8
FIRST_FLEXIBLE_VERSION = 9
FIRST_LEADER_VERSION = 10

_PARTITION = Struct(">ihqqq").pack  # index, error code, base offset, log append time, log start offset
_I16 = Struct(">h").pack
_I32 = Struct(">i").pack
_LEADER_TAG = Struct(">BBBiiB").pack  # 1 tagged field, tag 0, size 9: leader id, leader epoch, no tags
_NULL_STRING = b"\xff\xff"
_NO_RECORD_ERRORS = b"\x00\x00\x00\x00"  # an empty array (v8)
_NO_RECORD_ERRORS_COMPACT = b"\x01"  # an empty compact array (v9+)
_NO_TAGS = b"\x00"

Generated = RESPONSES[0]


class ProduceResponse(Generated):
    __slots__ = ()

    def encode(self, version, out):
        start = len(out)
        if version >= FIRST_FAST_VERSION and not self._unknown_tagged:
            try:
                if version >= FIRST_FLEXIBLE_VERSION:
                    return self._encode_flexible(version, out)
                return self._encode_classic(version, out)
            except Exception:  # the generated encoder names what it cannot encode
                del out[start:]
        return super().encode(version, out)

    def _encode_classic(self, version, out):
        """v5-v8: int16-length strings, int32 array counts."""
        out += _I32(len(self.responses))
        for topic in self.responses:
            _put_string(out, topic.name)
            parts = topic.partition_responses
            out += _I32(len(parts))
            for p in parts:
                out += _PARTITION(p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset)
                if version >= FIRST_RECORD_ERRORS_VERSION:
                    _check_plain(p)
                    out += _NO_RECORD_ERRORS
                    if p.error_message is None:
                        out += _NULL_STRING
                    else:
                        _put_string(out, p.error_message)
        out += _I32(self.throttle_time_ms)

    def _encode_flexible(self, version, out):
        """v9-v11: compact strings and arrays, tagged fields."""
        leaders = version >= FIRST_LEADER_VERSION
        wr_uvarint(out, len(self.responses) + 1)
        for topic in self.responses:
            if topic._unknown_tagged:
                raise ValueError("unknown tagged fields")
            _put_compact_string(out, topic.name)
            parts = topic.partition_responses
            wr_uvarint(out, len(parts) + 1)
            for p in parts:
                _check_plain(p)
                out += _PARTITION(p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset)
                out += _NO_RECORD_ERRORS_COMPACT
                if p.error_message is None:
                    out.append(0)
                else:
                    _put_compact_string(out, p.error_message)
                leader = p.current_leader
                if leaders and (leader.leader_id != -1 or leader.leader_epoch != -1):
                    if leader._unknown_tagged:
                        raise ValueError("unknown tagged fields")
                    out += _LEADER_TAG(1, 0, 9, leader.leader_id, leader.leader_epoch, 0)
                else:
                    out += _NO_TAGS
            out += _NO_TAGS
        out += _I32(self.throttle_time_ms)
        if leaders and self.node_endpoints:
            endpoints = bytearray()
            wr_uvarint(endpoints, len(self.node_endpoints) + 1)
            for e in self.node_endpoints:
                if e._unknown_tagged:
                    raise ValueError("unknown tagged fields")
                endpoints += _I32(e.node_id)
                _put_compact_string(endpoints, e.host)
                endpoints += _I32(e.port)
                if e.rack is None:
                    endpoints.append(0)
                else:
                    _put_compact_string(endpoints, e.rack)
                endpoints += _NO_TAGS
            out += b"\x01\x00"  # one tagged field, tag 0
            wr_uvarint(out, len(endpoints))
            out += endpoints
        else:
            out += _NO_TAGS


def _check_plain(p) -> None:
    """Record errors and unknown tagged fields are left to the generated encoder."""
    if p.record_errors or p._unknown_tagged:
        raise ValueError("not a plain partition answer")


def _put_string(out, s: str) -> None:
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError("string too long")
    out += _I16(len(b))
    out += b


def _put_compact_string(out, s: str) -> None:
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError("string too long")
    wr_uvarint(out, len(b) + 1)
    out += b
