"""Produce v9-v11 on one broker: every version appends in order; a malformed flexible Produce closes only
its connection (leader hints and Kafka side by side: tests/cluster/test_produce_versions.py)."""
import struct

from pybroker.records import build_batch, decode_records
from tests.cluster.test_produce_versions import TAGS, answer, frame_of, produce_max_version, request
from tests.kafka_wire import WireClient


def values_of(records: bytes) -> list:
    out, pos = [], 0
    while pos + 12 <= len(records):
        size = 12 + struct.unpack_from(">i", records, pos + 8)[0]
        out += [r.value for r in decode_records(records[pos:pos + size])]
        pos += size
    return out


def test_every_version_appends_in_order(broker):
    """v3-v11, flexible ones with unknown tagged fields at every level; acks=0 at v11 too."""
    with WireClient(broker.port) as c:
        assert produce_max_version(c) == 11
        c.create_topic("versions")
        for offset, version in enumerate(range(3, 12)):
            tags = TAGS if version >= 9 else None
            response = c.request(request("versions", 0, bytes(build_batch([b"v%d" % version])), tags=tags), version)
            p = answer(response)
            assert (p.error_code, p.base_offset, p.error_message) == (0, offset, None)
            assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (-1, -1)
            assert response.node_endpoints == []
        c.send_only(request("versions", 0, bytes(build_batch([b"acks0"])), acks=0, tags=TAGS), 11)
        assert c.api_versions().error_code == 0  # no answer to acks=0; the connection stays open
        fetched = c.fetch("versions", 0, 0)
        assert values_of(fetched.records) == [b"v%d" % v for v in range(3, 12)] + [b"acks0"]


def test_malformed_flexible_produce_closes_only_its_connection(broker):
    with WireClient(broker.port) as c:
        c.create_topic("malformed")
    good = frame_of(request("malformed", 0, bytes(build_batch([b"x"]))), 11)
    cuts = {"inside the records": good[:-8], "a varint with no end": good[:-12] + b"\xff" * 12,
            "a null topic name": good.replace(b"\x0amalformed", b"\x00malformed", 1)}
    for what, frame in cuts.items():
        with WireClient(broker.port) as c:
            c.send_frame(frame)
            assert c.is_closed_by_peer(), what
    with WireClient(broker.port) as c:
        p = answer(c.request(request("malformed", 0, bytes(build_batch([b"after"]))), 11))
        assert (p.error_code, p.base_offset) == (0, 0)

