"""pybroker's Producer in-process: Java's murmur2 partitioner, flush/close with no broker answering,
config rules, native and pure appenders (against a real broker: tests/broker/test_client_producer.py)."""
import pytest

from pybroker import core
from pybroker.client import partitioner as partitioners
from pybroker.client.errors import ConfigError, KafkaError
from pybroker.client.producer import Producer, parse_config
from tests.broker.test_client_producer import closed_port


def test_partitioner_functions_match_java_murmur2():
    from kafka.partitioner.default import murmur2
    fast = core.load("producer_fast") if "producer_fast" in core.MODULES else None
    impls = [__import__("pybroker._pure.producer_fast", fromlist=["x"])]
    if core.IMPL == "native":
        impls.append(__import__("pybroker._native.producer_fast", fromlist=["x"]))
    if fast is not None:
        impls.append(fast)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"abcde", bytes(range(256)), b"\x80" * 33] + \
           [b"key-%d" % i for i in range(300)]
    for impl in impls:
        for n in (1, 2, 7, 64):
            want = [(murmur2(k) & 0x7FFFFFFF) % n for k in keys]
            assert [impl.partition_for_key(k, n) for k in keys] == want
            assert [core.client_codec.partition_for_key(k, n) for k in keys] == want
            raw = impl.partitions_for_keys(keys + [None], n)
            assert list(memoryview(raw).cast("i")) == want + [-1]
    assert partitioners.crc32_partition(b"abc", 10) == __import__("zlib").crc32(b"abc") % 10


def test_flush_and_close_report_what_is_left_when_no_broker_answers():
    port = closed_port()
    errors = []
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "max.block.ms": 60000, "request.timeout.ms": 1000,
                  "delivery.timeout.ms": 60000})
    for i in range(10):
        p.produce("nowhere", b"x", on_delivery=lambda err, md: errors.append((err, md)))
    fut = p.send("nowhere", b"y")
    assert p.flush(0.3) == 11 and len(p) == 11
    p.close(0.2)
    assert len(errors) == 10 and all(isinstance(e, KafkaError) for e, _ in errors)
    assert all(md.offset == -1 and md.topic == "nowhere" for _, md in errors)
    with pytest.raises(KafkaError):
        fut.result(1)
    for call in (lambda: p.produce("nowhere", b"z"), lambda: p.send("nowhere", b"z"),
                 lambda: p.produce_batch("nowhere", [b"z"]), lambda: p.partitions_for("nowhere")):
        with pytest.raises(KafkaError, match="closed"):
            call()
    assert p.flush(1) == 0


def test_config_rules():
    base = {"bootstrap.servers": "127.0.0.1:9"}
    cfg, idem = parse_config(base)
    assert idem and cfg["acks"] == -1 and cfg["linger.ms"] == 5 and cfg["batch.size"] == 16384
    assert cfg["buffer.memory"] == 32 * 1024 * 1024 and cfg["partitioner"] == "murmur2_random"
    cfg, idem = parse_config({**base, "acks": "1"})
    assert not idem and cfg["acks"] == 1  # default idempotence yields to acks=1
    with pytest.raises(ConfigError, match="acks=all"):
        parse_config({**base, "acks": 0, "enable.idempotence": True})
    with pytest.raises(ConfigError, match="acks"):
        parse_config({**base, "acks": "some"})
    with pytest.raises(ConfigError, match="lingr.ms"):
        parse_config({**base, "lingr.ms": 1})
    with pytest.raises(ConfigError, match="partitioner"):
        parse_config({**base, "partitioner": "fnv1a"})
    with pytest.raises(ConfigError, match="delivery.timeout.ms"):
        parse_config({**base, "delivery.timeout.ms": 1000})
    with pytest.raises(ConfigError, match="compression.type"):
        parse_config({**base, "compression.type": "brotli"})


def test_native_and_pure_appenders_agree():
    if core.IMPL != "native":
        pytest.skip("needs the native build")
    import pybroker._native.producer_fast as nat
    import pybroker._pure.producer_fast as pure
    from pybroker._native.client_codec import BatchBuilder
    out = []
    for impl in (nat, pure):
        a = impl.Appender(BatchBuilder, 300, 5000, 1000, impl.MODE_MURMUR2)
        a.set_topic("t", 4)
        statuses = [a.try_append("t", b"v%d" % i, b"k%d" % i, -1, 1000 + i) for i in range(40)]
        statuses += [a.try_append("t", b"x", None, 3, 5), a.try_append("t", b"x", None, 9, 5),
                     a.try_append("u", b"x"), a.try_append("t", b"x" * 2000), a.try_append("t", b"x", None, "1"),
                     a.try_append("t", b"x", headers={"a": b"b"})]
        batches = {p: [s[0].build(0) for s in a.take_all("t", p)] for p in range(4)}
        out.append((statuses, batches, a.pending, a.buffered))
        while a.try_append("t", b"y" * 100, None, 0, 1) == impl.ST_OK:
            pass
        assert a.try_append("t", b"y" * 100, None, 0, 1) == impl.ST_BUFFER_FULL
    assert out[0] == out[1]
    statuses = out[0][0]
    assert statuses[:40] == [0] * 40 and statuses[40:] == [0, nat.ST_UNKNOWN_PARTITION, nat.ST_UNKNOWN_TOPIC,
                                                          nat.ST_TOO_LARGE, nat.ST_NEEDS_PYTHON, nat.ST_NEEDS_PYTHON]

