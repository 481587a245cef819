"""The transaction coordinator in-process: ``__transaction_state`` records in Kafka's layout and the state
machine's epoch bumps, producer id rotation and fencing (against real brokers: tests/broker/test_txn_coordinator.py)."""
import struct

import pytest

from pybroker.transaction import records
from pybroker.transaction.metadata import TxnState
from tests.broker.test_txn_coordinator import PRODUCER_FENCED


def test_state_records_round_trip_in_kafkas_layout():
    key = records.encode_key("my-txn")
    assert key == b"\x00\x00\x00\x06my-txn" and records.decode_key(key) == "my-txn"
    v = records.TxnLogValue(7, 3, 60000, TxnState.ONGOING.id, (("a", 0), ("a", 2), ("b", 1)), 1000, 900)
    data = records.encode_value(v, empty=False)
    assert data[:2] == b"\x00\x00"  # value v0, as Kafka 3.x writes it
    assert data[2:17] == struct.pack(">qhib", 7, 3, 60000, 1)
    assert records.decode_value(data) == v
    empty = records.encode_value(v._replace(status=0, partitions=()), empty=True)
    assert empty[17:21] == b"\xff\xff\xff\xff"  # Empty writes its partitions as null
    assert records.decode_value(empty).partitions == ()
    # v1: the flexible encoding with tagged fields (previous/next producer id), as Kafka 4 writes it
    flexible = (b"\x00\x01" + struct.pack(">qhib", 7, 3, 60000, 1) + b"\x02" + b"\x02a" + b"\x03"
                + struct.pack(">ii", 0, 2) + b"\x00" + struct.pack(">qq", 1000, 900)
                + b"\x02" + b"\x00\x08" + struct.pack(">q", 5) + b"\x01\x08" + struct.pack(">q", 6))
    assert records.decode_value(flexible) == v._replace(partitions=(("a", 0), ("a", 2)))
    with pytest.raises((ValueError, struct.error)):
        records.decode_value(data[:20])


def test_state_machine_bumps_rotates_and_fences_as_kafka():
    from pybroker.transaction.metadata import MAX_EPOCH, TransactionMetadata
    md = TransactionMetadata("t", producer_id=5, producer_epoch=-1, timeout_ms=1000)
    t = md.prepare_increment_epoch(1000, None, now=1)
    assert (t.producer_epoch, t.last_producer_epoch, t.state.label) == (0, -1, "Empty")
    with pytest.raises(RuntimeError):
        md.prepare_add_partitions({("a", 0)}, 2)  # a transition is pending: one at a time
    md.complete(t)
    # KIP-360: the current epoch resumes with a bump; a retry of that bump (the last epoch) gets it again
    t = md.prepare_increment_epoch(1000, 0, now=3)
    md.complete(t)
    assert (md.producer_epoch, md.last_producer_epoch) == (1, 0)
    t = md.prepare_increment_epoch(1000, 0, now=4)
    assert (t.producer_epoch, t.last_producer_epoch) == (1, 0)
    md.abandon()
    assert md.prepare_increment_epoch(1000, 7, now=5) == PRODUCER_FENCED
    md.complete(md.prepare_add_partitions({("a", 0)}, 10))
    assert (md.state.label, md.start_ms) == ("Ongoing", 10)
    with pytest.raises(RuntimeError):
        md.prepare_complete(11)  # Ongoing -> CompleteCommit skips the prepare step
    fence = md.prepare_fence_epoch()
    assert (fence.producer_epoch, fence.state.label) == (2, "PrepareEpochFence")
    md.abandon()
    md.failed_epoch_fence = True  # the fence's record was never written: its epoch is reused
    assert md.prepare_fence_epoch().producer_epoch == 1
    md.abandon()
    # an exhausted epoch gets a new producer id (one epoch stays in reserve for fencing)
    md = TransactionMetadata("t", producer_id=5, producer_epoch=MAX_EPOCH - 1, timeout_ms=1000)
    t = md.prepare_producer_id_rotation(6, 1000, 20, record_last_epoch=True)
    assert (t.producer_id, t.last_producer_id, t.producer_epoch, t.last_producer_epoch) == (6, 5, 0, MAX_EPOCH - 1)

