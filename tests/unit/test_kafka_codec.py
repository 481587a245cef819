"""Hot-path codecs: Produce decode and Fetch encode, native vs pure vs the generated codec.

Differential tests on Hypothesis-built requests (valid, truncated, garbled), golden bytes
(a ProduceRequest v3 assembled by hand from protocol.html, and Produce v8 requests captured
from confluent-kafka and kafka-python), a live capture through a recording proxy in front of
a real broker, and Fetch responses byte-identical to pybroker.api.fetch.encode and decodable
by the generated FetchResponse codec.

The cases of the other tiers: tests/interop/test_kafka_codec.py.
"""
import importlib
import struct
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from pybroker import core
from pybroker.api import fetch as fetch_api
from pybroker.contracts.kafka_codec import PartitionData, ProduceData, TopicData
from pybroker.protocol import DecodeError, EncodeError, RequestHeader, UnsupportedVersionError
from pybroker.protocol.messages import REQUESTS, RESPONSES

ProduceRequest = REQUESTS[0]
FetchRequest = REQUESTS[1]
FetchResponse = RESPONSES[1]
IMPLS = ("native", "pure")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def load(impl):
    if "kafka_codec" in core.MODULES:
        return core.load("kafka_codec", impl)
    package = "pybroker._native" if impl == "native" else "pybroker._pure"  # until core lists it
    return importlib.import_module(f"{package}.kafka_codec")


NATIVE, PURE = load("native"), load("pure")


@pytest.fixture(params=IMPLS)
def codec(request):
    return load(request.param)


def test_native_is_compiled():
    assert NATIVE.__file__.endswith(".so") and PURE.__file__.endswith(".py")


# ---- helpers ---------------------------------------------------------------------------------

def generated(frame, pos, version):
    """The generated codec's reading of the same body, in ProduceData shape (records as bytes)."""
    req, _ = ProduceRequest.decode(frame, pos, version)
    return (req.transactional_id, req.acks, req.timeout_ms,
            [(t.name, [(p.index, None if p.records is None else bytes(p.records))
                       for p in t.partition_data]) for t in req.topic_data])


def plain(data):
    """ProduceData with records copied to bytes, for comparisons."""
    return (data.transactional_id, data.acks, data.timeout_ms,
            [(t.name, [(p.index, None if p.records is None else bytes(p.records))
                       for p in t.partitions]) for t in data.topics])


def outcome(fn, *args):
    """("ok", plain value) or ("error", type, message): what a decoder did."""
    try:
        return ("ok", plain(fn(*args)))
    except (DecodeError, TypeError) as exc:
        return ("error", type(exc), str(exc))


def assert_zero_copy(data, frame):
    for t in data.topics:
        for p in t.partitions:
            if p.records is not None:
                assert p.records.obj is frame.obj
                assert p.records.readonly == frame.readonly


def decode_all(frame, pos, version):
    """Decode with both implementations, check they agree with each other and the generated
    codec, and return the native result."""
    n = NATIVE.decode_produce(frame, pos, version)
    p = PURE.decode_produce(frame, pos, version)
    assert type(n) is type(p) is ProduceData
    assert all(type(t) is TopicData and all(type(x) is PartitionData for x in t.partitions)
               for t in n.topics + p.topics)
    assert plain(n) == plain(p) == generated(frame, pos, version)
    assert_zero_copy(n, frame)
    assert_zero_copy(p, frame)
    return n


# ---- strategies ------------------------------------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
records = st.none() | st.binary(max_size=80)
# unknown tagged fields (written by flexible versions only): the decoders must skip them
tags = st.none() | st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=140)), max_size=3).map(
    lambda fields: sorted(fields, key=lambda f: f[0]) or None)
partitions = st.builds(ProduceRequest.PartitionProduceData, index=st.integers(-2**31, 2**31 - 1),
                       records=records, _unknown_tagged=tags)
topics = st.builds(ProduceRequest.TopicProduceData, name=names,
                   partition_data=st.lists(partitions, max_size=4), _unknown_tagged=tags)
requests = st.builds(ProduceRequest, transactional_id=st.none() | names,
                     acks=st.integers(-2**15, 2**15 - 1), timeout_ms=st.integers(-2**31, 2**31 - 1),
                     topic_data=st.lists(topics, max_size=4), _unknown_tagged=tags)
versions = st.integers(3, 11)


