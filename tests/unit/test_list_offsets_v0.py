"""ListOffsets v0 in-process (pybroker/replica/legacy_offsets.py through the replica manager and the
handler): segment boundaries newest first, chosen by the segment files' modification times, capped at
the high watermark for a consumer only, and no KIP-207 refusal (v0 predates it), as Kafka 3.8 serves
it. (Over the wire, and with kafka-python as an old client: tests/broker/test_list_offsets_v0.py.)"""
import asyncio
import os
from dataclasses import replace
from types import SimpleNamespace

from pybroker.api import list_offsets
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import UNKNOWN_SERVER_ERROR, UNKNOWN_TOPIC_OR_PARTITION
from tests.inprocess import start_services, stop_services
from tests.unit.test_replica_rules import FOLLOWER, OVERRIDES, append, follower_fetch, lead_with_follower

LATEST, EARLIEST = -1, -2
CONSUMER, DEBUG = -1, -2


def v0(services, topic, timestamp, max_num=100, replica_id=CONSUMER):
    return services.replicas.legacy_list_offsets(topic, 0, timestamp, max_num, replica_id)


def stamp_segments(p, times_ms) -> list[int]:
    """Give each segment file a known modification time; their base offsets, oldest first."""
    segments = list(p.log.segments)
    assert len(segments) == len(times_ms)
    for segment, ms in zip(segments, times_ms):
        os.utime(segment.log_path, ns=(ms * 1_000_000, ms * 1_000_000))
    return [s.base_offset for s in segments]


def test_segment_boundaries_newest_first_by_modification_time(tmp_path):
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        p = await lead_with_follower(services, "t", followers=())
        for values in ((b"a", b"b"), (b"c",), (b"d", b"e", b"f")):
            assert append(services, "t", 1, *values).error == 0
            p.log.roll()
        assert append(services, "t", 1, b"g").error == 0  # the active segment has data: the log end counts
        bases = stamp_segments(p, [1000, 2000, 3000, 4000])
        assert bases == [0, 2, 3, 6] and p.log_end_offset == p.high_watermark == 7
        assert v0(services, "t", LATEST) == (0, [7, 6, 3, 2, 0])
        assert v0(services, "t", LATEST, max_num=2) == (0, [7, 6])
        assert v0(services, "t", EARLIEST) == (0, [0])
        assert v0(services, "t", 2500) == (0, [2, 0])  # from the newest segment modified by then
        assert v0(services, "t", 2000, max_num=1) == (0, [2])
        assert v0(services, "t", 999) == (0, [])  # every segment is newer
        assert v0(services, "t", 4000) == (0, [6, 3, 2, 0])  # the log end is stamped now
        assert v0(services, "t", LATEST, max_num=0) == (0, [])
        assert v0(services, "t", LATEST, max_num=-1) == (UNKNOWN_SERVER_ERROR, [])  # Kafka fails sizing it
        assert v0(services, "nope", LATEST) == (UNKNOWN_TOPIC_OR_PARTITION, [])
        p.log.roll()  # an empty active segment adds no log-end entry: its base offset is the log end
        stamp_segments(p, [1000, 2000, 3000, 4000, 5000])
        assert v0(services, "t", LATEST) == (0, [7, 6, 3, 2, 0])
        await stop_services(services)
    asyncio.run(go())


def test_a_consumer_is_capped_at_the_high_watermark_and_v0_has_no_epoch_check(tmp_path):
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        p = await lead_with_follower(services, "t")
        assert append(services, "t", 1, b"a", b"b").error == 0
        p.log.roll()
        assert append(services, "t", 1, b"c").error == 0
        assert (p.high_watermark, p.log_end_offset) == (0, 3)  # the follower has fetched nothing yet
        assert v0(services, "t", LATEST) == (0, [0, 0])  # the log end and base 2 give way to the HW
        assert v0(services, "t", LATEST, replica_id=DEBUG) == (0, [3, 2, 0])  # only a consumer is capped
        assert v0(services, "t", LATEST, replica_id=FOLLOWER) == (0, [3, 2, 0])
        await follower_fetch(services, "t", 3)
        assert v0(services, "t", LATEST) == (0, [3, 2, 0])
        # a new epoch starting at 3 with the HW behind it (KIP-207 refuses v1+ latest): v0 answers the HW
        assert append(services, "t", 1, b"d").error == 0
        newer = replace(services.control.states[("t", 0)], leader_epoch=p.leader_epoch + 1)
        services.control._publish([newer], {})
        assert p.high_watermark_lags_epoch_start() and p.high_watermark == 3
        assert v0(services, "t", LATEST, max_num=1) == (0, [3])
        await stop_services(services)
    asyncio.run(go())


def test_the_handler_answers_old_style_offsets_at_v0(tmp_path):
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        await lead_with_follower(services, "t", followers=())
        assert append(services, "t", 1, b"a", b"b", b"c").error == 0
        req = REQUESTS[2]
        request = req(replica_id=-1, topics=[req.ListOffsetsTopic(name="t", partitions=[
            req.ListOffsetsPartition(partition_index=0, timestamp=LATEST, max_num_offsets=5),
            req.ListOffsetsPartition(partition_index=0, timestamp=EARLIEST, max_num_offsets=5)])])
        ctx = SimpleNamespace(replicas=services.replicas, authorizer=None, version=0)
        parts = list_offsets.handle(ctx, request).topics[0].partitions
        assert [(r.partition_index, r.error_code, r.old_style_offsets) for r in parts] == [(0, 0, [3, 0]), (0, 0, [0])]
        await stop_services(services)
    asyncio.run(go())
