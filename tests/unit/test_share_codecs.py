"""The Kafka 4.2 share-group codecs (pybroker/protocol/specs/ laid over Kafka's specs), byte for byte.

ShareGroupHeartbeat, ShareFetch and ShareAcknowledge v1 are checked against frames built field by
field exactly as librdkafka writes them: its encoders (rd_kafka_ShareGroupHeartbeatRequest in
src/rdkafka_request.c, rd_kafka_ShareFetchRequest and rd_kafka_ShareAcknowledgeRequest in
src/rdkafka_fetcher.c) for requests, its mock broker (src/rdkafka_mock_handlers.c) for responses.
Each frame is decoded by the generated codec and encoded back to the same bytes. The v2 fields of
Kafka 4.2, the share-group state RPCs, the share-group admin APIs, DescribeGroups v6, the new error
codes and the generator's overlay are checked too.
"""
import struct
import uuid

import pytest

from pybroker.protocol import (decode_request, decode_response, encode_request, encode_response,
                               request_header_version, response_header_version)
from pybroker.protocol import generate
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages import API_NAMES, REQUESTS, RESPONSES

CLIENT_ID = "rdkafka"
CORR = 7
TOPIC_A = uuid.UUID("9f1c6c3e-1b2a-4c5d-8e7f-0a1b2c3d4e5f")
TOPIC_B = uuid.UUID("00000000-0000-4000-8000-00000000000b")


# ---- the primitives as librdkafka writes them (rdkafka_buf.h) --------------------------------

def i8(v):
    return struct.pack(">b", v)


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cstr(s):
    """rd_kafka_buf_write_str/_kstr on a flexver buffer: uvarint(len + 1), 0 for NULL."""
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def carr(n):
    """rd_kafka_buf_write_arraycnt (or _pos + _finalize_arraycnt): uvarint(n + 1), 0 for NULL."""
    return uvarint(0 if n is None else n + 1)


def cbytes(b):
    """Compact bytes (records): uvarint(len + 1) then the bytes."""
    return uvarint(len(b) + 1) + b


def uuid_(u):
    """rd_kafka_buf_write_uuid: most significant 64 bits, then least significant (= RFC 4122 order)."""
    return i64(struct.unpack(">q", u.bytes[:8])[0]) + i64(struct.unpack(">q", u.bytes[8:])[0])


TAGS = b"\x00"  # rd_kafka_buf_write_tags_empty: an empty tagged-field section


def request_frame(api_key, version, body):
    """rd_kafka_buf_new_flexver_request + rd_kafka_buf_finalize, without the size prefix: header v2
    (ClientId is a legacy int16 string even in flexible headers), the body, then the body's final
    empty tag section that rd_kafka_buf_finalize appends."""
    return (i16(api_key) + i16(version) + i32(CORR) + i16(len(CLIENT_ID)) + CLIENT_ID.encode()
            + TAGS + body + TAGS)


def response_frame(body):
    """rd_kafka_mock_buf_new_response on a flexver request, without the size prefix: CorrId and an
    empty header tag section, then the body."""
    return i32(CORR) + TAGS + body


def roundtrip_request(frame, api_key, version):
    header, req = decode_request(frame)
    assert (header.request_api_key, header.request_api_version) == (api_key, version)
    assert (header.correlation_id, header.client_id) == (CORR, CLIENT_ID)
    assert bytes(encode_request(version, CORR, CLIENT_ID, req)) == frame
    return req


def roundtrip_response(frame, api_key, version):
    header, resp = decode_response(frame, api_key, version)
    assert header.correlation_id == CORR
    assert bytes(encode_response(1, CORR, resp, version)) == frame
    return resp


# ---- ShareGroupHeartbeat (76) v1 -------------------------------------------------------------

def test_share_group_heartbeat_request_v1_as_librdkafka_joins():
    body = (cstr("share-g")                    # GroupId
            + cstr("Zx1v2Q3wRk2sS8aF5mB7Cg")     # MemberId (the client makes it up, KIP-932)
            + i32(0)                           # MemberEpoch: 0 joins
            + cstr(None)                       # RackId: NULL (client.rack unset)
            + carr(2)                          # SubscribedTopicNames: 2, written last to first
            + cstr("orders") + cstr("audit"))
    req = roundtrip_request(request_frame(76, 1, body), 76, 1)
    assert (req.group_id, req.member_id, req.member_epoch) == ("share-g", "Zx1v2Q3wRk2sS8aF5mB7Cg", 0)
    assert req.rack_id is None
    assert req.subscribed_topic_names == ["orders", "audit"]


def test_share_group_heartbeat_request_v1_as_librdkafka_leaves():
    body = (cstr("share-g")                    # GroupId
            + cstr("Zx1v2Q3wRk2sS8aF5mB7Cg")     # MemberId
            + i32(-1)                          # MemberEpoch: -1 leaves
            + cstr("rack-1")                   # RackId
            + carr(None))                      # SubscribedTopicNames: NULL (arraycnt -1) = unchanged
    req = roundtrip_request(request_frame(76, 1, body), 76, 1)
    assert (req.member_epoch, req.rack_id, req.subscribed_topic_names) == (-1, "rack-1", None)


