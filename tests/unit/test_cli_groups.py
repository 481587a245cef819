"""``pybroker groups`` in-process: decoding member assignments of every version and bad input
(the command against a real broker: tests/broker/test_cli_groups.py)."""
import pytest

from pybroker.protocol.messages import DATA
from pybroker.tools.groups import decode_assignment
from pybroker.tools.wire import ToolError


def _assignment_bytes(version: int, parts: dict[str, list[int]], user_data=None) -> bytes:
    cls = DATA["ConsumerProtocolAssignment"]
    obj = cls(assigned_partitions=[cls.TopicPartition(topic=t, partitions=ps) for t, ps in parts.items()],
              user_data=user_data)
    return version.to_bytes(2, "big") + obj.to_bytes(min(version, cls.MAX_VERSION))


def test_decode_assignment_versions_and_bad_input():
    for v in (0, 1, 2, 3):
        raw = _assignment_bytes(v, {"a": [0, 2], "b": [1]}, user_data=b"u")
        assert decode_assignment(raw) == {"a": [0, 2], "b": [1]}
    # a future version appends fields: read as the newest known one, extra bytes ignored
    assert decode_assignment(_assignment_bytes(9, {"t": [5]}) + b"\x00\x01") == {"t": [5]}
    assert decode_assignment(b"") == {} and decode_assignment(None) == {}
    # hand-assembled v0: version, 1 topic "t" with partitions [3], null user data
    raw = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x01\x00\x00\x00\x03" + b"\xff\xff\xff\xff"
    assert decode_assignment(raw) == {"t": [3]}
    with pytest.raises(ToolError, match="cannot be decoded"):
        decode_assignment(raw[:9])
    with pytest.raises(ToolError, match="too short"):
        decode_assignment(b"\x00")
    with pytest.raises(ToolError, match="negative version"):
        decode_assignment(b"\xff\xff" + raw[2:])

