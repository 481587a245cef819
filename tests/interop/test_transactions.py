"""Kafka transactions end to end with unmodified clients, on Apache Kafka 3.8 (the oracle) and on pybroker.

Every test body runs against both brokers (tests/txn_brokers.py): Kafka's answers prove the test
right, pybroker's must match. The pybroker variants skip until pybroker advertises EndTxn.
Longer soaks (more records, more kills, the Kafka kill -9 variants) run with PYBROKER_TXN_SOAK=1.
"""
import asyncio
import collections
import os
import random
import signal
import struct
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol import REQUESTS
from tests.broker import ROOT
from tests.clientutil import Rec, check_exactly_once, wait_until
from tests.kafka_wire import WireClient
from tests.txn_brokers import TXN_SETTINGS, pybroker_supports_transactions, start_target
from tests.txn_wire import LONGEST_STRING, TxnWire

SOAK = os.environ.get("PYBROKER_TXN_SOAK", "").lower() not in ("", "0", "false", "no")
DEADLINE = 30
TARGETS = ("kafka", "pybroker")
COPIER = os.path.join(ROOT, "tests", "txn_copier.py")
COPY_RECORDS = 100_000 if SOAK else 20_000
COPY_KILLS = 10 if SOAK else 4
QUIET = {"log_level": 3}  # librdkafka: errors only (reconnects after a kill are expected)

# Kafka error codes (error-codes.tsv)
INVALID_REQUEST, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 42, 47, 48
INVALID_PRODUCER_ID_MAPPING, INVALID_TRANSACTION_TIMEOUT, PRODUCER_FENCED = 49, 50, 90
NOT_LEADER_OR_FOLLOWER = 6


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory):
    """One broker of each kind for the module's tests (each test uses its own topics and ids)."""
    broker = start_target(request.param, str(tmp_path_factory.mktemp(request.param)))
    yield broker
    broker.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topics(bootstrap: str, *topics: tuple[str, int], replication: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, n, replication) for t, n in topics]).values():
        future.result(DEADLINE)

    def led():  # Kafka answers CreateTopics before its partitions have leaders
        listed = admin.list_topics(timeout=DEADLINE).topics
        return all(t in listed and len(listed[t].partitions) == n and
                   all(p.leader >= 0 and not p.error for p in listed[t].partitions.values()) for t, n in topics)
    assert wait_until(led, timeout=DEADLINE), "the new topics have no leaders"


def txn_producer(bootstrap: str, txn_id: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **QUIET, **extra})
    p.init_transactions(DEADLINE)
    return p


def produce_all(producer: Producer, topic: str, values: list[bytes], partitions: int = 2) -> list[Rec]:
    """Produce ``values`` (value i to partition i % partitions, key = value) and flush: what was acked."""
    acked, errors = [], []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value()))

    for i, v in enumerate(values):
        producer.produce(topic, key=v, value=v, partition=i % partitions, on_delivery=report)
    assert producer.flush(DEADLINE) == 0 and not errors, errors[:3]
    return sorted(acked, key=lambda r: (r.partition, r.offset))


# ---- readers: each client, either isolation level, until a given value has arrived -------------

def read_confluent(bootstrap: str, topic: str, partitions: int, isolation: str, until=()) -> list:
    """Every record up to the end of each partition (the LSO under read_committed), via partition EOF,
    once the value (or every value) ``until`` has arrived."""
    until = {until} if isinstance(until, bytes) else set(until)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True, **QUIET})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got, eof = [], set()

        def drained():
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    got.append(Rec(m.partition(), m.offset(), m.key(), m.value()))
                    eof.discard(m.partition())
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                else:
                    raise KafkaException(m.error())
            return len(eof) == partitions and until <= {r.value for r in got}

        assert wait_until(drained, DEADLINE), f"{topic}: no end of partitions; got {len(got)} records"
        return got
    finally:
        c.close()


