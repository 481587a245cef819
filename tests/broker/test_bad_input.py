"""Bad input over real sockets against a real ``pybroker serve``.

For every kind of bad input the broker must answer with the error code Apache Kafka gives, or
close that connection; and afterwards it must still be up, answer a fresh connection, keep
serving a confluent-kafka producer and consumer opened before the bad input, and still hold
the records acked before it byte for byte.

Error codes follow Kafka 3.x (KafkaApis.handleProduceRequest, ProduceRequest.validateRecords,
UnifiedLog.analyzeAndValidateRecords). Deliberate differences are named where tested:
 * an unknown compression codec id answers CORRUPT_MESSAGE (Kafka: UNKNOWN_SERVER_ERROR);
 * a partition repeated in one Produce request is refused (INVALID_REQUEST) on both entries;
 * null records answer INVALID_RECORD, as empty records do in Kafka (Kafka fails on null).
"""
import os
import random
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pybroker.api import TABLE
from pybroker.protocol import REQUESTS, decode_response, encode_request
from pybroker.records import build_batch, decode_records
from tests.broker import BrokerProcess
from tests.kafka_wire import WireClient

MAX_REQUEST = 256 * 1024
MAX_MESSAGE = 4096
DEADLINE = 20
ACKED, WITNESS, TARGET = "acked", "witness", "target"

CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, MESSAGE_TOO_LARGE = 2, 3, 10
INVALID_REQUIRED_ACKS, UNSUPPORTED_VERSION, INVALID_REQUEST = 21, 35, 42
UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD = 76, 87


def garbage(n: int, seed: int, negative_size: bool = False) -> bytes:
    data = bytearray(random.Random(seed).randbytes(n))
    if negative_size:
        data[0] |= 0x80
    return bytes(data)


