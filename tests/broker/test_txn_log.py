"""Transactions on the storage side: producer state, the last stable offset, the aborted-transaction
index (``.txnindex``), read_committed fetches and WriteTxnMarkers.

The log-level tests use real log directories and the real Partition; the broker-level ones start real
broker processes (one, or three on ZooKeeper) and drive markers with WriteTxnMarkers wire requests,
as a transaction coordinator would. Expected codes are Kafka's (ProducerAppendInfo, KafkaApis).

The cases of the other tiers: tests/cluster/test_txn_log.py, tests/unit/test_txn_log.py.
"""
import os
import time

import pytest

from pybroker.log.txn_index import AbortedTxn
from pybroker.protocol import REQUESTS
from pybroker.records import (TRANSACTIONAL, Record, build_batch, decode_records)
from tests.kafka_wire import WireClient

INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 47, 48, 49
TRANSACTION_COORDINATOR_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 52, 53
NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION = 6, 3
DEADLINE = 30


# ---- helpers -------------------------------------------------------------------------------------

def txn_batch(pid: int, epoch: int, seq: int, count: int = 1, tag: bytes = b"v", key: bytes | None = None,
              transactional: bool = True) -> bytearray:
    return bytearray(build_batch([Record(b"%s-%d-%d" % (tag, pid, seq + i), key) for i in range(count)],
                             producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                             attributes=TRANSACTIONAL if transactional else 0,
                             base_timestamp=int(time.time() * 1000)))


# ---- records -------------------------------------------------------------------------------------


# ---- the txn index file --------------------------------------------------------------------------


# ---- producer state and the LSO ------------------------------------------------------------------


# ---- restarts, recovery, truncation, retention ---------------------------------------------------


# ---- the log cleaner -----------------------------------------------------------------------------


# ---- a real broker: WriteTxnMarkers on the wire, read_committed fetches --------------------------

TOPIC = "txn"


def write_markers(c: WireClient, markers, version: int = 1):
    """markers: (pid, epoch, commit, coordinator epoch, [(topic, partition)]); {(pid, topic, p): error}."""
    req = REQUESTS[27]
    request = req(markers=[req.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=ce,
        topics=[req.WritableTxnMarkerTopic(name=t, partition_indexes=[i for tt, i in parts if tt == t])
                for t in sorted({t for t, _ in parts})])
        for pid, epoch, commit, ce, parts in markers], )
    resp = c.request(request, version)
    return {(m.producer_id, t.name, p.partition_index): p.error_code
            for m in resp.markers for t in m.topics for p in t.partitions}


def fetch(c: WireClient, topic: str, partition: int, offset: int, isolation: int, max_bytes: int = 1 << 20):
    req = REQUESTS[1]
    request = req(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=isolation,
                  session_id=0, session_epoch=-1, topics=[req.FetchTopic(topic=topic, partitions=[
                      req.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                         log_start_offset=-1, partition_max_bytes=max_bytes)])],
                  forgotten_topics_data=[], rack_id="")
    return c.request(request, 11).responses[0].partitions[0]


def list_latest(c: WireClient, topic: str, partition: int, isolation: int) -> int:
    req = REQUESTS[2]
    request = req(replica_id=-1, isolation_level=isolation, topics=[req.ListOffsetsTopic(name=topic, partitions=[
        req.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1)])])
    p = c.request(request, 5).topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def record_offsets(data) -> list[int]:
    data = bytes(data or b"")
    out, pos = [], 0
    while pos + 12 <= len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
        if pos + size > len(data):
            break
        out += [r.offset for r in decode_records(data[pos:pos + size]) if not r.control]
        pos += size
    return out


NO_VERIFY = {"transaction.partition.verification.enable": "false"}


def new_pid(c: WireClient) -> int:
    """A producer id from InitProducerId (retried while the broker answers a retriable error)."""
    deadline = time.monotonic() + DEADLINE
    r = c.init_producer_id()
    while r.error_code in (14, 15) and time.monotonic() < deadline:  # load in progress, not available yet
        time.sleep(0.1)
        r = c.init_producer_id()
    assert r.error_code == 0, r
    return r.producer_id


class Model:
    """What the storage must say, computed the simple way: open transactions, aborted ones, the LSO."""

    def __init__(self):
        self.open: dict[int, int] = {}  # pid -> first offset
        self.aborted: list[AbortedTxn] = []

    def data(self, pid: int, offset: int, transactional: bool) -> None:
        if transactional:
            self.open.setdefault(pid, offset)

    def marker(self, pid: int, commit: bool, offset: int) -> None:
        first = self.open.pop(pid, None)
        if first is not None and not commit:
            self.aborted.append(AbortedTxn(pid, first, offset, min(self.open.values(), default=offset + 1)))

    def lso(self, hw: int) -> int:
        return min([hw, *self.open.values()])

    def collected(self, fetch_offset: int, upper: int) -> list:
        return [t for t in self.aborted if t.last_offset >= fetch_offset and t.first_offset < upper]


