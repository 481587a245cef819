"""Generated Kafka codecs: Hypothesis round trips of every class at every version, golden
bytes written by hand from protocol.html, truncation/garbage robustness, header helpers."""
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pybroker import protocol
from pybroker.protocol import (decode_request, decode_response, encode_request, encode_response,
                               request_header_version, response_header_version)
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages import API_NAMES, DATA, REQUESTS, RESPONSES
from pybroker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from pybroker.protocol.messages.fetch import FetchRequest, FetchResponse
from pybroker.protocol.messages.headers import RequestHeader, ResponseHeader
from pybroker.protocol.messages.metadata import MetadataRequest, MetadataResponse
from pybroker.protocol.messages.produce import ProduceRequest
from pybroker.protocol.primitives import (DecodeError, EncodeError, UnsupportedVersionError,
                                          rd_uvarint, rd_uvarlong, rd_varint, wr_uvarint,
                                          wr_varint)
from pybroker.records import Record, build_batch

INT_RANGES = {
    "int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1),
}


def vin(v, rng):
    return rng[0] <= v <= rng[1]


def value_strategy(top, typ, v, nullable):
    is_array = typ.startswith("[]")
    base = typ[2:] if is_array else typ
    if base in INT_RANGES:
        lo, hi = INT_RANGES[base]
        elem = st.integers(lo, hi)
    elif base == "bool":
        elem = st.booleans()
    elif base == "float64":
        elem = st.floats(allow_nan=False)
    elif base == "uuid":
        elem = st.binary(min_size=16, max_size=16).map(lambda b: uuid.UUID(bytes=b))
    elif base == "string":
        elem = st.text(max_size=12)
    elif base in ("bytes", "records"):
        elem = st.binary(max_size=24)
    else:
        elem = st.deferred(lambda: obj_strategy(top, getattr(top, base), v))
    s = st.lists(elem, max_size=3) if is_array else elem
    return st.one_of(st.none(), s) if nullable else s


def obj_strategy(top, cls, v):
    """Objects of ``cls`` with every field present at ``v`` drawn; absent fields default."""
    kwargs = {}
    known_tags = set()
    for attr, typ, versions, nullable, tag in cls.FIELDS:
        if not vin(v, versions):
            continue
        if tag is not None:
            known_tags.add(int(tag))  # a spec may write a tag as a string ("0")
        kwargs[attr] = value_strategy(top, typ, v, vin(v, nullable))
    if cls.FLEXIBLE_MIN is not None and v >= cls.FLEXIBLE_MIN:
        unknown = st.lists(st.integers(0, 300).filter(lambda t: t not in known_tags),
                           max_size=2, unique=True).flatmap(
            lambda tags: st.tuples(*[st.tuples(st.just(t), st.binary(max_size=5))
                                     for t in sorted(tags)]).map(lambda x: list(x) or None))
        kwargs["_unknown_tagged"] = unknown
    return st.fixed_dictionaries(kwargs).map(lambda kw: cls(**kw))


def all_cases():
    cases = []
    tables = [REQUESTS[k] for k in sorted(REQUESTS)] + [RESPONSES[k] for k in sorted(RESPONSES)]
    tables += [RequestHeader, ResponseHeader] + [DATA[k] for k in sorted(DATA)]
    for cls in tables:
        for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
            cases.append(pytest.param(cls, v, id=f"{cls.__name__}-v{v}"))
    return cases


CASES = all_cases()


def test_registry_covers_all_apis():
    assert set(REQUESTS) == set(RESPONSES) == set(API_NAMES)
    assert len(REQUESTS) >= 80
    for key, cls in REQUESTS.items():
        assert cls.API_KEY == key == RESPONSES[key].API_KEY
        assert cls.__name__ == API_NAMES[key] + "Request"
        assert (cls.MIN_VERSION, cls.MAX_VERSION) == (RESPONSES[key].MIN_VERSION,
                                                      RESPONSES[key].MAX_VERSION)
    assert REQUESTS[0] is ProduceRequest and REQUESTS[1] is FetchRequest
    assert ProduceRequest.FLEXIBLE_MIN == 9 and ProduceRequest.TopicProduceData.FLEXIBLE_MIN == 9


@pytest.mark.parametrize("cls,v", CASES)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_round_trip(cls, v, data):
    obj = data.draw(obj_strategy(cls, cls, v))
    out = bytearray()
    obj.encode(v, out)
    wire = bytes(out)
    back, pos = cls.decode(memoryview(wire), 0, v)
    assert pos == len(wire)
    assert back == obj
    again = bytearray()
    back.encode(v, again)
    assert again == wire


