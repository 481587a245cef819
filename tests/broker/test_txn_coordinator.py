"""The transaction coordinator (pybroker/transaction) against real brokers and clients.

* ``__transaction_state`` codecs: Kafka's key/value layouts (value v0 written, v0 and v1 read);
  the state machine's epoch bumps, producer id rotation and fencing.
* Out-of-order requests over the wire (tests/kafka_wire.py): one script of requests, each with the
  error code Kafka answers, run against Apache Kafka 3.8 (the oracle; skipped when absent) and
  against pybroker, so the expected codes are Kafka's own (AddPartitionsToTxn v4 verify_only too).
* confluent-kafka's transactional producer: commit and abort; the records it leaves in
  ``__transaction_state`` decode in Kafka's format (on both brokers) and DescribeTransactions /
  ListTransactions tell the same story; a second producer with the same id fences the first;
  Kafka's kafka-transactions.sh lists and describes.
* Timeouts: an ongoing transaction older than transaction.timeout.ms is aborted and its producer
  fenced; idle ids expire with a tombstone; a worn-out epoch moves the id to a new producer id.
* Restarts: a transaction left Ongoing or PrepareCommit survives kill -9 and is finished after.
* ACLs on transactional ids, topics and groups.
* A 3-broker cluster whose coordinator is killed: another broker takes over the id, and gives it
  back (answering NOT_COORDINATOR from then on) when the old one is elected again.

Waits poll for conditions with bounded deadlines; no test asserts a timing.

The cases of the other tiers: tests/cluster/test_txn_coordinator.py, tests/unit/test_txn_coordinator.py.
"""
import os
import struct
import subprocess
import time
import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.coordinator.records import offsets_partition
from pybroker.protocol import REQUESTS, decode_response
from pybroker.records import Record, build_batch, decode_records
from pybroker.transaction import records
from pybroker.transaction.metadata import TxnState
from tests.kafka_wire import ConnectionClosed, WireClient
from tests.txn_brokers import PyBroker, start_target

STATE_TOPIC = "__transaction_state"
STATE_PARTITIONS = 3  # tests/txn_brokers.py TXN_SETTINGS
DEADLINE = 60
COORDINATOR_LOAD_IN_PROGRESS = 14
(UNKNOWN_TOPIC, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, INVALID_PRODUCER_EPOCH,
 INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS,
 OPERATION_NOT_ATTEMPTED, PRODUCER_FENCED, TRANSACTIONAL_ID_NOT_FOUND, TRANSACTION_ABORTABLE) = \
    3, 16, 15, 42, 47, 48, 49, 50, 51, 55, 90, 105, 120
FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN, DESCRIBE_TXNS, LIST_TXNS = 10, 22, 24, 26, 65, 66


def wait_for(predicate, what: str, timeout: float = DEADLINE, interval: float = 0.05):
    """Poll ``predicate`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


# ---- wire helpers --------------------------------------------------------------------------------

def find_coordinator(c: WireClient, tid: str):
    req = REQUESTS[FIND_COORDINATOR]
    return c.request(req(key=tid, key_type=1), 2)


def wait_coordinator(c: WireClient, tid: str) -> int:
    """The coordinator's node id, once FindCoordinator (which creates the state topic) has one."""
    def ready():
        r = find_coordinator(c, tid)
        assert r.error_code in (0, COORDINATOR_NOT_AVAILABLE), r
        return r if r.error_code == 0 else None
    node = wait_for(ready, f"a coordinator for {tid}").node_id
    wait_for(lambda: describe(c, tid).error_code not in (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS),
             f"the coordinator of {tid} to be loaded")  # Kafka loads its state partitions after electing
    return node


def init_pid(c: WireClient, tid, timeout_ms: int = 60000, version: int = 1, pid: int = -1, epoch: int = -1):
    return c.request(REQUESTS[INIT_PRODUCER_ID](transactional_id=tid, transaction_timeout_ms=timeout_ms,
                                                producer_id=pid, producer_epoch=epoch), version)