def test_read_committed_fetch_with_markers_from_the_wire(broker_factory):
    b = broker_factory(overrides=NO_VERIFY)
    with WireClient(b.port) as c:
        c.create_topic(TOPIC, 2)
        a, bb = new_pid(c), new_pid(c)
        assert c.produce(TOPIC, 0, txn_batch(a, 0, 0, 2), transactional_id="ta").error_code == 0     # 0-1
        assert c.produce(TOPIC, 0, txn_batch(bb, 0, 0, 1), transactional_id="tb").error_code == 0    # 2
        assert c.produce(TOPIC, 0, txn_batch(a, 0, 2, 1), transactional_id="ta").error_code == 0     # 3
        r = fetch(c, TOPIC, 0, 0, 1)
        assert (r.error_code, r.high_watermark, r.last_stable_offset) == (0, 4, 0)
        assert record_offsets(r.records) == [] and r.aborted_transactions == []
        assert list_latest(c, TOPIC, 0, 1) == 0 and list_latest(c, TOPIC, 0, 0) == 4
        assert fetch(c, TOPIC, 0, 0, 0).aborted_transactions is None  # read_uncommitted: null
        errors = write_markers(c, [(a, 0, False, 0, [(TOPIC, 0)]), (bb, 0, True, 0, [(TOPIC, 0)])])
        assert errors == {(a, TOPIC, 0): 0, (bb, TOPIC, 0): 0}                                         # 4, 5
        r = fetch(c, TOPIC, 0, 0, 1)
        assert (r.high_watermark, r.last_stable_offset) == (6, 6)
        assert record_offsets(r.records) == [0, 1, 2, 3]  # all sent: the consumer drops A's
        assert [(t.producer_id, t.first_offset) for t in r.aborted_transactions] == [(a, 0)]
        assert [(t.producer_id, t.first_offset) for t in fetch(c, TOPIC, 0, 2, 1).aborted_transactions] == [(a, 0)]
        assert fetch(c, TOPIC, 0, 5, 1).aborted_transactions == []
        assert list_latest(c, TOPIC, 0, 1) == 6
        # Kafka's codes: older producer epoch, older coordinator epoch, a partition not hosted here
        write_markers(c, [(a, 3, False, 2, [(TOPIC, 0)])])
        assert write_markers(c, [(a, 2, True, 2, [(TOPIC, 0)])]) == {(a, TOPIC, 0): INVALID_PRODUCER_EPOCH}
        assert write_markers(c, [(a, 3, True, 1, [(TOPIC, 0)])]) == {(a, TOPIC, 0): TRANSACTION_COORDINATOR_FENCED}
        assert write_markers(c, [(a, 3, True, 2, [(TOPIC, 0), (TOPIC, 7), ("nope", 0)])], version=0) == {
            (a, TOPIC, 0): 0, (a, TOPIC, 7): UNKNOWN_TOPIC_OR_PARTITION, (a, "nope", 0): UNKNOWN_TOPIC_OR_PARTITION}


def test_produce_rules_with_a_transactional_id(broker_factory):
    b = broker_factory(overrides=NO_VERIFY)
    with WireClient(b.port) as c:
        c.create_topic(TOPIC, 2)
        pid, other = new_pid(c), new_pid(c)
        # a transactional batch needs the request's transactional id (Kafka: TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        assert c.produce(TOPIC, 0, txn_batch(pid, 0, 0, 1)).error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert c.produce(TOPIC, 0, txn_batch(pid, 0, 0, 1), transactional_id="x").error_code == 0
        # an open transaction takes only transactional batches
        assert c.produce(TOPIC, 0, txn_batch(pid, 0, 1, 1, transactional=False),
                         transactional_id="x").error_code == INVALID_TXN_STATE
        # one producer per request's transactional batches
        req = REQUESTS[0]
        request = req(transactional_id="x", acks=-1, timeout_ms=10000, topic_data=[req.TopicProduceData(
            name=TOPIC, partition_data=[req.PartitionProduceData(index=0, records=txn_batch(pid, 0, 1, 1)),
                                        req.PartitionProduceData(index=1, records=txn_batch(other, 0, 0, 1))])])
        codes = [p.error_code for p in c.request(request, 8).responses[0].partition_responses]
        assert codes == [INVALID_PRODUCER_ID_MAPPING] * 2
        assert c.list_offset(TOPIC, 1) == 0
        # a batch too short for its producer fields, flagged transactional: the same answer as without an id
        short = bytearray(40)
        short[8:12], short[16], short[22] = (28).to_bytes(4, "big"), 2, TRANSACTIONAL
        plain = c.produce(TOPIC, 1, short).error_code
        assert plain != 0 and c.produce(TOPIC, 1, short, transactional_id="x").error_code == plain
        assert c.list_offset(TOPIC, 1) == 0


