"""aiokafka against a real broker: every acks level and codec, idempotence, manual-assignment
reads from the beginning / an offset / a timestamp, and its admin client."""
import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.clientutil import (DEADLINE, MODES, Rec, check_arrived_intact, check_exactly_once, check_key_partitioning,
                              expected_from_offset, first_offset_at_or_after, norm_headers, records_to_send)

COUNT = 120
DEFAULT_CONFIG = 5  # DescribeConfigs config source


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 2 * DEADLINE))


class Admin:
    """``async with Admin(b) as ad``: a started AIOKafkaAdminClient, closed afterwards."""

    def __init__(self, b):
        self.client = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap)

    async def __aenter__(self):
        await self.client.start()
        return self.client

    async def __aexit__(self, *exc):
        await self.client.close()


async def create_topic(b, name, partitions=3, configs=None):
    async with Admin(b) as ad:
        res = await ad.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    assert [e[1] for e in res.topic_errors] == [0], res


async def produce(b, topic, to_send, **conf):
    """Send all and wait; returns acked Recs (acks=0: aiokafka returns no metadata, so none).

    The timestamps are the ones sent: aiokafka's metadata carries one timestamp per batch."""
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5, **conf)
    await p.start()
    try:
        futures = [await p.send(topic, key=k, value=v, headers=list(h), timestamp_ms=ts) for k, v, h, ts in to_send]
        mds = await asyncio.gather(*futures)
    finally:
        await p.stop()
    return [Rec(md.partition, md.offset, k, v, h, ts) for md, (k, v, h, ts) in zip(mds, to_send) if md is not None]


def to_rec(m) -> Rec:
    return Rec(m.partition, m.offset, m.key, m.value, norm_headers(m.headers), m.timestamp)


async def consume(b, starts: dict, expected: int, idle: float = 0.0):
    """Assign the partitions of ``starts`` (offset, or None for the beginning); read ``expected``."""
    c = AIOKafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await c.start()
    got = []
    try:
        c.assign(list(starts))
        for tp, offset in starts.items():
            if offset is None:
                await c.seek_to_beginning(tp)
            else:
                c.seek(tp, offset)
        end = time.monotonic() + DEADLINE
        while len(got) < expected and time.monotonic() < end:
            for records in (await c.getmany(timeout_ms=200)).values():
                got.extend(to_rec(m) for m in records)
        end = time.monotonic() + idle
        while time.monotonic() < end:
            for records in (await c.getmany(timeout_ms=100)).values():
                got.extend(to_rec(m) for m in records)
    finally:
        await c.stop()
    return got