def header(api_key: int, version: int, correlation_id: int = 7, client_id: bytes = b"bad") -> bytes:
    """A v1 request header (non-flexible): enough to reach the broker's version check."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


class Witness:
    """A confluent-kafka producer and consumer opened before any bad input."""

    def __init__(self, bootstrap: str):
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 0})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bad-input-witness",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
        self.consumer.assign([TopicPartition(WITNESS, 0, 0)])
        self.sent = 0

    def round_trip(self) -> None:
        """Produce one new record, wait for its ack, and see the consumer receive it."""
        self.sent += 1
        value = b"witness-%d" % self.sent
        errors = []
        self.producer.produce(WITNESS, value=value, partition=0, on_delivery=lambda err, m: errors.append(err))
        assert self.producer.flush(DEADLINE) == 0
        assert errors == [None]
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            m = self.consumer.poll(0.2)
            if m is not None and not m.error() and m.value() == value:
                return
        raise AssertionError(f"the witness consumer did not receive {value!r}")

    def close(self) -> None:
        self.producer.flush(DEADLINE)
        self.consumer.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """One broker for the module (small request and message limits), acked data, a witness."""
    data = tmp_path_factory.mktemp("bad-input")
    b = BrokerProcess(str(data / "data"), {"socket.request.max.bytes": MAX_REQUEST,
                                           "message.max.bytes": MAX_MESSAGE}).start()
    witness = None
    try:
        with WireClient(b.port) as c:
            for name in (ACKED, WITNESS):
                c.create_topic(name, 1)
            c.create_topic(TARGET, 2)
            for i in range(5):  # acked before any bad input
                r = c.produce(ACKED, 0, bytes(build_batch([b"acked-%d-%d" % (i, j) for j in range(3)],
                                                          base_timestamp=1000 + i)))
                assert (r.error_code, r.base_offset) == (0, 3 * i)
            stored = c.fetch(ACKED, 0, 0).records
            assert stored is not None and len(stored) > 0
        witness = Witness(b.bootstrap)
        witness.round_trip()
        yield b, bytes(stored), witness
    finally:
        if witness is not None:
            witness.close()
        code = b.stop()
        b.close()
    log = b.stderr()
    assert code == 0 and "Traceback" not in log and "level=ERROR" not in log, log[-3000:]


def assert_healthy(env) -> None:
    b, stored, witness = env
    assert b.alive(), b.stderr()[-2000:]
    with WireClient(b.port) as c:
        assert c.api_versions().error_code == 0
        meta = c.metadata([ACKED])
        assert meta.topics[0].error_code == 0 and len(meta.topics[0].partitions) == 1
        assert c.list_offset(ACKED, 0) == 15
        assert bytes(c.fetch(ACKED, 0, 0).records) == stored  # byte-identical
    witness.round_trip()


def leo(port: int, topic: str = TARGET, partition: int = 0) -> int:
    with WireClient(port) as c:
        return c.list_offset(topic, partition)


# ---- framing ------------------------------------------------------------------------------

FRAMING = {
    "negative size": struct.pack(">i", -1),
    "most negative size": struct.pack(">i", -2**31),
    "size 0": struct.pack(">i", 0),
    "size 7 (shorter than a header)": struct.pack(">i", 7) + b"\x00\x12\x00\x00\x00\x00\x00",
    "size 2**31-1": struct.pack(">i", 2**31 - 1) + b"\x00" * 64,
    "size just above socket.request.max.bytes": struct.pack(">i", MAX_REQUEST + 1) + b"\x00" * 64,
    "garbage bytes": garbage(4096, seed=1, negative_size=True),
    "garbage frame (unknown api key -1)": struct.pack(">ihh", 60, -1, 0) + bytes(range(56)),
}


@pytest.mark.parametrize("data", FRAMING.values(), ids=FRAMING.keys())
def test_bad_framing_closes_the_connection(env, data):
    with WireClient(env[0].port) as c:
        c.send_raw(data)
        assert c.is_closed_by_peer()
    assert_healthy(env)


def test_short_frame_then_close(env):
    """A frame shorter than its size, then EOF: nothing is dispatched, the broker hangs up."""
    body = bytes(header(18, 0))
    with WireClient(env[0].port) as c:
        c.send_raw(struct.pack(">i", len(body) + 50) + body)  # 50 bytes missing
        assert not c.is_closed_by_peer(timeout=0.5)  # the broker waits for the rest
        assert_healthy(env)  # a half-sent request blocks no one else
        c.sock.shutdown(socket.SHUT_WR)
        assert c.is_closed_by_peer()
    assert_healthy(env)


def test_request_of_exactly_the_max_size_is_served(env):
    """socket.request.max.bytes is inclusive; bytes after a request's body are ignored (as Kafka)."""
    body = header(18, 0)
    with WireClient(env[0].port) as c:
        c.send_frame(body + b"\x00" * (MAX_REQUEST - len(body)))
        h, resp = decode_response(c.recv_frame(), 18, 0)
        assert (h.correlation_id, resp.error_code) == (7, 0)


# ---- api keys and versions ----------------------------------------------------------------

def _unadvertised_key() -> int:
    return max(set(REQUESTS) - set(TABLE))  # known to the codecs, not served by this broker


UNSUPPORTED = {
    "unknown api key 999": header(999, 0) + b"\x00" * 16,
    "api key not advertised": header(_unadvertised_key(), 0) + b"\x00" * 16,
    "Fetch below our range": header(1, TABLE[1].MIN_VERSION - 1) + b"\x00" * 32,
    "Fetch above our range": header(1, TABLE[1].MAX_VERSION + 1) + b"\x00" * 32,
    "Metadata v99": header(3, 99) + b"\x00" * 16,
    "Produce v-1": header(0, -1) + b"\x00" * 16,
}