def test_kill_9_keeps_open_transactions_and_the_index(broker_factory, tmp_path):
    b = broker_factory(overrides={**NO_VERIFY, "log.flush.interval.messages": 1})  # markers wait for the flush
    with WireClient(b.port) as c:
        c.create_topic(TOPIC, 1)
        pids = [new_pid(c) for _ in range(3)]
        for i, pid in enumerate(pids):
            assert c.produce(TOPIC, 0, txn_batch(pid, 0, 0, 2), transactional_id=f"t{i}").error_code == 0
        write_markers(c, [(pids[0], 0, False, 0, [(TOPIC, 0)]), (pids[2], 0, True, 0, [(TOPIC, 0)])])
        before = fetch(c, TOPIC, 0, 0, 1)
        assert before.last_stable_offset == 2  # pids[1]'s transaction is open from 2
    index = os.path.join(b.data_dir, f"{TOPIC}-0", f"{0:020d}.txnindex")
    with open(index, "rb") as f:
        data = f.read()
    b.kill()
    b.start()
    with WireClient(b.port) as c:
        after = fetch(c, TOPIC, 0, 0, 1)
        assert after.last_stable_offset == 2 and record_offsets(after.records) == [0, 1]
        assert [(t.producer_id, t.first_offset) for t in after.aborted_transactions] == [(pids[0], 0)]
        write_markers(c, [(pids[1], 0, True, 0, [(TOPIC, 0)])])
        assert fetch(c, TOPIC, 0, 0, 1).last_stable_offset == 9  # 6 records, 3 markers
    with open(index, "rb") as f:
        assert f.read() == data


def test_confluent_kafka_read_committed_consumer_skips_aborted_records(broker_factory):
    """librdkafka reads our aborted-transaction list and LSO: it delivers committed records only."""
    from confluent_kafka import Consumer, TopicPartition
    b = broker_factory(overrides=NO_VERIFY)
    with WireClient(b.port) as c:
        c.create_topic(TOPIC, 1)
        good, bad = new_pid(c), new_pid(c)
        c.produce(TOPIC, 0, txn_batch(good, 0, 0, 2, b"good"), transactional_id="g")
        c.produce(TOPIC, 0, txn_batch(bad, 0, 0, 3, b"bad"), transactional_id="b")
        c.produce(TOPIC, 0, txn_batch(good, 0, 2, 1, b"good"), transactional_id="g")
        write_markers(c, [(bad, 0, False, 0, [(TOPIC, 0)]), (good, 0, True, 0, [(TOPIC, 0)])])
    values = {}
    for level in ("read_committed", "read_uncommitted"):
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"g-{level}", "isolation.level": level,
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got, deadline = [], time.monotonic() + DEADLINE
        while time.monotonic() < deadline and len(got) < (3 if level == "read_committed" else 6):
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        consumer.close()
        values[level] = got
    assert values["read_committed"] == [b"good-%d-%d" % (good, i) for i in range(3)]
    assert len(values["read_uncommitted"]) == 6


# ---- three brokers: followers' txn indexes follow the markers ------------------------------------


# ---- Apache Kafka 3.8 as the oracle --------------------------------------------------------------

KAFKA_HOME = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "pybroker-kafka", "kafka_2.13-3.8.0")


