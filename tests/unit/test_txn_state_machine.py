"""The transaction coordinator's state machine in-process (pybroker/transaction/coordinator.py over
metadata.py): InitProducerId, AddPartitionsToTxn and EndTxn called on the TransactionCoordinator built
from a broker's services, its state records and markers written through the real replica manager. An
epoch bump fences the previous producer (and aborts its open transaction first); a transaction older
than its timeout is aborted under a bumped epoch; EndTxn answers by state; idle ids expire with a
tombstone. The coordinator's clock is a test clock. (The transitions alone: tests/unit/test_txn_coordinator.py;
over the wire with real clients: tests/broker/test_txn_coordinator.py.)
"""
import asyncio

import pytest

from pybroker.protocol.errors import (CONCURRENT_TRANSACTIONS, INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING,
                                      INVALID_TXN_STATE, PRODUCER_FENCED, TRANSACTIONAL_ID_NOT_FOUND)
from pybroker.records import TRANSACTIONAL, Record, build_batch, decode_control_record, is_control_batch
from pybroker.transaction import coordinator as coordinator_module
from pybroker.transaction.state_log import TOPIC
from tests.inprocess import log_batches, start_services, stop_services, wait_for

TID = "t"
TIMEOUT_MS = 60000
DATA = ("orders", 0)


class Clock:
    """The transaction coordinator's wall clock (ms), moved by the test."""

    def __init__(self):
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(coordinator_module, "now_ms", clock)
    return clock


async def start(tmp_path, overrides=None):
    services = await start_services(tmp_path, overrides)
    await services.transactions.state_log.ensure_topic()
    await wait_for(lambda: services.transactions.owns(TID), "the transaction state partition to load")
    await services.control.create_topic("orders", 1, 1)
    return services


def write(services, producer_id: int, epoch: int, sequence: int, value: bytes) -> int:
    """A transactional producer's batch to orders-0 (the partition leader's checks included)."""
    batch = build_batch([Record(value=value)], attributes=TRANSACTIONAL, producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence)
    return services.replicas.append(1, {DATA: batch}, verification={})[DATA].error


def markers(services) -> list:
    """(commit, producer epoch) of every transaction marker in orders-0, in log order."""
    return [(decode_control_record(batch).commit, header[10])
            for header, batch in log_batches(services.replicas.get(*DATA).log) if is_control_batch(batch)]


def state_of(services, tid: str = TID):
    error, md = services.transactions.describe(tid)
    return md.state.label if md is not None else error


class EpochsOnlyGrow:
    def __init__(self):
        self.seen = []

    def saw(self, producer_id: int, epoch: int) -> None:
        assert not self.seen or (producer_id, epoch) > self.seen[-1], (self.seen, producer_id, epoch)
        self.seen.append((producer_id, epoch))


def test_a_new_producer_fences_the_old_one_and_aborts_its_open_transaction(tmp_path, clock):
    async def go():
        services = await start(tmp_path)
        txn, epochs = services.transactions, EpochsOnlyGrow()
        error, pid, epoch = await txn.init_producer_id(TID, TIMEOUT_MS, None)
        assert (error, epoch) == (0, 0) and pid >= 0
        epochs.saw(pid, epoch)
        assert await txn.add_partitions(TID, pid, 0, [DATA]) == 0 and state_of(services) == "Ongoing"
        assert write(services, pid, 0, 0, b"a") == 0
        partition = services.replicas.get(*DATA)
        assert partition.last_stable_offset == 0  # the open transaction holds read_committed back
        # another instance of the producer starts: the open transaction is aborted under a fenced epoch first
        assert await txn.init_producer_id(TID, TIMEOUT_MS, None) == (CONCURRENT_TRANSACTIONS, -1, -1)
        await wait_for(lambda: state_of(services) == "CompleteAbort", "the fenced transaction to be aborted")
        assert markers(services) == [(False, 1)]  # an ABORT marker under the bumped epoch
        assert partition.last_stable_offset == partition.log_end_offset == 2
        epochs.saw(pid, txn.describe(TID)[1].producer_epoch)
        error, again, epoch = await txn.init_producer_id(TID, TIMEOUT_MS, None)  # the new instance retries
        assert (error, again, epoch) == (0, pid, 2)
        epochs.saw(pid, epoch)
        # the old instance (epoch 0) is fenced everywhere
        assert await txn.add_partitions(TID, pid, 0, [DATA]) == PRODUCER_FENCED
        assert await txn.end_txn(TID, pid, 0, True) == PRODUCER_FENCED
        assert await txn.init_producer_id(TID, TIMEOUT_MS, (pid, 0)) == (PRODUCER_FENCED, -1, -1)
        assert write(services, pid, 0, 1, b"b") == INVALID_PRODUCER_EPOCH  # the partition saw epoch 1
        assert state_of(services) == "Empty" and txn.describe(TID)[1].producer_epoch == 2
        await stop_services(services)
    asyncio.run(go())


