"""Share-group requests that are wrong, on the wire, to a real broker: each gets Kafka's error code
(never a crash or a hang) and another connection keeps working meanwhile. Acknowledgements of records
the member does not hold or that overlap, stale and future member epochs, share sessions with a wrong
epoch or none at all, and a share group's id already taken by a consumer group."""
import uuid

import pytest
from confluent_kafka import Consumer

from pybroker.protocol import REQUESTS
from tests.clientutil import start_broker
from tests.kafka_wire import WireClient
from tests.shareutil import fill, make_topic, set_group_config, unique

HB, FETCH, ACK = 76, 78, 79
INVALID_REQUEST, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND = 42, 25, 110, 69
INVALID_RECORD_STATE, SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = 121, 122, 123


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory, "share-bad", {"offsets.topic.num.partitions": 1,
                                                     "share.coordinator.state.topic.num.partitions": 1,
                                                     "group.initial.rebalance.delay.ms": 0})
    yield b
    b.stop()
    b.close()


def heartbeat(w, group, member, epoch, topics=None):
    if epoch == 0:  # as clients do: the coordinator first (which creates __consumer_offsets)
        F = REQUESTS[10]
        assert w.request(F(key=group, key_type=0), 3).error_code == 0
    R = REQUESTS[HB]
    return w.request(R(group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
                       subscribed_topic_names=topics), 1)


def share_fetch(w, group, member, epoch, topic_id, partitions=(0,), acks=None, max_wait_ms=200):
    R = REQUESTS[FETCH]
    parts = [R.FetchPartition(partition_index=p, acknowledgement_batches=[
        R.AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=types)
        for f, la, types in (acks or {}).get(p, [])]) for p in partitions]
    return w.request(R(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=max_wait_ms,
                       min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100,
                       topics=[R.FetchTopic(topic_id=topic_id, partitions=parts)], forgotten_topics_data=[]), 1)


def share_ack(w, group, member, epoch, topic_id, acks):
    R = REQUESTS[ACK]
    return w.request(R(group_id=group, member_id=member, share_session_epoch=epoch, topics=[R.AcknowledgeTopic(
        topic_id=topic_id, partitions=[R.AcknowledgePartition(partition_index=p, acknowledgement_batches=[
            R.AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=types) for f, la, types in b])
            for p, b in acks.items()])]), 1)


def topic_id_of(w, topic):
    return next(t.topic_id for t in w.metadata([topic], version=12).topics if t.name == topic)


def partition_of(response):
    return response.responses[0].partitions[0]


@pytest.fixture
def held(broker):
    """A member that joined and holds the first 10 records of a fresh topic: (wire, group, member, topic id)."""
    topic = make_topic(broker.port, 1)
    fill(broker.bootstrap, topic, 1, 10)
    group = unique("bad")
    set_group_config(broker.port, group, {"share.auto.offset.reset": "earliest"})
    w = WireClient(broker.port)
    member = str(uuid.uuid4())
    assert heartbeat(w, group, member, 0, [topic]).error_code == 0
    tid = topic_id_of(w, topic)
    got = share_fetch(w, group, member, 0, tid, max_wait_ms=3000)
    assert got.error_code == 0 and partition_of(got).acquired_records[0].first_offset == 0
    yield w, group, member, tid
    w.close()


def test_acknowledging_records_not_held_is_invalid_record_state(broker, held):
    w, group, member, tid = held
    other = str(uuid.uuid4())
    assert share_fetch(w, group, other, 0, tid).error_code == 0  # another member's session
    r = share_fetch(w, group, other, 1, tid, acks={0: [(0, 4, [1])]})
    assert partition_of(r).acknowledge_error_code == INVALID_RECORD_STATE
    r = share_ack(w, group, member, 1, tid, {0: [(5, 20, [1])]})  # past what was ever delivered
    assert partition_of(r).error_code == INVALID_RECORD_STATE
    r = share_ack(w, group, member, 2, tid, {0: [(0, 9, [1])]})  # nothing applied by the refusals above
    assert r.error_code == 0 and partition_of(r).error_code == 0
    r = share_ack(w, group, member, 3, tid, {0: [(0, 0, [1])]})  # already acknowledged
    assert partition_of(r).error_code == INVALID_RECORD_STATE


def test_malformed_acknowledgement_batches_are_invalid_request(broker, held):
    w, group, member, tid = held
    for epoch, batches in enumerate(([(0, 4, [1]), (3, 6, [1])],  # overlapping
                                     [(5, 6, [1]), (0, 2, [1])],  # out of order
                                     [(4, 2, [1])],  # first > last
                                     [(0, 3, [1, 1])],  # types neither one nor one per offset
                                     [(0, 1, [9])]), 1):  # no such type
        r = share_ack(w, group, member, epoch, tid, {0: batches})
        assert (r.error_code or partition_of(r).error_code) == INVALID_REQUEST, batches
    r = share_ack(w, group, member, 6, tid, {0: [(0, 9, [1])]})  # the session and the records are intact
    assert partition_of(r).error_code == 0


def test_share_sessions_with_a_wrong_epoch_or_none(broker, held):
    w, group, member, tid = held
    assert share_fetch(w, group, member, 5, tid).error_code == INVALID_SHARE_SESSION_EPOCH
    assert share_fetch(w, group, str(uuid.uuid4()), 1, tid).error_code == SHARE_SESSION_NOT_FOUND
    assert share_ack(w, group, member, 0, tid, {0: [(0, 0, [1])]}).error_code == INVALID_SHARE_SESSION_EPOCH
    assert share_fetch(w, group, member, 0, tid, acks={0: [(0, 0, [1])]}).error_code == INVALID_REQUEST
    assert share_fetch(w, group, member, 1, tid).error_code == 0  # the session that epoch 0 opened goes on


def test_member_epochs(broker):
    topic = make_topic(broker.port, 2)
    group = unique("ep")
    with WireClient(broker.port) as w:
        member = str(uuid.uuid4())
        joined = heartbeat(w, group, member, 0, [topic])
        assert joined.error_code == 0 and joined.member_epoch > 0
        assert heartbeat(w, group, member, joined.member_epoch + 5).error_code == FENCED_MEMBER_EPOCH
        assert heartbeat(w, group, str(uuid.uuid4()), 3).error_code == UNKNOWN_MEMBER_ID
        assert heartbeat(w, group, "", 0, [topic]).error_code == INVALID_REQUEST
        assert heartbeat(w, group, member, joined.member_epoch).error_code == 0
        assert heartbeat(w, group, member, -1).member_epoch == -1
        assert heartbeat(w, group, member, joined.member_epoch).error_code == UNKNOWN_MEMBER_ID


def test_a_consumer_group_s_id_is_not_a_share_group(broker):
    topic = make_topic(broker.port, 1)
    group = unique("cg")
    fill(broker.bootstrap, topic, 1, 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        assert c.poll(30) is not None
        with WireClient(broker.port) as w:
            r = heartbeat(w, group, str(uuid.uuid4()), 0, [topic])
            assert r.error_code == GROUP_ID_NOT_FOUND and r.error_message
            assert share_fetch(w, group, str(uuid.uuid4()), 0, topic_id_of(w, topic)).error_code == GROUP_ID_NOT_FOUND
    finally:
        c.close()


def test_other_connections_keep_working(broker, held):
    w, group, member, tid = held
    w.send_raw(b"\x00\x00\x00\x10" + bytes([0, 78, 0, 1]) + b"\xff" * 12)  # a ShareFetch v1 that cannot decode
    assert w.is_closed_by_peer()
    with WireClient(broker.port) as other:
        assert other.api_versions().error_code == 0
