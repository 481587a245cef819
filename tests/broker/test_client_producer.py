"""pybroker's Producer / AsyncProducer against a real broker, read back with confluent-kafka and
kafka-python: round trips, every codec, partitioning (murmur2 as Kafka's clients, sticky, explicit),
headers/timestamps, acks, callbacks/futures, flush, bulk produce, buffer limits, idempotent retries
after lost connections and broker restarts, and the error paths.

The cases of the other tiers: tests/unit/test_client_producer.py.
"""
import asyncio
import collections
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient as CKAdmin
from confluent_kafka.admin import NewTopic as CKNewTopic

from pybroker.client import partitioner as partitioners
from pybroker.client.errors import BufferFullError, KafkaError, UnknownTopicError
from pybroker.client.producer import AsyncProducer, Producer
from pybroker.client.types import RecordMetadata
from pybroker.protocol.errors import ErrorCode
from pybroker.tools.wire import split_batches
from tests.kafka_wire import WireClient

DEADLINE = 30
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


_topic_ids = iter(range(1_000_000))


def new_topic(b, partitions=1, **config) -> str:
    name = f"prod-{next(_topic_ids)}-{os.getpid()}"
    admin = CKAdmin({"bootstrap.servers": b.bootstrap})
    fut = admin.create_topics([CKNewTopic(name, partitions, 1, config={k: str(v) for k, v in config.items()})])[name]
    fut.result(DEADLINE)
    return name


def conf(b, **kw) -> dict:
    out = {"bootstrap.servers": b.bootstrap, "linger.ms": 2}
    out.update({k.replace("_", "."): v for k, v in kw.items()})
    return out


def read_back(b, topic, count, partitions=(0,)):
    """Every record of ``partitions`` from offset 0 with confluent-kafka, until ``count`` arrived."""
    c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": "readback", "enable.auto.commit": False,
                    "enable.partition.eof": False})
    c.assign([CKTopicPartition(topic, p, 0) for p in partitions])
    got = []
    deadline = time.monotonic() + DEADLINE
    try:
        while len(got) < count and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m)
        extra = c.consume(num_messages=10, timeout=0.3)  # nothing beyond what was expected
        got += [m for m in extra if m.error() is None]
    finally:
        c.close()
    return got


def read_back_kafka_python(b, topic, count, partitions=(0,)):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, p) for p in partitions])
    c.seek_to_beginning()
    got = []
    deadline = time.monotonic() + DEADLINE
    try:
        while len(got) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got += recs
    finally:
        c.close()
    return got


def stored_batches(b, topic, partition=0) -> list:
    """(base offset, record count) of each record batch the broker holds for a partition."""
    with WireClient(b.port) as w:
        part = w.fetch(topic, partition, 0)
    assert part.error_code == 0, part
    # v2 batch header: baseOffset at byte 0, recordsCount at byte 57
    return [(struct.unpack_from(">q", batch, 0)[0], struct.unpack_from(">i", batch, 57)[0])
            for batch in split_batches(part.records)]


def java_partition(key: bytes, n: int) -> int:
    from kafka.partitioner.default import murmur2
    return (murmur2(key) & 0x7FFFFFFF) % n


def run_async(coro, timeout=DEADLINE):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- round trips ---------------------------------------------------------------------------------

