"""Broker restarts with real clients: a clean SIGTERM restart keeps every record and the offsets go
on; kill -9 mid-stream (flush every message, and default flushing) loses no acknowledged record
and duplicates none; idempotent producers carry on across a clean restart."""
import asyncio
import os
import subprocess
import sys
import threading

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewPartitions

from tests.interop import test_clients_confluent as cf
from tests.clientutil import DEADLINE, Rec, check_exactly_once, clean_marker, records_to_send, wait_until

WARNING_LEVELS = ("level=WARNING", "level=ERROR", "level=CRITICAL")

# The producer of the crash tests runs in its own process, so killing the broker cannot disturb
# the bookkeeping of what was acknowledged: one "partition offset value" line per delivery.
PRODUCER = r"""
import sys, time
from confluent_kafka import Producer
bootstrap, topic, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 2,
              "message.timeout.ms": 90000, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
def report(err, m):
    print(("%d %d %s" % (m.partition(), m.offset(), m.value().decode())) if err is None else "ERR %s" % err,
          flush=True)
for i in range(total):
    for _ in range(1000):
        try:
            p.produce(topic, key=b"key-%d" % (i % 10), value=b"v-%d" % i, on_delivery=report)
            break
        except BufferError:
            p.poll(0.05)
    p.poll(0)
    time.sleep(0.002)  # paced, so the kill lands mid-stream
left = p.flush(100)
print("DONE %d" % left, flush=True)
"""


def restart_stderr(b, before: int) -> str:
    return b.stderr()[before:]


def consume_all(b, topic, partitions, expected):
    return cf.consume(b, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)], expected, idle=0.3)


def test_clean_restart_keeps_everything_and_offsets_continue(broker_factory):
    b = broker_factory()
    cf.create_topic(b, "orders")
    acked = cf.produce(b, "orders", records_to_send("first", 300), acks="all", **{"compression.type": "lz4"})
    # admin changes that must survive the restart too: a log start, a grown topic, a deleted topic
    ad = cf.admin(b)
    cut = min(a.offset for a in acked if a.partition == 0) + 10
    ad.delete_records([TopicPartition("orders", 0, cut)])[TopicPartition("orders", 0, cut)].result(DEADLINE)
    acked = [a for a in acked if a.partition != 0 or a.offset >= cut]
    cf.create_topic(b, "grown", partitions=1)
    ad.create_partitions([NewPartitions("grown", 4)])["grown"].result(DEADLINE)
    cf.create_topic(b, "gone", partitions=2)
    cf.produce(b, "gone", records_to_send("gone", 10), acks=1)
    ad.delete_topics(["gone"])["gone"].result(DEADLINE)
    del ad
    assert b.stop() == 0
    assert clean_marker(b.data_dir)  # SIGTERM is a clean shutdown
    mark = len(b.stderr())
    b.start()
    after = restart_stderr(b, mark)
    assert not any(level in after for level in WARNING_LEVELS), after  # no recovery after a clean stop
    assert not clean_marker(b.data_dir)  # running again: a crash from now on must be detectable

    topics = cf.admin(b).list_topics(timeout=DEADLINE).topics
    assert "gone" not in topics and len(topics["grown"].partitions) == 4
    assert not any(name.startswith("gone-") for name in os.listdir(b.data_dir))
    got = consume_all(b, "orders", 3, len(acked))
    check_exactly_once(acked, got, timestamps=True)
    assert len(got) == len(acked) and min(r.offset for r in got if r.partition == 0) == cut
    ends = {p: max(a.offset for a in acked if a.partition == p) + 1 for p in range(3)}
    more = cf.produce(b, "orders", records_to_send("second", 60), acks="all")
    for p in range(3):  # the offsets continue where they were
        assert sorted(a.offset for a in more if a.partition == p) == list(range(ends[p], ends[p] + sum(
            a.partition == p for a in more)))
    got = consume_all(b, "orders", 3, len(acked) + 60)
    check_exactly_once(acked + more, got)
    assert len(got) == len(acked) + 60


