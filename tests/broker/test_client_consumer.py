"""pybroker's consumer (Consumer and AsyncConsumer) against a real broker: assign, seek, position,
pause/resume, poll and poll_batch, committed offsets (checked with confluent-kafka and
kafka-python), auto.offset.reset and out-of-range handling, records produced by confluent-kafka
and kafka-python with every compression codec, and read_committed over transactional data.

The cases of the other tiers: tests/unit/test_client_consumer.py.
"""
import asyncio
import os
import struct
import time
import uuid

import pyarrow as pa
import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition

from pybroker.client import AsyncConsumer, Consumer, KafkaError, OffsetAndMetadata, TopicPartition
from pybroker.client import arrow
from pybroker.client.fetcher import batches_end
from pybroker.protocol.errors import ErrorCode
from pybroker.records import Record, build_batch
from tests.clientutil import norm_headers
from tests.kafka_wire import WireClient

DEADLINE = 20  # seconds: the bound on every wait
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(b, partitions: int = 1) -> str:
    name = unique("ct")
    with WireClient(b.port) as w:
        w.create_topic(name, partitions)
    return name


def conf(b, **extra) -> dict:
    c = {"bootstrap.servers": b.bootstrap, "fetch.max.wait.ms": 100, "enable.auto.commit": False}
    c.update({k.replace("_", "."): v for k, v in extra.items()})
    return c


def produce(b, topic: str, count: int, partition: int = 0, prefix: str = "v", compression: str = "none",
            start: int = 0) -> list:
    """(key, value, headers, timestamp) of ``count`` records produced with confluent-kafka."""
    p = CKProducer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "compression.type": compression})
    sent = []
    for i in range(start, start + count):
        key = None if i % 5 == 4 else b"k%d" % (i % 3)
        headers = [("seq", str(i).encode()), ("n", None)] if i % 2 else []
        rec = (key, f"{prefix}-{i}".encode(), headers, BASE_TS + i)
        p.produce(topic, value=rec[1], key=key, headers=headers or None, timestamp=rec[3], partition=partition)
        sent.append(rec)
    assert p.flush(DEADLINE) == 0
    return sent


def poll_until(consumer, count: int, timeout: float = DEADLINE, max_records=None) -> list:
    got, end = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < end:
        got += consumer.poll(200, max_records)
    return got


async def apoll_until(consumer, count: int, timeout: float = DEADLINE) -> list:
    got, end = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < end:
        got += await consumer.poll(200)
    return got


def as_tuple(r) -> tuple:
    return (r.key, r.value, norm_headers(r.headers), r.timestamp)


def sent_tuple(s) -> tuple:
    return (s[0], s[1], norm_headers(s[2]), s[3])


def ck_committed(b, group: str, tps) -> dict:
    c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([CKTopicPartition(t, p) for t, p in tps], timeout=10)
        return {(x.topic, x.partition): x.offset for x in got}
    finally:
        c.close()


def kp_committed(b, group: str, tps) -> dict:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KPTopicPartition
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {(t, p): c.committed(KPTopicPartition(t, p)) for t, p in tps}
    finally:
        c.close()


# ---- assign, poll, seek, position -------------------------------------------------------------

def test_assign_poll_seek_position(broker):
    topic = new_topic(broker)
    sent = produce(broker, topic, 40)
    tp = TopicPartition(topic, 0)
    with Consumer(conf(broker)) as c:
        c.assign([(topic, 0, 0)])
        assert c.assignment() == [tp]
        got = poll_until(c, 40)
        assert [r.offset for r in got] == list(range(40))
        assert [as_tuple(r) for r in got] == [sent_tuple(s) for s in sent]
        assert all(r.topic == topic and r.partition == 0 and r.timestamp_type == 0 for r in got)
        assert c.position(tp) == 40
        assert c.poll(100) == []  # nothing more
        c.seek(tp, 25)
        assert c.position(tp) == 25
        again = poll_until(c, 15, max_records=4)
        assert [r.offset for r in again] == list(range(25, 40))
        c.seek_to_beginning([tp])
        assert c.position(tp) == 0
        assert poll_until(c, 1, max_records=1)[0].offset == 0
        c.seek_to_end()
        assert c.position(tp) == 40
        assert c.poll(100) == []
        more = produce(broker, topic, 3, start=40)
        got = poll_until(c, 3)
        assert [as_tuple(r) for r in got] == [sent_tuple(s) for s in more]
        assert c.end_offsets([tp]) == {tp: 43}
        assert c.beginning_offsets([tp]) == {tp: 0}
        c.assign([])
        assert c.assignment() == []
        with pytest.raises(ValueError):
            c.seek(tp, 0)