def test_share_group_heartbeat_response_v1_as_the_mock_assigns():
    body = (i32(0)                             # ThrottleTimeMs
            + i16(0)                           # ErrorCode
            + cstr(None)                       # ErrorMessage: NULL
            + cstr("Zx1v2Q3wRk2sS8aF5mB7Cg")     # MemberId
            + i32(3)                           # MemberEpoch
            + i32(5000)                        # HeartbeatIntervalMs
            + i8(1)                            # Assignment: present
            + carr(2)                          #   TopicPartitions (sorted by topic id)
            + uuid_(TOPIC_B) + carr(1) + i32(0) + TAGS          # TopicId, Partitions [0], tags
            + uuid_(TOPIC_A) + carr(2) + i32(0) + i32(1) + TAGS  # TopicId, Partitions [0, 1], tags
            + TAGS                             #   Assignment tags
            + TAGS)                            # top-level tags
    # The mock then sends with rd_kafka_mock_connection_send_response(), which appends one more
    # empty tag section although the handler wrote it already: a surplus trailing 0x00 that every
    # decoder (librdkafka's, Kafka's, ours) ignores, so the re-encoding is one byte shorter.
    frame = response_frame(body + b"\x00")
    header, resp = decode_response(frame, 76, 1)
    assert bytes(encode_response(1, CORR, resp, 1)) == frame[:-1]
    assert (resp.throttle_time_ms, resp.error_code, resp.error_message) == (0, 0, None)
    assert (resp.member_id, resp.member_epoch, resp.heartbeat_interval_ms) == (
        "Zx1v2Q3wRk2sS8aF5mB7Cg", 3, 5000)
    assert [(t.topic_id, t.partitions) for t in resp.assignment.topic_partitions] == [
        (TOPIC_B, [0]), (TOPIC_A, [0, 1])]


def test_share_group_heartbeat_response_v1_error_without_assignment():
    body = (i32(0)                             # ThrottleTimeMs
            + i16(ErrorCode.UNKNOWN_MEMBER_ID)   # ErrorCode
            + cstr("Broker: Unknown member")   # ErrorMessage: rd_kafka_err2str(err)
            + cstr(None)                       # MemberId: NULL on error
            + i32(7)                           # MemberEpoch
            + i32(5000)                        # HeartbeatIntervalMs
            + i8(-1)                           # Assignment: NULL (write_i8(-1))
            + TAGS)                            # top-level tags
    frame = response_frame(body + b"\x00")     # the mock's surplus tag byte again
    _, resp = decode_response(frame, 76, 1)
    assert bytes(encode_response(1, CORR, resp, 1)) == frame[:-1]
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID and resp.member_id is None
    assert resp.assignment is None


# ---- ShareFetch (78) v1 -----------------------------------------------------------------------

def test_share_fetch_request_v1_as_librdkafka_writes_it():
    body = (cstr("share-g")                    # GroupId
            + cstr("Zx1v2Q3wRk2sS8aF5mB7Cg")     # MemberId
            + i32(4)                           # ShareSessionEpoch
            + i32(500)                         # MaxWaitMs (fetch.wait.max.ms)
            + i32(1)                           # MinBytes
            + i32(52428800)                    # MaxBytes
            + i32(500)                         # MaxRecords (max.poll.records)
            + i32(500)                         # BatchSize
            + carr(2)                          # Topics: toppars_to_add, then ack_details
            + uuid_(TOPIC_A) + carr(1)         #   TopicId, Partitions: 1 (added to the session)
            + i32(2) + carr(0) + TAGS          #     PartitionIndex, no AcknowledgementBatches, tags
            + TAGS                             #   topic tags
            + uuid_(TOPIC_B) + carr(1)         #   TopicId, Partitions: 1 (with acknowledgements)
            + i32(0) + carr(2)                 #     PartitionIndex, AcknowledgementBatches: 2
            + i64(100) + i64(104) + carr(1) + i8(1) + TAGS  # FirstOffset, LastOffset, [ACCEPT], tags
            + i64(105) + i64(105) + carr(1) + i8(2) + TAGS  # FirstOffset, LastOffset, [RELEASE], tags
            + TAGS                             #     partition tags
            + TAGS                             #   topic tags
            + carr(1)                          # ForgottenTopicsData: 1
            + uuid_(TOPIC_A) + carr(2) + i32(0) + i32(1)  # TopicId, Partitions [0, 1]
            + TAGS)                            #   topic tags
    req = roundtrip_request(request_frame(78, 1, body), 78, 1)
    assert (req.group_id, req.member_id, req.share_session_epoch) == (
        "share-g", "Zx1v2Q3wRk2sS8aF5mB7Cg", 4)
    assert (req.max_wait_ms, req.min_bytes, req.max_bytes, req.max_records, req.batch_size) == (
        500, 1, 52428800, 500, 500)
    added, acked = req.topics
    assert added.topic_id == TOPIC_A
    assert [(p.partition_index, p.acknowledgement_batches) for p in added.partitions] == [(2, [])]
    assert acked.topic_id == TOPIC_B and acked.partitions[0].partition_index == 0
    assert [(b.first_offset, b.last_offset, b.acknowledge_types)
            for b in acked.partitions[0].acknowledgement_batches] == [(100, 104, [1]), (105, 105, [2])]
    assert [(t.topic_id, t.partitions) for t in req.forgotten_topics_data] == [(TOPIC_A, [0, 1])]