def test_sync_round_trip_keys_headers_timestamps_and_callbacks(broker):
    topic = new_topic(broker)
    base_ts = int(time.time() * 1000) - 100_000
    sent, reports, threads = [], [], set()

    def on_delivery(err, md):
        threads.add(threading.get_ident())
        reports.append((err, md))

    with Producer(conf(broker)) as p:
        for i in range(300):
            key = None if i % 7 == 0 else b"k%d" % (i % 5)
            value = None if i % 50 == 3 else (b"v-%d-" % i) * (i % 9 + 1)
            headers = [("seq", str(i).encode()), ("empty", None)] if i % 2 else {"h": b"x"}
            p.produce(topic, value=value, key=key, timestamp=base_ts + i, headers=headers, on_delivery=on_delivery)
            sent.append((key, value, base_ts + i, headers))
        p.produce(topic, value="text value", key="text key")  # str is UTF-8 encoded
        assert p.flush(DEADLINE) == 0
        assert len(p) == 0
    assert threads == {threading.get_ident()}, "callbacks run on the thread that calls poll/flush"
    assert len(reports) == 300 and all(err is None for err, _ in reports)
    assert [md.offset for _, md in reports] == list(range(300))
    assert all(isinstance(md, RecordMetadata) and md.topic == topic and md.partition == 0 for _, md in reports)
    assert [md.timestamp for _, md in reports] == [base_ts + i for i in range(300)]
    got = read_back(broker, topic, 301)
    assert len(got) == 301
    for m, (key, value, ts, headers) in zip(got, sent):
        assert (m.key(), m.value(), m.timestamp()[1]) == (key, value, ts)
        want = list(headers.items()) if isinstance(headers, dict) else headers
        assert [(k, v) for k, v in (m.headers() or [])] == want
    assert (got[-1].key(), got[-1].value()) == (b"text key", b"text value")


def test_async_produce_send_flush_and_callbacks_on_the_loop(broker):
    topic = new_topic(broker, partitions=3)

    async def main():
        reports = []
        async with AsyncProducer(conf(broker)) as p:
            loop_thread = threading.get_ident()
            for i in range(100):
                key = b"key%d" % (i % 4)
                await p.produce(topic, b"a%d" % i, key=key,
                                on_delivery=lambda err, md, k=key: reports.append((err, md, threading.get_ident(), k)))
            md = await p.send(topic, b"sent", partition=2)
            mds = await asyncio.gather(*(p.send(topic, b"g%d" % i, partition=1) for i in range(20)))
            assert await p.flush(DEADLINE) == 0
            assert await p.partitions_for(topic) == [0, 1, 2]
        return loop_thread, reports, md, mds

    loop_thread, reports, md, mds = run_async(main())
    assert len(reports) == 100 and all(e is None and t == loop_thread for e, _, t, _ in reports)
    keyed_on = collections.Counter(java_partition(b"key%d" % (i % 4), 3) for i in range(100))
    assert md.partition == 2 and md.offset == keyed_on[2]
    assert [m.offset for m in mds] == [keyed_on[1] + i for i in range(20)] and {m.partition for m in mds} == {1}
    by_key = collections.defaultdict(set)
    for _, m, _, key in reports:
        by_key[key].add(m.partition)
    assert {k: p.pop() for k, p in by_key.items()} == {k: java_partition(k, 3) for k in by_key}
    assert len(read_back(broker, topic, 121, partitions=(0, 1, 2))) == 121


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_read_by_confluent_and_kafka_python(broker, codec):
    topic = new_topic(broker)
    sent = [(b"key-%d" % (i % 3), (b"%s-%d " % (codec.encode(), i)) * (i % 40 + 1)) for i in range(400)]
    with Producer(conf(broker, compression_type=codec, batch_size=8192)) as p:
        futures = [p.send(topic, v, key=k, headers=[("i", str(i).encode())]) for i, (k, v) in enumerate(sent)]
        assert p.flush(DEADLINE) == 0
        assert p.metrics()["batches_sent"] > 1
    assert [f.result(1).offset for f in futures] == list(range(400))
    got = read_back(broker, topic, 400)
    assert [(m.key(), m.value()) for m in got] == sent
    assert [m.headers() for m in got] == [[("i", str(i).encode())] for i in range(400)]
    got = read_back_kafka_python(broker, topic, 400)
    assert [(r.key, r.value) for r in got] == sent