def test_iterator_and_max_records(broker):
    topic = new_topic(broker)
    produce(broker, topic, 12)
    with Consumer(conf(broker, max_poll_records=5)) as c:
        c.assign([(topic, 0, 0)])
        batch = []
        end = time.monotonic() + DEADLINE
        while not batch and time.monotonic() < end:
            batch = c.poll(200)
        assert 0 < len(batch) <= 5  # max.poll.records
        offsets = [r.offset for r in batch]
        for record in c:
            offsets.append(record.offset)
            if record.offset == 11:
                break
        assert offsets == list(range(12))
    with pytest.raises(RuntimeError):
        c.poll(0)


def test_poll_raw_hands_out_the_fetched_batches(broker):
    """poll_raw: whole record batches as fetched, decoding to what poll gives; the position moves
    past each chunk, commits follow it; read_committed cannot use it."""
    from pybroker.records import decode_records
    from pybroker.tools.mirror_batches import split
    topic = new_topic(broker)
    sent = produce(broker, topic, 60, compression="lz4")
    tp = TopicPartition(topic, 0)
    with Consumer(conf(broker, group_id=unique("raw"))) as c:
        c.assign([(topic, 0, 0)])
        chunks, end = [], time.monotonic() + DEADLINE
        while (not chunks or chunks[-1].next_offset < 60) and time.monotonic() < end:
            chunks += c.poll_raw(200)
        assert chunks and chunks[0].position == 0 and chunks[-1].next_offset == 60
        assert all(ch.topic == topic and ch.partition == 0 for ch in chunks)
        records = [r for ch in chunks for batch in split(ch.data) for r in decode_records(batch)]
        assert [r.offset for r in records] == list(range(60))
        assert [(r.key, r.value, norm_headers(r.headers), r.timestamp) for r in records] == \
            [sent_tuple(x) for x in sent]
        assert c.position(tp) == 60
        c.commit()
        assert c.committed([tp])[tp].offset == 60
        assert c.poll_raw(100) == []
    with Consumer(conf(broker, isolation_level="read_committed")) as c:
        c.assign([(topic, 0, 0)])
        with pytest.raises(Exception, match="read_uncommitted"):
            c.poll_raw(100)


def test_async_assign_poll_seek_commit(broker):
    topic = new_topic(broker, 2)
    sent0 = produce(broker, topic, 20, partition=0, prefix="a")
    sent1 = produce(broker, topic, 10, partition=1, prefix="b")
    group = unique("ag")

    async def run():
        async with AsyncConsumer(conf(broker, group_id=group, auto_offset_reset="earliest")) as c:
            c.assign([(topic, 0), (topic, 1)])
            got = await apoll_until(c, 30)
            by_part = {0: [], 1: []}
            for r in got:
                by_part[r.partition].append(as_tuple(r))
            assert by_part[0] == [sent_tuple(s) for s in sent0]
            assert by_part[1] == [sent_tuple(s) for s in sent1]
            assert await c.position((topic, 0)) == 20
            committed = await c.commit()
            assert committed[TopicPartition(topic, 0)].offset == 20
            assert (await c.committed([(topic, 0), (topic, 1)])) == {
                TopicPartition(topic, 0): OffsetAndMetadata(20, "", 0),
                TopicPartition(topic, 1): OffsetAndMetadata(10, "", 0)}
            c.seek((topic, 0), 5)
            seen = []
            async for record in c:
                seen.append(record.offset)
                if len(seen) == 15:
                    break
            assert seen == list(range(5, 20))
            task = c.commit({(topic, 0): 7}, asynchronous=True)
            await task
            assert (await c.committed([(topic, 0)]))[TopicPartition(topic, 0)].offset == 7

    asyncio.run(asyncio.wait_for(run(), 60))
    assert ck_committed(broker, group, [(topic, 0), (topic, 1)]) == {(topic, 0): 7, (topic, 1): 10}