def test_share_fetch_request_v1_closing_the_session():
    body = (cstr("share-g") + cstr("m")        # GroupId, MemberId
            + i32(-1)                          # ShareSessionEpoch: -1 closes
            + i32(0) + i32(0) + i32(0)         # MaxWaitMs, MinBytes, MaxBytes
            + i32(0) + i32(0)                  # MaxRecords 0: acknowledge only, BatchSize
            + carr(0)                          # Topics: none
            + carr(0))                         # ForgottenTopicsData: none (write_arraycnt(0))
    req = roundtrip_request(request_frame(78, 1, body), 78, 1)
    assert req.share_session_epoch == -1 and req.topics == [] and req.forgotten_topics_data == []


# stand-in for the RecordBatch bytes the mock copies from its log: the codec passes them through
RECORDS = bytes(range(61))


def test_share_fetch_response_v1_as_the_mock_writes_it():
    body = (i32(0)                             # ThrottleTimeMs
            + i16(0)                           # ErrorCode
            + cstr(None)                       # ErrorMessage: NULL
            + i32(30000)                       # AcquisitionLockTimeoutMs
            + carr(2)                          # Responses (topics, sorted by topic id)
            + uuid_(TOPIC_B) + carr(1)         #   TopicId, Partitions: 1
            + i32(0)                           #     PartitionIndex
            + i16(0) + cstr(None)              #     ErrorCode, ErrorMessage
            + i16(0) + cstr(None)              #     AcknowledgeErrorCode, AcknowledgeErrorMessage
            + i32(-1) + i32(-1) + TAGS         #     CurrentLeader: LeaderId, LeaderEpoch, tags
            + cbytes(RECORDS)                  #     Records (compact bytes)
            + carr(2)                          #     AcquiredRecords
            + i64(100) + i64(104) + i16(1) + TAGS  # FirstOffset, LastOffset, DeliveryCount, tags
            + i64(105) + i64(109) + i16(2) + TAGS
            + TAGS                             #     partition tags
            + TAGS                             #   topic tags
            + uuid_(TOPIC_A) + carr(1)         #   TopicId, Partitions: 1
            + i32(3)                           #     PartitionIndex
            + i16(ErrorCode.NOT_LEADER_OR_FOLLOWER)                   # ErrorCode
            + cstr("Broker: Not leader for partition")               # ErrorMessage
            + i16(ErrorCode.INVALID_RECORD_STATE)                     # AcknowledgeErrorCode
            + cstr("Broker: The record state is invalid")            # AcknowledgeErrorMessage
            + i32(2) + i32(5) + TAGS           #     CurrentLeader: the new leader, tags
            + uvarint(1)                       #     Records: empty (uvarint 1), never NULL
            + carr(0)                          #     AcquiredRecords: none
            + TAGS                             #     partition tags
            + TAGS                             #   topic tags
            + carr(1)                          # NodeEndpoints: the leader named above
            + i32(2) + cstr("broker-2") + i32(9092) + cstr(None) + TAGS  # NodeId, Host, Port, Rack
            + TAGS)                            # top-level tags (then send_response0(tags_written))
    resp = roundtrip_response(response_frame(body), 78, 1)
    assert (resp.error_code, resp.error_message, resp.acquisition_lock_timeout_ms) == (0, None, 30000)
    served, moved = resp.responses
    p = served.partitions[0]
    assert (served.topic_id, p.partition_index, p.error_code, p.acknowledge_error_code) == (
        TOPIC_B, 0, 0, 0)
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (-1, -1)
    assert bytes(p.records) == RECORDS
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records] == [
        (100, 104, 1), (105, 109, 2)]
    q = moved.partitions[0]
    assert (moved.topic_id, q.partition_index, q.error_code, q.error_message) == (
        TOPIC_A, 3, ErrorCode.NOT_LEADER_OR_FOLLOWER, "Broker: Not leader for partition")
    assert (q.acknowledge_error_code, q.acknowledge_error_message) == (
        ErrorCode.INVALID_RECORD_STATE, "Broker: The record state is invalid")
    assert (q.current_leader.leader_id, q.current_leader.leader_epoch) == (2, 5)
    assert bytes(q.records) == b"" and q.acquired_records == []
    assert [(n.node_id, n.host, n.port, n.rack) for n in resp.node_endpoints] == [
        (2, "broker-2", 9092, None)]