def test_linger_gathers_quick_records_into_one_batch_and_flush_sends_it_at_once(broker):
    topic = new_topic(broker)
    # records sent back to back within linger.ms go out together when the linger ends (no flush)
    with Producer(conf(broker, linger_ms=2000)) as p:
        futures = [p.send(topic, b"quick-%d" % i) for i in range(20)]
        assert [f.result(DEADLINE).offset for f in futures] == list(range(20))
        assert p.metrics()["batches_sent"] == 1 and p.metrics()["records_sent"] == 20
    assert stored_batches(broker, topic) == [(0, 20)]
    # a linger longer than any wait below: only flush can send this batch
    with Producer(conf(broker, linger_ms=DEADLINE * 2000)) as p:
        futures = [p.send(topic, b"held-%d" % i) for i in range(10)]
        assert p.metrics()["batches_sent"] == 0 and not any(f.done() for f in futures)
        assert p.flush(DEADLINE) == 0
        assert p.metrics()["batches_sent"] == 1
        assert [f.result(0).offset for f in futures] == list(range(20, 30))
    assert stored_batches(broker, topic) == [(0, 20), (20, 10)]
    assert [m.value() for m in read_back(broker, topic, 30)] == \
        [b"quick-%d" % i for i in range(20)] + [b"held-%d" % i for i in range(10)]


# ---- partitioning -------------------------------------------------------------------------------

def test_keyed_records_land_where_kafka_clients_put_them(broker):
    from kafka import KafkaProducer
    topic = new_topic(broker, partitions=7)
    keys = [b"user-%d" % i for i in range(150)] + [b"", b"\xff\x00\x01", "unicodé".encode()]
    with Producer(conf(broker)) as p:
        ours = [p.send(topic, b"v", key=k) for k in keys]
        p.flush(DEADLINE)
    ours = [f.result(1).partition for f in ours]
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=2)
    theirs = [kp.send(topic, b"v", key=k) for k in keys]
    kp.flush(DEADLINE)
    theirs = [f.get(DEADLINE).partition for f in theirs]
    kp.close(5)
    assert ours == theirs == [java_partition(k, 7) for k in keys]
    assert len(set(ours)) == 7


def test_keyless_records_stick_to_a_partition_per_batch(broker):
    topic = new_topic(broker, partitions=4)
    with Producer(conf(broker, batch_size=1024, linger_ms=1000)) as p:
        futures = [p.send(topic, b"%099d" % i) for i in range(300)]  # ~8 records fill a batch
        p.flush(DEADLINE)
        parts = [f.result(1).partition for f in futures]
        runs = [len(list(g)) for _, g in __import__("itertools").groupby(parts)]
        assert len(set(parts)) >= 2, parts
        assert 300 / 12 <= len(runs) <= 300 / 4, runs  # one run per batch, not per record
        # a batch sent by flush ends the stickiness: the next keyless records go elsewhere
        first = [p.send(topic, b"a") for _ in range(5)]
        p.flush(DEADLINE)
        second = [p.send(topic, b"b") for _ in range(5)]
        p.flush(DEADLINE)
    a = {f.result(1).partition for f in first}
    b = {f.result(1).partition for f in second}
    assert len(a) == 1 and len(b) == 1 and a != b


def test_explicit_partition_and_other_partitioners(broker):
    topic = new_topic(broker, partitions=5)
    with Producer(conf(broker)) as p:
        fs = [p.send(topic, b"x", key=b"k%d" % i, partition=i % 5) for i in range(20)]
        p.flush(DEADLINE)
    assert [f.result(1).partition for f in fs] == [i % 5 for i in range(20)]
    keys = [b"k%d" % i for i in range(40)]
    with Producer(conf(broker, partitioner="consistent_random")) as p:
        fs = [p.send(topic, b"x", key=k) for k in keys]
        p.flush(DEADLINE)
    assert [f.result(1).partition for f in fs] == [partitioners.crc32_partition(k, 5) for k in keys]
    with Producer(conf(broker, partitioner=lambda key, n: n - 1)) as p:
        fs = [p.send(topic, b"x", key=k) for k in keys[:5]]
        p.flush(DEADLINE)
    assert {f.result(1).partition for f in fs} == {4}
    with Producer(conf(broker, partitioner="random", batch_size=100000)) as p:
        fs = [p.send(topic, b"x", key=k) for k in keys]  # keys ignored: all sticky in one batch
        p.flush(DEADLINE)
    assert len({f.result(1).partition for f in fs}) == 1