@st.composite
def framed(draw):
    """(frame memoryview, body pos, version, body length): random junk before and after."""
    version = draw(versions)
    body = draw(requests).to_bytes(version)
    head = draw(st.binary(max_size=6))
    tail = draw(st.binary(max_size=6))
    buf = bytearray(head + body + tail) if draw(st.booleans()) else head + body + tail
    return memoryview(buf), len(head), version, len(body)


# ---- decode: differential --------------------------------------------------------------------

@SETTINGS
@given(framed())
def test_decode_matches_generated(case):
    frame, pos, version, _ = case
    decode_all(frame, pos, version)


@SETTINGS
@given(framed(), st.data())
def test_truncated_same_error(case, data):
    frame, pos, version, size = case
    cut = data.draw(st.integers(pos, pos + size - 1), label="cut")  # strictly inside the body
    short = frame[:cut]
    n, p = outcome(NATIVE.decode_produce, short, pos, version), outcome(PURE.decode_produce, short, pos, version)
    assert n == p
    assert n[0] == "error" and n[1] is DecodeError
    with pytest.raises(DecodeError):
        ProduceRequest.decode(short, pos, version)


@SETTINGS
@given(framed(), st.data())
def test_garbled_same_outcome(case, data):
    frame, pos, version, size = case
    assume(size > 0)
    buf = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        at = data.draw(st.integers(pos, pos + size - 1), label="at")
        buf[at] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0xC3, 0xED])
                            | st.integers(0, 255), label="byte")
    cut = data.draw(st.integers(pos, len(buf)), label="cut")
    view = memoryview(bytes(buf[:cut]))
    n, p = outcome(NATIVE.decode_produce, view, pos, version), outcome(PURE.decode_produce, view, pos, version)
    assert n == p
    try:
        g = ("ok", generated(view, pos, version))
    except DecodeError:
        g = ("error", DecodeError)
    assert n[:2] == g[:2]  # the generated codec accepts and refuses exactly the same inputs
    if n[0] == "ok":
        assert n[1] == g[1]


# ---- decode: hostile inputs -----------------------------------------------------------------

def body(*parts):
    return memoryview(b"".join(parts))


I16, I32 = struct.Struct(">h").pack, struct.Struct(">i").pack
HEAD = I16(-1) + I16(1) + I32(1000)  # null transactional_id, acks 1, timeout 1000


@pytest.mark.parametrize("frame, message", [
    (body(I16(-1), I16(1)), "acks and timeout_ms at offset 2 needs 6 bytes, only 2 left"),
    (body(I16(-2)), "transactional_id at offset 0 has length -2"),
    (body(I16(5), b"ab"), "transactional_id at offset 2 needs 5 bytes, only 2 left"),
    (body(I16(2), b"\xff\xfe", I16(1), I32(0), I32(0)), "transactional_id at offset 2 is not valid UTF-8"),
    (body(HEAD, I32(-1)), "topic count at offset 8 is -1"),
    (body(HEAD, I32(0x7FFFFFFF)), "topic count 2147483647 at offset 8 exceeds the 0 bytes left"),
    (body(HEAD, I32(1), I16(-1), I32(0)), "topic name at offset 12 has length -1"),
    (body(HEAD, I32(1), I16(1), b"t", I32(0x10000000)),
     "partition count 268435456 at offset 15 exceeds the 0 bytes left"),
    (body(HEAD, I32(1), I16(1), b"t", I32(1), I32(0), I32(-2)), "records at offset 23 have length -2"),
    (body(HEAD, I32(1), I16(1), b"t", I32(1), I32(0), I32(0x7FFFFFFF)),
     "records at offset 27 needs 2147483647 bytes, only 0 left"),
    (body(HEAD, I32(1), I16(1), b"t", I32(2), I32(0), I32(4), b"abcd", I32(0)),
     "partition index and records length at offset 31 needs 8 bytes, only 4 left"),
])
def test_hostile_messages(codec, frame, message):
    with pytest.raises(DecodeError) as info:
        codec.decode_produce(frame, 0, 5)
    assert str(info.value) == "ProduceRequest v5: " + message