@pytest.mark.parametrize("frame", UNSUPPORTED.values(), ids=UNSUPPORTED.keys())
def test_unsupported_api_or_version_closes_the_connection(env, frame):
    with WireClient(env[0].port) as c:
        c.send_frame(frame)
        assert c.is_closed_by_peer()
    assert_healthy(env)


@pytest.mark.parametrize("version", [TABLE[18].MAX_VERSION + 1, 99, 32767])
def test_api_versions_too_new_gets_a_v0_answer_with_our_ranges(env, version):
    """KIP-511: error 35 and the supported ranges in a v0 body; the connection stays open."""
    with WireClient(env[0].port) as c:
        c.send_frame(header(18, version, correlation_id=4242) + b"\x00" * 8)
        h, resp = decode_response(c.recv_frame(), 18, 0)
        assert h.correlation_id == 4242
        assert resp.error_code == UNSUPPORTED_VERSION
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert ranges == {key: (api.MIN_VERSION, api.MAX_VERSION) for key, api in TABLE.items()}
        assert c.api_versions(3).error_code == 0  # the client retries on the same connection
    assert_healthy(env)


# ---- malformed fields ---------------------------------------------------------------------

MALFORMED = {
    "truncated body (array of 1, nothing after)": header(3, 1) + struct.pack(">i", 1),
    "string length past the end": header(3, 1) + struct.pack(">ih", 1, 32767) + b"ab",
    "array count 2**31-1": header(3, 1) + struct.pack(">i", 2**31 - 1) + b"\x00\x01a" * 8,
    "negative array count": header(3, 1) + struct.pack(">i", -7) + b"\x00" * 8,
    "client id past the end": struct.pack(">hhih", 18, 0, 1, 500) + b"abc",
    "produce body cut inside the records": bytes(encode_request(
        8, 1, "bad", REQUESTS[0](acks=1, timeout_ms=1000, topic_data=[REQUESTS[0].TopicProduceData(
            name=TARGET, partition_data=[REQUESTS[0].PartitionProduceData(
                index=0, records=bytes(build_batch([b"x" * 100])))])])))[:-40],
}


