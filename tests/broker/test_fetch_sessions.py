"""Fetch sessions (KIP-227), topic ids and diverging epochs in Fetch v12-v17.

The cache's rules in-process (creation, eviction, epochs); a real broker driven by wire requests
(session errors 70/71/106, incremental answers with only the partitions that have news, forgotten
partitions, UNKNOWN_TOPIC_ID, diverging epochs); and real clients through a byte-counting proxy:
a kafka-python consumer of 1 000 partitions keeps a session and its steady-state fetch requests
are a few dozen bytes, and Kafka 3.8's console consumer (Fetch v17, topic ids) reads every record.
librdkafka (confluent-kafka, kcat) never opens fetch sessions (it always sends session 0, epoch -1),
so it is checked here on the sessionless path of the same versions.

The cases of the other tiers: tests/cluster/test_fetch_sessions.py, tests/unit/test_fetch_sessions.py.
"""
import os
import socket
import struct
import subprocess
import time
import uuid

import pytest

from pybroker.protocol import decode_response
from pybroker.protocol.messages import REQUESTS
from pybroker.records import Record, build_batch
from tests.proxy_base import ThreadedProxy
from tests.kafka_wire import WireClient

Fetch = REQUESTS[1]
KAFKA_HOME = os.path.expanduser("~/.cache/pybroker-kafka/kafka_2.13-3.8.0")
DEADLINE = 60


# ---- the cache, in-process ----------------------------------------------------------------------


# ---- a real broker, wire requests ------------------------------------------------------------------

def fetch_request(topics, session_id=0, epoch=-1, forgotten=(), max_wait_ms=0, by_id=False, min_bytes=0):
    """``topics``: {name or id: [(partition, offset[, last fetched epoch])]}."""
    return Fetch(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20, isolation_level=0,
                 session_id=session_id, session_epoch=epoch, rack_id="",
                 topics=[Fetch.FetchTopic(**({"topic_id": t} if by_id else {"topic": t}), partitions=[
                     Fetch.FetchPartition(partition=p[0], fetch_offset=p[1], partition_max_bytes=1 << 16,
                                          last_fetched_epoch=p[2] if len(p) > 2 else -1) for p in ps])
                         for t, ps in topics.items()],
                 forgotten_topics_data=[Fetch.ForgottenTopic(**({"topic_id": t} if by_id else {"topic": t}),
                                                             partitions=list(ps)) for t, ps in dict(forgotten).items()])


def answered(resp):
    return {(t.topic, p.partition_index): p for t in resp.responses for p in t.partitions}


BATCH = bytes(build_batch([Record(value=b"v", timestamp=1_700_000_000_000)], base_timestamp=1_700_000_000_000))


def produce(w, topic, partition):
    r = w.produce(topic, partition, BATCH)
    assert r.error_code == 0, r


@pytest.fixture
def wire(broker):
    with WireClient(broker.port) as w:
        w.create_topic("s", partitions=4)
        w.metadata(["s"])
        yield w


def test_incremental_session_over_the_wire(wire):
    w = wire
    resp = w.request(fetch_request({"s": [(i, 0) for i in range(4)]}, 0, 0), 12)
    sid = resp.session_id
    assert resp.error_code == 0 and sid != 0 and len(answered(resp)) == 4
    resp = w.request(fetch_request({}, sid, 1), 12)
    assert (resp.error_code, resp.session_id, resp.responses) == (0, sid, [])  # nothing new
    produce(w, "s", 2)
    resp = w.request(fetch_request({}, sid, 2), 12)
    got = answered(resp)
    assert list(got) == [("s", 2)] and got[("s", 2)].high_watermark == 1 and len(bytes(got[("s", 2)].records)) > 0
    # moved on past the record, forgot partition 0: partition 0's news is no longer answered
    resp = w.request(fetch_request({"s": [(2, 1)]}, sid, 3, forgotten={"s": [0]}), 12)
    assert answered(resp) == {}
    produce(w, "s", 0)
    assert answered(w.request(fetch_request({}, sid, 4), 12)) == {}
    # errors: a replayed epoch, an unknown session, a final epoch closes it
    assert w.request(fetch_request({}, sid, 4), 12).error_code == 71
    assert w.request(fetch_request({}, sid ^ 0x5A5A, 1), 12).error_code == 70
    resp = w.request(fetch_request({"s": [(0, 0)]}, sid, -1), 12)
    assert resp.session_id == 0 and list(answered(resp)) == [("s", 0)]
    assert w.request(fetch_request({}, sid, 5), 12).error_code == 70