@pytest.mark.parametrize("cls,v", CASES)
def test_default_object_round_trip_and_truncation(cls, v):
    obj = cls()
    wire = obj.to_bytes(v)
    assert cls.decode(memoryview(wire), 0, v) == (obj, len(wire))
    for cut in range(len(wire)):
        with pytest.raises(DecodeError):
            cls.decode(memoryview(wire[:cut]), 0, v)


def test_absent_field_encodes_nothing_and_decodes_to_default():
    # throttle_time_ms only exists from v1 of ApiVersionsResponse
    resp = ApiVersionsResponse(error_code=0, throttle_time_ms=99)
    wire = resp.to_bytes(0)
    assert wire == b"\x00\x00" + b"\x00\x00\x00\x00"
    back, _ = ApiVersionsResponse.decode(memoryview(wire), 0, 0)
    assert back.throttle_time_ms == 0


# ---- golden bytes, assembled by hand from protocol.html --------------------------------

def s16(s):  # STRING
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def cs(s):  # COMPACT_STRING with a one-byte length
    b = s.encode()
    return bytes([len(b) + 1]) + b


def test_golden_api_versions_v0():
    frame = (b"\x00\x12" b"\x00\x00" b"\x00\x00\x00\x2a" + s16("abc"))
    header, req = decode_request(memoryview(frame))
    assert (header.request_api_key, header.request_api_version, header.correlation_id,
            header.client_id) == (18, 0, 42, "abc")
    assert req == ApiVersionsRequest()
    assert encode_request(0, 42, "abc", ApiVersionsRequest()) == frame


def test_golden_api_versions_v3_flexible():
    frame = (b"\x00\x12" b"\x00\x03" b"\x00\x00\x00\x07"
             + s16("cli")  # client_id stays a non-compact STRING in header v2
             + b"\x00"  # header tagged fields
             + cs("pyk") + cs("1.0")
             + b"\x00")  # body tagged fields
    header, req = decode_request(memoryview(frame))
    assert header.client_id == "cli" and header.correlation_id == 7
    assert (req.client_software_name, req.client_software_version) == ("pyk", "1.0")
    assert encode_request(3, 7, "cli", req) == frame
    # null client id: int16 -1
    nul = encode_request(3, 7, None, req)
    assert nul[8:10] == b"\xff\xff" and decode_request(nul)[0].client_id is None


def test_golden_api_versions_response_headers():
    body_v0 = (b"\x00\x00"  # error_code
               b"\x00\x00\x00\x01" b"\x00\x00" b"\x00\x00" b"\x00\x0b")  # [Produce 0-11]
    resp = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(
        api_key=0, min_version=0, max_version=11)])
    hv = response_header_version(18, 0)
    assert hv == 0
    assert encode_response(hv, 5, resp, 0) == b"\x00\x00\x00\x05" + body_v0
    body_v3 = (b"\x00\x00"  # error_code
               b"\x02" b"\x00\x00" b"\x00\x00" b"\x00\x0b" b"\x00"  # compact array of 1
               b"\x00\x00\x00\x00"  # throttle_time_ms
               b"\x00")  # no tagged fields (all at their defaults)
    assert response_header_version(18, 3) == 0  # ApiVersions responses never use header v1
    assert encode_response(0, 5, resp, 3) == b"\x00\x00\x00\x05" + body_v3
    hdr, back = decode_response(b"\x00\x00\x00\x05" + body_v3, 18, 3)
    assert hdr.correlation_id == 5 and back == resp


def test_golden_metadata_v1():
    frame = (b"\x00\x03" b"\x00\x01" b"\x00\x00\x00\x09" + s16("c")
             + b"\x00\x00\x00\x02" + s16("t1") + s16("t2"))
    header, req = decode_request(frame)
    assert request_header_version(3, 1) == 1
    assert [t.name for t in req.topics] == ["t1", "t2"]
    assert encode_request(1, 9, "c", req) == frame
    # v1 topics is nullable: -1 means all topics
    null_frame = frame[:11] + b"\xff\xff\xff\xff"
    assert decode_request(null_frame)[1].topics is None
    assert encode_request(1, 9, "c", MetadataRequest(topics=None)) == null_frame