def test_share_fetch_response_v1_error_as_the_mock_writes_it():
    body = (i32(0)                             # ThrottleTimeMs
            + i16(ErrorCode.SHARE_SESSION_LIMIT_REACHED)                  # ErrorCode
            + cstr("Broker: The limit of share sessions has been reached")  # ErrorMessage
            + i32(0)                           # AcquisitionLockTimeoutMs
            + carr(0)                          # Responses: none
            + carr(0)                          # NodeEndpoints: none
            + TAGS)                            # top-level tags
    resp = roundtrip_response(response_frame(body), 78, 1)
    assert resp.error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED == 133
    assert resp.responses == [] and resp.node_endpoints == []


# ---- ShareAcknowledge (79) v1 -----------------------------------------------------------------

def test_share_acknowledge_request_v1_as_librdkafka_writes_it():
    body = (cstr("share-g")                    # GroupId
            + cstr("Zx1v2Q3wRk2sS8aF5mB7Cg")     # MemberId
            + i32(5)                           # ShareSessionEpoch
            + carr(1)                          # Topics
            + uuid_(TOPIC_A) + carr(2)         #   TopicId, Partitions: 2
            + i32(0) + carr(1)                 #     PartitionIndex, AcknowledgementBatches: 1
            + i64(10) + i64(19) + carr(1) + i8(1) + TAGS   # FirstOffset, LastOffset, [ACCEPT], tags
            + TAGS                             #     partition tags
            + i32(1) + carr(2)                 #     PartitionIndex, AcknowledgementBatches: 2
            + i64(7) + i64(7) + carr(1) + i8(3) + TAGS     # [REJECT]
            + i64(8) + i64(9) + carr(1) + i8(2) + TAGS     # [RELEASE]
            + TAGS                             #     partition tags
            + TAGS)                            #   topic tags
    req = roundtrip_request(request_frame(79, 1, body), 79, 1)
    assert (req.group_id, req.member_id, req.share_session_epoch) == (
        "share-g", "Zx1v2Q3wRk2sS8aF5mB7Cg", 5)
    (t,) = req.topics
    assert t.topic_id == TOPIC_A
    assert [(p.partition_index, [(b.first_offset, b.last_offset, b.acknowledge_types)
                                 for b in p.acknowledgement_batches]) for p in t.partitions] == [
        (0, [(10, 19, [1])]), (1, [(7, 7, [3]), (8, 9, [2])])]


def test_share_acknowledge_response_v1_as_the_mock_writes_it():
    body = (i32(0)                             # ThrottleTimeMs
            + i16(0)                           # ErrorCode
            + cstr(None)                       # ErrorMessage
            + carr(1)                          # Responses
            + uuid_(TOPIC_A) + carr(2)         #   TopicId, Partitions: 2
            + i32(0) + i16(0) + cstr(None)     #     PartitionIndex, ErrorCode, ErrorMessage
            + i32(-1) + i32(-1) + TAGS         #     CurrentLeader: LeaderId, LeaderEpoch, tags
            + TAGS                             #     partition tags
            + i32(1) + i16(ErrorCode.INVALID_RECORD_STATE)            # PartitionIndex, ErrorCode
            + cstr("Broker: The record state is invalid")            # ErrorMessage
            + i32(-1) + i32(-1) + TAGS         #     CurrentLeader, tags
            + TAGS                             #     partition tags
            + TAGS                             #   topic tags
            + carr(0)                          # NodeEndpoints: none
            + TAGS)                            # top-level tags
    resp = roundtrip_response(response_frame(body), 79, 1)
    assert (resp.error_code, resp.error_message) == (0, None)
    (t,) = resp.responses
    assert [(p.partition_index, p.error_code, p.error_message) for p in t.partitions] == [
        (0, 0, None), (1, ErrorCode.INVALID_RECORD_STATE, "Broker: The record state is invalid")]
    assert resp.node_endpoints == []


# ---- the v2 fields of Kafka 4.2 (KIP-1206, KIP-1222) ------------------------------------------