def test_sessions_at_v7_to_v11_too(wire):
    for version in (7, 11):
        resp = wire.request(fetch_request({"s": [(1, 0)]}, 0, 0), version)
        assert resp.session_id != 0
        again = wire.request(fetch_request({}, resp.session_id, 1), version)
        assert (again.error_code, again.responses) == (0, [])


def test_topic_ids(wire):
    w = wire
    topic_id = w.metadata(["s"], version=12).topics[0].topic_id
    assert topic_id.int, "Metadata v12 gives the topic's id"
    produce(w, "s", 1)
    resp = w.request(fetch_request({topic_id: [(1, 0)]}, by_id=True), 13)
    assert [t.topic_id for t in resp.responses] == [topic_id]
    p = resp.responses[0].partitions[0]
    assert p.error_code == 0 and len(bytes(p.records)) > 0
    unknown = uuid.uuid4()
    resp = w.request(fetch_request({unknown: [(0, 0)]}, by_id=True), 17)
    assert resp.responses[0].topic_id == unknown and resp.responses[0].partitions[0].error_code == 100
    # a session that names topics by name cannot go on with ids, and the reverse
    sid = w.request(fetch_request({"s": [(0, 0)]}, 0, 0), 12).session_id
    assert w.request(fetch_request({}, sid, 1, by_id=True), 13).error_code == 106


DeleteTopics = REQUESTS[20]


def recreate(w, topic):
    """Delete ``topic`` and create it again under the same name; its new id."""
    r = w.request(DeleteTopics(topics=[DeleteTopics.DeleteTopicState(name=topic)], timeout_ms=10_000), 6)
    assert r.responses[0].error_code == 0, r
    deadline = time.monotonic() + DEADLINE
    create = REQUESTS[19]
    req = create(topics=[create.CreatableTopic(name=topic, num_partitions=4, replication_factor=1, assignments=[],
                                               configs=[])], timeout_ms=10_000, validate_only=False)
    while (code := w.request(req, 4).topics[0].error_code) == 36:  # TOPIC_ALREADY_EXISTS: deletion in progress
        assert time.monotonic() < deadline, f"{topic} never came back"
        time.sleep(0.05)
    assert code == 0, code
    return w.metadata([topic], version=12).topics[0].topic_id


def produce_until_accepted(w, topic, partition):
    deadline = time.monotonic() + DEADLINE
    while w.produce(topic, partition, BATCH).error_code:  # the new partition's leader may not be up yet
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_waiting_fetch_by_id_never_reads_the_recreated_topic(wire):
    """A v17 fetch by topic id waits; the topic is deleted, recreated under its name and written to:
    the fetch answers without the new topic's records (whatever the order, an error for the old id)."""
    old = wire.metadata(["s"], version=12).topics[0].topic_id
    with WireClient(wire.sock.getpeername()[1], timeout=30) as parked:
        correlation = parked.send_only(fetch_request({old: [(0, 0)]}, max_wait_ms=10_000, by_id=True, min_bytes=1), 17)
        new = recreate(wire, "s")
        assert new != old
        produce_until_accepted(wire, "s", 0)
        header, resp = decode_response(parked.recv_frame(), 1, 17)
    assert header.correlation_id == correlation
    [t] = resp.responses
    [p] = t.partitions
    assert t.topic_id == old and p.error_code in (3, 100, 103), p  # unknown partition, unknown id, inconsistent id
    assert not bytes(p.records or b"")


def test_a_session_by_id_reads_its_topic_not_the_recreated_one(wire):
    """A session holds partition 0 by topic id; after delete and recreate under the same name, the
    next incremental fetch answers INCONSISTENT_TOPIC_ID (103) at read time, never new records."""
    old = wire.metadata(["s"], version=12).topics[0].topic_id
    resp = wire.request(fetch_request({old: [(0, 0)]}, 0, 0, by_id=True), 17)
    sid = resp.session_id
    assert sid and resp.responses[0].partitions[0].error_code == 0
    recreate(wire, "s")
    produce_until_accepted(wire, "s", 0)
    resp = wire.request(fetch_request({}, sid, 1, by_id=True), 17)
    [t] = resp.responses
    [p] = t.partitions
    assert (t.topic_id, p.error_code) == (old, 103) and not bytes(p.records or b"")