def test_golden_produce_v3_records_zero_copy():
    batch = bytes(build_batch([Record(value=b"hello", key=b"k")], base_offset=0))
    frame = (b"\x00\x00" b"\x00\x03" b"\x00\x00\x00\x01" + s16("p")
             + b"\xff\xff"  # transactional_id: null
             + b"\xff\xff"  # acks -1
             + b"\x00\x00\x75\x30"  # timeout 30000
             + b"\x00\x00\x00\x01" + s16("t")
             + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x02"  # partition 2
             + struct.pack(">i", len(batch)) + batch)
    header, req = decode_request(memoryview(frame))
    assert (req.transactional_id, req.acks, req.timeout_ms) == (None, -1, 30000)
    part = req.topic_data[0].partition_data[0]
    assert req.topic_data[0].name == "t" and part.index == 2
    assert isinstance(part.records, memoryview)
    assert part.records.obj is frame  # a view into the input, not a copy
    assert part.records == batch
    assert encode_request(3, 1, "p", req) == frame


def test_golden_fetch_v4():
    frame = (b"\x00\x01" b"\x00\x04" b"\x00\x00\x00\x0b" + s16("f")
             + b"\xff\xff\xff\xff"  # replica_id -1
             + b"\x00\x00\x01\xf4"  # max_wait_ms 500
             + b"\x00\x00\x00\x01"  # min_bytes 1
             + b"\x03\x20\x00\x00"  # max_bytes 52428800
             + b"\x01"  # isolation_level read_committed
             + b"\x00\x00\x00\x01" + s16("t")
             + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00"  # partition 0
             + b"\x00\x00\x00\x00\x00\x00\x00\x05"  # fetch_offset 5
             + b"\x00\x10\x00\x00")  # partition_max_bytes 1 MiB
    header, req = decode_request(frame)
    assert (req.replica_id, req.max_wait_ms, req.min_bytes, req.max_bytes,
            req.isolation_level) == (-1, 500, 1, 52428800, 1)
    p = req.topics[0].partitions[0]
    assert (req.topics[0].topic, p.partition, p.fetch_offset, p.partition_max_bytes) == \
        ("t", 0, 5, 1048576)
    assert p.log_start_offset == -1 and p.current_leader_epoch == -1  # absent in v4: defaults
    assert encode_request(4, 11, "f", req) == frame


def test_header_versions():
    assert request_header_version(7, 0) == 0  # ControlledShutdown v0
    assert request_header_version(0, 8) == 1 and request_header_version(0, 9) == 2
    assert response_header_version(0, 8) == 0 and response_header_version(0, 9) == 1
    assert response_header_version(3, 9) == 1
    assert ResponseHeader(correlation_id=3).to_bytes(0) == b"\x00\x00\x00\x03"
    assert ResponseHeader(correlation_id=3).to_bytes(1) == b"\x00\x00\x00\x03\x00"
    assert RequestHeader(request_api_key=7, request_api_version=0, correlation_id=1,
                         client_id="x").to_bytes(0) == b"\x00\x07\x00\x00\x00\x00\x00\x01"
    with pytest.raises(UnsupportedVersionError):
        request_header_version(9999, 0)


def test_unsupported_version_keeps_header():
    frame = b"\x00\x12\x00\x63\x00\x00\x00\x04" + s16("x") + b"\x00"
    with pytest.raises(UnsupportedVersionError) as ei:
        decode_request(frame)
    assert ei.value.api_key == 18 and ei.value.api_version == 99
    assert ei.value.header.correlation_id == 4 and ei.value.header.client_id == "x"
    assert isinstance(ei.value, DecodeError)


def test_tagged_fields_known_and_unknown():
    cur = FetchResponse.LeaderIdAndEpoch(leader_id=3, leader_epoch=9)
    part = FetchResponse.PartitionData(partition_index=1, current_leader=cur, records=b"",
                                       _unknown_tagged=[(7, b"zz")])
    resp = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic_id=uuid.UUID(int=5), partitions=[part])])
    wire = resp.to_bytes(13)
    back, _ = FetchResponse.decode(memoryview(wire), 0, 13)
    got = back.responses[0].partitions[0]
    assert got.current_leader == cur and got._unknown_tagged == [(7, b"zz")]
    assert got.snapshot_id == FetchResponse.SnapshotId()  # default, not on the wire
    assert back.responses[0].topic_id == uuid.UUID(int=5)
    # default-valued tagged fields are not written
    plain = FetchResponse.PartitionData(partition_index=1, records=b"")
    # current_leader: tag, size, 8 bytes, its own empty tag section; unknown: tag, size, 2
    assert len(plain.to_bytes(13)) + (1 + 1 + 8 + 1) + (1 + 1 + 2) == len(part.to_bytes(13))