def test_bad_arguments(codec):
    good = memoryview(ProduceRequest(topic_data=[]).to_bytes(3))
    with pytest.raises(UnsupportedVersionError):
        codec.decode_produce(good, 0, 12)
    for version in (2, 2**40):
        with pytest.raises(UnsupportedVersionError):
            codec.decode_produce(good, 0, version)
    for pos in (-1, len(good) + 1, 2**70):
        with pytest.raises(DecodeError, match="body offset"):
            codec.decode_produce(good, pos, 3)
    with pytest.raises(TypeError, match="contiguous one-dimensional"):
        codec.decode_produce(memoryview(bytes(good) * 2)[::2], 0, 3)
    with pytest.raises(TypeError, match="contiguous one-dimensional"):
        codec.decode_produce(memoryview(bytearray(16)).cast("I"), 0, 3)
    released = memoryview(bytes(good))
    released.release()
    with pytest.raises(ValueError):
        codec.decode_produce(released, 0, 3)
    assert plain(codec.decode_produce(bytes(good), 0, 3)) == (None, 0, 0, [])  # any buffer
    assert codec.decode_produce(bytearray(good), 0, 3).topics == []


# ---- decode: golden bytes --------------------------------------------------------------------

# ProduceRequest v3 built by hand from protocol.html: RequestHeader v1 then the body.
GOLDEN_V3 = bytes.fromhex(
    "0000"          # request_api_key 0 (Produce)
    "0003"          # request_api_version 3
    "0000002a"      # correlation_id 42
    "0006" "676f6c64656e"  # client_id "golden"
    "0002" "7478"   # transactional_id "tx"
    "ffff"          # acks -1 (all)
    "000005dc"      # timeout_ms 1500
    "00000002"      # topic_data: 2 topics
    "0003" "666f6f"  # name "foo"
    "00000002"      # partition_data: 2 partitions
    "00000000" "00000005" "68656c6c6f"  # index 0, records "hello" (opaque to this codec)
    "00000007" "ffffffff"               # index 7, records null
    "0002" "6261"   # name "ba"
    "00000001"      # 1 partition
    "00000003" "00000000"               # index 3, records empty
)
GOLDEN_V3_VALUE = ("tx", -1, 1500, [("foo", [(0, b"hello"), (7, None)]), ("ba", [(3, b"")])])

# Produce v8 requests (whole frames without the size prefix) captured from real clients through
# the recording proxy below, in front of a pybroker: 2 topics / 3 partitions, and 1 partition.
KAFKA_PYTHON_V8 = bytes.fromhex(
    "000000080000000600176b61666b612d707974686f6e2d70726f64756365722d31ffffffff00007530000000"
    "020006676f6c64656e0000000300000000000000500000000000000000000000440000000002c094cfda0000"
    "00000000000001a1ff1a6aef000001a1ff1a6aef000000000000000000000000000100000001240000000a6b"
    "65792d300e76616c75652d300000000002000000500000000000000000000000440000000002cedebc010000"
    "00000000000001a1ff1a6aef000001a1ff1a6aef000000000000000000000000000000000001240000000a6b"
    "65792d320e76616c75652d320000000001000000500000000000000000000000440000000002a22fee860000"
    "00000000000001a1ff1a6aef000001a1ff1a6aef000000000000000000000000000000000001240000000a6b"
    "65792d310e76616c75652d31000007676f6c64656e3200000001000000000000004900000000000000000000"
    "003d000000000208683c50000000000000000001a1ff1a6af5000001a1ff1a6af50000000000000000000000"
    "0000000000000116000000010a6f7468657200"
)
CONFLUENT_V8 = bytes.fromhex(
    "0000000800000004000772646b61666b61ffffffff00007530000000010006676f6c64656e00000001000000"
    "0000000050000000000000000000000044000000000292cc8716000000000000000001a1ff1a668a000001a1"
    "ff1a668a000000000000000000000000000100000001240000000a6b65792d300e76616c75652d3000"
)


def header_and_body(frame):
    version = struct.unpack_from(">h", frame, 2)[0]
    header, pos = RequestHeader.decode(frame, 0, 2 if version >= 9 else 1)  # flexible: header v2
    assert header.request_api_key == 0
    return header, pos


def test_golden_v3_hand_assembled():
    frame = memoryview(bytearray(GOLDEN_V3))
    header, pos = header_and_body(frame)
    assert (header.request_api_version, header.correlation_id, header.client_id) == (3, 42, "golden")
    assert plain(decode_all(frame, pos, 3)) == GOLDEN_V3_VALUE