def add_partitions(c: WireClient, tid: str, pid: int, epoch: int, parts, version: int = 3) -> dict:
    req = REQUESTS[ADD_PARTITIONS]
    by_topic = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    r = c.request(req(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                      v3_and_below_producer_epoch=epoch,
                      v3_and_below_topics=[req.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                           for t, ps in by_topic.items()]), version)
    return {(t.name, p.partition_index): p.partition_error_code
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(c: WireClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return c.request(REQUESTS[END_TXN](transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                       committed=commit), version).error_code


def describe(c: WireClient, tid: str):
    return c.request(REQUESTS[DESCRIBE_TXNS](transactional_ids=[tid]), 0).transaction_states[0]


def list_txns(c: WireClient, states=(), pids=(), duration: int = -1, version: int = 1):
    return c.request(REQUESTS[LIST_TXNS](state_filters=list(states), producer_id_filters=list(pids),
                                         duration_filter=duration), version)


def wait_state(c: WireClient, tid: str, state: str, timeout: float = DEADLINE):
    return wait_for(lambda: (lambda d: d if d.transaction_state == state else None)(describe(c, tid)),
                    f"{tid} to reach {state}", timeout)


def create_topic(bootstrap: str, name: str, partitions: int = 2, rf: int = 1, configs=None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})]).values():
        f.result(DEADLINE)  # a loaded machine can make a just-started Kafka slow to answer


def state_records(c: WireClient) -> list:
    """Every (transactional id, TxnLogValue or None) in ``__transaction_state``, partition by partition."""
    out = []
    for index in range(STATE_PARTITIONS):
        offset = 0
        for _ in range(1000):
            p = c.fetch(STATE_TOPIC, index, offset)
            data = bytes(p.records) if p.records is not None else b""
            if p.error_code or not data:
                break
            pos, last = 0, offset
            while pos + 12 <= len(data):
                length = struct.unpack_from(">i", data, pos + 8)[0]
                if pos + 12 + length > len(data):
                    break
                for rec in decode_records(memoryview(data)[pos:pos + 12 + length]):
                    if rec.offset >= offset:
                        out.append((records.decode_key(rec.key),
                                    None if rec.value is None else records.decode_value(rec.value)))
                    last = max(last, rec.offset + 1)
                pos += 12 + length
            if last == offset:
                break
            offset = last
    return out


# ---- codecs --------------------------------------------------------------------------------------


# ---- one script of out-of-order requests, Kafka 3.8 and pybroker ---------------------------------

@pytest.fixture(scope="module", params=["kafka", "pybroker"])
def target(request, tmp_path_factory):
    broker = start_target(request.param, str(tmp_path_factory.mktemp(request.param)),
                          {"transaction.max.timeout.ms": 120000})
    try:
        yield broker
    finally:
        broker.close()