# ---- poll_batch --------------------------------------------------------------------------------

def test_poll_batch_matches_poll(broker):
    topic = new_topic(broker, 2)
    sent = {0: produce(broker, topic, 30, partition=0, prefix="x"),
            1: produce(broker, topic, 20, partition=1, prefix="y")}
    with Consumer(conf(broker)) as c:
        c.assign([(topic, 0, 0), (topic, 1, 0)])
        rows, end = [], time.monotonic() + DEADLINE
        while len(rows) < 50 and time.monotonic() < end:
            batch = c.poll_batch(200, max_records=7)
            assert batch.schema == arrow.SCHEMA and batch.num_rows <= 7
            rows += batch.to_pylist()
        assert len(rows) == 50
        for part in (0, 1):
            mine = [r for r in rows if r["partition"] == part]
            assert [r["offset"] for r in mine] == list(range(len(sent[part])))
            assert [(r["key"], r["value"], norm_headers([(h["key"], h["value"]) for h in r["headers"]]),
                     int(r["timestamp"].timestamp() * 1000)) for r in mine] == [sent_tuple(s) for s in sent[part]]
            assert all(r["topic"] == topic and r["timestamp_type"] == 0 for r in mine)
        assert c.position((topic, 0)) == 30 and c.position((topic, 1)) == 20
        empty = c.poll_batch(100)
        assert empty.num_rows == 0 and empty.schema == arrow.SCHEMA
        c.seek((topic, 1), 15)  # poll and poll_batch share positions
        first = poll_until(c, 1, max_records=1)
        assert first[0].offset == 15
        rest = c.poll_batch(DEADLINE * 1000)
        assert rest.column("offset").to_pylist() == [16, 17, 18, 19]


def test_poll_batches_one_batch_per_partition_without_copies(broker):
    """poll_batches: the buffered rows as RecordBatches of one partition each (sync and async), the same rows
    as poll_batch gives, positions advanced alike."""
    topic = new_topic(broker, 2)
    sent = {0: produce(broker, topic, 30, partition=0, prefix="x"),
            1: produce(broker, topic, 20, partition=1, prefix="y")}

    def check(batches_seen):
        rows = [r for b in batches_seen for r in b.to_pylist()]
        assert all(b.schema == arrow.SCHEMA and len(set(b.column("partition").to_pylist())) == 1
                   for b in batches_seen)
        for part in (0, 1):
            assert [r["value"] for r in rows if r["partition"] == part] == [s[1] for s in sent[part]]

    with Consumer(conf(broker)) as c:
        c.assign([(topic, 0, 0), (topic, 1, 0)])
        seen, end = [], time.monotonic() + DEADLINE
        while sum(b.num_rows for b in seen) < 50 and time.monotonic() < end:
            seen += c.poll_batches(200)
        check(seen)
        assert c.position((topic, 0)) == 30 and c.position((topic, 1)) == 20
        assert c.poll_batches(100) == []

    async def run():
        async with AsyncConsumer(conf(broker)) as c:
            c.assign([(topic, 0, 0), (topic, 1, 0)])
            seen, end = [], time.monotonic() + DEADLINE
            while sum(b.num_rows for b in seen) < 50 and time.monotonic() < end:
                seen += await c.poll_batches(200)
            check(seen)
    asyncio.run(run())


