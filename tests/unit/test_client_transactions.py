"""Our clients' transactions in-process: the attribute bit, the read_committed filter (native, pure, model),
error flags, settings (against real brokers: tests/broker/test_client_transactions.py)."""
import pickle

import pytest
from hypothesis import given, settings, strategies as st

from pybroker import core
from pybroker._pure import client_codec as pure_codec
from pybroker.client import ConfigError, Producer, TransactionError
from pybroker.client.errors import KafkaError
from pybroker.client.transactions import classify
from pybroker.protocol.errors import ErrorCode
from tests.broker.test_client_transactions import steps
from tests.unit.test_client_codec import control_batch, txn_batch


@pytest.mark.parametrize("codec", [core.client_codec, pure_codec], ids=["native", "pure"])
def test_transactional_batches_carry_the_attribute_bit(codec):
    b = codec.BatchBuilder(1 << 16)
    b.append(1, b"k", b"v")
    txn, plain = b.build(0, 7, 1, 0, True), b.build(0, 7, 1, 0)
    assert int.from_bytes(txn[21:23], "big") == 0x10 and int.from_bytes(plain[21:23], "big") == 0
    assert txn == pure_codec_build(b"k", b"v", True)  # native and pure write the same bytes
    recs, nxt = codec.decode_records(txn, "t", 0, 0, read_committed=True, aborted=[])
    assert [r.value for r in recs] == [b"v"] and nxt == 1


def pure_codec_build(key, value, transactional):
    b = pure_codec.BatchBuilder(1 << 16)
    b.append(1, key, value)
    return b.build(0, 7, 1, 0, transactional)


def random_log(plan, closing):
    """(log bytes, aborted [(pid, first offset)], [(offset, value, committed)]) from a plan of steps;
    pids 1 and 2 are transactional, 9 is not; transactions still open at the end end with ``closing``."""
    parts, aborted, out, open_txn, offset = [], [], [], {}, 0
    for pid, action, n in plan + [(pid, closing, 0) for pid in (1, 2)]:
        if pid == 9 or action == "data":
            values = [b"%d-%d" % (pid, offset + i) for i in range(n)]
            parts.append(txn_batch(offset, pid, values, transactional=pid != 9))
            if pid != 9:
                open_txn.setdefault(pid, (offset, []))[1].extend(range(len(out), len(out) + n))
            out += [[offset + i, v, pid == 9] for i, v in enumerate(values)]
            offset += n
        elif pid in open_txn:
            first, indexes = open_txn.pop(pid)
            parts.append(control_batch(offset, pid, 1 if action == "commit" else 0))
            offset += 1
            if action == "abort":
                aborted.append((pid, first))
            for i in indexes:
                out[i][2] = action == "commit"
    return b"".join(bytes(x) for x in parts), aborted, out


@settings(max_examples=200, deadline=None)
@given(plan=steps, closing=st.sampled_from(["commit", "abort"]), start=st.integers(0, 40))
def test_read_committed_filter_native_pure_and_model_agree(plan, closing, start):
    buf, aborted, expected = random_log(plan, closing)
    want_committed = [v for off, v, ok in expected if ok and off >= start]
    want_all = [v for off, v, _ in expected if off >= start]
    for m in (core.client_codec, pure_codec):
        recs, _ = m.decode_records(buf, "t", 0, start, read_committed=True, aborted=aborted)
        assert [r.value for r in recs] == want_committed
        recs, _ = m.decode_records(buf, "t", 0, start)  # markers never surface
        assert [r.value for r in recs] == want_all
        cols = m.decode_columns(buf, start, read_committed=True, aborted=aborted)
        assert cols.count == len(want_committed)


def test_transaction_error_flags_and_pickling():
    fenced = classify(KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH))
    assert fenced.fatal and not fenced.txn_requires_abort and not fenced.retriable and fenced.name == "PRODUCER_FENCED"
    abortable = classify(KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    assert abortable.txn_requires_abort and not abortable.fatal
    retriable = classify(KafkaError(ErrorCode.REQUEST_TIMED_OUT))
    assert retriable.retriable and not retriable.fatal and not retriable.txn_requires_abort
    # the newest Produce/EndTxn/AddOffsetsToTxn/TxnOffsetCommit/FindCoordinator versions (KIP-890)
    aborted = classify(KafkaError(ErrorCode.TRANSACTION_ABORTABLE))
    assert aborted.txn_requires_abort and not aborted.fatal and not aborted.retriable
    again = pickle.loads(pickle.dumps(fenced))
    assert (again.code, again.name, again.fatal) == (fenced.code, "PRODUCER_FENCED", True)
    assert KafkaError(1).fatal is False and KafkaError(1).txn_requires_abort is False


def test_transactional_id_implies_idempotence():
    with pytest.raises(ConfigError, match="enable.idempotence"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t", "enable.idempotence": False})
    with pytest.raises(ConfigError, match="acks=all"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t", "acks": 1})
    with pytest.raises(ConfigError, match="transactional.id"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": ""})


def test_transaction_methods_need_a_transactional_id():
    p = Producer({"bootstrap.servers": "127.0.0.1:1"})
    try:
        with pytest.raises(TransactionError, match="transactional.id is not set"):
            p.begin_transaction()
    finally:
        p.close(0)