def test_out_of_order_requests_get_kafkas_error_codes(target):
    topic, tid = f"ooo-{uuid.uuid4().hex[:6]}", f"ooo-{uuid.uuid4().hex[:6]}"
    create_topic(target.bootstrap, topic)
    c = WireClient(target.port)
    wait_coordinator(c, tid)
    tp0, tp1 = (topic, 0), (topic, 1)
    # before InitProducerId: the id is unknown
    assert add_partitions(c, tid, 1234, 0, [tp0]) == {tp0: INVALID_PRODUCER_ID_MAPPING}
    assert end_txn(c, tid, 1234, 0, True) == INVALID_PRODUCER_ID_MAPPING
    assert describe(c, tid).error_code == TRANSACTIONAL_ID_NOT_FOUND
    assert init_pid(c, tid, timeout_ms=120001).error_code == INVALID_TRANSACTION_TIMEOUT
    assert init_pid(c, tid, timeout_ms=0).error_code == INVALID_TRANSACTION_TIMEOUT
    assert init_pid(c, "").error_code == INVALID_REQUEST
    long_id = "x" * 32767  # the longest a STRING can carry: Kafka takes it, so do we
    assert init_pid(c, tid, version=3, pid=5).error_code == INVALID_REQUEST  # epoch missing
    # Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first block of producer ids arrives
    r = wait_for(lambda: (lambda r: r if r.error_code != COORDINATOR_LOAD_IN_PROGRESS else None)(init_pid(c, tid)),
                 "a first producer id")
    assert r.error_code == 0 and r.producer_epoch == 0
    pid = r.producer_id
    assert init_pid(c, long_id).error_code == 0 and describe(c, long_id).transaction_state == "Empty"
    # no transaction yet
    assert end_txn(c, tid, pid, 0, True) == INVALID_TXN_STATE
    assert end_txn(c, tid, pid, 0, False) == INVALID_TXN_STATE
    # wrong producer id / epoch (PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before)
    assert add_partitions(c, tid, pid + 1000, 0, [tp0]) == {tp0: INVALID_PRODUCER_ID_MAPPING}
    assert add_partitions(c, tid, pid, 1, [tp0]) == {tp0: PRODUCER_FENCED}
    assert add_partitions(c, tid, pid, 1, [tp0], version=1) == {tp0: INVALID_PRODUCER_EPOCH}
    # an unknown topic: the others are not attempted
    assert add_partitions(c, tid, pid, 0, [tp0, ("no-such-topic", 0)]) == \
        {tp0: OPERATION_NOT_ATTEMPTED, ("no-such-topic", 0): UNKNOWN_TOPIC}
    assert add_partitions(c, tid, pid, 0, [tp0, tp1]) == {tp0: 0, tp1: 0}
    d = describe(c, tid)
    assert (d.error_code, d.transaction_state, d.producer_id, d.producer_epoch) == (0, "Ongoing", pid, 0)
    assert [(t.topic, sorted(t.partitions)) for t in d.topics] == [(topic, [0, 1])]
    assert d.transaction_timeout_ms == 60000 and d.transaction_start_time_ms > 0
    assert end_txn(c, tid, pid, 1, True) == PRODUCER_FENCED
    assert end_txn(c, tid, pid, 1, True, version=1) == INVALID_PRODUCER_EPOCH
    # the brokers' KIP-890 check
    assert verify_only(c, tid, pid, 0, [tp0, tp1]) == {tp0: 0, tp1: 0}
    assert verify_only(c, tid, pid, 0, [(topic, 7)]) == {(topic, 7): UNKNOWN_TOPIC}
    assert verify_only(c, tid, pid, 1, [tp0]) == {tp0: PRODUCER_FENCED}
    assert verify_only(c, tid, pid + 1000, 0, [tp0]) == {tp0: INVALID_PRODUCER_ID_MAPPING}
    assert verify_only(c, "never-seen", pid, 0, [tp0]) == {tp0: INVALID_PRODUCER_ID_MAPPING}
    listed = list_txns(c, states=["Ongoing", "NoSuchState"], pids=[pid])
    assert listed.error_code == 0 and listed.unknown_state_filters == ["NoSuchState"]
    assert [(s.transactional_id, s.producer_id, s.transaction_state) for s in listed.transaction_states] == \
        [(tid, pid, "Ongoing")]
    assert list_txns(c, pids=[pid], duration=3_600_000).transaction_states == []
    assert list_txns(c, states=["CompleteAbort"], pids=[pid]).transaction_states == []
    # abort; the other outcome is refused, the same one is answered 0 (or CONCURRENT while in flight)
    assert end_txn(c, tid, pid, 0, False) == 0
    assert end_txn(c, tid, pid, 0, True) in (INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS)  # markers in flight
    wait_for(lambda: end_txn(c, tid, pid, 0, False) == 0, "the abort to complete")
    assert wait_state(c, tid, "CompleteAbort").topics == []
    assert end_txn(c, tid, pid, 0, True) == INVALID_TXN_STATE
    assert verify_only(c, tid, pid, 0, [tp0]) == {tp0: TRANSACTION_ABORTABLE}
    # v5 (KIP-890) names TRANSACTION_ABORTABLE in its spec; Kafka 3.8 already answers it to v4 as well
    assert verify_only(c, tid, pid, 0, [tp0, tp1], version=5) == dict.fromkeys([tp0, tp1], TRANSACTION_ABORTABLE)
    assert verify_only(c, tid, pid, 1, [tp0], version=5) == {tp0: PRODUCER_FENCED}
    # a new producer instance bumps the epoch; the old epoch is fenced
    r = init_pid(c, tid)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, 1)
    assert add_partitions(c, tid, pid, 0, [tp0]) == {tp0: PRODUCER_FENCED}
    # KIP-360: resuming with the current id/epoch bumps it; with a stranger's id is fenced
    assert init_pid(c, tid, version=4, pid=pid + 1000, epoch=1).error_code == PRODUCER_FENCED
    assert init_pid(c, tid, version=3, pid=pid + 1000, epoch=1).error_code == INVALID_PRODUCER_EPOCH
    r = init_pid(c, tid, version=4, pid=pid, epoch=1)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, 2)
    # InitProducerId during a transaction: aborted first (CONCURRENT_TRANSACTIONS until done)
    assert add_partitions(c, tid, pid, 2, [tp1]) == {tp1: 0}
    assert init_pid(c, tid).error_code == CONCURRENT_TRANSACTIONS
    r = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(init_pid(c, tid)), "a new epoch")
    assert (r.producer_id, r.producer_epoch) == (pid, 4)  # one bump fenced the old producer, one is ours
    assert add_partitions(c, tid, pid, 2, [tp1]) == {tp1: PRODUCER_FENCED}
    assert describe(c, tid).transaction_state == "Empty"
    c.close()