def read_kafka_python(bootstrap: str, topic: str, partitions: int, isolation: str, until: bytes) -> tuple:
    """(records, end offsets as this isolation level sees them)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      group_id=None, consumer_timeout_ms=200)
    try:
        tps = [KTP(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning()
        got = []

        def arrived():
            for batch in c.poll(200, max_records=1000).values():
                got.extend(Rec(m.partition, m.offset, m.key, m.value) for m in batch)
            return any(r.value == until for r in got)

        assert wait_until(arrived, DEADLINE), f"kafka-python {isolation}: {until!r} never arrived"
        for batch in c.poll(300).values():  # whatever else a fetch hands out next
            got.extend(Rec(m.partition, m.offset, m.key, m.value) for m in batch)
        ends = c.end_offsets(tps)
        return got, {tp.partition: o for tp, o in ends.items()}
    finally:
        c.close()


def read_aiokafka(bootstrap: str, topic: str, partitions: int, isolation: str, until: bytes) -> tuple:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def main():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
        await c.start()
        try:
            tps = [ATP(topic, p) for p in range(partitions)]
            c.assign(tps)
            await c.seek_to_beginning()
            got = []
            while not any(r.value == until for r in got):
                for batch in (await c.getmany(timeout_ms=200)).values():
                    got.extend(Rec(m.partition, m.offset, m.key, m.value) for m in batch)
            for batch in (await c.getmany(timeout_ms=300)).values():
                got.extend(Rec(m.partition, m.offset, m.key, m.value) for m in batch)
            ends = await c.end_offsets(tps)
            return got, {tp.partition: o for tp, o in ends.items()}
        finally:
            await c.stop()

    return asyncio.run(asyncio.wait_for(main(), DEADLINE))


def by_position(recs) -> list:
    return sorted(recs, key=lambda r: (r.partition, r.offset))


# ---- raw fetch: what the broker itself sends --------------------------------------------------

BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
ATTRIBUTES_AT, LAST_DELTA_AT, PRODUCER_AT = 21, 23, 43


def batches(data: bytes | None):
    """(base offset, last offset, attributes, producer id) of each whole batch in a fetched slice."""
    data, pos = bytes(data or b""), 0
    while pos + 61 <= len(data):
        base, length = BATCH_HEAD.unpack_from(data, pos)
        if pos + 12 + length > len(data):
            break
        attributes, = struct.unpack_from(">h", data, pos + ATTRIBUTES_AT)
        last_delta, = struct.unpack_from(">i", data, pos + LAST_DELTA_AT)
        producer, = struct.unpack_from(">q", data, pos + PRODUCER_AT)
        yield base, base + last_delta, attributes, producer
        pos += 12 + length


def raw_fetch(port: int, topic: str, partition: int, isolation: int, version: int = 11):
    req = REQUESTS[1]
    request = req(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation,
                  session_id=0, session_epoch=-1, topics=[req.FetchTopic(topic=topic, partitions=[
                      req.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=0,
                                         log_start_offset=-1, partition_max_bytes=1 << 20)])],
                  forgotten_topics_data=[], rack_id="")
    with WireClient(port) as c:
        return c.request(request, version).responses[0].partitions[0]


# ---- 1. commit and abort, read by three clients at both isolation levels ------------------------

def test_commit_and_abort_seen_by_every_client(target):
    topic = unique("txn-basic")
    create_topics(target.bootstrap, (topic, 2))
    p = txn_producer(target.bootstrap, unique("basic"))
    txns = {}
    for name, commit in (("A", True), ("B", False), ("C", True), ("E", True)):
        p.begin_transaction()
        txns[name] = produce_all(p, topic, [b"%s-%d" % (name.encode(), i) for i in range(6)])
        if commit:
            p.commit_transaction(DEADLINE)
        else:
            p.abort_transaction(DEADLINE)
    p.begin_transaction()  # left open: read_committed stops at its first offset (the LSO)
    txns["D"] = produce_all(p, topic, [b"D-%d" % i for i in range(4)])
    committed = by_position(txns["A"] + txns["C"] + txns["E"])
    written = by_position(committed + txns["B"] + txns["D"])
    open_first = {r.partition: r.offset for r in reversed(txns["D"])}
    high = {r.partition: r.offset + 1 for r in txns["D"]}
    try:
        # every transaction ended with one control batch per partition: offsets leave a gap for each
        for part in range(2):
            offsets = [r.offset for r in written if r.partition == part]
            assert offsets == [0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17], offsets

        got = read_confluent(target.bootstrap, topic, 2, "read_committed")
        check_exactly_once(committed, got, headers=False)
        assert by_position(got) == committed
        got = read_confluent(target.bootstrap, topic, 2, "read_uncommitted", until=b"D-3")
        assert by_position(got) == written

        last = b"E-5"
        for reader in (read_kafka_python, read_aiokafka):
            got, ends = reader(target.bootstrap, topic, 2, "read_committed", last)
            assert by_position(got) == committed, reader.__name__
            assert ends == open_first, (reader.__name__, ends)  # latest under read_committed = the LSO
            got, ends = reader(target.bootstrap, topic, 2, "read_uncommitted", b"D-3")
            assert by_position(got) == written, reader.__name__
            assert ends == high, (reader.__name__, ends)

        # the broker's own view: aborted_transactions under read_committed, control batches in the log
        for part in range(2):
            rc = raw_fetch(target.port, topic, part, 1)
            assert rc.error_code == 0 and rc.last_stable_offset == open_first[part], rc
            aborted = [(a.producer_id, a.first_offset) for a in rc.aborted_transactions or []]
            b_first = min(r.offset for r in txns["B"] if r.partition == part)
            assert [o for _, o in aborted] == [b_first], aborted
            shown = list(batches(rc.records))
            assert shown and all(b[2] & 0x10 for b in shown), shown  # all transactional
            assert max(b[1] for b in shown) < open_first[part]  # nothing at or past the LSO
            ru = raw_fetch(target.port, topic, part, 0)
            assert ru.high_watermark == high[part], ru
            controls = [b for b in batches(ru.records) if b[2] & 0x20]
            assert [b[0] for b in controls] == [3, 7, 11, 15], controls
            assert {b[3] for b in controls} == {aborted[0][0]}
    finally:
        p.abort_transaction(DEADLINE)


# ---- 2. consume-transform-produce, the copier killed with SIGKILL again and again ----------------

class Copier:
    """tests/txn_copier.py in its own process, killed and restarted by PID."""

    def __init__(self, bootstrap: str, source: str, sink: str, partitions: int, total: int, log_path: str):
        self.group, self.txn_id = unique("copier-group"), unique("copier")
        self.args = [sys.executable, COPIER, bootstrap, source, sink, self.group, self.txn_id, str(partitions),
                     str(total)]
        self.bootstrap, self.source, self.partitions = bootstrap, source, partitions
        self.log_path = log_path
        self.proc = None
        self.starts = 0
        # read_uncommitted: OffsetFetch without require_stable, so progress shows while commits are pending
        self.probe = Consumer({"bootstrap.servers": bootstrap, "group.id": self.group, "enable.auto.commit": False,
                               "isolation.level": "read_uncommitted", **QUIET})

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        self.starts += 1

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(DEADLINE)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def progress(self) -> int:
        """Input records the copier's committed transactions have consumed (the group's committed offsets)."""
        try:
            tps = self.probe.committed([TopicPartition(self.source, p) for p in range(self.partitions)], timeout=5)
        except KafkaException:  # coordinator moving (a broker was killed): no answer yet
            return -1
        return sum(max(tp.offset, 0) for tp in tps)

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def close(self) -> None:
        self.kill()
        self.probe.close()


def fill_input(bootstrap: str, topic: str, partitions: int, total: int) -> dict:
    """``total`` records round robin over the partitions: {partition: [values in order]}."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20, **QUIET})
    values = collections.defaultdict(list)
    for i in range(total):
        v = b"in-%d-%06d" % (i % partitions, i)
        for _ in range(1000):  # bounded: a full queue drains within seconds
            try:
                p.produce(topic, key=b"k%d" % (i % 97), value=v, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
        values[i % partitions].append(v)
    assert p.flush(DEADLINE) == 0
    return values


def read_values(bootstrap: str, topic: str, partitions: int) -> dict:
    """{partition: [values in offset order]} read with read_committed to the end of each partition."""
    out = collections.defaultdict(list)
    for r in by_position(read_confluent(bootstrap, topic, partitions, "read_committed")):
        out[r.partition].append(r.value)
    return out


def run_copier_with_kills(copier: Copier, total: int, kills: int, chaos=None) -> None:
    """Start the copier; kill it with SIGKILL at ``kills`` random progress points, restarting it each
    time; ``chaos(copier)`` (when given) runs once, mid-copy, instead of one copier kill. Ends when
    the group's committed offsets cover every input record."""
    rng = random.Random(os.environ.get("PYBROKER_TXN_SEED", "7"))
    points = sorted(rng.uniform(0.05, 0.85) * total for _ in range(kills))
    assert wait_until(lambda: copier.progress() == 0, DEADLINE)  # the probe is connected before the copier starts
    copier.start()
    for i, point in enumerate(points):
        at = copier.progress()
        reached = wait_until(lambda: copier.progress() >= max(point, at + 1) or not copier.alive(), 2 * DEADLINE,
                             interval=0.02)
        assert copier.alive() or copier.proc.returncode == 0, copier.log()[-3000:]
        assert reached, f"no progress past {point:.0f} within {2 * DEADLINE}s: {copier.log()[-3000:]}"
        if chaos is not None and i == len(points) // 2:
            chaos(copier)
            continue
        copier.kill()
        copier.start()
    assert wait_until(lambda: copier.progress() >= total or not copier.alive(), 4 * DEADLINE), \
        f"copier stalled at {copier.progress()} of {total}: {copier.log()[-3000:]}"
    assert copier.progress() >= total, copier.log()[-3000:]


def check_copied(bootstrap: str, sink: str, expected: dict) -> None:
    got = read_values(bootstrap, sink, len(expected))
    for p, values in expected.items():
        dupes = [v for v, n in collections.Counter(got.get(p, [])).items() if n > 1]
        assert not dupes, f"partition {p}: {len(dupes)} duplicated, e.g. {dupes[:3]}"
        missing = set(values) - set(got.get(p, []))
        assert not missing, f"partition {p}: {len(missing)} missing, e.g. {sorted(missing)[:3]}"
        assert got[p] == values, f"partition {p}: order differs"
    assert set(got) <= set(expected)


def test_copier_killed_repeatedly_copies_exactly_once(target, tmp_path):
    source, sink = unique("copy-in"), unique("copy-out")
    create_topics(target.bootstrap, (source, 3), (sink, 3))
    expected = fill_input(target.bootstrap, source, 3, COPY_RECORDS)
    copier = Copier(target.bootstrap, source, sink, 3, COPY_RECORDS, str(tmp_path / "copier.log"))
    try:
        run_copier_with_kills(copier, COPY_RECORDS, COPY_KILLS)
        assert copier.starts == COPY_KILLS + 1
        check_copied(target.bootstrap, sink, expected)
    finally:
        copier.close()


# ---- 3. zombie fencing ---------------------------------------------------------------------------

def fenced(exc: KafkaException) -> bool:
    err = exc.args[0]
    return err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH)