@pytest.mark.parametrize("capture, client_id, layout", [
    (KAFKA_PYTHON_V8, "kafka-python-producer-1", [("golden", [0, 2, 1]), ("golden2", [0])]),
    (CONFLUENT_V8, "rdkafka", [("golden", [0])]),
])
def test_golden_captures(capture, client_id, layout):
    frame = memoryview(bytearray(capture))
    header, pos = header_and_body(frame)
    assert (header.request_api_version, header.client_id) == (8, client_id)
    data = decode_all(frame, pos, 8)
    assert (data.transactional_id, data.acks, data.timeout_ms) == (None, -1, 30000)
    assert [(t.name, [p.index for p in t.partitions]) for t in data.topics] == layout
    for t in data.topics:
        for p in t.partitions:
            assert p.records[16] == 2  # magic of a v2 record batch at its fixed offset
            assert struct.unpack_from(">i", p.records, 8)[0] + 12 == len(p.records)  # batchLength


# ---- live capture ----------------------------------------------------------------------------


# ---- fetch encode ----------------------------------------------------------------------------

@dataclass
class Slice:
    """Stands in for log.FetchSlice: only ``length`` is read; ``data`` is what sendfile would send."""
    data: bytes

    @property
    def length(self):
        return len(self.data)


@dataclass
class Result:
    error: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: object = None
    aborted_transactions: list | None = None  # read_committed only: (producer id, first offset) pairs
    diverging_epoch: tuple | None = None  # v12+: (epoch, end offset)
    current_leader: tuple | None = None  # v12+: (leader id, leader epoch)


i16 = st.integers(-2**15, 2**15 - 1)
i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)
fetch_topics = st.lists(st.builds(FetchRequest.FetchTopic, topic=names, partitions=st.lists(
    st.builds(FetchRequest.FetchPartition, partition=i32), max_size=5)), max_size=4)
slices = st.none() | st.builds(Slice, st.binary(max_size=40))
aborted_lists = st.none() | st.lists(st.tuples(i64, i64), max_size=4)


@st.composite
def fetch_cases(draw):
    topics = draw(fetch_topics)
    n = sum(len(t.partitions) for t in topics)
    results = [draw(st.builds(Result, i16, i64, i64, i64, slices, aborted_lists)) for _ in range(n)]
    return draw(st.integers(4, 11)), topics, results, draw(st.booleans())


def check_parts(parts, reference):
    assert type(parts) is list
    assert len(parts) == len(reference)
    for a, b in zip(parts, reference):
        if type(b) is bytes:
            assert type(a) is bytes and a == b
        else:
            assert a is b  # slices pass through untouched
    assert all(type(x) is bytes for x in parts[::2]) and all(type(x) is Slice for x in parts[1::2])


@SETTINGS
@given(fetch_cases())
def test_fetch_identical_to_reference(case):
    version, topics, results, committed_only = case
    reference = list(fetch_api.encode(version, topics, results, committed_only))
    for impl in (NATIVE, PURE):
        check_parts(impl.encode_fetch(version, topics, results, committed_only), reference)
    wire = b"".join(x if type(x) is bytes else x.data for x in reference)
    resp, end = FetchResponse.decode(wire, 0, version)
    assert end == len(wire)
    assert (resp.throttle_time_ms, resp.error_code, resp.session_id) == (0, 0, 0)
    it = iter(results)
    assert [t.topic for t in resp.responses] == [t.topic for t in topics]
    for t, rt in zip(topics, resp.responses):
        assert [p.partition_index for p in rt.partitions] == [p.partition for p in t.partitions]
        for rp in rt.partitions:
            r = next(it)
            assert (rp.error_code, rp.high_watermark, rp.last_stable_offset) == \
                (r.error, r.high_watermark, r.last_stable_offset)
            assert rp.log_start_offset == (r.log_start_offset if version >= 5 else -1)
            expected = [(pid, first) for pid, first in (r.aborted_transactions or ())] if committed_only else None
            if r.error and not committed_only and r.aborted_transactions is not None:
                expected = []  # a partition refused unread: an empty list, as Kafka answers it
            got = rp.aborted_transactions
            assert (None if got is None else [(a.producer_id, a.first_offset) for a in got]) == expected
            assert rp.preferred_read_replica == -1
            assert bytes(rp.records) == (b"" if r.records is None else r.records.data)