# ---- confluent-kafka's transactional producer ----------------------------------------------------

def producer(bootstrap: str, tid: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})


def produce_in_transaction(p: Producer, topic: str, n: int = 10, partitions: int = 2) -> None:
    p.begin_transaction()
    errors = []
    for i in range(n):
        p.produce(topic, b"v%d" % i, partition=i % partitions,
                  on_delivery=lambda err, msg: err is not None and errors.append(err))
    assert p.flush(30) == 0
    assert errors == []


def test_confluent_commit_and_abort_leave_kafkas_records(target):
    topic, tid = f"ca-{uuid.uuid4().hex[:6]}", f"ca-{uuid.uuid4().hex[:6]}"
    create_topic(target.bootstrap, topic)
    p = producer(target.bootstrap, tid)
    p.init_transactions(30)
    produce_in_transaction(p, topic)
    p.commit_transaction(30)
    c = WireClient(target.port)
    d = wait_state(c, tid, "CompleteCommit")
    pid = d.producer_id
    produce_in_transaction(p, topic)
    p.abort_transaction(30)
    wait_state(c, tid, "CompleteAbort")
    mine = [v for k, v in state_records(c) if k == tid]
    states = [TxnState.from_id(v.status).label for v in mine]
    assert states == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing", "PrepareAbort",
                      "CompleteAbort"], states
    assert {(v.producer_id, v.producer_epoch) for v in mine} == {(pid, 0)}
    assert set(mine[1].partitions) == {(topic, 0), (topic, 1)} and mine[0].partitions == ()
    assert mine[3].partitions == () and mine[2].partitions == mine[1].partitions
    assert all(v.timeout_ms == 60000 for v in mine)
    listed = list_txns(c, pids=[pid])
    assert [(s.transactional_id, s.transaction_state) for s in listed.transaction_states] == \
        [(tid, "CompleteAbort")]
    c.close()


def test_second_producer_with_the_same_id_fences_the_first(target):
    topic, tid = f"fence-{uuid.uuid4().hex[:6]}", f"fence-{uuid.uuid4().hex[:6]}"
    create_topic(target.bootstrap, topic)
    first = producer(target.bootstrap, tid)
    first.init_transactions(30)
    produce_in_transaction(first, topic)
    second = producer(target.bootstrap, tid)
    second.init_transactions(60)  # aborts the first's transaction, then bumps the epoch twice
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(30)
    assert info.value.args[0].fatal(), info.value.args[0]
    c = WireClient(target.port)
    d = describe(c, tid)
    assert (d.transaction_state, d.producer_epoch) == ("Empty", 2)
    produce_in_transaction(second, topic)
    second.commit_transaction(30)
    assert wait_state(c, tid, "CompleteCommit").producer_epoch == 2
    c.close()


def test_a_topic_deleted_during_the_transaction_does_not_block_its_commit(target):
    kept, gone, tid = (f"{x}-{uuid.uuid4().hex[:6]}" for x in ("kept", "gone", "del"))
    create_topic(target.bootstrap, kept)
    create_topic(target.bootstrap, gone)
    c = WireClient(target.port)
    wait_coordinator(c, tid)
    r = wait_for(lambda: (lambda r: r if r.error_code != COORDINATOR_LOAD_IN_PROGRESS else None)(init_pid(c, tid)),
                 "a producer id")
    assert add_partitions(c, tid, r.producer_id, 0, [(kept, 0), (gone, 0)]) == {(kept, 0): 0, (gone, 0): 0}
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    for f in admin.delete_topics([gone]).values():
        f.result(30)
    wait_for(lambda: c.metadata([gone]).topics[0].error_code == UNKNOWN_TOPIC, f"{gone} to be gone")
    assert end_txn(c, tid, r.producer_id, 0, True) == 0
    assert wait_state(c, tid, "CompleteCommit").topics == []
    c.close()


# ---- timeouts ------------------------------------------------------------------------------------