def test_error_codes():
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode(6) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert "CRC" in ErrorCode.CORRUPT_MESSAGE.description


# ---- robustness --------------------------------------------------------------------------

def sample_encodings():
    batch = bytes(build_batch([Record(value=b"v" * 40)]))
    produce = ProduceRequest(acks=1, timeout_ms=5, topic_data=[ProduceRequest.TopicProduceData(
        name="topic", partition_data=[ProduceRequest.PartitionProduceData(index=0,
                                                                          records=batch)])])
    fetch = FetchRequest(max_wait_ms=1, topics=[FetchRequest.FetchTopic(
        topic="t", topic_id=uuid.UUID(int=1),
        partitions=[FetchRequest.FetchPartition(partition=1, fetch_offset=3)])],
        cluster_id="c")
    fresp = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[FetchResponse.PartitionData(
            records=batch, current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=1),
            aborted_transactions=[FetchResponse.AbortedTransaction(producer_id=1)])])])
    out = []
    for v in (3, 8, 9, 11):
        out.append((ProduceRequest, v, produce.to_bytes(v)))
    for v in (4, 12, 13, 15):
        out.append((FetchRequest, v, fetch.to_bytes(v)))
    for v in (4, 11, 12, 16):
        out.append((FetchResponse, v, fresp.to_bytes(v)))
    return out


SAMPLES = sample_encodings()


@pytest.mark.parametrize("cls,v,wire", SAMPLES, ids=[f"{c.__name__}-v{v}" for c, v, _ in SAMPLES])
def test_every_cut_point_raises_decode_error(cls, v, wire):
    assert cls.decode(memoryview(wire), 0, v)[1] == len(wire)
    for cut in range(len(wire)):
        with pytest.raises(DecodeError):
            cls.decode(memoryview(wire[:cut]), 0, v)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_garbage_and_mutations_only_raise_decode_error(data):
    cls, v, wire = data.draw(st.sampled_from(SAMPLES))
    if data.draw(st.booleans()):
        buf = bytearray(wire)
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(buf) - 1))
            buf[i] = data.draw(st.integers(0, 255))
        buf = bytes(buf)
    else:
        buf = data.draw(st.binary(max_size=200))
        cls = data.draw(st.sampled_from(sorted(REQUESTS.values(), key=lambda c: c.API_KEY)))
        v = data.draw(st.integers(cls.MIN_VERSION, cls.MAX_VERSION))
    try:
        obj, pos = cls.decode(memoryview(buf), 0, v)
    except DecodeError:
        return
    assert 0 <= pos <= len(buf)
    obj.to_bytes(v)  # whatever decoded must re-encode


@settings(max_examples=200, deadline=None)
@given(frame=st.binary(max_size=80))
def test_decode_request_garbage(frame):
    try:
        decode_request(frame)
    except DecodeError:
        pass


def test_huge_array_count_rejected_quickly():
    # ProduceRequest v0: acks, timeout, then a topic count of 2**31-1 and 10 bytes of body
    wire = b"\x00\x01" b"\x00\x00\x00\x05" b"\x7f\xff\xff\xff" + b"\x00" * 10
    with pytest.raises(DecodeError, match="exceeds"):
        ProduceRequest.decode(memoryview(wire), 0, 0)
    # compact form: uvarint count 2**31
    wire = b"\x00" b"\x00\x01" b"\x00\x00\x00\x05" b"\x80\x80\x80\x80\x08" + b"\x00" * 10
    with pytest.raises(DecodeError, match="exceeds"):
        ProduceRequest.decode(memoryview(wire), 0, 9)
    # int32 array of 2**31-1 elements
    part = MetadataResponse.MetadataResponsePartition
    wire = b"\x00" * 10 + b"\x7f\xff\xff\xff" + b"\x00" * 10  # replica_nodes count
    with pytest.raises(DecodeError, match="exceeds"):
        part.decode(memoryview(wire), 0, 1)


