"""Our clients' transactions against real brokers: Apache Kafka 3.8 (the oracle) and pybroker (run
once it advertises EndTxn): the transactional Producer (init/begin/send_offsets/commit/abort,
fencing), the read_committed Consumer, confluent-kafka reading what our producer wrote, and the
``pybroker transactions`` CLI. Offline checks of the flags, the config rules and the
transactional batch attribute (native and pure) come first.

The cases of the other tiers: tests/unit/test_client_transactions.py.
"""
import asyncio
import subprocess
import sys
import time
import uuid

import pytest
from hypothesis import strategies as st

from pybroker.client import (AdminClient, AsyncProducer, Consumer, ConsumerGroupMetadata, NewTopic,
                             Producer, TopicPartition, TransactionError)
from pybroker.protocol.errors import ErrorCode
from tests.txn_brokers import start_target

WAIT_S = 30


# ---- offline ----------------------------------------------------------------------------------


steps = st.lists(st.tuples(st.sampled_from([1, 2, 9]), st.sampled_from(["data", "data", "commit", "abort"]),
                           st.integers(1, 3)), max_size=25)


# ---- against a broker --------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["kafka", "pybroker"])
def target(request, tmp_path_factory):
    broker = start_target(request.param, str(tmp_path_factory.mktemp(request.param)))
    yield broker
    broker.close()


def new_topic(bs: str, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:10]}"
    with AdminClient({"bootstrap.servers": bs}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])
    return name


def txn_producer(bs: str, tid: str | None = None, **extra) -> Producer:
    return Producer({"bootstrap.servers": bs, "transactional.id": tid or f"tid-{uuid.uuid4().hex[:8]}",
                     "linger.ms": 1, **extra})


def write_committed_aborted_committed(bs: str, topic: str) -> None:
    """c0..c9 committed, a0..a4 written then aborted, d0..d2 committed, over two partitions."""
    p = txn_producer(bs)
    try:
        p.init_transactions(WAIT_S)
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, value=b"c%d" % i, partition=i % 2)
        p.commit_transaction(WAIT_S)
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, value=b"a%d" % i, partition=i % 2)
        assert p.flush(WAIT_S) == 0  # written to the log before the abort
        p.abort_transaction(WAIT_S)
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, value=b"d%d" % i, partition=i % 2)
        p.commit_transaction(WAIT_S)
    finally:
        p.close(10)