def test_timed_out_transaction_is_aborted_and_its_producer_fenced(target):
    topic, tid = f"to-{uuid.uuid4().hex[:6]}", f"to-{uuid.uuid4().hex[:6]}"
    create_topic(target.bootstrap, topic)
    p = producer(target.bootstrap, tid, **{"transaction.timeout.ms": 1500})
    p.init_transactions(30)
    produce_in_transaction(p, topic)
    c = WireClient(target.port)
    pid = describe(c, tid).producer_id
    d = wait_state(c, tid, "CompleteAbort")  # the cleanup runs every 500 ms (tests/txn_brokers.py)
    assert (d.producer_id, d.producer_epoch) == (pid, 1)
    with pytest.raises(KafkaException):
        p.commit_transaction(30)
    c.close()


@pytest.mark.parametrize("kind", ["kafka", "pybroker"])
def test_idle_transactional_ids_expire_with_a_tombstone(kind, tmp_path):
    broker = start_target(kind, str(tmp_path), {"transactional.id.expiration.ms": 1000,
                                                "transaction.remove.expired.transaction.cleanup.interval.ms": 300})
    try:
        c = WireClient(broker.port)
        tid = f"idle-{uuid.uuid4().hex[:6]}"
        wait_coordinator(c, tid)
        r = wait_for(lambda: (lambda r: r if r.error_code != COORDINATOR_LOAD_IN_PROGRESS else None)(init_pid(c, tid)),
                     "a producer id")
        assert r.error_code == 0
        wait_for(lambda: describe(c, tid).error_code == TRANSACTIONAL_ID_NOT_FOUND, f"{tid} to expire")
        mine = [v for k, v in state_records(c) if k == tid]
        assert mine[-1] is None and TxnState.from_id(mine[0].status) == TxnState.EMPTY  # the tombstone
        r = init_pid(c, tid)  # a new life: a new producer id
        assert r.error_code == 0 and r.producer_epoch == 0
        c.close()
    finally:
        broker.close()