def test_bad_lengths():
    with pytest.raises(DecodeError):  # string longer than the buffer
        RequestHeader.decode(memoryview(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x09ab"), 0, 1)
    with pytest.raises(DecodeError):  # -2 is not a valid nullable string length
        RequestHeader.decode(memoryview(b"\x00\x00\x00\x00\x00\x00\x00\x00\xff\xfe"), 0, 1)
    with pytest.raises(DecodeError):  # null where the spec does not allow it
        MetadataRequest.MetadataRequestTopic.decode(memoryview(b"\xff\xff"), 0, 1)
    with pytest.raises(DecodeError):  # invalid UTF-8
        MetadataRequest.MetadataRequestTopic.decode(memoryview(b"\x00\x01\xff"), 0, 1)
    with pytest.raises(DecodeError):  # records length past the end
        ProduceRequest.PartitionProduceData.decode(
            memoryview(b"\x00\x00\x00\x00\x00\x00\x00\x09abc"), 0, 3)


def test_varints():
    for n in (0, 1, 127, 128, 300, 2**31, 2**32 - 1):
        out = bytearray()
        wr_uvarint(out, n)
        assert rd_uvarint(memoryview(bytes(out)), 0) == (n, len(out))
    for n in (0, -1, 1, -2**31, 2**31 - 1):
        out = bytearray()
        wr_varint(out, n)
        assert rd_varint(memoryview(bytes(out)), 0) == (n, len(out))
    with pytest.raises(DecodeError, match="longer than 5"):
        rd_uvarint(memoryview(b"\x80\x80\x80\x80\x80\x01"), 0)
    with pytest.raises(DecodeError, match="longer than 10"):
        rd_uvarlong(memoryview(b"\x80" * 10 + b"\x01"), 0)
    with pytest.raises(DecodeError, match="truncated"):
        rd_uvarint(memoryview(b"\x80\x80"), 0)
    with pytest.raises(EncodeError):
        wr_uvarint(bytearray(), -1)


def test_encode_errors():
    with pytest.raises(EncodeError):  # null for a non-nullable string
        MetadataRequest.MetadataRequestTopic(name=None).to_bytes(1)
    with pytest.raises(EncodeError):  # int16 out of range
        ProduceRequest(acks=70000).to_bytes(3)
    with pytest.raises(UnsupportedVersionError):
        ProduceRequest().to_bytes(99)
    with pytest.raises(EncodeError):  # uuid of the wrong size
        FetchRequest.FetchTopic(topic_id=b"short").to_bytes(13)


def test_uuid_accepts_bytes_and_records_any_buffer():
    raw = bytes(range(16))
    t = FetchRequest.FetchTopic(topic_id=raw)
    back, _ = FetchRequest.FetchTopic.decode(memoryview(t.to_bytes(13)), 0, 13)
    assert back.topic_id == uuid.UUID(bytes=raw)
    for rec in (b"abc", bytearray(b"abc"), memoryview(b"xxabc")[2:]):
        p = ProduceRequest.PartitionProduceData(index=1, records=rec)
        assert p.to_bytes(9) == b"\x00\x00\x00\x01\x04abc\x00"


def test_lazy_package_exports():
    assert protocol.REQUESTS is REQUESTS and protocol.ErrorCode is ErrorCode


@pytest.mark.parametrize("call", [
    "encode_request(0, 1, 'c', ApiVersionsRequest())",
    "decode_request(b'\\x00\\x12\\x00\\x00\\x00\\x00\\x00\\x01\\xff\\xff')",
    "decode_response(b'\\x00\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00', 18, 0)",
    "encode_response(0, 1, ApiVersionsResponse(), 0)",
])
def test_helpers_work_first_thing_in_a_fresh_interpreter(call):
    # the package loads its generated codecs lazily; every helper must trigger that itself
    code = ("from pybroker.protocol import *\n"
            "from pybroker.protocol.messages.api_versions import ApiVersionsRequest, "
            "ApiVersionsResponse\n" + call)
    code = code.replace("from pybroker.protocol import *", "from pybroker.protocol import ("
                        "encode_request, decode_request, decode_response, encode_response)", 1)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   cwd=str(Path(__file__).resolve().parents[2]))


@pytest.mark.parametrize("reader", ["rd_cstring", "rd_ncstring"])
def test_a_compact_string_over_int16_length_is_refused(reader):
    """As Kafka's parsers: 32767 bytes is the most a string may hold, compact or not."""
    from pybroker.protocol import primitives
    read = getattr(primitives, reader)
    ok = bytes([0x80, 0x80, 0x02]) + b"x" * 0x7FFF  # uvarint 32768 = length 32767 + 1
    assert read(ok, 0) == ("x" * 0x7FFF, len(ok))
    too_long = bytes([0x81, 0x80, 0x02]) + b"x" * 0x8000  # uvarint 32769 = length 32768 + 1
    with pytest.raises(protocol.DecodeError, match="over 32767"):
        read(too_long, 0)