@pytest.mark.parametrize("frame", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_request_closes_the_connection(env, frame):
    before = leo(env[0].port)
    with WireClient(env[0].port) as c:
        c.send_frame(frame)
        assert c.is_closed_by_peer()
    assert leo(env[0].port) == before
    assert_healthy(env)


# ---- produce errors -----------------------------------------------------------------------

def _bad_crc():
    b = build_batch([b"payload"])
    b[-1] ^= 0x01  # a flipped bit in the last record
    return bytes(b)


def _magic(m):
    b = build_batch([b"payload"])
    b[16] = m
    return bytes(b)


def _control():
    return bytes(build_batch([b"\x00\x00\x00\x00\x00\x00"], attributes=0x20, producer_id=1,
                             producer_epoch=0, base_sequence=0))


def _good():
    return bytes(build_batch([b"good"]))


# (records, produce version, acks, topic, partition) -> expected error code
PRODUCE_ERRORS = {
    # LogValidator/UnifiedLog: CRC checked on every client batch
    "bad CRC": (_bad_crc(), 8, -1, TARGET, 0, CORRUPT_MESSAGE),
    # ProduceRequest.validateRecords: v3+ takes magic 2 only -> InvalidRecordException
    "magic 1 batch in Produce v8": (_magic(1), 8, -1, TARGET, 0, INVALID_RECORD),
    "magic 0 batch in Produce v3": (_magic(0), 3, -1, TARGET, 0, INVALID_RECORD),
    # Kafka's batch iterator: a magic above 2 (or negative) is a CorruptRecordException
    "magic 3 batch": (_magic(3), 8, -1, TARGET, 0, CORRUPT_MESSAGE),
    "magic -1 batch": (_magic(0xFF), 8, -1, TARGET, 0, CORRUPT_MESSAGE),
    "batch larger than message.max.bytes": (bytes(build_batch([os.urandom(MAX_MESSAGE)])), 8, -1, TARGET, 0,
                                            MESSAGE_TOO_LARGE),
    "missing topic": (_good(), 8, -1, "no-such-topic", 0, UNKNOWN_TOPIC_OR_PARTITION),
    "missing partition": (_good(), 8, -1, TARGET, 9, UNKNOWN_TOPIC_OR_PARTITION),
    "negative partition": (_good(), 8, -1, TARGET, -1, UNKNOWN_TOPIC_OR_PARTITION),
    "acks=5": (_good(), 8, 5, TARGET, 0, INVALID_REQUIRED_ACKS),
    "acks=-2": (_good(), 8, -2, TARGET, 0, INVALID_REQUIRED_ACKS),
    "corrupt message set in Produce v2": (b"\x00" * 8 + struct.pack(">i", 20) + b"\xff" * 20, 2, -1, TARGET, 0,
                                          CORRUPT_MESSAGE),
    "control batch from a producer": (_control(), 8, -1, TARGET, 0, INVALID_RECORD),
    "records null": (None, 8, -1, TARGET, 0, INVALID_RECORD),
    "records empty": (b"", 8, -1, TARGET, 0, INVALID_RECORD),
    "two batches for one partition": (_good() * 2, 8, -1, TARGET, 0, INVALID_RECORD),
    "base offset not 0": (bytes(build_batch([b"x"], base_offset=5)), 8, -1, TARGET, 0, INVALID_RECORD),
    "zstd before Produce v7": (bytes(build_batch([b"z" * 50], attributes=4)), 6, -1, TARGET, 0,
                               UNSUPPORTED_COMPRESSION_TYPE),
    "garbage records": (garbage(200, seed=2), 8, -1, TARGET, 0, None),  # CORRUPT_MESSAGE or INVALID_RECORD
    # Kafka's iterator finds no whole batch in a truncated one: "must have at least one record batch"
    "truncated batch": (_good()[:-5], 8, -1, TARGET, 0, INVALID_RECORD),
    "records shorter than a length field": (b"\x00" * 11, 8, -1, TARGET, 0, INVALID_RECORD),
    "batch length below any record": (struct.pack(">qi", 0, 5) + b"\x00" * 60, 8, -1, TARGET, 0, CORRUPT_MESSAGE),
    "batch then an impossible second length": (_good() + struct.pack(">qi", 0, 5), 8, -1, TARGET, 0,
                                               CORRUPT_MESSAGE),
    # Kafka fails on an unknown codec id with UNKNOWN_SERVER_ERROR (IllegalArgumentException);
    # CORRUPT_MESSAGE names the fault (deliberate difference)
    "unknown codec 7": (bytes(build_batch([b"c"], attributes=7)), 8, -1, TARGET, 0, CORRUPT_MESSAGE),
}


@pytest.mark.parametrize("case", PRODUCE_ERRORS.values(), ids=PRODUCE_ERRORS.keys())
def test_produce_error_code_and_nothing_appended(env, case):
    records, version, acks, topic, partition, expected = case
    port = env[0].port
    before = [leo(port, TARGET, p) for p in (0, 1)]
    with WireClient(port) as c:
        r = c.produce(topic, partition, records, acks=acks, version=version)
        if expected is None:
            assert r.error_code in (CORRUPT_MESSAGE, INVALID_RECORD), r
        else:
            assert r.error_code == expected, r
        assert r.base_offset == -1
        assert c.api_versions().error_code == 0  # an error answer keeps the connection usable
    assert [leo(port, TARGET, p) for p in (0, 1)] == before
    assert_healthy(env)


def test_tail_too_short_for_a_batch_is_ignored_as_kafka_does(env):
    """Kafka's batch iterator stops at a tail too short to be a batch (here: the first 30 bytes
    of another); only the first batch is stored."""
    port = env[0].port
    before = leo(port)
    batch = _good()
    with WireClient(port) as c:
        r = c.produce(TARGET, 0, batch + batch[:30])
        assert (r.error_code, r.base_offset) == (0, before)
        stored = bytes(c.fetch(TARGET, 0, before).records)
    assert leo(port) == before + 1
    assert len(stored) == len(batch) and stored[61:] == batch[61:]  # the records as sent
    assert_healthy(env)


def test_one_bad_partition_does_not_fail_the_others(env):
    port = env[0].port
    before = [leo(port, TARGET, p) for p in (0, 1)]
    req = REQUESTS[0]
    request = req(acks=-1, timeout_ms=5000, topic_data=[
        req.TopicProduceData(name=TARGET, partition_data=[
            req.PartitionProduceData(index=0, records=_bad_crc()),
            req.PartitionProduceData(index=1, records=_good())]),
        req.TopicProduceData(name="no-such-topic", partition_data=[
            req.PartitionProduceData(index=0, records=_good())])])
    with WireClient(port) as c:
        resp = c.request(request, 8)
    codes = {(t.name, p.index): (p.error_code, p.base_offset) for t in resp.responses for p in t.partition_responses}
    assert codes == {(TARGET, 0): (CORRUPT_MESSAGE, -1), (TARGET, 1): (0, before[1]),
                     ("no-such-topic", 0): (UNKNOWN_TOPIC_OR_PARTITION, -1)}
    assert [leo(port, TARGET, p) for p in (0, 1)] == [before[0], before[1] + 1]
    assert_healthy(env)


def test_partition_repeated_in_one_request_is_refused(env):
    port = env[0].port
    before = leo(port)
    req = REQUESTS[0]
    request = req(acks=1, timeout_ms=5000, topic_data=[req.TopicProduceData(name=TARGET, partition_data=[
        req.PartitionProduceData(index=0, records=_good()), req.PartitionProduceData(index=0, records=_good())])])
    with WireClient(port) as c:
        resp = c.request(request, 8)
    assert [p.error_code for p in resp.responses[0].partition_responses] == [INVALID_REQUEST] * 2
    assert leo(port) == before
    assert_healthy(env)


def test_acks_zero_produce_error_closes_the_connection(env):
    """Kafka closes the connection when an acks=0 produce fails: the client has no other way to
    learn it must refresh metadata. A good acks=0 produce leaves the connection open."""
    port = env[0].port
    before = leo(port)
    with WireClient(port) as c:
        c.send_only(REQUESTS[0](acks=0, timeout_ms=1000, topic_data=[REQUESTS[0].TopicProduceData(
            name=TARGET, partition_data=[REQUESTS[0].PartitionProduceData(index=0, records=_good())])]), 8)
        assert c.api_versions().error_code == 0  # no response to the produce, the next one comes
        c.send_only(REQUESTS[0](acks=0, timeout_ms=1000, topic_data=[REQUESTS[0].TopicProduceData(
            name=TARGET, partition_data=[REQUESTS[0].PartitionProduceData(index=0, records=_bad_crc())])]), 8)
        assert c.is_closed_by_peer()
    assert leo(port) == before + 1
    assert_healthy(env)


def test_many_bad_requests_on_one_connection_in_a_pipeline(env):
    """Ten erroring produces pipelined on one connection: ten answers, in order, no append."""
    port = env[0].port
    before = leo(port)
    req = REQUESTS[0]
    with WireClient(port) as c:
        ids = [c.send_only(req(acks=1, timeout_ms=1000, topic_data=[req.TopicProduceData(
            name=TARGET, partition_data=[req.PartitionProduceData(index=0, records=_bad_crc())])]), 8)
            for _ in range(10)]
        for cid in ids:
            h, resp = decode_response(c.recv_frame(), 0, 8)
            assert h.correlation_id == cid
            assert resp.responses[0].partition_responses[0].error_code == CORRUPT_MESSAGE
    assert leo(port) == before
    assert_healthy(env)


# ---- many hostile connections -------------------------------------------------------------

def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


ANNOUNCED = 32 << 20


def test_200_garbage_connections_keep_memory_bounded(broker_factory):
    """Half the connections send random bytes; half announce a frame of the full
    socket.request.max.bytes (32 MiB) and send only a little of it. Memory must follow the bytes
    received, not the sizes announced: 100 x 32 MiB would be 3.2 GB."""
    b = broker_factory(overrides={"socket.request.max.bytes": ANNOUNCED})
    with WireClient(b.port) as c:
        c.create_topic("kept", 1)
        r = c.produce("kept", 0, _good())
        assert r.error_code == 0
        stored = bytes(c.fetch("kept", 0, 0).records)
    witness_values = []
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    base_rss = rss_mb(b.proc.pid)
    socks, lock = [], threading.Lock()

    def hostile(i: int) -> None:
        rng = random.Random(i)
        s = socket.create_connection(("127.0.0.1", b.port), timeout=DEADLINE)
        if i % 2:
            data = rng.randbytes(2048)
        else:
            data = struct.pack(">i", ANNOUNCED) + header(0, 8) + rng.randbytes(4000)
        try:
            s.sendall(data)
        except OSError:
            pass  # the broker may already have hung up on garbage
        with lock:
            socks.append(s)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(hostile, range(200)))
    try:
        time.sleep(1.0)  # let the broker read what was sent
        assert b.alive()
        rss = rss_mb(b.proc.pid)
        assert rss < 400, f"broker RSS {rss:.0f} MB (was {base_rss:.0f} MB) with 200 hostile connections"
        with WireClient(b.port) as c:  # still serves while they are open
            assert c.api_versions().error_code == 0
            assert bytes(c.fetch("kept", 0, 0).records) == stored
        p.produce("kept", value=b"during", on_delivery=lambda err, m: witness_values.append(err))
        assert p.flush(DEADLINE) == 0 and witness_values == [None]
    finally:
        for s in socks:
            s.close()
    assert b.alive()
    with WireClient(b.port) as c:
        assert c.metadata(["kept"]).topics[0].error_code == 0
        assert c.list_offset("kept", 0) == 2
        assert bytes(c.fetch("kept", 0, 0).records)[:len(stored)] == stored