class ProducerChild:
    """The producer script in a subprocess; its delivery lines are collected by a thread."""

    def __init__(self, bootstrap, topic, total):
        self.proc = subprocess.Popen([sys.executable, "-c", PRODUCER, bootstrap, topic, str(total)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.acked, self.errors, self.done = [], [], None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = line.split()
            if parts[0] == "DONE":
                self.done = int(parts[1])
            elif parts[0] == "ERR":
                self.errors.append(line)
            else:
                i = int(parts[2].split("-")[1])  # the script's key for value v-i
                self.acked.append(Rec(int(parts[0]), int(parts[1]), b"key-%d" % (i % 10), parts[2].encode()))

    def finish(self, timeout):
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            self.reader.join(10)
            self.proc.stdout.close()


@pytest.mark.parametrize("flush", ["every-message", "default"])
def test_kill_9_mid_stream_keeps_every_acked_record_once(broker_factory, tmp_path, flush):
    overrides = {"log.flush.interval.messages": 1} if flush == "every-message" else {}
    data = str(tmp_path / "crash-data")
    b = broker_factory(overrides=overrides, data_dir=data)
    cf.create_topic(b, "stream")
    total, kill_after = 1500, 400
    child = ProducerChild(b.bootstrap, "stream", total)
    try:
        assert wait_until(lambda: len(child.acked) >= kill_after or child.proc.poll() is not None, DEADLINE)
        assert child.proc.poll() is None, "the producer finished before the kill"
        b.kill()  # SIGKILL the broker mid-stream
        at_kill = len(child.acked)
        assert not clean_marker(data)
        b2 = broker_factory(overrides=overrides, data_dir=data, port=b.port)  # same port: the producer goes on
        child.finish(120)
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
    assert child.done == 0 and not child.errors, (child.done, child.errors[:3])
    assert at_kill < total and len(child.acked) == total  # the kill landed mid-stream; all acked in the end

    got = consume_all(b2, "stream", 3, total)
    check_exactly_once(child.acked, got, headers=False)  # each acked value once, at its acked offset
    assert len(got) == total  # idempotence: the retries after the crash added no duplicates
    for p in range(3):
        assert [r.offset for r in got if r.partition == p] == list(range(sum(r.partition == p for r in got)))


def test_idempotent_producers_continue_after_clean_restart(broker_factory, tmp_path):
    """kafka-python and aiokafka idempotent producers keep their producer id and sequences across
    a clean broker restart: the broker restored their state, so no OUT_OF_ORDER_SEQUENCE/UNKNOWN_PRODUCER."""
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    data = str(tmp_path / "idem-data")
    b = broker_factory(data_dir=data)
    cf.create_topic(b, "idem")
    port = b.port
    kp = KafkaProducer(bootstrap_servers=b.bootstrap, enable_idempotence=True, acks="all", linger_ms=2,
                       reconnect_backoff_ms=50, reconnect_backoff_max_ms=500, retries=50, retry_backoff_ms=100)

    async def aio_start():
        p = AIOKafkaProducer(bootstrap_servers=b.bootstrap, enable_idempotence=True, linger_ms=2,
                             retry_backoff_ms=100, request_timeout_ms=20000)
        await p.start()
        return p

    loop = asyncio.new_event_loop()
    ap = loop.run_until_complete(aio_start())
    sent = []

    def send_round(tag, n):
        futures = [kp.send("idem", key=b"key-%d" % (i % 6), value=b"kp-%s-%d" % (tag, i)) for i in range(n)]
        kp.flush(DEADLINE)
        mds = [f.get(DEADLINE) for f in futures]  # raises on OutOfOrderSequence and the like
        sent.extend(Rec(m.partition, m.offset, b"key-%d" % (i % 6), b"kp-%s-%d" % (tag, i))
                    for i, m in enumerate(mds))

        async def aio_round():
            futs = [await ap.send("idem", key=b"akey-%d" % (i % 6), value=b"aio-%s-%d" % (tag, i)) for i in range(n)]
            return await asyncio.wait_for(asyncio.gather(*futs), DEADLINE)
        mds = loop.run_until_complete(aio_round())
        sent.extend(Rec(m.partition, m.offset, b"akey-%d" % (i % 6), b"aio-%s-%d" % (tag, i))
                    for i, m in enumerate(mds))

    try:
        send_round(b"before", 60)
        assert b.stop() == 0 and clean_marker(data)
        b2 = broker_factory(data_dir=data, port=port)
        send_round(b"after", 60)
        send_round(b"later", 30)
    finally:
        kp.close(10)
        loop.run_until_complete(ap.stop())
        loop.close()
    got = consume_all(b2, "idem", 3, len(sent))
    check_exactly_once(sent, got, headers=False)
    assert len(got) == len(sent) == 300


def test_clean_stop_answers_parked_fetches(broker_factory):
    """SIGTERM with a consumer long-polling (max wait 60 s): the parked fetch is answered at once,
    so the shutdown finishes cleanly instead of waiting out the fetch (or the 30 s stop timeout)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    b = broker_factory()
    cf.create_topic(b, "parked", partitions=1)
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=60000,
                      request_timeout_ms=90000, reconnect_backoff_max_ms=200)
    try:
        c.assign([KTP("parked", 0)])
        c.seek(KTP("parked", 0), 0)
        assert c.poll(timeout_ms=1000) == {}  # a fetch is now parked on the broker
        mark = len(b.stderr())
        assert b.stop() == 0
        assert clean_marker(b.data_dir)
        assert not any(level in b.stderr()[mark:] for level in WARNING_LEVELS), b.stderr()[mark:]
    finally:
        c.close()