def test_fetch_examples(codec):
    topics = [FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(partition=i)
                                                             for i in range(3)])]
    a, b = Slice(b"x" * 7), Slice(b"")
    results = [Result(0, 10, 10, 0, a), Result(1, -1, -1, -1, None), Result(0, 5, 5, 0, b)]
    for version in range(4, 12):
        parts = codec.encode_fetch(version, topics, results, False)
        check_parts(parts, list(fetch_api.encode(version, topics, results, False)))
        assert parts[1] is a and parts[3] is b and len(parts) == 4  # no trailing empty bytes
    assert codec.encode_fetch(4, [], [], True) == [b"\0" * 8]
    assert codec.encode_fetch(7, [], [], True) == [b"\0" * 14]


def test_fetch_aborted_transactions_only_when_read_committed(codec):
    """read_uncommitted ignores the list (null on the wire); read_committed writes it after the offsets."""
    topics = [FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(partition=0)])]
    results = [Result(0, 10, 4, 0, Slice(b"r" * 3), [(7, 2), (9, 3)])]
    for version in range(4, 12):
        uncommitted = codec.encode_fetch(version, topics, results, False)
        assert uncommitted == list(fetch_api.encode(version, topics, [Result(0, 10, 4, 0, results[0].records)], False))
        committed = codec.encode_fetch(version, topics, results, True)
        check_parts(committed, list(fetch_api.encode(version, topics, results, True)))
        head = committed[0]
        at = head.index(struct.pack(">i", 2) + struct.pack(">qq", 7, 2) + struct.pack(">qq", 9, 3))
        assert at == len(head) - 4 - (4 if version >= 11 else 0) - 36  # then [replica], records length


@pytest.mark.parametrize("txns, message", [
    ([(2**63, 0)], f"FetchResponse: aborted producer id {2**63} is out of range [{-2**63}, {2**63 - 1}]"),
    ([(1, "x")], "FetchResponse: aborted first offset must be an integer, not str"),
])
def test_fetch_bad_aborted_transactions(txns, message):
    for impl in (NATIVE, PURE):
        with pytest.raises(EncodeError) as exc:
            impl.encode_fetch(5, TOPIC1, [Result(aborted_transactions=txns)], True)
        assert str(exc.value) == message


def _fetch_error(impl, version, topics, results):
    try:
        impl.encode_fetch(version, topics, results, False)
    except (EncodeError, AttributeError) as exc:
        return type(exc), str(exc)
    return None


TOPIC1 = [FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(partition=0)])]


@pytest.mark.parametrize("version, topics, results, message", [
    (3, TOPIC1, [Result()], "FetchResponse: version 3 is not supported (4-17)"),
    (18, TOPIC1, [Result()], "FetchResponse: version 18 is not supported (4-17)"),
    (2**40, TOPIC1, [Result()], f"FetchResponse: version {2**40} is not supported (4-17)"),
    (4, TOPIC1, [], "FetchResponse: 0 results for 1 requested partitions"),
    (4, TOPIC1, [Result(), Result()], "FetchResponse: 2 results for 1 requested partitions"),
    (4, TOPIC1, [Result(error=40000)], "FetchResponse: error code 40000 is out of range [-32768, 32767]"),
    (4, TOPIC1, [Result(high_watermark=2**63)],
     f"FetchResponse: high watermark {2**63} is out of range [{-2**63}, {2**63 - 1}]"),
    (4, TOPIC1, [Result(last_stable_offset=1.5)], "FetchResponse: last stable offset must be an integer, not float"),
    (5, TOPIC1, [Result(log_start_offset=None)], "FetchResponse: log start offset must be an integer, not NoneType"),
    (4, TOPIC1, [Result(log_start_offset=None)], None),  # v4 has no log start offset
    (4, TOPIC1, [Result(records=Slice(b"x"), error=2**40)],
     "FetchResponse: error code 1099511627776 is out of range [-32768, 32767]"),
    (4, [FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(partition=2**31)])],
     [Result()], f"FetchResponse: partition index {2**31} is out of range [{-2**31}, {2**31 - 1}]"),
    (4, [FetchRequest.FetchTopic(topic="x" * 40000, partitions=[])], [],
     "FetchResponse: topic name of 40000 bytes exceeds 32767"),
    (4, [FetchRequest.FetchTopic(topic=b"t", partitions=[])], [], "FetchResponse: topic name must be a str, not bytes"),
    (4, [FetchRequest.FetchTopic(topic="\ud800", partitions=[])], [],
     "FetchResponse: topic name '\\ud800' is not encodable as UTF-8"),
])
def test_fetch_errors(version, topics, results, message):
    got = {impl.__name__: _fetch_error(impl, version, topics, results) for impl in (NATIVE, PURE)}
    expected = None if message is None else (EncodeError, message)
    assert got == {NATIVE.__name__: expected, PURE.__name__: expected}


