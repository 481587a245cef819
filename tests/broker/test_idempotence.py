"""The idempotent producer at the protocol level: InitProducerId, sequence and epoch rules,
duplicate detection over the last five batches, and the state after clean and unclean restarts.

Expected codes are Kafka's (ProducerAppendInfo / ProducerStateEntry, Kafka >= 2.7):
 * an older epoch on Produce is INVALID_PRODUCER_EPOCH (47). Since KIP-588 (2.7) Kafka answers
   47 rather than PRODUCER_FENCED (90) on the produce path, so clients can abort and retry; 90
   is for the transaction coordinator, which this broker does not have.
 * a gap, or a new epoch not starting at sequence 0, is OUT_OF_ORDER_SEQUENCE_NUMBER (45).
 * a producer id the partition has no state for may start at any sequence (its earlier batches
   may have been removed by retention or DeleteRecords).
 * a duplicate (same producer id, epoch and sequence range as one of the last 5 batches) is
   answered with no error and the base offset of the original append; nothing is appended.
"""
import os
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pybroker.records import build_batch, decode_records
from tests.kafka_wire import WireClient

OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, INVALID_RECORD = 45, 47, 87
TOPIC = "idem"
DEADLINE = 30


def batch(pid: int, epoch: int, seq: int, count: int = 1, tag: str = "") -> bytes:
    return bytes(build_batch([b"%s-%d-%d-%d" % (tag.encode(), pid, seq, i) for i in range(count)],
                             producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                             base_timestamp=int(time.time() * 1000)))


def new_pid(c: WireClient) -> int:
    r = c.init_producer_id()
    assert (r.error_code, r.producer_epoch) == (0, 0) and r.producer_id >= 0
    return r.producer_id


def produce(c: WireClient, data: bytes, partition: int = 0):
    r = c.produce(TOPIC, partition, data)
    return r.error_code, r.base_offset


def values(c: WireClient, partition: int = 0) -> list[bytes]:
    """Every record value of the partition, in offset order (checks offsets are dense)."""
    out, offset = [], 0
    data = c.fetch(TOPIC, partition, 0).records
    data = bytes(data) if data is not None else b""
    pos = 0
    while pos + 12 <= len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        for rec in decode_records(data[pos:pos + size]):
            assert rec.offset == offset
            out.append(rec.value)
            offset += 1
        pos += size
    return out


def setup_topic(broker, partitions: int = 1) -> WireClient:
    c = WireClient(broker.port)
    c.create_topic(TOPIC, partitions)
    return c


def test_init_producer_id_gives_distinct_ids(broker):
    clients = [WireClient(broker.port) for _ in range(3)]
    try:
        ids = [new_pid(c) for _ in range(10) for c in clients]
    finally:
        for c in clients:
            c.close()
    assert len(set(ids)) == len(ids)


def test_producer_ids_are_never_reused_after_restarts(broker):
    with WireClient(broker.port) as c:
        seen = [new_pid(c) for _ in range(5)]
    assert broker.stop() == 0  # clean
    broker.start()
    with WireClient(broker.port) as c:
        after_clean = [new_pid(c) for _ in range(5)]
    assert min(after_clean) > max(seen)
    seen += after_clean
    broker.kill()  # crash: ids handed out from the block in use must not come back
    broker.start()
    with WireClient(broker.port) as c:
        after_crash = [new_pid(c) for _ in range(5)]
    assert min(after_crash) > max(seen)
    assert len(set(seen + after_crash)) == 15


def test_in_order_sequences_then_duplicates_get_their_original_offsets(broker):
    with setup_topic(broker) as c:
        pid = new_pid(c)
        sent = [batch(pid, 0, 0, 3), batch(pid, 0, 3, 2), batch(pid, 0, 5, 1)]
        assert [produce(c, b) for b in sent] == [(0, 0), (0, 3), (0, 5)]
        assert c.list_offset(TOPIC, 0) == 6
        # resending any of them (a retry after a lost response) appends nothing
        assert [produce(c, b) for b in reversed(sent)] == [(0, 5), (0, 3), (0, 0)]
        assert produce(c, sent[1]) == (0, 3)
        assert c.list_offset(TOPIC, 0) == 6
        assert len(values(c)) == 6
        assert produce(c, batch(pid, 0, 6, 4)) == (0, 6)  # and the sequence goes on
        assert c.list_offset(TOPIC, 0) == 10