def test_a_partition_named_twice_is_answered_once(wire):
    """As Kafka: a full fetch naming a partition twice (in one topic or in two entries of it) reads it
    once, with its last parameters, in the place of its first mention."""
    produce(wire, "s", 1)
    req = fetch_request({"s": [(1, 5), (2, 0), (1, 0)]})
    req.topics.append(Fetch.FetchTopic(topic="s", partitions=[
        Fetch.FetchPartition(partition=3, fetch_offset=0, partition_max_bytes=1 << 16),
        Fetch.FetchPartition(partition=2, fetch_offset=0, partition_max_bytes=1 << 16)]))
    for version in (11, 12):
        resp = wire.request(req, version)
        got = [(t.topic, p.partition_index) for t in resp.responses for p in t.partitions]
        assert got == [("s", 1), ("s", 2), ("s", 3)], got
        assert len(resp.responses) == 1
        one = resp.responses[0].partitions[0]
        assert one.error_code == 0 and len(bytes(one.records)) > 0  # offset 0, its last mention


def test_diverging_epoch(wire):
    """A fetcher that read up to offset 5 in epoch 0 where this log's epoch 0 ends at 1: it diverged."""
    produce(wire, "s", 3)
    p = answered(wire.request(fetch_request({"s": [(3, 5, 0)]}), 12))[("s", 3)]
    assert p.error_code == 0 and p.records is not None and len(bytes(p.records)) == 0
    assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (0, 1)
    ok = answered(wire.request(fetch_request({"s": [(3, 0, 0)]}), 12))[("s", 3)]
    assert ok.diverging_epoch.epoch == -1 and len(bytes(ok.records)) > 0
    bad = answered(wire.request(fetch_request({"s": [(3, 0, 9)]}), 12))[("s", 3)]
    assert bad.error_code == 1  # an epoch newer than any known here: OFFSET_OUT_OF_RANGE, as Kafka


def test_no_slots_no_sessions(broker_factory):
    b = broker_factory(overrides={"max.incremental.fetch.session.cache.slots": "0"})
    with WireClient(b.port) as w:
        w.create_topic("z")
        resp = w.request(fetch_request({"z": [(0, 0)]}, 0, 0), 12)
        assert resp.error_code == 0 and resp.session_id == 0 and list(answered(resp)) == [("z", 0)]


# ---- real clients through a byte-counting proxy -----------------------------------------------------