def test_share_fetch_request_v2_puts_acquire_mode_and_renew_flag_after_batch_size():
    body = (cstr("g") + cstr("m") + i32(1)     # GroupId, MemberId, ShareSessionEpoch
            + i32(0) + i32(0) + i32(0)         # MaxWaitMs, MinBytes, MaxBytes (0 with renewals)
            + i32(0) + i32(100)                # MaxRecords, BatchSize
            + i8(1)                            # ShareAcquireMode: record limit
            + i8(1)                            # IsRenewAck: true
            + carr(1) + uuid_(TOPIC_A) + carr(1) + i32(0) + carr(1)
            + i64(3) + i64(3) + carr(1) + i8(4) + TAGS   # [RENEW]
            + TAGS + TAGS
            + carr(0))                         # ForgottenTopicsData
    req = roundtrip_request(request_frame(78, 2, body), 78, 2)
    assert (req.share_acquire_mode, req.is_renew_ack) == (1, True)
    assert req.topics[0].partitions[0].acknowledgement_batches[0].acknowledge_types == [4]
    # v1 has neither field: they are dropped when writing and defaulted when reading
    v1 = REQUESTS[78].decode(req.to_bytes(1), 0, 1)[0]
    assert (v1.share_acquire_mode, v1.is_renew_ack) == (0, False)
    assert len(req.to_bytes(1)) == len(req.to_bytes(2)) - 2


def test_share_acknowledge_v2_renew_flag_and_lock_timeout():
    body = (cstr("g") + cstr("m") + i32(2)     # GroupId, MemberId, ShareSessionEpoch
            + i8(1)                            # IsRenewAck
            + carr(0))                         # Topics
    req = roundtrip_request(request_frame(79, 2, body), 79, 2)
    assert req.is_renew_ack is True
    resp_body = (i32(0) + i16(0) + cstr(None)  # ThrottleTimeMs, ErrorCode, ErrorMessage
                 + i32(15000)                  # AcquisitionLockTimeoutMs (v2+)
                 + carr(0) + carr(0) + TAGS)   # Responses, NodeEndpoints, tags
    resp = roundtrip_response(response_frame(resp_body), 79, 2)
    assert resp.acquisition_lock_timeout_ms == 15000
    assert RESPONSES[79].decode(resp.to_bytes(1), 0, 1)[0].acquisition_lock_timeout_ms == 0


def test_share_fetch_response_v2_is_v1():
    resp = RESPONSES[78](acquisition_lock_timeout_ms=30000, responses=[
        RESPONSES[78].ShareFetchableTopicResponse(topic_id=TOPIC_A, partitions=[
            RESPONSES[78].PartitionData(partition_index=1, records=RECORDS, acquired_records=[
                RESPONSES[78].AcquiredRecords(first_offset=0, last_offset=4, delivery_count=1)])])])
    assert resp.to_bytes(1) == resp.to_bytes(2)


def test_version_ranges_and_headers_of_the_share_apis():
    ranges = {key: (REQUESTS[key].MIN_VERSION, REQUESTS[key].MAX_VERSION) for key in
              (76, 77, 78, 79, 83, 84, 85, 86, 87, 90, 91, 92, 15)}
    assert ranges == {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2),        # v0 (4.0) is gone
                      83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1),
                      90: (0, 1), 91: (0, 0), 92: (0, 0), 15: (0, 6)}
    for key, (lo, hi) in ranges.items():
        assert (RESPONSES[key].MIN_VERSION, RESPONSES[key].MAX_VERSION) == (lo, hi)
        if key != 15:  # every share API is flexible from its first version
            assert request_header_version(key, lo) == 2 and response_header_version(key, lo) == 1
    assert [API_NAMES[k] for k in (90, 91, 92)] == [
        "DescribeShareGroupOffsets", "AlterShareGroupOffsets", "DeleteShareGroupOffsets"]


# ---- round trips: ShareGroupDescribe, state RPCs, admin APIs, DescribeGroups ------------------

def roundtrip(obj, version):
    cls = type(obj)
    data = obj.to_bytes(version)
    back, end = cls.decode(data, 0, version)
    assert end == len(data)
    assert back.to_bytes(version) == data
    return back


def test_share_group_describe_v1_roundtrip():
    Req, Resp = REQUESTS[77], RESPONSES[77]
    req = Req(group_ids=["g1", "g2"], include_authorized_operations=True)
    assert roundtrip(req, 1) == req
    tp = Resp.TopicPartitions(topic_id=TOPIC_A, topic_name="orders", partitions=[0, 2])
    resp = Resp(throttle_time_ms=1, groups=[Resp.DescribedGroup(
        error_code=0, group_id="g1", group_state="Stable", group_epoch=4, assignment_epoch=4,
        assignor_name="simple", authorized_operations=0x1F8, members=[Resp.Member(
            member_id="m1", rack_id="r1", member_epoch=4, client_id="c", client_host="/127.0.0.1",
            subscribed_topic_names=["orders"],
            assignment=Resp.Assignment(topic_partitions=[tp]))]),
        Resp.DescribedGroup(error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message="no such group",
                            group_id="g2")])
    assert roundtrip(resp, 1) == resp


STATE_BATCH = dict(first_offset=10, last_offset=19, delivery_state=4, delivery_count=5)


