"""ShareFetch/ShareAcknowledge v2 (Kafka 4.2, KIP-1206/KIP-1222) on the wire: record_limit acquisition
mode cuts batches at MaxRecords, and a renewing request extends a member's acquisition locks without
fetching (so the records stay with it past the lock duration)."""
import time
import uuid

import pytest

from pybroker.protocol import REQUESTS
from tests.broker.test_share_bad_input import heartbeat, partition_of, topic_id_of
from tests.clientutil import start_broker
from tests.kafka_wire import WireClient
from tests.shareutil import fill, make_topic, set_group_config, unique

FETCH, ACK = 78, 79
RECORD_LIMIT, RENEW, ACCEPT = 1, 4, 1
INVALID_REQUEST = 42


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory, "share-v2", {
        "offsets.topic.num.partitions": 1, "share.coordinator.state.topic.num.partitions": 1,
        "group.share.min.record.lock.duration.ms": 1000, "group.share.record.lock.duration.ms": 1500})
    yield b
    b.stop()
    b.close()


def fetch_v2(w, group, member, epoch, tid, *, mode=0, renew=False, acks=None, max_records=3, max_wait_ms=2000):
    R = REQUESTS[FETCH]
    parts = [R.FetchPartition(partition_index=0, acknowledgement_batches=[
        R.AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=t) for f, la, t in acks or []])]
    return w.request(R(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=max_wait_ms,
                       min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
                       share_acquire_mode=mode, is_renew_ack=renew,
                       topics=[R.FetchTopic(topic_id=tid, partitions=parts)], forgotten_topics_data=[]), 2)


@pytest.fixture
def member(broker):
    topic = make_topic(broker.port, 1)
    fill(broker.bootstrap, topic, 1, 10, **{"batch.num.messages": 100, "linger.ms": 100})  # one batch
    group = unique("v2")
    set_group_config(broker.port, group, {"share.auto.offset.reset": "earliest",
                                          "share.record.lock.duration.ms": "1500"})
    w = WireClient(broker.port)
    m = str(uuid.uuid4())
    assert heartbeat(w, group, m, 0, [topic]).error_code == 0
    yield w, group, m, topic_id_of(w, topic)
    w.close()


def ranges(response):
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in partition_of(response).acquired_records]


def test_record_limit_mode_cuts_batches(broker, member):
    w, group, m, tid = member
    assert ranges(fetch_v2(w, group, m, 0, tid, mode=RECORD_LIMIT)) == [(0, 2, 1)]
    assert ranges(fetch_v2(w, group, m, 1, tid, mode=RECORD_LIMIT)) == [(3, 5, 1)]
    # batch_optimized (the default mode): the rest of the batch at once
    assert ranges(fetch_v2(w, group, m, 2, tid, max_records=1)) == [(6, 9, 1)]


def test_renewing_keeps_records_past_the_lock_duration(broker, member):
    w, group, m, tid = member
    got = fetch_v2(w, group, m, 0, tid, mode=RECORD_LIMIT)
    assert got.acquisition_lock_timeout_ms == 1500 and ranges(got) == [(0, 2, 1)]
    epoch = 1
    end = time.monotonic() + 3.5  # more than twice the lock duration
    while time.monotonic() < end:
        r = fetch_v2(w, group, m, epoch, tid, renew=True, acks=[(0, 2, [RENEW])], max_wait_ms=0)
        epoch += 1
        assert partition_of(r).acknowledge_error_code == 0 and not partition_of(r).acquired_records
        time.sleep(0.5)  # the renewal period of a slow consumer (the thing under test is the lock's age)
    r = fetch_v2(w, group, m, epoch, tid, acks=[(0, 2, [ACCEPT])], max_wait_ms=0)
    assert partition_of(r).acknowledge_error_code == 0  # still held by m: its locks never lapsed


def test_renew_outside_a_renewing_request_is_invalid(broker, member):
    w, group, m, tid = member
    fetch_v2(w, group, m, 0, tid, mode=RECORD_LIMIT)
    assert fetch_v2(w, group, m, 1, tid, acks=[(0, 2, [RENEW])]).error_code == INVALID_REQUEST