def test_a_gap_is_out_of_order_and_appends_nothing(broker):
    with setup_topic(broker) as c:
        pid = new_pid(c)
        assert produce(c, batch(pid, 0, 0, 3)) == (0, 0)
        assert produce(c, batch(pid, 0, 5, 1))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER  # 3, 4 missing
        assert produce(c, batch(pid, 0, 4, 1))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(c, batch(pid, 0, 1, 3))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps, not a duplicate
        assert c.list_offset(TOPIC, 0) == 3
        assert produce(c, batch(pid, 0, 3, 1)) == (0, 3)  # the right sequence still goes in


def test_epoch_rules(broker):
    with setup_topic(broker) as c:
        pid = new_pid(c)
        first = batch(pid, 0, 0, 2)
        assert produce(c, first) == (0, 0)
        assert produce(c, batch(pid, 0, 2, 1)) == (0, 2)
        # a new epoch must start at sequence 0
        assert produce(c, batch(pid, 1, 3, 1))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(c, batch(pid, 1, 0, 1, tag="e1")) == (0, 3)
        # the old epoch is fenced, for new batches and for resends of its batches alike
        assert produce(c, batch(pid, 0, 3, 1))[0] == INVALID_PRODUCER_EPOCH
        assert produce(c, first)[0] == INVALID_PRODUCER_EPOCH
        assert produce(c, batch(pid, 1, 1, 1, tag="e1")) == (0, 4)
        assert c.list_offset(TOPIC, 0) == 5