def test_async_poll_batch(broker):
    topic = new_topic(broker)
    sent = produce(broker, topic, 25)

    async def run():
        async with AsyncConsumer(conf(broker)) as c:
            c.assign([(topic, 0, 0)])
            tables, n, end = [], 0, time.monotonic() + DEADLINE
            while n < 25 and time.monotonic() < end:
                b = await c.poll_batch(200)
                tables.append(b)
                n += b.num_rows
            table = pa.Table.from_batches(tables)
            assert table.column("value").to_pylist() == [s[1] for s in sent]
            assert table.column("key").to_pylist() == [s[0] for s in sent]
            assert (await c.poll_batch(50)).num_rows == 0

    asyncio.run(asyncio.wait_for(run(), 60))


# ---- pause / resume ---------------------------------------------------------------------------------

def test_pause_resume(broker):
    topic = new_topic(broker, 2)
    produce(broker, topic, 30, partition=0)
    produce(broker, topic, 30, partition=1)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Consumer(conf(broker, max_partition_fetch_bytes=1024)) as c:
        c.assign([(topic, 0, 0), (topic, 1, 0)])
        c.pause([p1])
        assert c.paused() == [p1]
        got = poll_until(c, 30)
        time.sleep(0.3)
        got += c.poll(300)
        assert {r.partition for r in got} == {0} and len(got) == 30
        assert c.position(p1) == 0
        c.resume([p1])
        assert c.paused() == []
        got = poll_until(c, 30)
        assert [r.offset for r in got] == list(range(30)) and {r.partition for r in got} == {1}
        # pausing with data buffered keeps it: nothing is lost or repeated after resume
        produce(broker, topic, 40, partition=0, start=30)
        first = poll_until(c, 1, max_records=1)
        c.pause([p0])
        time.sleep(0.3)
        assert c.poll(200) == []
        c.resume([p0])
        rest = poll_until(c, 39)
        assert [r.offset for r in first + rest] == list(range(30, 70))


# ---- commits ------------------------------------------------------------------------------------------

def test_manual_commit_restart_and_continue(broker):
    topic = new_topic(broker)
    produce(broker, topic, 50)
    group = unique("mc")
    tp = TopicPartition(topic, 0)
    with Consumer(conf(broker, group_id=group, auto_offset_reset="earliest")) as c:
        c.assign([tp])
        got = poll_until(c, 20, max_records=20)
        assert [r.offset for r in got] == list(range(20))
        assert c.commit() == {tp: OffsetAndMetadata(20, "", 0)}
        assert c.committed([tp]) == {tp: OffsetAndMetadata(20, "", 0)}
        fut = c.commit({tp: OffsetAndMetadata(21, "note")}, asynchronous=True)
        assert fut.result(DEADLINE) == {tp: OffsetAndMetadata(21, "note")}
        assert c.committed([tp])[tp].metadata == "note"
        c.commit([(topic, 0, 20)])
    assert ck_committed(broker, group, [(topic, 0)]) == {(topic, 0): 20}
    assert kp_committed(broker, group, [(topic, 0)]) == {(topic, 0): 20}
    with Consumer(conf(broker, group_id=group, auto_offset_reset="latest")) as c:
        c.assign([tp])
        assert c.position(tp) == 20  # from the committed offset, not the reset policy
        got = poll_until(c, 30)
        assert [r.offset for r in got] == list(range(20, 50))


def test_auto_commit_interval_and_close(broker):
    topic = new_topic(broker)
    produce(broker, topic, 30)
    group = unique("ac")
    tp = (topic, 0)
    c = Consumer(conf(broker, group_id=group, auto_offset_reset="earliest", enable_auto_commit=True,
                      auto_commit_interval_ms=200))
    try:
        c.assign([tp])
        assert len(poll_until(c, 12, max_records=12)) == 12
        end = time.monotonic() + DEADLINE
        c.pause([tp])  # polls that take nothing still drive the auto-commit timer
        while kp_committed(broker, group, [tp])[tp] != 12 and time.monotonic() < end:
            time.sleep(0.25)
            c.poll(50)
        c.resume([tp])
        assert kp_committed(broker, group, [tp]) == {tp: 12}
        assert len(poll_until(c, 18)) == 18
    finally:
        c.close()  # commits the final position
    assert ck_committed(broker, group, [tp]) == {tp: 30}
    produce(broker, topic, 5, start=30)
    with Consumer(conf(broker, group_id=group, enable_auto_commit=True)) as c:
        c.assign([tp])
        assert [r.offset for r in poll_until(c, 5)] == list(range(30, 35))