@pytest.mark.parametrize("name,acks,codec,idempotent", MODES, ids=[m[0] for m in MODES])
def test_produce_and_read_back(broker, name, acks, codec, idempotent):
    async def scenario():
        topic = f"aio-{name}"
        await create_topic(broker, topic)
        to_send = records_to_send(topic, COUNT)
        conf = {"acks": "all" if idempotent else acks, "compression_type": codec, "enable_idempotence": idempotent}
        acked = await produce(broker, topic, to_send, **conf)
        tps = [TopicPartition(topic, p) for p in range(3)]
        got = await consume(broker, {tp: None for tp in tps}, COUNT, idle=0.5)
        if acks == 0:
            assert acked == []
            # on one healthy broker every record still arrives, intact, in send order
            check_arrived_intact({v: (k, h) for k, v, h, _ in to_send}, got)
            assert sorted(r.value for r in got) == sorted(v for _, v, _, _ in to_send)
            acked = got
        else:
            assert len(acked) == COUNT
            check_exactly_once(acked, got, timestamps=True)
            assert len(got) == COUNT
        check_key_partitioning(acked)

        starts = {tp: sum(a.partition == tp.partition for a in acked) // 2 for tp in tps}
        want = [r for tp in tps for r in expected_from_offset(acked, tp.partition, starts[tp])]
        got = await consume(broker, starts, len(want))
        check_exactly_once(want, got)
        assert len(got) == len(want)

        ts = to_send[COUNT // 2][3] + 5
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            found = await c.offsets_for_times({tp: ts for tp in tps})
            late = await c.offsets_for_times({tp: to_send[-1][3] + 1000 for tp in tps})
        finally:
            await c.stop()
        for tp, ot in found.items():
            assert (ot.offset if ot else -1) == first_offset_at_or_after(acked, tp.partition, ts), (tp, ot)
        assert all(v is None for v in late.values())
        starts = {tp: ot.offset for tp, ot in found.items() if ot}
        want = [r for tp, off in starts.items() for r in expected_from_offset(acked, tp.partition, off)]
        got = await consume(broker, starts, len(want))
        check_exactly_once(want, got)
        assert len(got) == len(want) and all(r.timestamp >= ts for r in got)
    run(scenario())


def test_list_offsets_and_delete_records(broker):
    async def scenario():
        topic = "aio-offsets"
        await create_topic(broker, topic)
        acked = await produce(broker, topic, records_to_send(topic, 90), acks="all")
        tps = [TopicPartition(topic, p) for p in range(3)]
        counts = {tp: sum(a.partition == tp.partition for a in acked) for tp in tps}
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            assert await c.beginning_offsets(tps) == {tp: 0 for tp in tps}
            assert await c.end_offsets(tps) == counts
            cut = {tp: counts[tp] // 2 for tp in tps}
            async with Admin(broker) as ad:
                res = await ad.delete_records({tp: RecordsToDelete(cut[tp]) for tp in tps})
            assert res == cut
            assert await c.beginning_offsets(tps) == cut
            assert await c.end_offsets(tps) == counts
        finally:
            await c.stop()
        want = [a for a in acked if a.offset >= cut[TopicPartition(topic, a.partition)]]
        got = await consume(broker, {tp: None for tp in tps}, len(want), idle=0.3)
        check_exactly_once(want, got)
        assert len(got) == len(want)
        # a position below the new log start is out of range: reset to earliest = the cut
        got = await consume(broker, {tps[0]: 0}, counts[tps[0]] - cut[tps[0]])
        assert [r.offset for r in got] == list(range(cut[tps[0]], counts[tps[0]]))
    run(scenario())


def test_admin_partitions_configs_topics(broker):
    async def scenario():
        async with Admin(broker) as ad:
            await create_topic(broker, "aio-grow", partitions=2, configs={"retention.bytes": "1000000"})
            res = await ad.create_partitions({"aio-grow": NewPartitions(3)})
            assert [e[1] for e in res.topic_errors] == [0]
            desc = await ad.describe_topics(["aio-grow"])
            assert [p["partition"] for p in desc[0]["partitions"]] == [0, 1, 2]
            p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
            await p.start()
            try:
                md = await p.send_and_wait("aio-grow", b"in-new-partition", partition=2)
            finally:
                await p.stop()
            assert (md.partition, md.offset) == (2, 0)
            got = await consume(broker, {TopicPartition("aio-grow", 2): None}, 1)
            assert [(r.offset, r.value) for r in got] == [(0, b"in-new-partition")]

            res = await ad.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio-grow"),
                                             ConfigResource(ConfigResourceType.BROKER, "0")])
            resources = {r[3]: r for resp in res for r in resp.resources}
            topic_entries = {e[0]: e for e in resources["aio-grow"][4]}
            assert topic_entries["retention.bytes"][1] == "1000000"
            assert topic_entries["retention.bytes"][3] != DEFAULT_CONFIG
            assert topic_entries["segment.bytes"][3] == DEFAULT_CONFIG
            broker_entries = {e[0]: e for e in resources["0"][4]}
            assert broker_entries["log.dirs"][1] == broker.data_dir
            assert "num.partitions" in broker_entries and "log.retention.ms" in broker_entries

            res = await ad.create_topics([NewTopic("aio-dry", 3, 1)], validate_only=True)
            assert [e[1] for e in res.topic_errors] == [0]
            assert "aio-dry" not in await ad.list_topics()

            res = await ad.delete_topics(["aio-grow"])
            assert [e[1] for e in res.topic_error_codes] == [0]
            assert "aio-grow" not in await ad.list_topics()
            await create_topic(broker, "aio-grow", partitions=1)  # recreating works, empty
            c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
            await c.start()
            try:
                tp = TopicPartition("aio-grow", 0)
                assert await c.end_offsets([tp]) == {tp: 0}
            finally:
                await c.stop()
    run(scenario())


def test_fetch_long_poll_wakes_on_produce(broker):
    """A consumer parked at the end gets a later record while its fetch waits (max wait 20 s)."""
    async def scenario():
        topic = "aio-longpoll"
        await create_topic(broker, topic, partitions=1)
        await produce(broker, topic, records_to_send("before", 2), acks=1)
        tp = TopicPartition(topic, 0)
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             fetch_max_wait_ms=20000, request_timeout_ms=40000)
        await c.start()
        try:
            c.assign([tp])
            c.seek(tp, 2)
            assert await c.getmany(timeout_ms=1000) == {}

            async def later():
                await asyncio.sleep(1.0)
                await produce(broker, topic, [(b"k", b"late", (), int(time.time() * 1000))], acks=1)
            task = asyncio.create_task(later())
            got, end = [], time.monotonic() + 15  # under the 20 s fetch wait: the append woke the fetch
            while not got and time.monotonic() < end:
                for records in (await c.getmany(timeout_ms=500)).values():
                    got.extend(records)
            await task
        finally:
            await c.stop()
        assert [(m.offset, m.value) for m in got] == [(2, b"late")]
    run(scenario())
