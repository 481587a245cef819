"""The share consumer's pure logic (pybroker/client/share_session.py and the parts of share_fetcher.py /
share_consumer.py that need no broker): acknowledgement batches (ranges and per-offset types), the share
session's epochs and partition lists, implicit and explicit acknowledgement bookkeeping, commit waiters,
and only records inside the acquired ranges reaching the application, with their delivery counts.

The same consumer against a broker process: tests/broker/test_share_client.py.
"""
import asyncio
import struct

import pytest

from pybroker import core
from pybroker.client import ConfigError, TopicPartition
from pybroker.client.errors import KafkaError
from pybroker.client.share_consumer import AsyncShareConsumer
from pybroker.client.share_fetcher import Chunk, ShareFetcher
from pybroker.client.share_session import (GAP, AcknowledgeType, Acknowledgements, IllegalStateError, ShareSession,
                                           ack_batches, ack_type, deliverable, next_epoch)
from pybroker.protocol.errors import ErrorCode

ACCEPT, RELEASE, REJECT = 1, 2, 3
TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
CONF = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g"}


def rec(offset: int, topic: str = "t", partition: int = 0, value: bytes | None = None):
    return core.client_codec.ConsumerRecord(topic, partition, offset, 1000 + offset, 0, None,
                                            value if value is not None else b"v%d" % offset, (), 0)


# ---- acknowledgement batches ----------------------------------------------------------------------

def test_one_type_per_contiguous_range():
    acks = {o: ACCEPT for o in range(10, 20)}
    assert ack_batches(acks) == [(10, 19, [ACCEPT])]


def test_mixed_types_in_a_range_become_one_type_per_offset():
    acks = {10: ACCEPT, 11: RELEASE, 12: ACCEPT, 13: REJECT}
    assert ack_batches(acks) == [(10, 13, [ACCEPT, RELEASE, ACCEPT, REJECT])]


def test_gaps_between_offsets_split_batches():
    acks = {5: ACCEPT, 6: ACCEPT, 9: RELEASE, 20: REJECT, 21: ACCEPT}
    assert ack_batches(acks) == [(5, 6, [ACCEPT]), (9, 9, [RELEASE]), (20, 21, [REJECT, ACCEPT])]


def test_gap_acknowledgements_batch_like_the_others():
    assert ack_batches({3: GAP, 4: GAP, 5: ACCEPT}) == [(3, 5, [GAP, GAP, ACCEPT])]
    assert ack_batches({}) == []


@pytest.mark.parametrize("given,expected", [
    ("accept", 1), ("RELEASE", 2), (" reject ", 3), (1, 1), (AcknowledgeType.REJECT, 3)])
def test_acknowledge_types(given, expected):
    assert ack_type(given) == expected


def test_confluent_acknowledge_types_are_accepted():
    ck = pytest.importorskip("confluent_kafka")
    assert ack_type(ck.AcknowledgeType.RELEASE) == RELEASE


@pytest.mark.parametrize("bad,error", [("renew", ValueError), (0, ValueError), (4, ValueError), (True, TypeError),
                                       (1.0, TypeError), (None, TypeError)])
def test_bad_acknowledge_types(bad, error):
    with pytest.raises(error):
        ack_type(bad)


# ---- share sessions ------------------------------------------------------------------------------

def test_epoch_zero_names_every_partition_then_only_changes():
    s = ShareSession(1)
    req = s.fetch_request({TP, TP1})
    assert (req.epoch, req.added, req.forgotten) == (0, [TP, TP1], [])
    s.answered(req)
    assert s.is_open and s.epoch == 1 and s.partitions == {TP, TP1}
    req = s.fetch_request({TP, TP1})
    assert (req.epoch, req.added, req.forgotten) == (1, [], [])
    s.answered(req)
    tp2 = TopicPartition("u", 0)
    req = s.fetch_request({TP1, tp2})
    assert (req.epoch, req.added, req.forgotten) == (2, [tp2], [TP])
    s.answered(req)
    assert s.partitions == {TP1, tp2} and s.epoch == 3


def test_acknowledge_requests_carry_the_next_epoch_and_close_is_minus_one():
    s = ShareSession(1)
    with pytest.raises(IllegalStateError):  # acknowledgements never open a session
        s.acknowledge_request()
    s.answered(s.fetch_request({TP}))
    req = s.acknowledge_request()
    assert req.epoch == 1
    s.answered(req)
    assert s.epoch == 2
    close = s.close_request()
    assert close.epoch == -1
    incarnation = s.incarnation
    s.answered(close)
    assert not s.is_open and s.partitions == set() and s.incarnation == incarnation + 1


