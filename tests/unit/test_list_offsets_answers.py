"""The ListOffsets handler's answers per version in-process (pybroker/api/list_offsets.py), as Kafka 3.8
gives them: a leader whose high watermark lags the start of its epoch (KIP-207) answers
OFFSET_NOT_AVAILABLE from v5 and LEADER_NOT_AVAILABLE below (clients before v5 do not know the code),
and a partition named twice in one request is refused INVALID_REQUEST each time (v1+; v0 answers both).
(The KIP-207 rule itself: tests/unit/test_replica_rules.py; v0's offsets: tests/unit/test_list_offsets_v0.py.)"""
import asyncio
from dataclasses import replace
from types import SimpleNamespace

from pybroker.api import list_offsets
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import INVALID_REQUEST, LEADER_NOT_AVAILABLE, OFFSET_NOT_AVAILABLE
from tests.inprocess import start_services, stop_services
from tests.unit.test_replica_rules import OVERRIDES, append, follower_fetch, lead_with_follower

LATEST, EARLIEST = -1, -2
Request = REQUESTS[2]


def ask(services, version: int, *partitions) -> list[tuple]:
    """(partition, error, offset) per asked (partition, timestamp) of topic t, at ``version``."""
    request = Request(replica_id=-1, isolation_level=0, topics=[Request.ListOffsetsTopic(name="t", partitions=[
        Request.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=ts, max_num_offsets=1)
        for p, ts in partitions])])
    ctx = SimpleNamespace(replicas=services.replicas, metadata=services.metadata, authorizer=None, version=version)
    return [(r.partition_index, r.error_code, r.offset if version else r.old_style_offsets)
            for r in list_offsets.handle(ctx, request).topics[0].partitions]


def test_a_lagging_new_leader_answers_by_version(tmp_path):
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        p = await lead_with_follower(services, "t")
        assert append(services, "t", 1, b"a", b"b", b"c").error == 0
        await follower_fetch(services, "t", 3)
        await follower_fetch(services, "t", 3)  # the HW reaches 3
        newer = replace(services.control.states[("t", 0)], leader_epoch=p.leader_epoch + 1)
        assert append(services, "t", 1, b"d").error == 0
        services.control._publish([newer], {})  # epoch starts at 4; the HW is 3
        assert p.high_watermark == 3 and p.high_watermark_lags_epoch_start()
        for version in range(1, 11):
            expected = OFFSET_NOT_AVAILABLE if version >= 5 else LEADER_NOT_AVAILABLE
            assert ask(services, version, (0, LATEST)) == [(0, expected, -1)], version
            assert ask(services, version, (0, 10**13)) == [(0, expected, -1)], version  # nothing found below the HW
            assert ask(services, version, (0, EARLIEST)) == [(0, 0, 0)], version
        assert ask(services, 0, (0, LATEST)) == [(0, 0, [3])]  # v0 predates KIP-207: the HW
        await follower_fetch(services, "t", 4)
        assert ask(services, 4, (0, LATEST)) == ask(services, 5, (0, LATEST)) == [(0, 0, 4)]
        await stop_services(services)
    asyncio.run(go())


def test_a_partition_named_twice_is_an_invalid_request_from_v1(tmp_path):
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        await lead_with_follower(services, "t", followers=())
        assert append(services, "t", 1, b"a").error == 0
        for version in range(1, 11):
            assert ask(services, version, (0, LATEST), (0, EARLIEST), (1, LATEST)) == [
                (0, INVALID_REQUEST, -1), (0, INVALID_REQUEST, -1), (1, 3, -1)], version  # 3: unknown partition
        assert ask(services, 0, (0, LATEST), (0, EARLIEST)) == [(0, 0, [1]), (0, 0, [0])]
        await stop_services(services)
    asyncio.run(go())