def test_state_rpcs_v0_roundtrip():
    for key, req in [
        (83, REQUESTS[83](group_id="g", topics=[REQUESTS[83].InitializeStateData(
            topic_id=TOPIC_A, partitions=[REQUESTS[83].PartitionData(
                partition=0, state_epoch=2, start_offset=-1)])])),
        (84, REQUESTS[84](group_id="g", topics=[REQUESTS[84].ReadStateData(
            topic_id=TOPIC_A, partitions=[REQUESTS[84].PartitionData(partition=1, leader_epoch=3)])])),
        (86, REQUESTS[86](group_id="g", topics=[REQUESTS[86].DeleteStateData(
            topic_id=TOPIC_A, partitions=[REQUESTS[86].PartitionData(partition=1)])])),
    ]:
        assert roundtrip(req, 0) == req, API_NAMES[key]
    read = RESPONSES[84](results=[RESPONSES[84].ReadStateResult(topic_id=TOPIC_A, partitions=[
        RESPONSES[84].PartitionResult(partition=1, state_epoch=2, start_offset=10,
                                      state_batches=[RESPONSES[84].StateBatch(**STATE_BATCH)]),
        RESPONSES[84].PartitionResult(partition=2, error_code=ErrorCode.FENCED_STATE_EPOCH,
                                      error_message="stale")])])
    assert roundtrip(read, 0) == read
    for key, result in [(83, "InitializeStateResult"), (86, "DeleteStateResult")]:
        cls = RESPONSES[key]
        resp = cls(results=[getattr(cls, result)(topic_id=TOPIC_B, partitions=[
            cls.PartitionResult(partition=0, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                error_message="loading")])])
        assert roundtrip(resp, 0) == resp


def test_write_share_group_state_v1_carries_the_delivery_complete_count():
    Req = REQUESTS[85]
    req = Req(group_id="g", topics=[Req.WriteStateData(topic_id=TOPIC_A, partitions=[
        Req.PartitionData(partition=0, state_epoch=2, leader_epoch=3, start_offset=10,
                          delivery_complete_count=4, state_batches=[Req.StateBatch(**STATE_BATCH)])])])
    assert roundtrip(req, 1) == req
    # the count sits between StartOffset and StateBatches
    assert req.to_bytes(1) == (
        cstr("g") + carr(1) + uuid_(TOPIC_A) + carr(1)
        + i32(0) + i32(2) + i32(3) + i64(10)   # Partition, StateEpoch, LeaderEpoch, StartOffset
        + i32(4)                               # DeliveryCompleteCount (v1+)
        + carr(1) + i64(10) + i64(19) + i8(4) + i16(5) + TAGS  # StateBatches
        + TAGS + TAGS + TAGS)
    v0 = roundtrip(req, 0)
    assert v0.topics[0].partitions[0].delivery_complete_count == -1  # absent at v0: its default
    assert len(req.to_bytes(0)) == len(req.to_bytes(1)) - 4
    resp = RESPONSES[85](results=[RESPONSES[85].WriteStateResult(topic_id=TOPIC_A, partitions=[
        RESPONSES[85].PartitionResult(partition=0)])])
    assert resp.to_bytes(0) == resp.to_bytes(1) and roundtrip(resp, 1) == resp


def test_read_share_group_state_summary_v0_has_the_leader_epoch_and_v1_the_count():
    Req, Resp = REQUESTS[87], RESPONSES[87]
    req = Req(group_id="g", topics=[Req.ReadStateSummaryData(topic_id=TOPIC_A, partitions=[
        Req.PartitionData(partition=0, leader_epoch=3)])])
    assert roundtrip(req, 0) == req and req.to_bytes(0) == req.to_bytes(1)
    resp = Resp(results=[Resp.ReadStateSummaryResult(topic_id=TOPIC_A, partitions=[
        Resp.PartitionResult(partition=0, state_epoch=2, leader_epoch=3, start_offset=10,
                             delivery_complete_count=6)])])
    assert roundtrip(resp, 1) == resp
    assert resp.to_bytes(1) == (
        carr(1) + uuid_(TOPIC_A) + carr(1)
        + i32(0) + i16(0) + cstr(None)         # Partition, ErrorCode, ErrorMessage
        + i32(2) + i32(3) + i64(10)            # StateEpoch, LeaderEpoch, StartOffset
        + i32(6)                               # DeliveryCompleteCount (v1+)
        + TAGS + TAGS + TAGS)
    assert resp.to_bytes(0) == resp.to_bytes(1)[:-4 - 3] + TAGS * 3
    assert roundtrip(resp, 0).results[0].partitions[0].delivery_complete_count == -1