def test_reset_reopens_with_epoch_zero_under_a_new_incarnation():
    s = ShareSession(3)
    s.answered(s.fetch_request({TP}))
    before = s.source
    s.reset()
    assert s.source == (3, before[1] + 1)
    assert s.fetch_request({TP}).epoch == 0


def test_epochs_wrap_to_one():
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(0) == 1


# ---- acquired records ------------------------------------------------------------------------------

def test_only_records_inside_acquired_ranges_are_delivered_with_their_counts():
    records = [rec(o) for o in range(0, 10)]
    out, gaps, missing = deliverable(records, [(2, 4, 1), (7, 8, 3)], 10)
    assert [(r.offset, n) for r, n in out] == [(2, 1), (3, 1), (4, 1), (7, 3), (8, 3)]
    assert gaps == [] and missing == []


def test_acquired_offsets_without_records_are_gaps_and_missing_batches_are_released():
    records = [rec(o) for o in (0, 1, 3, 6)]  # 2, 4, 5 compacted away
    out, gaps, missing = deliverable(records, [(0, 9, 2)], 7)  # the response's batches end at 7
    assert [r.offset for r, _ in out] == [0, 1, 3, 6]
    assert gaps == [2, 4, 5]
    assert missing == [7, 8, 9]


def test_no_records_at_all():
    out, gaps, missing = deliverable([], [(5, 7, 1)], 5)
    assert out == [] and gaps == [] and missing == [5, 6, 7]


def _batch(base: int, values: list) -> bytes:
    b = core.client_codec.BatchBuilder(1 << 20)
    for v in values:
        b.append(1000, None, v)
    data = bytearray(b.build(0))
    struct.pack_into(">q", data, 0, base)  # the base offset lies outside the CRC
    return bytes(data)


class _Partition:
    def __init__(self, records, acquired):
        self.records = records
        self.acquired_records = [type("A", (), {"first_offset": f, "last_offset": la, "delivery_count": n})()
                                 for f, la, n in acquired]


def _fetcher(acks, assigned=(TP,)):
    async def make():
        f = ShareFetcher(AsyncShareConsumer(CONF).config, None, "g", lambda: "m", acks, lambda: None)
        f.assigned = set(assigned)
        return f
    return asyncio.run(make())


def test_a_response_is_decoded_and_filtered_to_the_acquired_ranges():
    acks = Acknowledgements(explicit=False)
    f = _fetcher(acks)
    data = _batch(0, [b"a", b"b", b"c", b"d"]) + _batch(4, [b"e", b"f"])
    assert f._queue(TP, (1, 0), _Partition(data, [(1, 2, 1), (4, 4, 2)]))
    chunk = f.buffer[0]
    assert [(r.offset, r.value, n) for r, n in chunk.records] == [(1, b"b", 1), (2, b"c", 1), (4, b"e", 2)]
    assert not acks.flush()  # nothing to acknowledge by itself: every acquired offset had a record


def test_records_of_an_unassigned_partition_are_released_at_once():
    acks = Acknowledgements(explicit=False)
    f = _fetcher(acks, assigned=())
    data = _batch(0, [b"a", b"b"])
    assert not f._queue(TP, (1, 0), _Partition(data, [(0, 1, 1)]))
    send = acks.take(1, 0)
    assert send.batches() == {TP: [(0, 1, [RELEASE])]}


def test_acquired_offsets_past_the_fetched_batches_are_released():
    acks = Acknowledgements(explicit=False)
    f = _fetcher(acks)
    data = _batch(0, [b"a", b"b"])
    assert f._queue(TP, (1, 0), _Partition(data, [(0, 4, 1)]))
    assert [r.offset for r, _ in f.buffer[0].records] == [0, 1]
    assert acks.take(1, 0).batches() == {TP: [(2, 4, [RELEASE])]}


def test_take_hands_out_slices_in_order_up_to_the_limit():
    acks = Acknowledgements(explicit=False)
    f = _fetcher(acks)
    f.buffer.append(Chunk(TP, (1, 0), [(rec(o), 1) for o in range(5)]))
    f.buffer.append(Chunk(TP1, (1, 0), [(rec(o, partition=1), 1) for o in range(3)]))
    f._leaders = {1: type("L", (), {"wake": asyncio.Event()})()}
    got = f.take(4)
    assert [(c.tp, [r.offset for r, _ in part]) for c, part in got] == [(TP, [0, 1, 2, 3])]
    got = f.take(4)
    assert [(c.tp, [r.offset for r, _ in part]) for c, part in got] == [(TP, [4]), (TP1, [0, 1, 2])]
    assert not f.buffer