def test_zombie_producer_is_fenced_and_its_data_never_visible(target):
    topic, txn_id = unique("txn-zombie"), unique("zombie")
    create_topics(target.bootstrap, (topic, 1))
    old = txn_producer(target.bootstrap, txn_id)
    old.begin_transaction()
    produce_all(old, topic, [b"old-1"], 1)
    new = txn_producer(target.bootstrap, txn_id)  # bumps the epoch: aborts and fences the old one
    new.begin_transaction()
    produce_all(new, topic, [b"new-1"], 1)
    new.commit_transaction(DEADLINE)
    old.produce(topic, value=b"old-2", partition=0)
    try:  # the fenced produce surfaces as a fatal error here or at the commit
        old.flush(DEADLINE)
    except KafkaException as exc:
        assert fenced(exc), exc
    with pytest.raises(KafkaException) as info:
        old.commit_transaction(DEADLINE)
    assert fenced(info.value), info.value
    assert [r.value for r in read_confluent(target.bootstrap, topic, 1, "read_committed")] == [b"new-1"]
    uncommitted = [r.value for r in read_confluent(target.bootstrap, topic, 1, "read_uncommitted")]
    assert uncommitted == [b"old-1", b"new-1"], uncommitted  # the aborted write stays in the log, hidden


# ---- 4. transaction timeout ---------------------------------------------------------------------