def consume_to_end(bs: str, topic: str, isolation: str, partitions: int = 2, expected: int | None = None) -> list:
    """Every record our Consumer returns up to the end offsets (the LSO with read_committed).
    ``expected``: keep reading (end offsets asked again) until that many records arrived: Kafka
    answers EndTxn before it has written the markers, so right after a commit the LSO may still
    be at the transaction's first offset."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer({"bootstrap.servers": bs, "isolation.level": isolation, "auto.offset.reset": "earliest",
                   "enable.auto.commit": False}) as c:
        c.assign(tps)
        got = []
        deadline = time.monotonic() + WAIT_S
        while True:
            ends = c.end_offsets(tps)
            while any(c.position(tp) < ends[tp] for tp in tps):
                assert time.monotonic() < deadline, f"positions stuck below {ends}"
                got += c.poll(200)
            got += c.poll(200)
            if expected is None or len(got) >= expected or time.monotonic() >= deadline:
                return got


def test_commit_is_visible_abort_is_not_and_markers_never_surface(target):
    topic = new_topic(target.bootstrap)
    write_committed_aborted_committed(target.bootstrap, topic)
    committed = consume_to_end(target.bootstrap, topic, "read_committed")
    assert sorted(r.value for r in committed) == sorted([b"c%d" % i for i in range(10)] + [b"d0", b"d1", b"d2"])
    everything = consume_to_end(target.bootstrap, topic, "read_uncommitted")
    values = sorted(r.value for r in everything)  # data records only: the three markers per partition never show
    assert values == sorted([b"c%d" % i for i in range(10)] + [b"a%d" % i for i in range(5)] + [b"d0", b"d1", b"d2"])
    for p in (0, 1):  # offsets: 5 + 3 + 1 data records, one marker after each transaction
        offsets = [r.offset for r in everything if r.partition == p]
        assert len(offsets) == len(set(offsets))
        with Consumer({"bootstrap.servers": target.bootstrap}) as c:
            end = c.end_offsets([TopicPartition(topic, p)])[TopicPartition(topic, p)]
        assert end == len(offsets) + 3


def test_confluent_kafka_reads_what_our_transactional_producer_wrote(target):
    ck = pytest.importorskip("confluent_kafka")
    topic = new_topic(target.bootstrap)
    write_committed_aborted_committed(target.bootstrap, topic)
    for isolation, want in (("read_committed", 13), ("read_uncommitted", 18)):
        c = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": f"ck-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
        try:
            c.assign([ck.TopicPartition(topic, p, 0) for p in (0, 1)])
            got = []
            deadline = time.monotonic() + WAIT_S
            while len(got) < want and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    got.append(m.value())
            extra = c.poll(0.5)  # nothing beyond
            assert extra is None or extra.error() is not None
        finally:
            c.close()
        assert len(got) == want, (isolation, got)
        assert all(not v.startswith(b"a") for v in got) or isolation == "read_uncommitted"


def test_open_transaction_is_held_back_from_read_committed(target):
    topic = new_topic(target.bootstrap, 1)
    p = txn_producer(target.bootstrap)
    try:
        p.init_transactions(WAIT_S)
        p.begin_transaction()
        p.produce(topic, value=b"open", partition=0)
        assert p.flush(WAIT_S) == 0
        assert consume_to_end(target.bootstrap, topic, "read_committed", 1) == []
        assert [r.value for r in consume_to_end(target.bootstrap, topic, "read_uncommitted", 1)] == [b"open"]
        p.commit_transaction(WAIT_S)
        assert [r.value for r in consume_to_end(target.bootstrap, topic, "read_committed", 1)] == [b"open"]
    finally:
        p.close(10)


def test_send_offsets_to_transaction_commits_with_the_transaction(target):
    bs = target.bootstrap
    source, sink = new_topic(bs, 1), new_topic(bs, 1)
    with Producer({"bootstrap.servers": bs}) as plain:
        for i in range(10):
            plain.produce(source, value=b"in%d" % i, partition=0)
        assert plain.flush(WAIT_S) == 0
    group = f"g-{uuid.uuid4().hex[:6]}"
    tp = TopicPartition(source, 0)
    with Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                   "enable.auto.commit": False, "isolation.level": "read_committed"}) as c:
        c.subscribe([source])
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < 10 and time.monotonic() < deadline:
            got += c.poll(200)
        assert len(got) == 10
        meta = c.consumer_group_metadata()
        assert isinstance(meta, ConsumerGroupMetadata) and meta.group_id == group and meta.generation_id >= 1
        p = txn_producer(bs)
        try:
            p.init_transactions(WAIT_S)
            p.begin_transaction()  # consume-transform-produce: outputs and input offsets in one transaction
            for r in got[:6]:
                p.produce(sink, value=r.value.upper(), partition=0)
            p.send_offsets_to_transaction({tp: got[5].offset + 1}, meta, WAIT_S)
            p.commit_transaction(WAIT_S)
            assert c.committed([tp])[tp].offset == 6
            p.begin_transaction()  # aborted: neither outputs nor offsets count
            for r in got[6:]:
                p.produce(sink, value=r.value.upper(), partition=0)
            p.send_offsets_to_transaction([(source, 0, 10)], c.consumer_group_metadata(), WAIT_S)
            p.abort_transaction(WAIT_S)
            assert c.committed([tp])[tp].offset == 6
        finally:
            p.close(10)
    assert [r.value for r in consume_to_end(bs, sink, "read_committed", 1)] == [b"IN%d" % i for i in range(6)]


def test_second_producer_with_the_same_id_fences_the_first(target):
    bs = target.bootstrap
    topic = new_topic(bs, 1)
    tid = f"fence-{uuid.uuid4().hex[:6]}"
    first, second = txn_producer(bs, tid), txn_producer(bs, tid)
    try:
        first.init_transactions(WAIT_S)
        first.begin_transaction()
        first.produce(topic, value=b"zombie", partition=0)
        assert first.flush(WAIT_S) == 0
        second.init_transactions(WAIT_S)  # aborts the first one's transaction and bumps the epoch
        with pytest.raises(TransactionError) as info:
            first.commit_transaction(WAIT_S)
        assert info.value.fatal and not info.value.retriable and info.value.name == "PRODUCER_FENCED"
        with pytest.raises(TransactionError) as again:  # fatal for good
            first.begin_transaction()
        assert again.value.fatal
        second.begin_transaction()
        second.produce(topic, value=b"live", partition=0)
        second.commit_transaction(WAIT_S)
    finally:
        first.close(5)
        second.close(10)
    assert [r.value for r in consume_to_end(bs, topic, "read_committed", 1)] == [b"live"]


def test_state_rules(target):
    bs = target.bootstrap
    topic = new_topic(bs, 1)
    p = txn_producer(bs)
    try:
        with pytest.raises(TransactionError, match="begin_transaction is not valid in state UNINITIALIZED"):
            p.begin_transaction()
        p.init_transactions(WAIT_S)
        with pytest.raises(TransactionError) as info:
            p.produce(topic, value=b"x")  # outside a transaction
        assert info.value.code == ErrorCode.INVALID_TXN_STATE
        with pytest.raises(TransactionError):
            p.commit_transaction(WAIT_S)
        p.begin_transaction()
        with pytest.raises(TransactionError, match="not valid in state IN_TRANSACTION"):
            p.begin_transaction()
        p.commit_transaction(WAIT_S)  # an empty transaction ends locally
        p.begin_transaction()
        p.abort_transaction(WAIT_S)
        p.begin_transaction()
        p.produce(topic, value=b"kept", partition=0)
        p.commit_transaction(WAIT_S)
    finally:
        p.close(10)
    assert [r.value for r in consume_to_end(bs, topic, "read_committed", 1)] == [b"kept"]


def test_async_producer_transactions(target):
    bs = target.bootstrap
    topic = new_topic(bs, 2)

    async def main():
        async with AsyncProducer({"bootstrap.servers": bs, "transactional.id": f"a-{uuid.uuid4().hex[:6]}"}) as p:
            await p.init_transactions(WAIT_S)
            p.begin_transaction()
            sent = [await p.send(topic, value=b"x%d" % i, partition=i % 2) for i in range(4)]
            await p.commit_transaction(WAIT_S)
            p.begin_transaction()
            await p.produce(topic, value=b"dropped", partition=0)
            await p.abort_transaction(WAIT_S)
            return sent

    sent = asyncio.run(asyncio.wait_for(main(), 120))
    assert all(m.offset >= 0 for m in sent)
    assert sorted(r.value for r in consume_to_end(bs, topic, "read_committed")) == [b"x%d" % i for i in range(4)]


# ---- the CLI ------------------------------------------------------------------------------------

def cli(bs: str, *argv, timeout=60):
    return subprocess.run([sys.executable, "-m", "pybroker.cli", "transactions", "--bootstrap-server", bs, *argv],
                          capture_output=True, text=True, timeout=timeout)


def table(text: str) -> list:
    return [[c.strip() for c in line.rstrip("\n").split("\t")[:-1]] for line in text.splitlines()]


def test_cli_lists_and_describes_transactions(target):
    bs = target.bootstrap
    topic = new_topic(bs, 1)
    tid = f"cli-{uuid.uuid4().hex[:6]}"
    p = txn_producer(bs, tid)
    try:
        p.init_transactions(WAIT_S)
        p.begin_transaction()
        p.produce(topic, value=b"open", partition=0)
        assert p.flush(WAIT_S) == 0
        out = cli(bs, "list")
        assert out.returncode == 0, out.stderr
        rows = table(out.stdout)
        assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        mine = [r for r in rows[1:] if r[0] == tid]
        assert len(mine) == 1 and mine[0][3] == "Ongoing"
        out = cli(bs, "describe", "--transactional-id", tid)
        assert out.returncode == 0, out.stderr
        rows = table(out.stdout)
        assert rows[0] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                           "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                           "TopicPartitions"]
        assert rows[1][1] == tid and rows[1][4] == "Ongoing" and rows[1][8] == f"{topic}-0"
        assert rows[1][2] == mine[0][2]
        missing = cli(bs, "describe", "--transactional-id", "no-such-id")
        assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr
        p.commit_transaction(WAIT_S)
        rows = table(cli(bs, "describe", "--transactional-id", tid).stdout)
        assert rows[1][4] == "CompleteCommit" and rows[1][8] == ""
    finally:
        p.close(5)


@pytest.mark.parametrize("how", ["start-offset", "producer-id"])
def test_cli_describes_producers_and_aborts_a_hanging_transaction(target, how):
    bs = target.bootstrap
    topic = new_topic(bs, 1)
    p = txn_producer(bs)
    try:
        p.init_transactions(WAIT_S)
        p.begin_transaction()
        p.produce(topic, value=b"open", partition=0)
        assert p.flush(WAIT_S) == 0
        pid, epoch = p.metrics()["producer_id"], p.metrics()["producer_epoch"]
        out = cli(bs, "describe-producers", "--topic", topic, "--partition", "0")
        assert out.returncode == 0, out.stderr
        rows = table(out.stdout)
        assert rows[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                           "CurrentTransactionStartOffset"]
        mine = [r for r in rows[1:] if r[0] == str(pid)]
        assert len(mine) == 1 and mine[0][1] == str(epoch) and mine[0][5] == "0", rows
        with AdminClient({"bootstrap.servers": bs}) as admin:
            broker_id = min(admin.list_topics().brokers)
        out = cli(bs, "find-hanging", "--broker-id", str(broker_id), "--max-transaction-timeout", "0")
        assert out.returncode == 0, out.stderr  # open, but its coordinator has it in progress: not hanging
        assert table(out.stdout) == [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                                      "StartOffset", "LastTimestamp", "Duration(min)"]]
        if how == "start-offset":
            out = cli(bs, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
        else:
            out = cli(bs, "abort", "--topic", topic, "--partition", "0", "--producer-id", str(pid),
                      "--producer-epoch", str(epoch), "--coordinator-epoch", str(max(0, int(mine[0][2]))))
        assert out.returncode == 0, out.stderr  # the operator's ABORT marker closes it on the partition
        assert consume_to_end(bs, topic, "read_committed", 1) == []
        rows = table(cli(bs, "describe-producers", "--topic", topic, "--partition", "0").stdout)
        assert [r[5] for r in rows[1:] if r[0] == str(pid)] == ["None"]
        wrong = cli(bs, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
        assert wrong.returncode == 1 and "could not find any open transactions" in wrong.stderr
    finally:
        p.close(5)


def test_a_failed_record_makes_the_transaction_abortable(target):
    bs = target.bootstrap
    topic = new_topic(bs, 1)
    p = txn_producer(bs, **{"allow.auto.create.topics": False, "max.block.ms": 1000})
    try:
        p.init_transactions(WAIT_S)
        p.begin_transaction()
        p.produce(topic, value=b"lost with the abort", partition=0)
        p.produce(f"missing-{uuid.uuid4().hex[:6]}", value=b"x")  # fails after max.block.ms
        with pytest.raises(TransactionError) as info:
            p.commit_transaction(WAIT_S)
        assert info.value.txn_requires_abort and not info.value.fatal
        with pytest.raises(TransactionError) as again:
            p.produce(topic, value=b"refused", partition=0)
        assert again.value.txn_requires_abort
        p.abort_transaction(WAIT_S)
        p.begin_transaction()
        p.produce(topic, value=b"next", partition=0)
        p.commit_transaction(WAIT_S)
    finally:
        p.close(10)
    assert [r.value for r in consume_to_end(bs, topic, "read_committed", 1)] == [b"next"]


def test_abort_with_lost_sequences_bumps_the_epoch(target):
    bs = target.bootstrap
    topic = new_topic(bs, 1)
    p = txn_producer(bs)
    try:
        p.init_transactions(WAIT_S)
        pid, epoch = p.metrics()["producer_id"], p.metrics()["producer_epoch"]
        p.begin_transaction()
        p.produce(topic, value=b"aborted", partition=0)
        assert p.flush(WAIT_S) == 0
        p._engine.txn.bump_epoch = True  # as after a batch whose outcome is unknown
        p.abort_transaction(WAIT_S)
        assert (p.metrics()["producer_id"], p.metrics()["producer_epoch"]) == (pid, epoch + 1)
        p.begin_transaction()
        p.produce(topic, value=b"after the bump", partition=0)  # sequence 0 again under the new epoch
        p.commit_transaction(WAIT_S)
    finally:
        p.close(10)
    assert [r.value for r in consume_to_end(bs, topic, "read_committed", 1)] == [b"after the bump"]


def test_our_read_committed_consumer_reads_confluent_kafkas_transactions(target):
    ck = pytest.importorskip("confluent_kafka")
    bs = target.bootstrap
    topic = new_topic(bs, 2)
    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": f"ck-{uuid.uuid4().hex[:6]}", "linger.ms": 1})
    p.init_transactions(WAIT_S)
    for round_, commit in (("c", True), ("a", False), ("d", True)):
        p.begin_transaction()
        for i in range(6):
            p.produce(topic, value=b"%s%d" % (round_.encode(), i), partition=i % 2)
        assert p.flush(WAIT_S) == 0
        (p.commit_transaction if commit else p.abort_transaction)(WAIT_S)
    want = sorted(b"%s%d" % (r, i) for r in (b"c", b"d") for i in range(6))
    assert sorted(r.value for r in consume_to_end(bs, topic, "read_committed")) == want
    assert len(consume_to_end(bs, topic, "read_uncommitted")) == 18


def test_a_commit_that_times_out_may_be_called_again(target):
    bs = target.bootstrap
    topic = new_topic(bs, 1)
    p = txn_producer(bs)
    try:
        p.init_transactions(WAIT_S)
        p.begin_transaction()
        for i in range(20000):
            p.produce(topic, value=b"%d" % i, partition=0)
        with pytest.raises(TransactionError) as info:
            p.commit_transaction(0)  # no time to deliver them
        assert info.value.retriable and not info.value.fatal and not info.value.txn_requires_abort
        p.commit_transaction(WAIT_S)
    finally:
        p.close(10)
    assert len(consume_to_end(bs, topic, "read_committed", 1, expected=20000)) == 20000