def start_kafka(base_dir: str):
    """One KRaft Kafka 3.8 (broker and controller) with verification off; (process, port)."""
    import subprocess
    from tests.cluster import Cluster, answers_requests, free_ports
    port, controller = free_ports(2)
    lines = ["process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{controller}",
             f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
             f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
             "inter.broker.listener.name=PLAINTEXT",
             "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
             f"log.dirs={os.path.join(base_dir, 'kafka-data')}", "offsets.topic.replication.factor=1",
             "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
             "transaction.partition.verification.enable=false"]
    os.makedirs(base_dir, exist_ok=True)
    props = os.path.join(base_dir, "kafka.properties")
    with open(props, "w") as f:
        f.write("\n".join(lines) + "\n")
    env = {**os.environ, "LOG_DIR": os.path.join(base_dir, "kafka-logs"), "KAFKA_HEAP_OPTS": "-Xmx512M -Xms512M"}
    bin_dir = os.path.join(KAFKA_HOME, "bin")
    subprocess.run([os.path.join(bin_dir, "kafka-storage.sh"), "format", "-t", "txn-log-oracle-00001", "-c", props],
                   check=True, capture_output=True, env=env, timeout=120)
    proc = subprocess.Popen([os.path.join(bin_dir, "kafka-server-start.sh"), props], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def serving():
        try:
            answers_requests(port, timeout=2)
            return True
        except Exception:  # not listening yet
            return False
    try:
        Cluster.wait_for(lambda: proc.poll() is None and serving(), 120, "Kafka to listen", interval=0.5)
    except BaseException:
        proc.kill()
        proc.wait(60)
        raise
    return proc, port


def oracle_steps(port: int) -> list:
    """One scenario of produces, markers, read_committed fetches and ListOffsets; producer ids named."""
    out = []
    with WireClient(port) as c:
        c.create_topic("oracle", 2)
        deadline = time.monotonic() + DEADLINE
        while c.metadata(["oracle"]).topics[0].partitions[0].leader_id < 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        a, b = new_pid(c), new_pid(c)
        names = {a: "A", b: "B"}

        def view(r):
            aborted = None if r.aborted_transactions is None else \
                [(names.get(t.producer_id, t.producer_id), t.first_offset) for t in r.aborted_transactions]
            return (r.error_code, r.high_watermark, r.last_stable_offset, aborted, record_offsets(r.records))

        out.append(("no transactional id", c.produce("oracle", 0, txn_batch(a, 0, 0, 2)).error_code))
        out.append(("A opens", c.produce("oracle", 0, txn_batch(a, 0, 0, 2), transactional_id="ta").error_code))
        out.append(("B opens", c.produce("oracle", 0, txn_batch(b, 0, 0, 1), transactional_id="tb").error_code))
        out.append(("A again", c.produce("oracle", 0, txn_batch(a, 0, 2, 1), transactional_id="ta").error_code))
        out.append(("A not transactional", c.produce("oracle", 0, txn_batch(a, 0, 3, 1, transactional=False),
                                                     transactional_id="ta").error_code))
        out.append(("open", view(fetch(c, "oracle", 0, 0, 1)), view(fetch(c, "oracle", 0, 0, 0))))
        out.append(("latest", list_latest(c, "oracle", 0, 1), list_latest(c, "oracle", 0, 0)))
        out.append(("markers", sorted((names[k[0]], k[1], k[2], v) for k, v in write_markers(
            c, [(a, 0, False, 3, [("oracle", 0)]), (b, 0, True, 3, [("oracle", 0), ("oracle", 1)])]).items())))
        for offset in (0, 2, 3, 4, 5):
            out.append(("ended", offset, view(fetch(c, "oracle", 0, offset, 1))))
        out.append(("latest", list_latest(c, "oracle", 0, 1), list_latest(c, "oracle", 0, 0)))
        out.append(("older coordinator epoch", write_markers(c, [(a, 0, True, 2, [("oracle", 0)])])[(a, "oracle", 0)]))
        out.append(("bumped epoch", write_markers(c, [(a, 1, False, 3, [("oracle", 0)])])[(a, "oracle", 0)]))
        out.append(("older epoch", write_markers(c, [(a, 0, False, 3, [("oracle", 0)])])[(a, "oracle", 0)]))
        out.append(("older epoch data", c.produce("oracle", 0, txn_batch(a, 0, 3, 1),
                                                  transactional_id="ta").error_code))
        out.append(("unknown partition", write_markers(c, [(a, 1, True, 3, [("oracle", 9)])])[(a, "oracle", 9)]))
        req = REQUESTS[0]
        request = req(transactional_id="x", acks=-1, timeout_ms=10000, topic_data=[req.TopicProduceData(
            name="oracle", partition_data=[req.PartitionProduceData(index=0, records=txn_batch(a, 1, 0, 1)),
                                           req.PartitionProduceData(index=1, records=txn_batch(b, 0, 1, 1))])])
        try:
            codes = [p.error_code for p in c.request(request, 8).responses[0].partition_responses]
        except Exception as exc:  # the broker may refuse the whole request by closing
            codes = type(exc).__name__
        out.append(("two producers", codes))
    return out


def test_storage_answers_as_kafka(tmp_path, broker_factory):
    """The same produces, markers and reads against Kafka 3.8 and pybroker give the same answers."""
    if not os.path.isfile(os.path.join(KAFKA_HOME, "bin", "kafka-server-start.sh")):
        pytest.skip(f"Apache Kafka 3.8 is not installed at {KAFKA_HOME}")
    proc, port = start_kafka(str(tmp_path / "kafka"))
    try:
        theirs = oracle_steps(port)
    finally:
        proc.kill()
        proc.wait(60)
    ours = oracle_steps(broker_factory(overrides=NO_VERIFY).port)
    assert ours == theirs