def test_stalled_transaction_is_aborted_by_the_broker(target):
    topic = unique("txn-timeout")
    create_topics(target.bootstrap, (topic, 1))
    stalled = txn_producer(target.bootstrap, unique("stall"), **{"transaction.timeout.ms": 2000})
    stalled.begin_transaction()
    produce_all(stalled, topic, [b"stalled-%d" % i for i in range(3)], 1)
    plain = Producer({"bootstrap.servers": target.bootstrap, "enable.idempotence": True, **QUIET})
    produce_all(plain, topic, [b"after"], 1)
    # the broker aborts the stalled transaction: read_committed moves past it to the later record
    got = read_confluent(target.bootstrap, topic, 1, "read_committed", until=b"after")
    assert [r.value for r in got] == [b"after"]
    with pytest.raises(KafkaException) as info:
        stalled.commit_transaction(DEADLINE)
    err = info.value.args[0]
    assert err.fatal() or err.txn_requires_abort() or fenced(info.value), err
    assert [r.value for r in read_confluent(target.bootstrap, topic, 1, "read_committed")] == [b"after"]


# ---- 5. the broker killed with SIGKILL mid-transaction and right after a commit -----------------

@pytest.fixture(params=TARGETS)
def crash_target(request, tmp_path):
    """A broker of its own, to be killed; Kafka's recovery after kill -9 is slow, so it runs in soaks only."""
    if request.param == "kafka" and not SOAK:
        pytest.skip("Kafka 3.8 restarts slowly after kill -9 (~15 s): run with PYBROKER_TXN_SOAK=1")
    broker = start_target(request.param, str(tmp_path / request.param))
    yield broker
    broker.close()