def test_records_buffered_past_their_lock_are_dropped():
    acks = Acknowledgements(explicit=False)
    f = _fetcher(acks)
    f.buffer.append(Chunk(TP, (1, 0), [(rec(0), 1)], expires=0.0))  # long expired
    f.buffer.append(Chunk(TP1, (1, 0), [(rec(5, partition=1), 1)]))
    f._leaders = {1: type("L", (), {"wake": asyncio.Event()})()}
    got = f.take(10)
    assert [(c.tp, [r.offset for r, _ in part]) for c, part in got] == [(TP1, [5])]
    assert not acks.flush()  # nothing acknowledged for them: the leader gave them to others


# ---- acknowledgement bookkeeping ------------------------------------------------------------------

SRC = (1, 0)


def test_explicit_acknowledgements_need_a_held_record_and_happen_once():
    acks = Acknowledgements(explicit=True)
    acks.hold(TP, [0, 1, 2], SRC)
    acks.acknowledge(TP, 1, REJECT)
    with pytest.raises(IllegalStateError):
        acks.acknowledge(TP, 1, ACCEPT)  # twice
    with pytest.raises(IllegalStateError):
        acks.acknowledge(TP, 7, ACCEPT)  # never delivered
    assert acks.held_count() == 2
    acks.acknowledge(TP, 0, ACCEPT)
    acks.acknowledge(TP, 2, RELEASE)
    assert acks.held_count() == 0
    assert acks.take(1, 0).batches() == {}  # staged, not due until a poll/commit flushes
    assert acks.flush()
    assert acks.take(1, 0).batches() == {TP: [(0, 2, [ACCEPT, REJECT, RELEASE])]}


def test_implicit_mode_accepts_everything_held():
    acks = Acknowledgements(explicit=False)
    acks.hold(TP, [3, 4, 5], SRC)
    acks.hold(TP1, [9], SRC)
    assert acks.settle_held(ACCEPT) == 4
    assert acks.held_count() == 0
    acks.flush()
    assert acks.take(1, 0).batches() == {TP: [(3, 5, [ACCEPT])], TP1: [(9, 9, [ACCEPT])]}


def test_acknowledgements_go_to_the_leader_they_came_from_and_stale_sessions_fail():
    acks = Acknowledgements(explicit=False)
    acks.hold(TP, [0], (1, 0))
    acks.hold(TP1, [0], (2, 0))
    acks.hold(TP, [1], (1, 1))
    acks.settle_held(ACCEPT)
    acks.flush()
    assert acks.due_nodes() == {1, 2}
    send = acks.take(1, 1)  # the session with node 1 is at incarnation 1 now
    assert send.batches() == {TP: [(1, 1, [ACCEPT])]}
    assert send.stale == {TP: {0: ACCEPT}}
    assert acks.due_nodes() == {2}


def test_gaps_and_releases_are_staged_without_being_held():
    acks = Acknowledgements(explicit=True)
    acks.stage(SRC, TP, [4, 5], GAP)
    acks.flush()
    assert acks.take(1, 0).batches() == {TP: [(4, 5, [GAP])]}


def test_a_commit_waits_for_what_was_due_and_in_flight_when_it_started():
    acks = Acknowledgements(explicit=False)
    acks.hold(TP, [0, 1], SRC)
    acks.settle_held(ACCEPT)
    acks.flush()
    in_flight = acks.take(1, 0)  # sent, not answered yet
    acks.hold(TP, [2], SRC)
    acks.hold(TP1, [0], SRC)
    acks.settle_held(ACCEPT)
    acks.flush()
    waiter = acks.waiter()
    done = []
    waiter.on_done = lambda: done.append(True)
    assert set(waiter.targets) == {(SRC, TP), (SRC, TP1)}
    acks.complete(in_flight.keys, in_flight.acks, {TP: None})
    assert not done
    nxt = acks.take(1, 0)
    error = KafkaError(ErrorCode.INVALID_RECORD_STATE)
    acks.complete(nxt.keys, nxt.acks, {TP: None, TP1: error})
    assert done == [True] and waiter.done
    assert waiter.results == {TP: None, TP1: error}
    assert not acks.pending()
    assert acks.waiter() is None  # nothing left to wait for


def test_later_acknowledgements_do_not_change_a_finished_commit():
    acks = Acknowledgements(explicit=False)
    acks.hold(TP, [0], SRC)
    acks.settle_held(ACCEPT)
    acks.flush()
    waiter = acks.waiter()
    first = acks.take(1, 0)
    acks.complete(first.keys, first.acks, {TP: None})
    assert waiter.done and waiter.results == {TP: None}
    acks.hold(TP, [1], SRC)
    acks.settle_held(ACCEPT)
    acks.flush()
    second = acks.take(1, 0)
    acks.complete(second.keys, second.acks, {TP: KafkaError(ErrorCode.INVALID_RECORD_STATE)})
    assert waiter.results == {TP: None}