def test_only_the_last_five_batches_are_remembered(broker):
    with setup_topic(broker) as c:
        pid = new_pid(c)
        sent = [batch(pid, 0, seq, 1) for seq in range(6)]
        assert [produce(c, b) for b in sent] == [(0, i) for i in range(6)]
        assert [produce(c, b) for b in sent[1:]] == [(0, i) for i in range(1, 6)]  # remembered
        # the sixth-newest is forgotten: it is neither a duplicate nor the next sequence
        assert produce(c, sent[0])[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert c.list_offset(TOPIC, 0) == 6


def test_unknown_producer_may_start_at_any_sequence(broker):
    with setup_topic(broker) as c:
        pid = new_pid(c)
        assert produce(c, batch(pid, 0, 42, 2)) == (0, 0)
        assert produce(c, batch(pid, 0, 44, 1)) == (0, 2)
        assert produce(c, batch(pid, 0, 46, 1))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producer_id_without_a_sequence_is_an_invalid_record(broker):
    """Kafka's LogValidator refuses a batch with a producer id and base sequence -1 (87)."""
    with setup_topic(broker) as c:
        pid = new_pid(c)
        assert produce(c, batch(pid, 0, -1, 1))[0] == INVALID_RECORD
        assert c.list_offset(TOPIC, 0) == 0
        assert produce(c, batch(pid, 0, 0, 1)) == (0, 0)


def test_state_is_per_partition(broker):
    with setup_topic(broker, partitions=2) as c:
        pid = new_pid(c)
        assert produce(c, batch(pid, 0, 0, 5), partition=0) == (0, 0)
        assert produce(c, batch(pid, 0, 0, 1), partition=1) == (0, 0)  # its own sequence
        assert produce(c, batch(pid, 0, 5, 1), partition=0) == (0, 5)
        assert produce(c, batch(pid, 0, 5, 1), partition=1)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER


def _fill(c: WireClient, pids: list[int]) -> dict:
    """Seven two-record batches for each producer (epoch 1 for the second); returns them."""
    sent = {}
    for k, pid in enumerate(pids):
        epoch = k  # the second producer has bumped its epoch once
        sent[pid] = [batch(pid, epoch, seq, 2, tag="r") for seq in range(0, 14, 2)]
        for b in sent[pid]:
            assert produce(c, b)[0] == 0
    return sent


def _check_after_restart(c: WireClient, pids: list[int], sent: dict, offsets: dict, end: int) -> None:
    for k, pid in enumerate(pids):
        epoch = k
        for b, offset in list(zip(sent[pid], offsets[pid]))[-5:]:  # the last five are duplicates
            assert produce(c, b) == (0, offset)
        assert produce(c, sent[pid][0])[0] == OUT_OF_ORDER_SEQUENCE_NUMBER  # forgotten before too
        assert produce(c, batch(pid, epoch, 15, 1))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        if epoch:
            assert produce(c, batch(pid, epoch - 1, 14, 1))[0] == INVALID_PRODUCER_EPOCH
    assert c.list_offset(TOPIC, 0) == end
    for k, pid in enumerate(pids):
        assert produce(c, batch(pid, k, 14, 1))[0] == 0
    assert c.list_offset(TOPIC, 0) == end + len(pids)


def _restart_case(broker, crash: bool) -> None:
    with setup_topic(broker) as c:
        pids = [new_pid(c), new_pid(c)]
        sent = _fill(c, pids)
        end = c.list_offset(TOPIC, 0)
    assert end == 28
    # offsets as assigned: the producers' batches went in one after the other
    offsets = {pids[0]: list(range(0, 14, 2)), pids[1]: list(range(14, 28, 2))}
    if crash:
        broker.kill()
    else:
        assert broker.stop() == 0
        assert os.path.exists(os.path.join(broker.data_dir, f"{TOPIC}-0", "producer-state.json"))
    broker.start()
    with WireClient(broker.port) as c:
        _check_after_restart(c, pids, sent, offsets, end)
        assert len(values(c)) == end + 2


def test_duplicates_detected_after_a_clean_restart(broker):
    _restart_case(broker, crash=False)


def test_duplicates_detected_after_kill_9(broker):
    _restart_case(broker, crash=True)


def test_state_survives_two_restarts_in_a_row(broker):
    """A snapshot is used once; the state after the first restart must be saved again."""
    with setup_topic(broker) as c:
        pid = new_pid(c)
        sent = [batch(pid, 0, seq, 1) for seq in range(3)]
        for b in sent:
            assert produce(c, b)[0] == 0
    for crash in (False, True, False):
        if crash:
            broker.kill()
        else:
            assert broker.stop() == 0
        broker.start()
        with WireClient(broker.port) as c:
            assert produce(c, sent[-1]) == (0, 2)
            assert c.list_offset(TOPIC, 0) == 3


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill-9"])
def test_confluent_idempotent_producer_across_a_broker_restart(broker_factory, crash):
    """librdkafka keeps its producer id and sequences when the broker restarts under it (same
    port) with produce requests in flight: every message lands exactly once, in order."""
    b = broker_factory()
    with WireClient(b.port) as c:
        c.create_topic(TOPIC, 1)
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                  "batch.num.messages": 10, "message.timeout.ms": 60000,
                  "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
    errors, total = [], 400
    for i in range(total):
        p.produce(TOPIC, value=b"m-%04d" % i, partition=0,
                  on_delivery=lambda err, m: errors.append(err) if err else None)
        if i == 100:
            assert p.flush(DEADLINE) == 0
        if i == 250:
            p.poll(0.01)
            b.kill() if crash else b.stop()
            b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port}"  # same port: the client reconnects
            b.start()
    assert p.flush(DEADLINE * 2) == 0
    assert errors == []
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "idem-check", "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got, end = [], time.monotonic() + DEADLINE
    while len(got) < total and time.monotonic() < end:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == [b"m-%04d" % i for i in range(total)]
    with WireClient(b.port) as w:
        assert w.list_offset(TOPIC, 0) == total  # no duplicate appended