def test_many_threads_produce_concurrently(broker):
    topic = new_topic(broker, partitions=3)
    per_thread, nthreads = 4000, 4
    errors = []
    with Producer(conf(broker, batch_size=4096, linger_ms=1)) as p:
        def work(t):
            for i in range(per_thread):
                key = None if i % 3 == 0 else b"t%d-k%d" % (t, i % 5)
                p.produce(topic, b"%d-%d" % (t, i), key=key, on_delivery=lambda e, md: e and errors.append(e))
                if i == per_thread // 2:
                    p.produce_batch(topic, [b"%d-bulk" % t] * 50, partition=t % 3)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(DEADLINE)
        assert p.flush(DEADLINE) == 0
    assert not errors
    got = read_back(broker, topic, nthreads * (per_thread + 50), partitions=range(3))
    assert len(got) == nthreads * (per_thread + 50)
    last = {}
    for m in got:
        t, i = m.value().split(b"-")
        if i == b"bulk":
            continue
        if m.key() is not None:
            assert m.partition() == java_partition(m.key(), 3)
        k = (int(t), m.partition())
        assert int(i) > last.get(k, -1), "a thread's records to one partition arrive in order"
        last[k] = int(i)
    assert len({m.value() for m in got if not m.value().endswith(b"bulk")}) == nthreads * per_thread


# ---- acks, futures, flush -------------------------------------------------------------------------

@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks_levels(broker, acks):
    topic = new_topic(broker)
    with Producer(conf(broker, acks=acks)) as p:
        fs = [p.send(topic, b"r%d" % i) for i in range(60)]
        assert p.flush(DEADLINE) == 0
    offsets = [f.result(1).offset for f in fs]
    assert offsets == ([-1] * 60 if acks == 0 else list(range(60)))
    assert [m.value() for m in read_back(broker, topic, 60)] == [b"r%d" % i for i in range(60)]


# ---- bulk -------------------------------------------------------------------------------------------

def test_produce_batch_lists_arrow_pandas(broker):
    import pandas as pd
    import pyarrow as pa
    topic = new_topic(broker)
    values = [b"bulk-%05d" % i for i in range(5000)]
    with Producer(conf(broker, batch_size=16384)) as p:
        r1 = p.produce_batch(topic, values[:2000]).result(DEADLINE)
        r2 = p.produce_batch(topic, pa.array(values[2000:3000], pa.binary()),
                             keys=pa.array([b"k"] * 1000, pa.large_binary())).result(DEADLINE)
        r3 = p.produce_batch(topic, pa.chunked_array([pa.array([v.decode() for v in values[3000:3500]]),
                                                      pa.array([v.decode() for v in values[3500:4000]])]),
                             partition=0, timestamp=1234567).result(DEADLINE)
        r4 = p.produce_batch(topic, pd.Series(values[4000:]), headers=[("src", b"pandas")]).result(DEADLINE)
        assert p.produce_batch(topic, []).result(1) == []
    for r, n in ((r1, 2000), (r2, 1000), (r3, 1000), (r4, 1000)):
        assert sum(c for _, _, c in r) == n and len(r) > 1  # several batches of 16 KiB
        assert all(part == 0 for part, _, _ in r)
    runs = r1 + r2 + r3 + r4
    assert [o for _, o, _ in runs] == [sum(c for _, _, c in runs[:i]) for i in range(len(runs))]
    got = read_back(broker, topic, 5000)
    assert [m.value() for m in got] == values
    assert {m.key() for m in got[2000:3000]} == {b"k"} and got[0].key() is None
    assert {m.timestamp()[1] for m in got[3000:4000]} == {1234567}
    assert {tuple(m.headers()) for m in got[4000:]} == {(("src", b"pandas"),)}