def test_describe_share_group_offsets_v0_v1():
    Req, Resp = REQUESTS[90], RESPONSES[90]
    req = Req(groups=[Req.DescribeShareGroupOffsetsRequestGroup(group_id="g1", topics=None),
                      Req.DescribeShareGroupOffsetsRequestGroup(group_id="g2", topics=[
                          Req.DescribeShareGroupOffsetsRequestTopic(topic_name="orders",
                                                                   partitions=[0, 1])])])
    for v in (0, 1):
        assert roundtrip(req, v) == req
    head = carr(2) + cstr("g1") + carr(None) + TAGS  # Groups, GroupId, Topics: NULL = all, tags
    assert req.to_bytes(0).startswith(head)
    part = Resp.DescribeShareGroupOffsetsResponsePartition(partition_index=0, start_offset=40,
                                                           leader_epoch=1, lag=7)
    resp = Resp(groups=[Resp.DescribeShareGroupOffsetsResponseGroup(group_id="g1", topics=[
        Resp.DescribeShareGroupOffsetsResponseTopic(topic_name="orders", topic_id=TOPIC_A,
                                                    partitions=[part])])])
    assert roundtrip(resp, 1) == resp
    assert (i32(0) + i64(40) + i32(1) + i64(7) + i16(0) + cstr(None) + TAGS) in resp.to_bytes(1)
    assert roundtrip(resp, 0).groups[0].topics[0].partitions[0].lag == -1


def test_alter_and_delete_share_group_offsets_v0():
    Req, Resp = REQUESTS[91], RESPONSES[91]
    req = Req(group_id="g", topics=[Req.AlterShareGroupOffsetsRequestTopic(topic_name="orders", partitions=[
        Req.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=5)])])
    assert roundtrip(req, 0) == req
    resp = Resp(error_code=0, responses=[Resp.AlterShareGroupOffsetsResponseTopic(
        topic_name="orders", topic_id=TOPIC_A, partitions=[
            Resp.AlterShareGroupOffsetsResponsePartition(partition_index=0,
                                                         error_code=ErrorCode.NON_EMPTY_GROUP)])])
    assert roundtrip(resp, 0) == resp
    assert resp.to_bytes(0)[:4 + 2 + 1] == i32(0) + i16(0) + cstr(None)  # top-level error first
    Req, Resp = REQUESTS[92], RESPONSES[92]
    req = Req(group_id="g", topics=[Req.DeleteShareGroupOffsetsRequestTopic(topic_name="orders")])
    assert req.to_bytes(0) == cstr("g") + carr(1) + cstr("orders") + TAGS + TAGS
    resp = Resp(responses=[Resp.DeleteShareGroupOffsetsResponseTopic(
        topic_name="orders", topic_id=TOPIC_A, error_code=ErrorCode.GROUP_ID_NOT_FOUND)])
    assert roundtrip(resp, 0) == resp
    assert resp.to_bytes(0) == (i32(0) + i16(0) + cstr(None) + carr(1) + cstr("orders")
                                + uuid_(TOPIC_A) + i16(ErrorCode.GROUP_ID_NOT_FOUND) + cstr(None)
                                + TAGS + TAGS)


def test_describe_groups_v6_adds_a_group_error_message():
    Resp = RESPONSES[15]
    group = Resp.DescribedGroup(error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message="unknown group",
                                group_id="g", authorized_operations=-2147483648)
    resp = Resp(throttle_time_ms=0, groups=[group])
    assert roundtrip(resp, 6) == resp
    assert resp.to_bytes(6) == (i32(0) + carr(1) + i16(ErrorCode.GROUP_ID_NOT_FOUND)
                                + cstr("unknown group") + cstr("g") + cstr("") + cstr("")
                                + cstr("") + carr(0) + i32(-2147483648) + TAGS + TAGS)
    assert resp.to_bytes(5) == resp.to_bytes(6).replace(cstr("unknown group"), b"", 1)
    assert roundtrip(resp, 5).groups[0].error_message is None
    req = REQUESTS[15](groups=["g"], include_authorized_operations=True)
    assert roundtrip(req, 6) == req and req.to_bytes(6) == req.to_bytes(5)


def test_kafka_4_2_error_codes():
    assert [(e.name, e.value) for e in ErrorCode if e.value >= 121] == [
        ("INVALID_RECORD_STATE", 121), ("SHARE_SESSION_NOT_FOUND", 122),
        ("INVALID_SHARE_SESSION_EPOCH", 123), ("FENCED_STATE_EPOCH", 124),
        ("INVALID_VOTER_KEY", 125), ("DUPLICATE_VOTER", 126), ("VOTER_NOT_FOUND", 127),
        ("INVALID_REGULAR_EXPRESSION", 128), ("REBOOTSTRAP_REQUIRED", 129),
        ("STREAMS_INVALID_TOPOLOGY", 130), ("STREAMS_INVALID_TOPOLOGY_EPOCH", 131),
        ("STREAMS_TOPOLOGY_FENCED", 132), ("SHARE_SESSION_LIMIT_REACHED", 133)]
    assert "share sessions" in ErrorCode.SHARE_SESSION_LIMIT_REACHED.description


# ---- the generator's overlay ------------------------------------------------------------------

def _spec(path, text):
    path.write_text(text, encoding="utf-8")


def _message(api_key, kind, name, valid, fields):
    return ('{"apiKey": %d, "type": "%s", "name": "%s", "validVersions": "%s", '
            '"flexibleVersions": "none", "fields": [%s]}' % (api_key, kind, name, valid, fields))