@pytest.mark.slow
def test_exhausted_epoch_moves_the_id_to_a_new_producer_id(tmp_path):
    """32766 InitProducerIds wear out a producer id's epochs (one stays in reserve for fencing)."""
    broker = PyBroker(str(tmp_path)).start()
    try:
        c = WireClient(broker.port)
        wait_coordinator(c, "worn")
        first = init_pid(c, "worn", version=4)
        pid, epoch = first.producer_id, first.producer_epoch
        for _ in range(32766):
            r = init_pid(c, "worn", version=4, pid=pid, epoch=epoch)
            assert r.error_code == 0 and r.producer_id == pid and r.producer_epoch == epoch + 1, r
            epoch = r.producer_epoch
        assert epoch == 32766
        r = init_pid(c, "worn", version=4, pid=pid, epoch=epoch)
        assert r.error_code == 0 and r.producer_id != pid and r.producer_epoch == 0
        again = init_pid(c, "worn", version=4, pid=pid, epoch=epoch)  # a retry whose answer was lost
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, r.producer_id, 0)
        assert init_pid(c, "worn", version=4, pid=pid, epoch=epoch - 1).error_code == PRODUCER_FENCED
        c.close()
    finally:
        broker.close()


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7f:
        out.append(n & 0x7f | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def init_pid_with_long_id(c: WireClient, size: int):
    """InitProducerId v4 whose compact-string id is ``size`` bytes (past what our encoder writes)."""
    stand_in = "Q" * 200
    correlation, body = c.encode(INIT_PRODUCER_ID, 4, REQUESTS[INIT_PRODUCER_ID](
        transactional_id=stand_in, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
    old = _uvarint(len(stand_in) + 1) + stand_in.encode()
    assert bytes(body).count(old) == 1
    c.send_frame(bytes(body).replace(old, _uvarint(size + 1) + b"y" * size))
    header, response = decode_response(c.recv_frame(), INIT_PRODUCER_ID, 4)
    assert header.correlation_id == correlation
    return response


def test_transactional_id_too_long_to_store_closes_the_connection_and_leaves_nothing_stuck(tmp_path):
    """A flexible InitProducerId could carry an id longer than a string may be (and than
    ``__transaction_state``'s INT16-length key): as Kafka's parser, the broker closes the connection."""
    broker = PyBroker(str(tmp_path)).start()
    try:
        c = WireClient(broker.port)
        for index in range(STATE_PARTITIONS):  # every state partition loaded, whichever the long id maps to
            wait_coordinator(c, next(f"p{i}" for i in range(1000) if offsets_partition(f"p{i}", STATE_PARTITIONS)
                                     == index))
        for _ in range(2):  # the second refusal shows that the first left nothing pending
            with WireClient(broker.port) as refused, pytest.raises(ConnectionClosed):
                init_pid_with_long_id(refused, 40000)
        assert init_pid(c, "z" * 32767, version=4).error_code == 0  # the longest storable id still works
        assert broker.alive()
        c.close()
    finally:
        broker.close()


# ---- restarts (pybroker) -------------------------------------------------------------------------

def test_restart_finishes_ongoing_and_prepared_transactions(tmp_path):
    broker = PyBroker(str(tmp_path)).start()
    try:
        topic = f"restart-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, topic, partitions=1)
        c = WireClient(broker.port, client_id="__admin_client")  # Kafka's name for writes to internal topics
        wait_coordinator(c, "ongoing-id")
        ongoing = init_pid(c, "ongoing-id")
        assert add_partitions(c, "ongoing-id", ongoing.producer_id, 0, [(topic, 0)]) == {(topic, 0): 0}
        # a coordinator that died between PrepareCommit and its markers left this record behind
        pid = init_pid(c, None).producer_id
        now = int(time.time() * 1000)
        prepared = records.TxnLogValue(pid, 0, 60000, TxnState.PREPARE_COMMIT.id, ((topic, 0),), now, now)
        batch = build_batch([Record(key=records.encode_key("prepared-id"),
                                    value=records.encode_value(prepared, empty=False))], base_timestamp=now)
        r = c.produce(STATE_TOPIC, offsets_partition("prepared-id", STATE_PARTITIONS), bytes(batch))
        assert r.error_code == 0, r
        c.close()
        broker.kill()
        broker.restart()
        c = WireClient(broker.port)
        d = wait_for(lambda: (lambda d: d if d.error_code == 0 else None)(describe(c, "ongoing-id")),
                     "the coordinator to load")
        assert (d.transaction_state, d.producer_id) == ("Ongoing", ongoing.producer_id)
        assert [(t.topic, t.partitions) for t in d.topics] == [(topic, [0])]
        d = wait_state(c, "prepared-id", "CompleteCommit")  # its markers were sent after loading
        assert (d.producer_id, d.producer_epoch, d.topics) == (pid, 0, [])
        mine = [v for k, v in state_records(c) if k == "prepared-id"]
        assert [TxnState.from_id(v.status).label for v in mine] == ["PrepareCommit", "CompleteCommit"]
        # a new instance of the ongoing id aborts its transaction first
        r = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(init_pid(c, "ongoing-id")),
                     "the ongoing transaction to be aborted")
        assert (r.producer_id, r.producer_epoch) == (ongoing.producer_id, 2)
        assert describe(c, "ongoing-id").transaction_state == "Empty"
        c.close()
    finally:
        broker.close()


# ---- a cluster whose coordinator dies --------------------------------------------------------------

CLUSTER = {"min.insync.replicas": 2, "default.replication.factor": 3, "offsets.topic.num.partitions": 3,
           "transaction.state.log.num.partitions": STATE_PARTITIONS, "zookeeper.session.timeout.ms": 6000,
           "replica.lag.time.max.ms": 3000, "auto.leader.rebalance.enable": "false"}


def verify_only(c: WireClient, tid: str, pid: int, epoch: int, parts, version: int = 4) -> dict:
    req = REQUESTS[ADD_PARTITIONS]
    by_topic = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    r = c.request(req(transactions=[req.AddPartitionsToTxnTransaction(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=True,
        topics=[req.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])]), version)
    assert r.error_code == 0
    [txn] = r.results_by_transaction
    return {(t.name, p.partition_index): p.partition_error_code for t in txn.topic_results
            for p in t.results_by_partition}


# ---- Kafka's own CLI reads the coordinator ----------------------------------------------------------

def kafka_transactions(bootstrap: str, *args) -> str:
    from tests.txn_brokers import KAFKA_HOME
    path = os.path.join(KAFKA_HOME, "bin", "kafka-transactions.sh")
    if not os.path.exists(path):
        pytest.skip(f"Apache Kafka's CLI is not installed ({path})")
    done = subprocess.run([path, "--bootstrap-server", bootstrap, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_kafka_transactions_cli_lists_and_describes(target):
    topic, tid = f"cli-{uuid.uuid4().hex[:6]}", f"cli-{uuid.uuid4().hex[:6]}"
    create_topic(target.bootstrap, topic)
    p = producer(target.bootstrap, tid)
    p.init_transactions(30)
    produce_in_transaction(p, topic)
    rows = [line.split() for line in kafka_transactions(target.bootstrap, "list").splitlines()[1:]]
    mine = [r for r in rows if r[0] == tid]
    assert len(mine) == 1 and mine[0][3] == "Ongoing", rows  # TransactionalId Coordinator ProducerId State
    out = kafka_transactions(target.bootstrap, "describe", "--transactional-id", tid).splitlines()
    header, values = out[0].split("\t"), out[1].split("\t")
    fields = dict(zip([h.strip() for h in header], [v.strip() for v in values]))
    assert fields["TransactionalId"] == tid and fields["TransactionState"] == "Ongoing", fields
    assert fields["TransactionTimeoutMs"] == "60000" and fields["ProducerEpoch"] == "0", fields
    assert set(fields["TopicPartitions"].split(",")) == {f"{topic}-0", f"{topic}-1"}
    p.commit_transaction(30)


# ---- ACLs (pybroker) ---------------------------------------------------------------------------------

def test_acls_guard_transactional_ids_topics_and_groups(tmp_path):
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)
    anon, authorizer = "User:ANONYMOUS", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

    def allow(rtype, name, op, pattern=ResourcePatternType.LITERAL):
        return AclBinding(rtype, name, pattern, anon, "*", op, AclPermissionType.ALLOW)
    broker = PyBroker(str(tmp_path), {"authorizer.class.name": authorizer, "super.users": anon}).start()
    try:  # bootstrapped as operators do: ACLs made as super user, then restarted without it
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        create_topic(broker.bootstrap, "acl-ok")
        create_topic(broker.bootstrap, "acl-no")
        for f in admin.create_acls([
                allow(ResourceType.TOPIC, "acl-ok", AclOperation.ALL),
                allow(ResourceType.TRANSACTIONAL_ID, "writer", AclOperation.WRITE),
                allow(ResourceType.TRANSACTIONAL_ID, "reader", AclOperation.DESCRIBE),
                allow(ResourceType.GROUP, "g-ok", AclOperation.READ)]).values():
            f.result(30)
    finally:
        broker.process.stop()
    broker.process.overrides.pop("super.users")
    broker.restart()
    try:
        c = WireClient(broker.port)
        assert find_coordinator(c, "nobody").error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        wait_coordinator(c, "writer")
        assert init_pid(c, "nobody").error_code == 53
        assert init_pid(c, "reader").error_code == 53  # DESCRIBE does not allow WRITE
        r = init_pid(c, "writer")
        assert r.error_code == 0
        pid = r.producer_id
        assert add_partitions(c, "reader", pid, 0, [("acl-ok", 0)]) == {("acl-ok", 0): 53}
        assert add_partitions(c, "writer", pid, 0, [("acl-ok", 0), ("acl-no", 0)]) == \
            {("acl-ok", 0): OPERATION_NOT_ATTEMPTED, ("acl-no", 0): 29}  # TOPIC_AUTHORIZATION_FAILED
        assert add_partitions(c, "writer", pid, 0, [("acl-ok", 0)]) == {("acl-ok", 0): 0}
        add_offsets = REQUESTS[25]
        assert c.request(add_offsets(transactional_id="writer", producer_id=pid, producer_epoch=0,
                                     group_id="g-no"), 3).error_code == 30  # GROUP_AUTHORIZATION_FAILED
        assert c.request(add_offsets(transactional_id="writer", producer_id=pid, producer_epoch=0,
                                     group_id="g-ok"), 3).error_code == 0
        assert end_txn(c, "reader", pid, 0, True) == 53
        assert describe(c, "nobody").error_code == 53
        assert describe(c, "reader").error_code == TRANSACTIONAL_ID_NOT_FOUND
        d = describe(c, "writer")
        assert d.transaction_state == "Ongoing"
        assert sorted(t.topic for t in d.topics) == ["acl-ok"]  # __consumer_offsets: no DESCRIBE on it
        assert [s.transactional_id for s in list_txns(c).transaction_states] == ["writer"]
        assert end_txn(c, "writer", pid, 0, True) == 0
        c.close()
    finally:
        broker.close()
