"""``pybroker topics / produce / consume`` run as subprocesses against a real broker."""
import random
import re
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from pybroker.tools.console import murmur2, partition_for_key
from tests.broker import ROOT

DEADLINE = 30


def tool(*args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybroker", *args], cwd=ROOT, input=stdin,
                          capture_output=True, timeout=60)


def ok(*args, stdin: bytes | None = None) -> str:
    r = tool(*args, stdin=stdin)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout.decode()


def fails(*args, stdin: bytes | None = None) -> str:
    r = tool(*args, stdin=stdin)
    assert r.returncode != 0, (args, r.stdout, r.stderr)
    return r.stderr.decode()


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_murmur2_matches_java_and_kafka_python():
    # values from Kafka's UtilsTest.testMurmur2 (Java ints)
    java = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
            b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
    for key, value in java.items():
        assert murmur2(key) == value
    rng = random.Random(7)
    for n in range(300):
        key = rng.randbytes(n % 41)
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
        assert partition_for_key(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7


def test_topics_create_list_describe_alter_delete(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    assert ok("topics", *bs, "--create", "--topic", "orders", "--partitions", "3", "--replication-factor", "1",
              "--config", "retention.ms=3600000", "--config", "segment.bytes=1048576") == "Created topic orders.\n"
    assert ok("topics", *bs, "--create", "--topic", "plain") == "Created topic plain.\n"  # broker defaults
    assert lines(ok("topics", *bs, "--list")) == ["orders", "plain"]

    out = lines(ok("topics", *bs, "--describe", "--topic", "orders"))
    head, topic_id = re.subn(r"\tTopicId: [A-Za-z0-9_-]{22}\t", "\t", out[0])  # Kafka's base64 form of the id
    assert topic_id == 1 and head == ("Topic: orders\tPartitionCount: 3\tReplicationFactor: 1\t"
                                      "Configs: retention.ms=3600000,segment.bytes=1048576")
    assert out[1:] == [f"\tTopic: orders\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(3)]
    everything = lines(ok("topics", *bs, "--describe"))
    assert everything[:4] == out and everything[4].startswith("Topic: plain\tTopicId: ")
    assert "\tPartitionCount: 1\t" in everything[4]
    assert everything[4].endswith("Configs: ") and len(everything) == 6

    assert ok("topics", *bs, "--alter", "--topic", "orders", "--partitions", "5") == ""
    out = lines(ok("topics", *bs, "--describe", "--topic", "orders"))
    assert "PartitionCount: 5" in out[0] and len(out) == 6 and "\tPartition: 4\tLeader: 0\t" in out[5]

    assert ok("topics", *bs, "--delete", "--topic", "plain") == ""
    assert lines(ok("topics", *bs, "--list")) == ["orders"]


def test_topics_errors_name_kafka_error_codes(broker, tmp_path):
    bs = ("--bootstrap-server", broker.bootstrap)
    ok("topics", *bs, "--create", "--topic", "t", "--partitions", "2")
    err = fails("topics", *bs, "--create", "--topic", "t", "--partitions", "2")
    assert "TOPIC_ALREADY_EXISTS (36)" in err and "'t'" in err
    assert ok("topics", *bs, "--create", "--topic", "t", "--if-not-exists") == ""
    assert "UNKNOWN_TOPIC_OR_PARTITION (3)" in fails("topics", *bs, "--describe", "--topic", "ghost")
    assert "UNKNOWN_TOPIC_OR_PARTITION (3)" in fails("topics", *bs, "--delete", "--topic", "ghost")
    assert ok("topics", *bs, "--delete", "--topic", "ghost", "--if-exists") == ""
    assert "UNKNOWN_TOPIC_OR_PARTITION (3)" in fails("topics", *bs, "--alter", "--topic", "ghost", "--partitions", "3")
    err = fails("topics", *bs, "--alter", "--topic", "t", "--partitions", "1")  # shrinking is refused
    assert "INVALID_PARTITIONS (37)" in err
    assert "INVALID_PARTITIONS (37)" in fails("topics", *bs, "--create", "--topic", "z", "--partitions", "0")
    assert "INVALID_REPLICATION_FACTOR (38)" in fails("topics", *bs, "--create", "--topic", "z",
                                                      "--replication-factor", "3")
    assert "INVALID_CONFIG (40)" in fails("topics", *bs, "--create", "--topic", "z", "--config", "no.such=1")
    assert "INVALID_TOPIC_EXCEPTION (17)" in fails("topics", *bs, "--create", "--topic", "bad/name")
    assert "needs --topic" in fails("topics", *bs, "--create")
    assert tool("topics", *bs, "--create", "--list").returncode == 2  # argparse: one action only
    assert lines(ok("topics", *bs, "--list")) == ["t"]
    assert "PartitionCount: 2" in ok("topics", *bs, "--describe", "--topic", "t")
    # a closed port: a clear connection error, not a traceback
    err = fails("topics", "--bootstrap-server", "127.0.0.1:1", "--list")
    assert "cannot connect to 127.0.0.1:1" in err and "Traceback" not in err


def test_produce_then_consume_all_one_partition_and_from_offset(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    ok("topics", *bs, "--create", "--topic", "lines", "--partitions", "3")
    sent = [f"line-{i}" for i in range(1300)]
    assert ok("produce", *bs, "--topic", "lines", stdin=("\n".join(sent) + "\n").encode()) == ""
    got = lines(ok("consume", *bs, "--topic", "lines", "--from-beginning"))
    assert sorted(got) == sorted(sent)

    # keyless lines go round-robin per 500-record batch: three batches, three partitions, in order
    per_part = {p: lines(ok("consume", *bs, "--topic", "lines", "--partition", str(p), "--from-beginning"))
                for p in range(3)}
    assert sorted(len(v) for v in per_part.values()) == [300, 500, 500]
    assert sorted(sum(per_part.values(), [])) == sorted(sent)
    for values in per_part.values():  # each partition holds one contiguous run of the input
        first = sent.index(values[0])
        assert values == sent[first:first + len(values)]

    big = max(per_part, key=lambda p: len(per_part[p]))
    out = lines(ok("consume", *bs, "--topic", "lines", "--partition", str(big), "--offset", "490",
                   "--property", "print.offset=true", "--property", "print.partition=true"))
    assert out == [f"Partition:{big}\tOffset:{o}\t{per_part[big][o]}" for o in range(490, 500)]
    assert lines(ok("consume", *bs, "--topic", "lines", "--partition", str(big), "--offset", "earliest",
                    "--max-messages", "4")) == per_part[big][:4]
    assert ok("consume", *bs, "--topic", "lines", "--offset", "999999") == ""  # past the end: nothing
    # starting at latest waits for new records; --timeout-ms ends the wait
    assert ok("consume", *bs, "--topic", "lines", "--timeout-ms", "700") == ""

    # a single partition, given explicitly; then read back from an offset
    ok("produce", *bs, "--topic", "lines", "--partition", "1", stdin=b"x1\nx2\r\nx3")
    tail = lines(ok("consume", *bs, "--topic", "lines", "--partition", "1", "--from-beginning"))
    assert tail[-3:] == ["x1", "x2", "x3"] and len(tail) == len(per_part[1]) + 3

    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails("consume", *bs, "--topic", "nope", "--from-beginning")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails("consume", *bs, "--topic", "lines", "--partition", "7",
                                                 "--from-beginning")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails("produce", *bs, "--topic", "lines", "--partition", "7",
                                                 stdin=b"v\n")
    assert "no key separator" in fails("produce", *bs, "--topic", "lines", "--property", "parse.key=true",
                                       stdin=b"novalue\n")


def test_keys_land_where_the_java_partitioner_puts_them(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    ok("topics", *bs, "--create", "--topic", "keyed", "--partitions", "4")
    keys = [f"user-{i}" for i in range(60)] + ["", "é-ü", "a:b"]
    stdin = "".join(f"{k}:value-{n}\n" for n, k in enumerate(keys)).encode()
    ok("produce", *bs, "--topic", "keyed", "--property", "parse.key=true", "--property", "key.separator=:",
       "--batch-size", "7", stdin=stdin)
    seen = {}
    for p in range(4):
        for line in lines(ok("consume", *bs, "--topic", "keyed", "--partition", str(p), "--from-beginning",
                             "--property", "print.key=true", "--property", "key.separator=|")):
            key, value = line.split("|")
            seen[key] = (p, value)
    assert len(seen) == len(keys)
    for n, k in enumerate(keys):  # "a:b" splits at the first separator: key "a", value "b:value-.."
        key, value = ("a", f"b:value-{n}") if k == "a:b" else (k, f"value-{n}")
        expected = (kafka_python_murmur2(key.encode()) & 0x7FFFFFFF) % 4
        assert seen[key] == (expected, value), key
    assert len({p for p, _ in seen.values()}) == 4

    # librdkafka's Java-compatible partitioner agrees
    prod = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    placed = {}
    for i in range(20):
        prod.produce("keyed", key=f"user-{i}".encode(), value=b"c",
                     on_delivery=lambda err, m: placed.__setitem__(m.key().decode(), (err, m.partition())))
    assert prod.flush(DEADLINE) == 0
    assert placed == {f"user-{i}": (None, seen[f"user-{i}"][0]) for i in range(20)}


def test_consume_prints_confluent_kafka_compressed_records(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    ok("topics", *bs, "--create", "--topic", "mixed", "--partitions", "1")
    expected = []
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        prod = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20})
        for i in range(50):
            key = None if i % 5 == 0 else f"{codec}-k{i}".encode()
            prod.produce("mixed", key=key, value=f"{codec}-v{i}".encode(), headers=[("h", codec.encode())])
            expected.append((key, f"{codec}-v{i}"))
        assert prod.flush(DEADLINE) == 0
    out = lines(ok("consume", *bs, "--topic", "mixed", "--from-beginning", "--property", "print.key=true",
                   "--property", "print.offset=true", "--property", "print.headers=true"))
    assert len(out) == 200
    for n, (line, (key, value)) in enumerate(zip(out, expected)):
        codec = value.split("-")[0]
        assert line == f"Offset:{n}\th:{codec}\t{'null' if key is None else key.decode()}\t{value}"
    # --max-messages stops early, mid-batch
    assert lines(ok("consume", *bs, "--topic", "mixed", "--from-beginning", "--max-messages", "3")) == \
        ["gzip-v0", "gzip-v1", "gzip-v2"]


def test_confluent_kafka_reads_what_produce_sent(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    ok("topics", *bs, "--create", "--topic", "ours", "--partitions", "2")
    rows = [(f"k{i % 9}", f"payload {i} " + "x" * (i % 30)) for i in range(400)]
    ok("produce", *bs, "--topic", "ours", "--compression-codec", "lz4", "--property", "parse.key=true",
       "--property", "key.separator=\\t", "--batch-size", "64",
       stdin="".join(f"{k}\t{v}\n" for k, v in rows).encode())
    before = time.time() * 1000
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("ours", p, 0) for p in range(2)])
        got = []
        end = time.monotonic() + DEADLINE
        while len(got) < len(rows) and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append((m.partition(), m.offset(), m.key().decode(), m.value().decode(), m.timestamp()[1]))
    finally:
        c.close()
    assert sorted((k, v) for _, _, k, v, _ in got) == sorted(rows)
    for p, _, k, _, ts in got:
        assert p == partition_for_key(k.encode(), 2)
        assert 0 < ts <= before + 1000  # stamped at send time, in ms
    for p in range(2):  # per key, the input order survives
        for key in {k for _, k in rows}:
            mine = [v for pp, _, k, v, _ in sorted(got, key=lambda g: (g[0], g[1])) if pp == p and k == key]
            assert mine == [v for k, v in rows if k == key] or not mine


def test_bad_usage_exits_non_zero_without_a_traceback(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    assert tool("consume", *bs, "--topic", "t", "--from-beginning", "--offset", "3").returncode == 2
    err = fails("consume", *bs, "--topic", "t", "--offset", "-4")
    assert "--offset must be" in err and "Traceback" not in err
    err = fails("produce", "--bootstrap-server", "nocolon", "--topic", "t", stdin=b"x\n")
    assert "HOST:PORT" in err and "Traceback" not in err


def test_produce_auto_creates_a_topic_only_when_the_broker_allows(broker_factory):
    on = broker_factory()
    ok("produce", "--bootstrap-server", on.bootstrap, "--topic", "fresh", stdin=b"a\nb\n")
    assert lines(ok("consume", "--bootstrap-server", on.bootstrap, "--topic", "fresh", "--from-beginning")) == ["a",
                                                                                                                "b"]
    off = broker_factory(overrides={"auto.create.topics.enable": "false"})
    err = fails("produce", "--bootstrap-server", off.bootstrap, "--topic", "fresh", stdin=b"a\n")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err and "Traceback" not in err
    assert ok("topics", "--bootstrap-server", off.bootstrap, "--list") == ""