def _int_field(name, versions="0+"):
    return '{"name": "%s", "type": "int32", "versions": "%s"}' % (name, versions)


@pytest.fixture
def kafka_and_overlay(tmp_path):
    kafka, overlay = tmp_path / "kafka", tmp_path / "overlay"
    kafka.mkdir()
    overlay.mkdir()
    _spec(kafka / "RequestHeader.json",
          '{"type": "header", "name": "RequestHeader", "validVersions": "0", '
          '"flexibleVersions": "none", "fields": [%s]}' % _int_field("CorrelationId"))
    _spec(kafka / "ResponseHeader.json",
          '{"type": "header", "name": "ResponseHeader", "validVersions": "0", '
          '"flexibleVersions": "none", "fields": [%s]}' % _int_field("CorrelationId"))
    _spec(kafka / "EchoRequest.json", _message(900, "request", "EchoRequest", "0", _int_field("A")))
    _spec(kafka / "EchoResponse.json", _message(900, "response", "EchoResponse", "0", _int_field("B")))
    _spec(kafka / "error-codes.tsv", "name\tcode\tdescription\nNONE\t0\tNo error.\nOOPS\t1\tOld words.\n")
    # the overlay replaces EchoRequest (a v1 with a new field), adds Ping, rewords OOPS, adds LATE
    _spec(overlay / "EchoRequest.json", _message(900, "request", "EchoRequest", "0-1",
                                                 _int_field("A") + ", " + _int_field("C", "1+")))
    _spec(overlay / "PingRequest.json", _message(901, "request", "PingRequest", "0", _int_field("A")))
    _spec(overlay / "PingResponse.json", _message(901, "response", "PingResponse", "0", _int_field("B")))
    _spec(overlay / "error-codes.tsv", "name\tcode\tdescription\nLATE\t7\tNew code.\nOOPS\t1\tNew words.\n")
    return kafka, overlay


def test_overlay_replaces_and_adds_specs_and_error_codes(kafka_and_overlay):
    kafka, overlay = kafka_and_overlay
    plain = generate.generate_all(kafka, None)
    laid = generate.generate_all(kafka, overlay)
    assert "messages/ping.py" not in plain and "messages/ping.py" in laid
    assert "versions 0." in plain["messages/echo.py"] and "versions 0-1." in laid["messages/echo.py"]
    assert "'c'" not in plain["messages/echo.py"] and "('c', 'int32', (1, 32767)" in laid["messages/echo.py"]
    assert "901: ('ping', 'PingRequest')" in laid["messages/__init__.py"]
    errors = laid["errors.py"]
    assert "LATE = 7" in errors and "'New words.'" in errors and "Old words" not in errors
    assert errors.index("NONE = 0") < errors.index("OOPS = 1") < errors.index("LATE = 7")
    assert generate.generate_all(kafka, overlay) == laid  # deterministic
    assert generate.generate_all(kafka, kafka / "missing") == plain  # an absent overlay adds nothing


def test_overlay_error_codes_must_agree_with_kafka(kafka_and_overlay):
    kafka, overlay = kafka_and_overlay
    _spec(overlay / "error-codes.tsv", "name\tcode\tdescription\nOOPS\t5\tMoved.\n")
    with pytest.raises(generate.SpecError, match="OOPS is 1"):
        generate.generate_all(kafka, overlay)
    _spec(overlay / "error-codes.tsv", "name\tcode\tdescription\nOTHER\t1\tTaken.\n")
    with pytest.raises(generate.SpecError, match="code 1 of OTHER is already OOPS"):
        generate.generate_all(kafka, overlay)


def test_check_mode_covers_the_overlay(kafka_and_overlay, tmp_path):
    kafka, overlay = kafka_and_overlay
    out = tmp_path / "out"
    args = ["--specs", str(kafka), "--overlay", str(overlay), "--out", str(out)]
    assert generate.main(args) == 0
    assert generate.main(args + ["--check"]) == 0
    _spec(overlay / "PingResponse.json", _message(901, "response", "PingResponse", "0", _int_field("Z")))
    assert generate.main(args + ["--check"]) == 1
    assert generate.main(["--specs", str(tmp_path / "nope"), "--overlay", str(overlay),
                          "--out", str(out), "--check"]) == 2


def test_the_package_overlay_is_the_default_and_parses():
    assert generate.OVERLAY_DIR == generate.PACKAGE_DIR / "specs"
    names = sorted(p.name for p in generate.OVERLAY_DIR.glob("*.json"))
    assert len(names) == 26 and "error-codes.tsv" in {p.name for p in generate.OVERLAY_DIR.iterdir()}
    for name in names:
        msg = generate.build_message(generate.load_spec(generate.OVERLAY_DIR / name),
                                     generate.OVERLAY_DIR / name)
        assert msg.name + ".json" == name