# ---- auto.offset.reset and out of range -----------------------------------------------------------------

def test_auto_offset_reset_policies(broker):
    topic = new_topic(broker)
    produce(broker, topic, 10)
    tp = TopicPartition(topic, 0)
    with Consumer(conf(broker, group_id=unique("e"), auto_offset_reset="earliest")) as c:
        c.assign([tp])
        assert poll_until(c, 1, max_records=1)[0].offset == 0
    with Consumer(conf(broker, group_id=unique("l"), auto_offset_reset="latest")) as c:
        c.assign([tp])
        assert c.position(tp) == 10
        assert c.poll(200) == []
        produce(broker, topic, 2, start=10)
        assert [r.offset for r in poll_until(c, 2)] == [10, 11]
    with Consumer(conf(broker, group_id=unique("n"), auto_offset_reset="none")) as c:
        c.assign([tp])
        with pytest.raises(KafkaError) as info:
            poll_until(c, 1)
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        c.seek(tp, 3)  # an explicit position clears it
        assert poll_until(c, 1, max_records=1)[0].offset == 3

    async def run():
        async with AsyncConsumer(conf(broker, group_id=unique("an"), auto_offset_reset="none")) as c:
            c.assign([tp])
            with pytest.raises(KafkaError) as info:
                await apoll_until(c, 1)
            assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE

    asyncio.run(asyncio.wait_for(run(), 60))


def test_out_of_range_positions(broker):
    topic = new_topic(broker)
    produce(broker, topic, 10)
    tp = TopicPartition(topic, 0)
    with Consumer(conf(broker, auto_offset_reset="earliest")) as c:
        c.assign([(topic, 0, 500)])
        got = poll_until(c, 10)
        assert [r.offset for r in got] == list(range(10))
    with Consumer(conf(broker, auto_offset_reset="latest")) as c:
        c.assign([(topic, 0, 500)])
        end = time.monotonic() + DEADLINE
        while c.position(tp) != 10 and time.monotonic() < end:
            c.poll(100)
        assert c.position(tp) == 10
    with Consumer(conf(broker, auto_offset_reset="none")) as c:
        c.assign([(topic, 0, 500)])
        with pytest.raises(KafkaError) as info:
            poll_until(c, 1)
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        with pytest.raises(KafkaError):  # it stays until the application moves the position
            c.poll(100)
        c.seek(tp, 8)
        assert [r.offset for r in poll_until(c, 2)] == [8, 9]


# ---- records from other producers, every codec --------------------------------------------------------

@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_records_from_confluent_and_kafka_python(broker, codec):
    from kafka import KafkaProducer
    topic = new_topic(broker, 2)
    sent_ck = produce(broker, topic, 30, partition=0, prefix=f"ck-{codec}", compression=codec)
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=5, acks="all")
    sent_kp = []
    for i in range(30):
        rec = (b"kp%d" % (i % 4) if i % 3 else None, f"kp-{codec}-{i}".encode() * (1 + i % 7),
               [("i", str(i).encode())] if i % 2 else [], BASE_TS + 1000 + i)
        kp.send(topic, value=rec[1], key=rec[0], headers=rec[2], timestamp_ms=rec[3], partition=1)
        sent_kp.append(rec)
    kp.flush(DEADLINE)
    kp.close()
    expected = {0: [sent_tuple(s) for s in sent_ck], 1: [sent_tuple(s) for s in sent_kp]}
    with Consumer(conf(broker)) as c:
        c.assign([(topic, 0, 0), (topic, 1, 0)])
        got = poll_until(c, 60)
        assert {p: [as_tuple(r) for r in got if r.partition == p] for p in (0, 1)} == expected
        c.seek((topic, 0), 0)
        c.seek((topic, 1), 0)
        rows, end = [], time.monotonic() + DEADLINE
        while len(rows) < 60 and time.monotonic() < end:
            rows += c.poll_batch(200).to_pylist()
        by_part = {p: [(r["key"], r["value"], norm_headers([(h["key"], h["value"]) for h in r["headers"]]),
                        int(r["timestamp"].timestamp() * 1000)) for r in rows if r["partition"] == p]
                   for p in (0, 1)}
        assert by_part == expected