class NegativeSlice:
    length = -1


class NoLength:
    pass


def test_fetch_bad_slices():
    bad = _fetch_error(NATIVE, 4, TOPIC1, [Result(records=NegativeSlice())])
    assert bad == (EncodeError, "FetchResponse: records length -1 is out of range [0, 2147483647]")
    assert _fetch_error(PURE, 4, TOPIC1, [Result(records=NegativeSlice())]) == bad
    missing = _fetch_error(NATIVE, 4, TOPIC1, [Result(records=NoLength())])
    assert missing[0] is AttributeError
    assert _fetch_error(PURE, 4, TOPIC1, [Result(records=NoLength())]) == missing


# ---- fetch encode, flexible versions (v12-v17) ---------------------------------------------------

def generated_fetch(version, topics, results, committed_only, session_id=0, error_code=0, endpoints=()):
    """The generated codec's encoding of the same response (empty records for None, as we send)."""
    FR = FetchResponse
    it = iter(results)
    resp = FR(throttle_time_ms=0, error_code=error_code, session_id=session_id, responses=[
        FR.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
            FR.PartitionData(
                partition_index=p.partition, error_code=r.error, high_watermark=r.high_watermark,
                last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
                diverging_epoch=FR.EpochEndOffset(epoch=r.diverging_epoch[0], end_offset=r.diverging_epoch[1])
                if r.diverging_epoch else FR.EpochEndOffset(),
                current_leader=FR.LeaderIdAndEpoch(leader_id=r.current_leader[0], leader_epoch=r.current_leader[1])
                if r.current_leader else FR.LeaderIdAndEpoch(),
                aborted_transactions=[FR.AbortedTransaction(producer_id=a, first_offset=b)
                                      for a, b in (r.aborted_transactions or ())]
                if committed_only else [] if r.error and r.aborted_transactions is not None else None,
                preferred_read_replica=-1, records=b"" if r.records is None else r.records.data)
            for p, r in zip(t.partitions, it)]) for t in topics],
        node_endpoints=[FR.NodeEndpoint(node_id=a, host=b, port=c, rack=d) for a, b, c, d in endpoints]
        if version >= 16 else [])
    out = bytearray()
    resp.encode(version, out)
    return bytes(out)


def wire_of(parts):
    return b"".join(x if type(x) is bytes else x.data for x in parts)


uuids = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
flex_topics = st.lists(st.builds(FetchRequest.FetchTopic, topic=names, topic_id=uuids, partitions=st.lists(
    st.builds(FetchRequest.FetchPartition, partition=i32), max_size=5)), max_size=4)
pairs32 = st.none() | st.tuples(i32, i32)
diverging = st.none() | st.tuples(i32, i64)
endpoint_lists = st.lists(st.tuples(i32, names, i32, st.none() | names), max_size=3)


@st.composite
def flexible_cases(draw):
    topics = draw(flex_topics)
    n = sum(len(t.partitions) for t in topics)
    results = [draw(st.builds(Result, i16, i64, i64, i64, slices, aborted_lists, diverging, pairs32))
               for _ in range(n)]
    return (draw(st.integers(12, 17)), topics, results, draw(st.booleans()), draw(i32), draw(i16),
            draw(endpoint_lists))


@SETTINGS
@given(flexible_cases())
def test_fetch_flexible_identical_to_generated(case):
    version, topics, results, committed_only, session_id, error_code, endpoints = case
    expected = generated_fetch(version, topics, results, committed_only, session_id, error_code, endpoints)
    outs = [impl.encode_fetch(version, topics, results, committed_only, session_id, error_code, endpoints)
            for impl in (NATIVE, PURE)]
    assert wire_of(outs[0]) == expected
    assert outs[0] == outs[1]
    for parts in outs:
        assert wire_of(parts) == expected
        assert all(type(x) is bytes for x in parts[::2]) and all(type(x) is Slice for x in parts[1::2])
    resp, end = FetchResponse.decode(memoryview(expected), 0, version)
    assert end == len(expected) and resp.session_id == session_id