def test_large_request_trickled_in_pieces_arrives_intact(broker_factory):
    """The frame buffer grows with the bytes received (not the size announced): a 3 MB produce
    sent in uneven pieces must still be stored byte for byte."""
    b = broker_factory(overrides={"message.max.bytes": 8 << 20})
    payload = random.Random(3).randbytes(3 << 20)
    records = bytes(build_batch([payload[i:i + (1 << 20)] for i in range(0, len(payload), 1 << 20)]))
    req = REQUESTS[0]
    with WireClient(b.port) as c:
        c.create_topic("big", 1)
        _, body = c.encode(0, 8, req(acks=-1, timeout_ms=10000, topic_data=[req.TopicProduceData(
            name="big", partition_data=[req.PartitionProduceData(index=0, records=records)])]))
        frame = struct.pack(">i", len(body)) + bytes(body)
        rng, pos = random.Random(4), 0
        while pos < len(frame):
            step = rng.choice([1, 3, 100, 5000, 40000, 300000, 1 << 20])
            c.send_raw(frame[pos:pos + step])
            pos += step
            if rng.random() < 0.2:
                time.sleep(0.005)  # let the broker drain its socket mid-frame
        h, resp = decode_response(c.recv_frame(), 0, 8)
        assert resp.responses[0].partition_responses[0].error_code == 0
        stored = bytes(c.fetch("big", 0, 0, max_bytes=8 << 20).records)
    assert len(stored) == len(records) and stored[61:] == records[61:]
    values = [r.value for r in decode_records(stored)]
    assert b"".join(values) == payload