def test_produce_batch_keyed_is_partitioned_by_murmur2(broker):
    import pyarrow as pa
    topic = new_topic(broker, partitions=6)
    keys = [b"key-%d" % (i % 97) for i in range(3000)]
    values = [b"val-%d" % i for i in range(3000)]
    with Producer(conf(broker)) as p:
        res_list = p.produce_batch(topic, values[:1500], keys=keys[:1500]).result(DEADLINE)
        res_arrow = p.produce_batch(topic, pa.array(values[1500:]), keys=pa.array(keys[1500:])).result(DEADLINE)
    assert sum(c for _, _, c in res_list) == 1500 and sum(c for _, _, c in res_arrow) == 1500
    got = read_back(broker, topic, 3000, partitions=range(6))
    assert len(got) == 3000
    per_partition = collections.defaultdict(list)
    for m in got:
        assert m.partition() == java_partition(m.key(), 6)
        per_partition[m.partition()].append(int(m.value().split(b"-")[1]))
    for seq in per_partition.values():
        assert seq == sorted(seq)  # order kept within each partition


def test_async_produce_batch(broker):
    import pyarrow as pa
    topic = new_topic(broker, partitions=2)

    async def main():
        async with AsyncProducer(conf(broker)) as p:
            a = await p.produce_batch(topic, [b"a"] * 100, partition=1)
            b = await p.produce_batch(topic, pa.array([b"b"] * 50), keys=pa.array([b"x"] * 50))
        return a, b
    a, b = run_async(main())
    assert a == [(1, 0, 100)]
    assert len(b) == 1 and b[0][0] == java_partition(b"x", 2) and b[0][2] == 50


# ---- idempotence under connection loss --------------------------------------------------------------

def _check_exactly_once_in_order(broker, topic, count):
    got = read_back(broker, topic, count)
    values = [int(m.value().split(b"-")[1]) for m in got]
    assert values == list(range(count)), f"{len(values)} records; first differences at " \
        f"{next((i for i, (a, b) in enumerate(zip(values, range(count))) if a != b), None)}"


def test_idempotent_retries_after_dropped_connections_write_each_record_once(broker, monkeypatch):
    from pybroker.client import producer_sender
    topic = new_topic(broker)
    count = 6000
    drops = {"wanted": 0, "done": 0}
    send = producer_sender.BrokerSender._send

    def send_then_drop(self, conn, batches):  # close the connection right under the request just written
        send(self, conn, batches)
        if drops["wanted"] > drops["done"] and self.inflight:  # counters written by one thread each
            drops["done"] += 1
            self.engine.loop.create_task(conn.close())  # runs before any response can be read

    monkeypatch.setattr(producer_sender.BrokerSender, "_send", send_then_drop)
    with Producer(conf(broker, batch_size=2048, linger_ms=0)) as p:
        futures = []
        for i in range(count):
            futures.append(p.send(topic, b"rec-%d" % i))
            if i % 1000 == 500:
                drops["wanted"] += 1
        assert p.flush(DEADLINE) == 0
        # a drop can land after the response was already read, so not every drop forces a retry
        assert drops["done"] >= 3 and p.metrics()["retries"] >= 1
    assert [f.result(1).offset for f in futures] == list(range(count))
    _check_exactly_once_in_order(broker, topic, count)