def test_broker_killed_mid_transaction_never_shows_half(crash_target):
    b = crash_target
    topic = unique("txn-crash")
    create_topics(b.bootstrap, (topic, 2))
    txn_id = unique("crash")
    open_txn = txn_producer(b.bootstrap, txn_id)
    open_txn.begin_transaction()
    assert len(produce_all(open_txn, topic, [b"open-%d" % i for i in range(10)])) == 10
    lapsing = txn_producer(b.bootstrap, unique("lapse"), **{"transaction.timeout.ms": 3000})
    lapsing.begin_transaction()  # never ended: after the restart only its timeout can abort it
    assert len(produce_all(lapsing, topic, [b"lapsed-%d" % i for i in range(10)])) == 10
    b.kill()
    del open_txn, lapsing
    b.restart()
    successor = txn_producer(b.bootstrap, txn_id)  # aborts the transaction the crash left open
    successor.begin_transaction()
    after = produce_all(successor, topic, [b"after-%d" % i for i in range(4)])
    successor.commit_transaction(DEADLINE)
    plain = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, **QUIET})
    tail = produce_all(plain, topic, [b"tail-0", b"tail-1"])
    got = read_confluent(b.bootstrap, topic, 2, "read_committed", until=(b"tail-0", b"tail-1"))
    assert by_position(got) == by_position(after + tail), b.stderr()[-3000:]

    # killed right after commit_transaction returned: the commit survives the restart
    done = txn_producer(b.bootstrap, unique("crash-commit"))
    done.begin_transaction()
    committed = produce_all(done, topic, [b"done-%d" % i for i in range(10)])
    done.commit_transaction(DEADLINE)
    b.kill()
    del done
    b.restart()
    got = read_confluent(b.bootstrap, topic, 2, "read_committed", until=b"done-9")
    assert by_position(got) == by_position(after + tail + committed), b.stderr()[-3000:]


# ---- 6. bad input on the wire: the error codes Kafka 3.8 answers --------------------------------

# what Kafka 3.8 answers (asserted on the oracle itself, then on pybroker)
EXPECTED_WIRE_ERRORS = {
    "add partitions before InitProducerId": INVALID_PRODUCER_ID_MAPPING,
    "end a transaction never begun": INVALID_TXN_STATE,
    "add partitions with a fenced epoch": PRODUCER_FENCED,
    "end a transaction with a fenced epoch": PRODUCER_FENCED,
    "transactional batch from a fenced epoch": INVALID_PRODUCER_EPOCH,  # at every Produce version
    # KIP-890 verification; Produce v11+ answers TRANSACTION_ABORTABLE (120) instead, v3-v10 this
    "transactional batch to a partition not in the transaction": INVALID_TXN_STATE,
    "empty transactional id": INVALID_REQUEST,
    "longest transactional id": 0,
    "timeout over transaction.max.timeout.ms": INVALID_TRANSACTION_TIMEOUT,
    "transactional id longer than a protocol string": "closed",  # unparseable request: connection dropped
}