class CountingProxy(ThreadedProxy):
    """TCP proxy on 127.0.0.1 recording (api key, version, request bytes, response bytes) per request;
    connections wait (unaccepted) until ``target`` names the port to forward to."""

    def __init__(self, lifetime=120.0):
        super().__init__(lifetime)
        self.requests = {}  # (connection, correlation id) -> [api key, version, request size, response size]
        self.order = []
        self._connections = 0

    def target(self, port):
        self._target = port

    def fetches(self):
        with self._lock:
            return [self.requests[k] for k in self.order if self.requests[k][0] == 1 and self.requests[k][3] >= 0]

    def _accept(self):
        while self._running():
            if self._target is None:
                time.sleep(0.05)
                continue
            try:
                client, _ = self.sock.accept()
            except OSError:  # timeout included
                continue
            upstream = socket.create_connection(("127.0.0.1", self._target), timeout=10)
            for s in (client, upstream):
                s.settimeout(0.2)
                self._socks.append(s)
            self._connections += 1
            self._spawn(self._pump, client, upstream, self._connections, True)
            self._spawn(self._pump, upstream, client, self._connections, False)

    def _pump(self, src, dst, conn, is_request):
        pending = bytearray()
        while self._running():
            try:
                data = src.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                break
            pending += data
            while len(pending) >= 8 and len(pending) >= 4 + struct.unpack_from(">i", pending)[0]:
                size = struct.unpack_from(">i", pending)[0]
                with self._lock:
                    if is_request:
                        key, version, corr = struct.unpack_from(">hhi", pending, 4)
                        self.requests[(conn, corr)] = [key, version, 4 + size, -1]
                        self.order.append((conn, corr))
                    else:
                        corr = struct.unpack_from(">i", pending, 4)[0]
                        if (conn, corr) in self.requests:
                            self.requests[(conn, corr)][3] = 4 + size
                del pending[:4 + size]
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def proxied(broker_factory):
    proxy = CountingProxy()
    b = broker_factory(overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    proxy.start(b.port)
    yield b, proxy
    proxy.close()


PARTITIONS = 1000


def test_kafka_python_consumer_of_1000_partitions_keeps_a_session(proxied):
    kafka = pytest.importorskip("kafka")
    b, proxy = proxied
    with WireClient(b.port, timeout=DEADLINE) as w:  # a thousand partition directories take a while
        w.create_topic("wide", partitions=PARTITIONS)
        for i in (0, 499, 999):
            produce(w, "wide", i)
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{proxy.port}", auto_offset_reset="earliest",
                                   enable_auto_commit=False, fetch_max_wait_ms=100, request_timeout_ms=30000)
    try:
        consumer.assign([kafka.TopicPartition("wide", i) for i in range(PARTITIONS)])
        got = []
        deadline = time.monotonic() + DEADLINE
        while len(got) < 3 and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=200).values():
                got += [(r.partition, r.offset) for r in recs]
        assert sorted(got) == [(0, 0), (499, 0), (999, 0)]
        settled = len(proxy.fetches())
        while len(proxy.fetches()) < settled + 10 and time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)  # idle: the session's steady state
        with WireClient(b.port) as w:
            produce(w, "wide", 500)
        while len(got) < 4 and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=200).values():
                got += [(r.partition, r.offset) for r in recs]
        assert (500, 0) in got and len(got) == 4
    finally:
        consumer.close()
    fetches = proxy.fetches()
    assert fetches and all(v == 12 for _, v, _, _ in fetches)  # kafka-python's highest: v12
    full = max(size for _, _, size, _ in fetches)
    steady = [f for f in fetches[settled:settled + 10]]
    assert full > 20 * PARTITIONS  # the full fetch names every partition
    assert all(req < 200 and resp < 200 for _, _, req, resp in steady), steady  # then only the session id


def java_tool(name):
    tool = os.path.join(KAFKA_HOME, "bin", name)
    if not os.path.exists(tool):
        pytest.skip("Kafka 3.8 is not installed (~/.cache/pybroker-kafka)")
    return tool


def test_kafka_console_consumer_uses_sessions(proxied, tmp_path):
    tool = java_tool("kafka-console-consumer.sh")
    b, proxy = proxied
    with WireClient(b.port) as w:
        w.create_topic("java", partitions=50)
        for i in range(50):
            produce(w, "java", i)
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "LOG_DIR": str(tmp_path)}
    proc = subprocess.run([tool, "--bootstrap-server", f"127.0.0.1:{proxy.port}", "--topic", "java",
                           "--from-beginning", "--max-messages", "51", "--timeout-ms", "5000",  # then idle
                           "--consumer-property", "fetch.max.wait.ms=100"],
                          capture_output=True, text=True, timeout=DEADLINE + 30, env=env)
    assert proc.stdout.count("v") == 50, proc.stderr[-2000:]
    fetches = proxy.fetches()
    versions = {v for _, v, _, _ in fetches}
    assert versions and min(versions) >= 12, versions  # Kafka 3.8's client: v16 with topic ids, else v12
    sizes = [req for _, _, req, _ in fetches]
    assert sizes[0] > 20 * 50 and min(sizes) < 120, sizes  # a full fetch, then incremental ones


def test_librdkafka_sessionless_at_current_versions(proxied):
    ck = pytest.importorskip("confluent_kafka")
    b, proxy = proxied
    with WireClient(b.port) as w:
        w.create_topic("rd", partitions=3)
        for i in range(3):
            produce(w, "rd", i)
    c = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "group.id": "g-rd",
                     "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    try:
        c.assign([ck.TopicPartition("rd", i) for i in range(3)])
        got = []
        deadline = time.monotonic() + DEADLINE
        while len(got) < 3 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.offset()))
        assert sorted(got) == [(0, 0), (1, 0), (2, 0)]
    finally:
        c.close()
    assert {v for _, v, _, _ in proxy.fetches()} & set(range(12, 18))  # a flexible version was used


# ---- a cluster: followers fetch in sessions; a consumer at a follower learns the leader ------------