def test_completions_reach_the_commit_callback_when_one_is_set():
    acks = Acknowledgements(explicit=False)
    acks.record_completions = True
    acks.hold(TP, [0, 1], SRC)
    acks.settle_held(ACCEPT)
    acks.flush()
    send = acks.take(1, 0)
    acks.complete(send.keys, send.acks, {}, None)
    assert acks.take_completed() == [({TP: {0, 1}}, None)]
    assert acks.take_completed() == []


# ---- the consumer without a broker ---------------------------------------------------------------------

@pytest.mark.parametrize("key", ["auto.offset.reset", "enable.auto.commit", "isolation.level", "group.instance.id",
                                 "session.timeout.ms", "partition.assignment.strategy"])
def test_consumer_settings_a_share_consumer_refuses(key):
    with pytest.raises(ConfigError, match=key):
        AsyncShareConsumer({**CONF, key: "x"})


def test_group_id_and_mode_are_checked():
    with pytest.raises(ConfigError, match="group.id"):
        AsyncShareConsumer({"bootstrap.servers": "127.0.0.1:9"})
    with pytest.raises(ConfigError, match="share.acknowledgement.mode"):
        AsyncShareConsumer({**CONF, "share.acknowledgement.mode": "sometimes"})
    assert AsyncShareConsumer({**CONF, "share.acknowledgement.mode": "EXPLICIT"}).explicit


def _run(conf, body):
    async def main():
        c = AsyncShareConsumer(conf)
        await c.start()
        c._membership.topics = ["t"]  # subscribed, without a heartbeat task
        try:
            return await body(c)
        finally:
            c._fetcher._closing = True
            for leader in c._fetcher._leaders.values():
                if leader.task is not None:
                    leader.task.cancel()
            c._fetcher._metadata_task.cancel()
            await c._cluster.close()
    return asyncio.run(main())


def test_explicit_mode_refuses_a_poll_before_every_record_is_acknowledged():
    async def body(c):
        c._fetcher.buffer.append(Chunk(TP, SRC, [(rec(0), 1), (rec(1), 2)]))
        got = await c.poll(0)
        assert [(r.offset, r.delivery_count) for r in got] == [(0, 1), (1, 2)]
        c.acknowledge(got[0], "accept")
        with pytest.raises(IllegalStateError, match="not acknowledged"):
            await c.poll(0)
        c.acknowledge(got[1], AcknowledgeType.RELEASE)
        assert await c.poll(0) == []
    _run({**CONF, "share.acknowledgement.mode": "explicit"}, body)


def test_implicit_mode_refuses_acknowledge_and_accepts_on_the_next_poll():
    async def body(c):
        c._fetcher.buffer.append(Chunk(TP, SRC, [(rec(0), 1)]))
        got = await c.poll(0)
        with pytest.raises(IllegalStateError, match="explicit"):
            c.acknowledge(got[0])
        assert c._acks.held_count() == 1
        c._acks.flush()
        await c.poll(0)
        assert c._acks.held_count() == 0
        # the acceptance went to leader 1, which has no open session: failed at once, nothing outstanding
        await asyncio.sleep(0)
        assert not c._acks.pending()
    _run(CONF, body)


def test_a_record_the_deserializer_refuses_is_rejected_and_raised_in_its_turn():
    def value_deserializer(data, ctx):
        if data == b"bad":
            raise ValueError("not a number")
        return int(data)

    async def body(c):
        c._fetcher.buffer.append(Chunk(TP, SRC, [(rec(0, value=b"1"), 1), (rec(1, value=b"bad"), 1),
                                                 (rec(2, value=b"3"), 1)]))
        got = await c.poll(0)
        assert [r.value for r in got] == [1]
        from pybroker.client.serialization import ValueDeserializationError
        with pytest.raises(ValueDeserializationError):
            await c.poll(0)
        got = await c.poll(0)
        assert [(r.offset, r.value) for r in got] == [(2, 3)]
    _run({**CONF, "value.deserializer": value_deserializer}, body)


def test_poll_needs_a_subscription():
    async def main():
        c = AsyncShareConsumer(CONF)
        await c.start()
        try:
            with pytest.raises(IllegalStateError, match="not subscribed"):
                await c.poll(0)
        finally:
            await c.close(1000)
        with pytest.raises(IllegalStateError, match="closed"):
            await c.poll(0)
    asyncio.run(main())