def wire_errors(port: int, topic: str) -> dict:
    w = TxnWire(port)
    got = {}
    try:
        w.coordinator("any")  # single broker: once it answers, it coordinates every transactional id
        tid = unique("wire-end")
        code, pid, epoch = w.init(tid)
        assert code == 0, code
        got["add partitions before InitProducerId"] = w.add(unique("never-inited"), pid + 1000, 0, topic)
        got["end a transaction never begun"] = w.end(tid, pid, epoch)

        tid = unique("wire-fence")
        _, pid, epoch = w.init(tid)
        assert w.add(tid, pid, epoch, topic) == 0
        answers = []  # a new partition may still be without its leader (6): nothing was written, retry
        assert wait_until(lambda: answers.append(w.produce(tid, pid, epoch, 0, topic, b"first")) or
                          answers[-1] != NOT_LEADER_OR_FOLLOWER, timeout=DEADLINE) and answers[-1] == 0, answers
        code, pid2, epoch2 = w.init(tid)  # the second init aborts the open transaction and bumps the epoch
        assert code == 0 and pid2 == pid and epoch2 > epoch, (code, pid2, epoch2)
        got["add partitions with a fenced epoch"] = w.add(tid, pid, epoch, topic)
        got["end a transaction with a fenced epoch"] = w.end(tid, pid, epoch)
        got["transactional batch from a fenced epoch"] = w.produce(tid, pid, epoch, 1, topic, b"zombie")

        tid = unique("wire-unadded")
        _, pid, epoch = w.init(tid)
        got["transactional batch to a partition not in the transaction"] = \
            w.produce(tid, pid, epoch, 0, topic, b"unadded")
        got["empty transactional id"] = w.init("")[0]
        got["longest transactional id"] = w.init("x" * LONGEST_STRING)[0]
        got["timeout over transaction.max.timeout.ms"] = w.init(unique("wire-timeout"), 900_001)[0]
        got["transactional id longer than a protocol string"] = w.overlong_init(LONGEST_STRING + 1)
    finally:
        w.close()
    return got


def test_bad_transactional_requests_get_kafkas_error_codes(target):
    topic = unique("txn-wire")
    create_topics(target.bootstrap, (topic, 1))
    got = wire_errors(target.port, topic)
    wrong = {case: (code, EXPECTED_WIRE_ERRORS[case]) for case, code in got.items()
             if code != EXPECTED_WIRE_ERRORS[case]}
    assert not wrong, f"(got, Kafka's) by case: {wrong}"
    # nothing the refused requests sent became visible
    assert read_confluent(target.bootstrap, topic, 1, "read_committed") == []


# ---- 7. quixstreams with processing_guarantee="exactly-once", killed and restarted ---------------

QUIX_APP = os.path.join(ROOT, "tests", "quix_eos_app.py")
QUIX_KEYS = 6
QUIX_SECOND_ROUND = 3000  # input fed before the kill: the kill lands while the app works through it


class QuixApp:
    """tests/quix_eos_app.py in the quixstreams virtualenv, killed by PID."""

    def __init__(self, bootstrap: str, source: str, sink: str, state_dir: str, log_path: str):
        from tests.quix_env import quixstreams_python
        python, why = quixstreams_python()
        if python is None:
            pytest.skip(why)
        self.args = [python, QUIX_APP, bootstrap, unique("quix-eos"), source, sink, state_dir, unique("quix-txn")]
        self.log_path, self.proc = log_path, None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(DEADLINE)

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-3000:]


class Totals:
    """The application's output read with read_committed, and the model it must equal."""

    def __init__(self, bootstrap: str, sink: str):
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("quix-out"),
                                  "enable.auto.commit": False, "isolation.level": "read_committed", **QUIET})
        self.consumer.assign([TopicPartition(sink, 0, 0)])
        self.raw = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("quix-raw"),
                             "enable.auto.commit": False, "isolation.level": "read_uncommitted", **QUIET})
        self.raw.assign([TopicPartition(sink, 0, 0)])
        self.written = 0
        self.got = collections.defaultdict(list)
        self.want = collections.defaultdict(list)

    def expect(self, key: str, amount: int) -> None:
        total, count = self.want[key][-1] if self.want[key] else (0, 0)
        self.want[key].append((total + amount, count + 1))

    def count(self) -> int:
        import json
        for m in self.consumer.consume(500, 0.2):
            assert m.error() is None, m.error()
            v = json.loads(m.value())
            self.got[m.key().decode()].append((v["sum"], v["count"]))
        return sum(map(len, self.got.values()))

    def uncommitted(self) -> int:
        """Records written to the output so far, committed or not."""
        self.written += sum(m.error() is None for m in self.raw.consume(500, 0.05))
        return self.written

    def close(self) -> None:
        self.consumer.close()
        self.raw.close()