def test_a_transaction_older_than_its_timeout_is_aborted_and_its_producer_fenced(tmp_path, clock):
    async def go():
        services = await start(tmp_path)
        txn = services.transactions
        error, pid, _ = await txn.init_producer_id(TID, 1000, None)
        assert await txn.add_partitions(TID, pid, 0, [DATA]) == 0
        assert write(services, pid, 0, 0, b"a") == 0
        clock.now += 999
        assert txn.abort_timed_out() == 0 and state_of(services) == "Ongoing"
        clock.now += 1
        assert txn.abort_timed_out() == 1
        await wait_for(lambda: state_of(services) == "CompleteAbort", "the timed-out transaction to be aborted")
        assert markers(services) == [(False, 1)] and txn.describe(TID)[1].producer_epoch == 1
        partition = services.replicas.get(*DATA)
        assert partition.last_stable_offset == partition.log_end_offset
        assert partition.aborted_transactions(0) == [(pid, 0)]  # what read_committed consumers skip
        # the producer learns it was fenced whatever it sends, even an InitProducerId naming its epoch
        assert await txn.end_txn(TID, pid, 0, True) == PRODUCER_FENCED
        assert await txn.add_partitions(TID, pid, 0, [DATA]) == PRODUCER_FENCED
        assert await txn.init_producer_id(TID, 1000, (pid, 0)) == (PRODUCER_FENCED, -1, -1)
        assert await txn.init_producer_id(TID, 1000, None) == (0, pid, 2)  # a new instance carries on
        await stop_services(services)
    asyncio.run(go())


def test_end_txn_answers_by_state_and_a_retried_end_gets_the_same_answer(tmp_path, clock):
    async def go():
        services = await start(tmp_path)
        txn = services.transactions
        error, pid, _ = await txn.init_producer_id(TID, TIMEOUT_MS, None)
        assert await txn.end_txn(TID, pid, 0, True) == INVALID_TXN_STATE  # nothing to end
        assert await txn.end_txn("unknown", pid, 0, True) == INVALID_PRODUCER_ID_MAPPING
        assert await txn.add_partitions(TID, pid + 1, 0, [DATA]) == INVALID_PRODUCER_ID_MAPPING
        assert await txn.add_partitions(TID, pid, 5, [DATA]) == PRODUCER_FENCED
        assert await txn.add_partitions(TID, pid, 0, [DATA]) == 0
        assert write(services, pid, 0, 0, b"a") == 0
        assert await txn.end_txn(TID, pid, 0, True) == 0
        assert state_of(services) == "CompleteCommit" and markers(services) == [(True, 0)]
        assert await txn.end_txn(TID, pid, 0, True) == 0  # a retried commit: already done
        assert await txn.end_txn(TID, pid, 0, False) == INVALID_TXN_STATE  # abort what was committed: no
        assert await txn.add_partitions(TID, pid, 0, [DATA]) == 0 and state_of(services) == "Ongoing"
        assert write(services, pid, 0, 1, b"b") == 0
        assert await txn.end_txn(TID, pid, 0, False) == 0
        assert state_of(services) == "CompleteAbort" and markers(services) == [(True, 0), (False, 0)]
        assert await txn.end_txn(TID, pid, 0, True) == INVALID_TXN_STATE
        partition = services.replicas.get(*DATA)
        assert partition.last_stable_offset == partition.log_end_offset == 4
        assert partition.aborted_transactions(0) == [(pid, 2)]
        await stop_services(services)
    asyncio.run(go())


def test_idle_transactional_ids_expire_with_a_tombstone_and_open_ones_do_not(tmp_path, clock):
    async def go():
        services = await start(tmp_path, {"transactional.id.expiration.ms": 60000})
        txn = services.transactions
        _, pid, _ = await txn.init_producer_id(TID, TIMEOUT_MS, None)
        _, busy, _ = await txn.init_producer_id("busy", TIMEOUT_MS, None)
        assert await txn.add_partitions("busy", busy, 0, [DATA]) == 0
        clock.now += 59999
        assert txn.remove_expired() == 0
        clock.now += 1
        assert txn.remove_expired() == 1  # only the idle one: an Ongoing id never expires
        await wait_for(lambda: state_of(services) == TRANSACTIONAL_ID_NOT_FOUND, "the id to expire")
        assert state_of(services, "busy") == "Ongoing"
        index = txn.partition_for(TID)
        replayed = [value for tid, value in txn.state_log.replay(index) if tid == TID]
        assert replayed[-1] is None  # a tombstone: a restarted coordinator forgets the id too
        error, new_pid, epoch = await txn.init_producer_id(TID, TIMEOUT_MS, None)
        assert (error, epoch) == (0, 0) and new_pid != pid  # a new producer id: nothing to fence
        assert services.replicas.get(TOPIC, index).high_watermark == services.replicas.get(TOPIC, index).log_end_offset
        await stop_services(services)
    asyncio.run(go())