# ---- read_committed -------------------------------------------------------------------------------------

PID_ABORTED, PID_COMMITTED = 4242, 4343


def _control(pid: int, commit: bool, base_offset: int) -> bytearray:
    key = struct.pack(">hh", 0, 1 if commit else 0)  # version, type (0 abort, 1 commit)
    value = struct.pack(">hi", 0, 0)  # version, coordinator epoch
    return build_batch([Record(key=key, value=value)], base_offset=base_offset, base_timestamp=BASE_TS,
                       attributes=0x30, producer_id=pid, producer_epoch=0, base_sequence=-1)


def _transactional_log(first: int) -> tuple:
    """Batches from offset ``first``: committed-txn data, aborted-txn data interleaved, markers,
    then plain data. Returns (bytes, {offset: value} of what read_committed must see, aborted list)."""
    out, visible, offset = bytearray(), {}, first

    def data(pid, values, transactional):
        nonlocal offset
        recs = [Record(key=None, value=v) for v in values]
        out.extend(build_batch(recs, base_offset=offset, base_timestamp=BASE_TS,
                               attributes=0x10 if transactional else 0, producer_id=pid,
                               producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1))
        start = offset
        offset += len(values)
        return start

    aborted_first = data(PID_ABORTED, [b"aborted-1", b"aborted-2"], True)
    c = data(PID_COMMITTED, [b"committed-1"], True)
    visible[c] = b"committed-1"
    data(PID_ABORTED, [b"aborted-3"], True)
    out.extend(_control(PID_ABORTED, False, offset))
    offset += 1
    out.extend(_control(PID_COMMITTED, True, offset))
    offset += 1
    p = data(-1, [b"plain-1", b"plain-2"], False)
    visible[p], visible[p + 1] = b"plain-1", b"plain-2"
    return bytes(out), visible, [(PID_ABORTED, aborted_first)]


def test_transactional_batches_served_by_the_broker(broker_factory, tmp_path):
    """Transactional data and ABORT/COMMIT markers written into a partition's log (the broker
    serves what its log holds): control batches never reach the application, and the consumer
    reads with either isolation level. The broker tracks no transactions, so its fetch responses
    list no aborted transactions and aborted records stay visible even to read_committed."""
    data_dir = str(tmp_path / "txn-data")
    b = broker_factory(data_dir=data_dir)
    topic = new_topic(b)
    produce(b, topic, 2)
    assert b.stop() == 0
    seg = os.path.join(data_dir, f"{topic}-0", "00000000000000000000.log")
    raw, visible, _ = _transactional_log(2)
    with open(seg, "ab") as f:
        f.write(raw)
    b.start()
    for isolation in ("read_uncommitted", "read_committed"):
        with Consumer(conf(b, isolation_level=isolation)) as c:
            c.assign([(topic, 0, 2)])
            got = poll_until(c, 6)
            assert [r.offset for r in got] == [2, 3, 4, 5, 8, 9]
            assert {r.offset: r.value for r in got}.items() >= visible.items()
            assert c.position((topic, 0)) == 10
            c.seek((topic, 0), 2)
            table = c.poll_batch(DEADLINE * 1000)
            assert table.column("offset").to_pylist() == [2, 3, 4, 5, 8, 9]


# ---- errors and configuration --------------------------------------------------------------------------

def test_configuration_errors(broker):
    from pybroker.client import ConfigError
    with pytest.raises(ConfigError):
        Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "sometimes"})
    with pytest.raises(ConfigError):
        Consumer({"bootstrap.servers": broker.bootstrap, "no.such.setting": 1})
    with pytest.raises(ConfigError):
        Consumer({"bootstrap.servers": broker.bootstrap, "partition.assignment.strategy": "fancy"})
    with Consumer(conf(broker)) as c:
        with pytest.raises(RuntimeError):
            c.poll(0)  # neither subscribed nor assigned
        with pytest.raises(KafkaError):
            c.subscribe(["x"])  # no group.id
        with pytest.raises(KafkaError):
            c.commit()