def feed(producer: Producer, topic: str, totals: Totals, start: int, count: int) -> None:
    import json
    for i in range(start, start + count):
        key, amount = f"key-{i % QUIX_KEYS}", 1 + (i * 7) % 13
        producer.produce(topic, key=key, value=json.dumps({"amount": amount}).encode(), partition=i % 2)
        totals.expect(key, amount)
    assert producer.flush(DEADLINE) == 0


def test_quixstreams_exactly_once_survives_a_kill(target, tmp_path):
    source, sink = unique("quix-in"), unique("quix-out")
    create_topics(target.bootstrap, (source, 2), (sink, 1))
    app = QuixApp(target.bootstrap, source, sink, str(tmp_path / "state"), str(tmp_path / "quix.log"))
    totals = Totals(target.bootstrap, sink)
    producer = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 5, **QUIET})
    try:
        app.start()
        feed(producer, source, totals, 0, 60)
        assert wait_until(lambda: totals.count() >= 60 or not app.alive(), 3 * DEADLINE), app.log()
        assert dict(totals.got) == dict(totals.want), app.log()
        # more input; SIGKILL as soon as output of it is written (most likely inside an open transaction)
        feed(producer, source, totals, 60, QUIX_SECOND_ROUND)
        assert wait_until(lambda: totals.uncommitted() > 60 or not app.alive(), 3 * DEADLINE), app.log()
        app.kill()
        app.start()
        assert wait_until(lambda: totals.count() >= 60 + QUIX_SECOND_ROUND or not app.alive(), 3 * DEADLINE), app.log()
        totals.count()  # one more read: anything beyond the model would show up as a difference
        assert dict(totals.got) == dict(totals.want), app.log()
    finally:
        app.kill()
        totals.close()


# ---- 8. three pybroker brokers: the copier's transaction coordinator killed with SIGKILL ---------

CLUSTER_SETTINGS = {**TXN_SETTINGS, "offsets.topic.replication.factor": 3,
                    "transaction.state.log.replication.factor": 3, "transaction.state.log.min.isr": 2,
                    "default.replication.factor": 3, "min.insync.replicas": 2}


@pytest.mark.slow
def test_cluster_copier_survives_its_coordinator_killed(tmp_path, zookeeper):
    from tests.cluster import Cluster
    if not pybroker_supports_transactions():
        pytest.skip("pybroker does not advertise EndTxn (API 26) in ApiVersions yet")
    records = COPY_RECORDS // 2
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=CLUSTER_SETTINGS) as cluster:
        source, sink = unique("cl-in"), unique("cl-out")
        create_topics(cluster.bootstrap, (source, 3), (sink, 3), replication=3)
        expected = fill_input(cluster.bootstrap, source, 3, records)
        copier = Copier(cluster.bootstrap, source, sink, 3, records, str(tmp_path / "copier.log"))
        killed = []

        def kill_coordinator(c: Copier) -> None:
            alive = next(b for b in cluster.brokers.values() if b.alive())
            wire = TxnWire(alive.port)
            try:
                node = wire.coordinator(c.txn_id)
            finally:
                wire.close()
            cluster.kill(node)
            killed.append(node)
            cluster.restart(node)

        try:
            run_copier_with_kills(copier, records, 3 if SOAK else 1, chaos=kill_coordinator)
            assert killed, "the coordinator was never killed"
            check_copied(cluster.bootstrap, sink, expected)
        except BaseException:
            for broker_id, b in cluster.brokers.items():
                print(f"--- broker {broker_id} stderr tail:\n{b.stderr()[-3000:]}")
            raise
        finally:
            copier.close()