def test_fetch_flexible_examples(codec):
    """Slices stay whole; the tagged fields after a slice open the next bytes part; v13+ writes ids."""
    tid = uuid.uuid4()
    topics = [FetchRequest.FetchTopic(topic="t", topic_id=tid, partitions=[FetchRequest.FetchPartition(partition=i)
                                                                          for i in range(2)])]
    a = Slice(b"x" * 7)
    results = [Result(0, 10, 10, 0, a, diverging_epoch=(3, 9)), Result(6, -1, -1, -1, current_leader=(2, 5))]
    for version in range(12, 18):
        parts = codec.encode_fetch(version, topics, results, False, 123, 0, [(2, "h", 9092, None)])
        assert parts[1] is a and len(parts) == 3
        assert parts[2].startswith(b"\x01\x00\x0d" + struct.pack(">iq", 3, 9) + b"\x00")  # diverging_epoch
        assert (tid.bytes in parts[0]) == (version >= 13) and (b"\x02t" in parts[0]) == (version == 12)
        resp, _ = FetchResponse.decode(memoryview(wire_of(parts)), 0, version)
        assert resp.session_id == 123
        assert [n.node_id for n in resp.node_endpoints] == ([2] if version >= 16 else [])
        p0, p1 = resp.responses[0].partitions
        assert (p0.diverging_epoch.epoch, p0.diverging_epoch.end_offset) == (3, 9)
        assert (p1.current_leader.leader_id, p1.current_leader.leader_epoch) == (2, 5)
        assert bytes(p0.records) == a.data and bytes(p1.records) == b""
    assert codec.encode_fetch(12, [], [], False, 0, 70) == [struct.pack(">ihi", 0, 70, 0) + b"\x01\x00"]


@pytest.mark.parametrize("version, topics, results, kwargs, message", [
    (13, [FetchRequest.FetchTopic(topic_id="x", partitions=[])], [], {},
     "FetchResponse: topic id must be a UUID or 16 bytes, not str"),
    (12, TOPIC1, [Result(diverging_epoch=(2**31, 0))], {},
     f"FetchResponse: diverging epoch {2**31} is out of range [{-2**31}, {2**31 - 1}]"),
    (12, TOPIC1, [Result(current_leader=(1, "e"))], {},
     "FetchResponse: current leader epoch must be an integer, not str"),
    (12, TOPIC1, [Result()], {"session_id": 2**31},
     f"FetchResponse: session id {2**31} is out of range [{-2**31}, {2**31 - 1}]"),
    (7, TOPIC1, [Result()], {"error_code": 1.0}, "FetchResponse: error code must be an integer, not float"),
    (16, TOPIC1, [Result()], {"node_endpoints": [(1, "h", 2**40, None)]},
     f"FetchResponse: node port {2**40} is out of range [{-2**31}, {2**31 - 1}]"),
])
def test_fetch_flexible_errors(version, topics, results, kwargs, message):
    for impl in (NATIVE, PURE):
        with pytest.raises(EncodeError) as exc:
            impl.encode_fetch(version, topics, results, False, **kwargs)
        assert str(exc.value) == message


@st.composite
def untagged_cases(draw):
    topics = draw(flex_topics)
    n = sum(len(t.partitions) for t in topics)
    results = [draw(st.builds(Result, i16, i64, i64, i64, slices, aborted_lists)) for _ in range(n)]
    return draw(st.integers(12, 17)), topics, results, draw(st.booleans()), draw(endpoint_lists)


@SETTINGS
@given(untagged_cases())
def test_fetch_untagged_identical(case):
    """tagged=False (no result has a diverging epoch or a current leader): the same bytes and parts,
    native and pure, as when every result is read for its tagged fields; topic ids as UUIDs or bytes."""
    version, topics, results, committed_only, endpoints = case
    expected = NATIVE.encode_fetch(version, topics, results, committed_only, 7, 0, endpoints)
    as_bytes = [FetchRequest.FetchTopic(topic=t.topic, topic_id=t.topic_id.bytes, partitions=t.partitions)
                for t in topics]
    for impl in (NATIVE, PURE):
        assert impl.encode_fetch(version, topics, results, committed_only, 7, 0, endpoints, tagged=False) == expected
        assert impl.encode_fetch(version, as_bytes, results, committed_only, 7, 0, endpoints, False) == expected