def test_broker_restart_and_close_with_broker_down(broker_factory):
    b = broker_factory(overrides={"group.initial.rebalance.delay.ms": 0})
    topic = new_topic(b)
    produce(b, topic, 10)
    c = Consumer(conf(b, group_id=unique("rs"), session_timeout_ms=6000, heartbeat_interval_ms=300,
                      auto_offset_reset="earliest", reconnect_backoff_max_ms=200, retry_backoff_max_ms=200))
    try:
        c.subscribe([topic])
        assert [r.offset for r in poll_until(c, 10)] == list(range(10))
        c.commit()
        assert b.stop() == 0
        assert c.poll(500) == []  # a broker away is not an error for poll
        b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port}"  # same port: the consumer reconnects
        b.start()
        produce(b, topic, 5, start=10)
        got = poll_until(c, 5)
        # the restarted coordinator forgot the member: it rejoins and goes on from its commit
        assert [r.offset for r in got] == list(range(10, 15))
        b.kill()
        start = time.monotonic()
    finally:
        c.close(timeout_ms=2000)
    assert time.monotonic() - start < 10  # the commit/LeaveGroup give up instead of hanging


# ---- unexpected failures of the fetch loop ---------------------------------------------------------

class FlakyBatchesEnd:
    """Stands in for the fetcher's batches_end: raises while ``failing`` (or ``fail_times`` times)."""

    def __init__(self, fail_times: int = 0, failing: bool = False):
        self.fail_times = fail_times
        self.failing = failing
        self.failures = 0

    def __call__(self, buf):
        if self.failing or self.failures < self.fail_times:
            self.failures += 1
            raise RuntimeError("injected fetch-loop failure")
        return batches_end(buf)


def test_fetch_loop_failures_back_off_and_recover(broker, monkeypatch, caplog):
    topic = new_topic(broker)
    sent = produce(broker, topic, 30)
    flaky = FlakyBatchesEnd(fail_times=3)
    monkeypatch.setattr("pybroker.client.fetcher.batches_end", flaky)
    caplog.set_level("DEBUG", logger="pybroker.client.fetcher")
    with Consumer(conf(broker, retry_backoff_ms=20, retry_backoff_max_ms=1000)) as c:
        c.assign([(topic, 0, 0)])
        got = poll_until(c, 30)  # a transient streak is retried quietly: poll does not raise
    assert [as_tuple(r) for r in got] == [sent_tuple(s) for s in sent]
    assert flaky.failures == 3
    warnings = [r for r in caplog.records if r.name == "pybroker.client.fetcher" and r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].exc_info is not None  # one traceback per streak
    assert any("works again after 3" in r.getMessage() for r in caplog.records)


def test_persistent_fetch_loop_failure_reaches_poll_once(broker, monkeypatch):
    topic = new_topic(broker)
    produce(broker, topic, 10)
    flaky = FlakyBatchesEnd(failing=True)
    monkeypatch.setattr("pybroker.client.fetcher.batches_end", flaky)
    with Consumer(conf(broker, retry_backoff_ms=10, retry_backoff_max_ms=80)) as c:
        c.assign([(topic, 0, 0)])
        raised, end = None, time.monotonic() + DEADLINE
        while raised is None and time.monotonic() < end:
            try:
                assert c.poll(200) == []
            except KafkaError as exc:
                raised = exc
        assert raised is not None and "injected fetch-loop failure" in str(raised)
        assert flaky.failures >= 4  # reported once the backoff reached retry.backoff.max.ms (10 * 2**3)
        before = flaky.failures
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            assert c.poll(100) == []  # still failing, but reported once per streak
        # backoff of 80 ms +-20% allows at most ~9 attempts in 0.6 s; a respawn loop makes thousands
        assert flaky.failures - before <= 12
        flaky.failing = False
        got = poll_until(c, 10)
        assert [r.offset for r in got] == list(range(10))