def test_partition_batches_reach_the_broker_in_sequence_order_after_dropped_connections(broker, monkeypatch):
    """Drop the connection under many requests with batches in flight and more queued: no batch
    may go out while an older one of its partition waits for a retry or is in flight on another
    (lost) connection."""
    from pybroker.client import producer_sender
    send = producer_sender.BrokerSender._send
    for rnd in range(3):
        topic = new_topic(broker, partitions=2)
        count = 6000
        seen = {"sends": 0, "drops": 0, "violations": []}
        sent_on = {}

        def checked_send(self, conn, batches):
            for b in batches:
                st = self.engine.acc.state(b.tp)
                older = [x.ordinal for x in st.retry if x.ordinal < b.ordinal]
                elsewhere = [x.ordinal for x in st.inflight if sent_on.get(id(x)) is not conn]
                if older or elsewhere or conn.closed:
                    seen["violations"].append((b.tp, b.ordinal, older, elsewhere))
                sent_on[id(b)] = conn
            send(self, conn, batches)
            seen["sends"] += 1
            if seen["sends"] % 5 == 2 and self.inflight:  # several batches in flight, many more queued
                seen["drops"] += 1
                self.engine.loop.create_task(conn.close())

        monkeypatch.setattr(producer_sender.BrokerSender, "_send", checked_send)
        with Producer(conf(broker, batch_size=1024, linger_ms=0)) as p:
            futures = [p.send(topic, b"rec-%d" % i, partition=i % 2) for i in range(count)]
            assert p.flush(DEADLINE) == 0
        assert seen["drops"] >= 3, rnd
        assert not seen["violations"], seen["violations"][:5]
        errors = [f.exception(1) for f in futures if f.exception(1) is not None]
        assert not errors, (len(errors), errors[0])
        for part in (0, 1):
            assert [futures[i].result(1).offset for i in range(part, count, 2)] == list(range(count // 2))
        got = read_back(broker, topic, count, partitions=(0, 1))
        assert sorted(int(m.value().split(b"-")[1]) for m in got) == list(range(count))


def test_appends_racing_the_sender_keep_every_delivery_report(broker):
    """Garbage-collector finalizers that switch threads in the middle of an append (as any Python
    ``__del__`` may) must not let the sender seal the batch being appended to."""
    import gc

    class Yields:
        def __init__(self):
            self.me = self  # a cycle, so only the collector frees it

        def __del__(self):
            time.sleep(0)  # hands the GIL to the sender thread

    topic = new_topic(broker)
    old = gc.get_threshold()
    gc.set_threshold(50, 1, 1)
    try:
        with Producer(conf(broker, batch_size=512, linger_ms=0)) as p:
            futures = []
            for i in range(4000):
                if i % 3 == 0:
                    Yields()
                futures.append(p.send(topic, b"r-%d" % i))
            assert p.flush(DEADLINE) == 0
            assert [f.result(DEADLINE).offset for f in futures] == list(range(4000))
    finally:
        gc.set_threshold(*old)
        gc.collect()


def test_idempotent_producer_survives_a_broker_restart(broker_factory):
    port = closed_port()
    b = broker_factory(port=port)
    topic = new_topic(b)
    count = 4000
    restarted = threading.Event()

    def restart():
        b.stop()
        b.start()
        restarted.set()

    with Producer(conf(b, batch_size=4096, linger_ms=1)) as p:
        futures = []
        for i in range(count):
            futures.append(p.send(topic, b"rec-%d" % i))
            if i == count // 3:
                t = threading.Thread(target=restart)
                t.start()
            if i % 200 == 0:
                time.sleep(0.005)
        t.join(60)
        assert restarted.is_set()
        assert p.flush(DEADLINE) == 0
    assert [f.result(1).offset for f in futures] == list(range(count))
    _check_exactly_once_in_order(b, topic, count)


def test_out_of_order_sequence_fails_the_partition(broker):
    topic = new_topic(broker, partitions=2)
    with Producer(conf(broker)) as p:
        assert p.send(topic, b"first", partition=0).result(DEADLINE).offset == 0
        # the producer's next sequence for partition 0 no longer matches the broker's
        p._thread.run(_skip_sequence(p._engine, (topic, 0)))
        bad = p.send(topic, b"second", partition=0)
        err = bad.exception(DEADLINE)
        assert isinstance(err, KafkaError) and err.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        later = []
        p.produce(topic, b"third", partition=0, on_delivery=lambda e, md: later.append(e))
        other = p.send(topic, b"fine", partition=1)
        assert p.flush(DEADLINE) == 0
        assert other.result(1).offset == 0  # the other partition is unaffected
        assert p.metrics()["failed_partitions"] == [(topic, 0)]
    assert len(later) == 1 and later[0].code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "partition" in str(later[0]) and not later[0].retriable
    assert [m.value() for m in read_back(broker, topic, 1)] == [b"first"]


async def _skip_sequence(engine, tp):
    engine.acc.state(tp).next_seq += 100


# ---- errors ---------------------------------------------------------------------------------------

def test_unknown_topic_without_auto_create_is_a_delivery_error(broker_factory):
    b = broker_factory(overrides={"auto.create.topics.enable": "false"})
    errors = []
    with Producer(conf(b, max_block_ms=400)) as p:
        p.produce("missing", b"x", on_delivery=lambda err, md: errors.append(err))
        fut = p.send("missing", b"y")
        batch = p.produce_batch("missing", [b"z"])
        assert p.flush(DEADLINE) == 0
        assert isinstance(fut.exception(DEADLINE), UnknownTopicError)
        assert isinstance(batch.exception(DEADLINE), UnknownTopicError)
        with pytest.raises(UnknownTopicError):
            p.partitions_for("missing")
        ok = new_topic(b, partitions=2)
        bad = p.send(ok, b"x", partition=5)  # a partition the topic does not have
        assert isinstance(bad.exception(DEADLINE), UnknownTopicError)
        assert p.send(ok, b"x", partition=1).result(DEADLINE).partition == 1
    assert len(errors) == 1 and isinstance(errors[0], UnknownTopicError) and "missing" in str(errors[0])

    async def main():
        async with AsyncProducer(conf(b, max_block_ms=300)) as ap:
            with pytest.raises(UnknownTopicError):
                await ap.send("missing-too", b"x")
    run_async(main())


def test_record_too_large(broker):
    with Producer(conf(broker, max_request_size=10000)) as p:
        with pytest.raises(KafkaError) as info:
            p.produce("anything", b"x" * 20000)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE and "max.request.size" in str(info.value)
        with pytest.raises(KafkaError):
            p.send("anything", b"x" * 20000)
    topic = new_topic(broker, **{"max.message.bytes": 1000})
    # the broker refuses the big record's batch: a delivery error, not retried; the batches after it
    # (pipelined, idempotent) are renumbered to close the sequence gap and still arrive once, in order
    with Producer(conf(broker, batch_size=600, linger_ms=50)) as p:
        before = [p.send(topic, b"a%03d" % i * 10) for i in range(12)]
        big = p.send(topic, b"y" * 5000)
        after = [p.send(topic, b"b%03d" % i * 10) for i in range(30)]
        assert p.flush(DEADLINE) == 0
        err = big.exception(DEADLINE)
        assert p.metrics()["failed_partitions"] == [] and p.metrics()["retries"] > 0
    assert isinstance(err, KafkaError) and err.code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)
    assert not err.retriable
    assert [f.result(1).offset for f in before + after] == list(range(42))
    assert [m.value() for m in read_back(broker, topic, 42)] == [b"a%03d" % i * 10 for i in range(12)] + \
        [b"b%03d" % i * 10 for i in range(30)]


def test_bad_arguments_raise(broker):
    topic = new_topic(broker)
    with Producer(conf(broker)) as p:
        with pytest.raises(TypeError):
            p.produce(topic, 12345)
        with pytest.raises(ValueError):
            p.produce(topic, b"x", partition=-7)
        with pytest.raises(ValueError):
            p.produce(topic, b"x", headers=[("a", b"1", b"2")])
        with pytest.raises(ValueError):
            p.produce_batch(topic, [b"a", b"b"], keys=[b"k"])
        with pytest.raises(TypeError):
            p.produce_batch(topic, [1, 2])
        p.produce(topic, b"fine", headers=[["k", "str value"]])
        assert p.flush(DEADLINE) == 0
    assert read_back(broker, topic, 1)[0].headers() == [("k", b"str value")]


# ---- the pure twin ----------------------------------------------------------------------------------


def test_pure_implementation_end_to_end(broker):
    topic = new_topic(broker, partitions=3)
    script = (
        "import sys, pyarrow as pa\n"
        "from pybroker.client.producer import Producer, _fast_module\n"
        "assert _fast_module().__name__ == 'pybroker._pure.producer_fast'\n"
        "with Producer({'bootstrap.servers': sys.argv[1], 'linger.ms': 2, 'batch.size': 2000}) as p:\n"
        "    fs = [p.send(sys.argv[2], b'v%d' % i, key=b'k%d' % (i % 9)) for i in range(300)]\n"
        "    r = p.produce_batch(sys.argv[2], pa.array([b'b'] * 200), keys=pa.array([b'k1'] * 200)).result(30)\n"
        "    assert p.flush(30) == 0\n"
        "print(sum(f.result(1).offset >= 0 for f in fs), sum(c for _, _, c in r))\n")
    env = dict(os.environ, PYBROKER_IMPL="pure")
    out = subprocess.run([sys.executable, "-c", script, broker.bootstrap, topic], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["300", "200"]
    got = read_back(broker, topic, 500, partitions=range(3))
    assert len(got) == 500 and all(m.partition() == java_partition(m.key(), 3) for m in got)


def test_produce_batch_waits_for_buffer_space(broker):
    topic = new_topic(broker)
    values = [b"%0200d" % i for i in range(20000)]  # ~4.5 MB through a 256 KiB buffer
    with Producer(conf(broker, buffer_memory=262144, batch_size=32768)) as p:
        res = p.produce_batch(topic, values).result(DEADLINE)
    assert sum(c for _, _, c in res) == 20000
    got = read_back(broker, topic, 20000)
    assert len(got) == 20000 and got[-1].value() == values[-1]


def test_buffer_full_raises_after_max_block_ms_sync_and_async(broker_factory):
    b = broker_factory()
    topic = new_topic(b)
    c = conf(b, buffer_memory=20000, max_block_ms=300, request_timeout_ms=20000)
    with Producer(c) as p:
        p.partitions_for(topic)
        b.proc.send_signal(signal.SIGSTOP)  # the broker stops answering: the buffer fills
        try:
            sent = 0
            with pytest.raises(BufferFullError, match="buffer.memory"):
                for _ in range(2000):
                    p.produce(topic, b"x" * 100)
                    sent += 1
            assert 0 < sent < 1000
        finally:
            b.proc.send_signal(signal.SIGCONT)
        assert p.flush(DEADLINE) == 0

    async def main():
        async with AsyncProducer(c) as ap:
            await ap.partitions_for(topic)
            b.proc.send_signal(signal.SIGSTOP)
            n = 0
            try:
                with pytest.raises(BufferFullError):
                    for _ in range(2000):
                        await ap.produce(topic, b"y" * 100)
                        n += 1
            finally:
                b.proc.send_signal(signal.SIGCONT)
            assert await ap.flush(DEADLINE) == 0
            return n
    n = run_async(main())
    got = read_back(b, topic, sent + n)
    assert [m.value() for m in got] == [b"x" * 100] * sent + [b"y" * 100] * n


def test_a_refused_first_batch_is_not_overtaken_by_batches_pipelined_behind_it(broker, monkeypatch):
    """A broker without state for a producer accepts any sequence, so the first batch of a
    partition must be acknowledged before more are pipelined: otherwise a first batch refused
    unwritten (NOT_LEADER_OR_FOLLOWER from a partition just created, as Kafka answers under load)
    is overtaken by the next ones and its retry is refused as OUT_OF_ORDER_SEQUENCE_NUMBER."""
    from pybroker.client import connection
    from pybroker.protocol.messages import RESPONSES
    ProduceResponse = RESPONSES[0]
    request = connection.BrokerConnection.request
    refused = []

    def refuse_first_batch(self, obj, version, timeout_s=None):
        if obj.API_KEY == 0 and not refused:
            td = obj.topic_data[0]
            pd = td.partition_data[0]
            refused.append(int.from_bytes(bytes(pd.records[53:57]), "big"))  # its base sequence
            body = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name=td.name, partition_responses=[
                ProduceResponse.PartitionProduceResponse(index=pd.index, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                         base_offset=-1, log_append_time_ms=-1)])])
            fut = self._loop.create_future()
            self._loop.call_later(0.2, fut.set_result, body)  # answered late: later batches could go meanwhile
            return fut
        return request(self, obj, version, timeout_s)

    monkeypatch.setattr(connection.BrokerConnection, "request", refuse_first_batch)
    topic = new_topic(broker)
    count = 20000
    with Producer(conf(broker, enable_idempotence=True, batch_size=4096, linger_ms=0)) as p:
        futures = [p.send(topic, b"rec-%d" % i) for i in range(count)]
        assert p.flush(DEADLINE) == 0
    assert refused == [0]
    errors = [f.exception(1) for f in futures if f.exception(1) is not None]
    assert not errors, (len(errors), errors[0])
    assert [f.result(1).offset for f in futures] == list(range(count))
