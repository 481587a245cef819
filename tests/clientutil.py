"""Shared helpers for the real-client integration tests: records, exactly-once checks, brokers.

Every client test normalises what it produced (and got acked) and what it consumed into
``Rec`` tuples, so the same checks apply to confluent-kafka, kafka-python, aiokafka and kcat.
"""
import collections
import os
import time
from dataclasses import dataclass

from tests.broker import BrokerProcess

DEADLINE = 30  # seconds: the bound on every wait for a client
MODES = [  # (name, acks, compression, idempotence): every acks level, every codec, idempotence
    ("acks0", 0, None, False),
    ("acks1-gzip", 1, "gzip", False),
    ("all-snappy", "all", "snappy", False),
    ("all-lz4", "all", "lz4", False),
    ("acks1-zstd", 1, "zstd", False),
    ("idempotent-zstd", "all", "zstd", True),
]


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    timestamp: int = -1


def records_to_send(prefix: str, count: int, keys: int = 12, base_ts: int | None = None):
    """(key, value, headers, timestamp) for ``count`` keyed records with unique values."""
    base_ts = int(time.time() * 1000) - 10 * count if base_ts is None else base_ts
    return [(b"key-%d" % (i % keys), f"{prefix}-{i}".encode(),
             (("seq", str(i).encode()), ("src", prefix.encode())), base_ts + 10 * i)
            for i in range(count)]


def norm_headers(headers) -> tuple:
    """Headers as a tuple of (str, bytes) whatever the client returned (None, list, tuple)."""
    return tuple((k if isinstance(k, str) else k.decode(), bytes(v) if v is not None else None)
                 for k, v in (headers or ()))


def check_in_order(got: list[Rec]) -> None:
    """Per partition, offsets arrive strictly increasing and no (partition, offset) twice."""
    last = {}
    for r in got:
        assert r.offset > last.get(r.partition, -1), f"out of order or repeated: {r} after offset {last[r.partition]}"
        last[r.partition] = r.offset


def check_exactly_once(acked: list[Rec], got: list[Rec], headers: bool = True, timestamps: bool = False) -> None:
    """Every acked record arrived once, at its acked offset, intact; nothing arrived out of order."""
    check_in_order(got)
    by_pos = {(r.partition, r.offset): r for r in got}
    counts = collections.Counter(r.value for r in got)
    for a in acked:
        r = by_pos.get((a.partition, a.offset))
        assert r is not None, f"acked record missing: {a}"
        assert (r.key, r.value) == (a.key, a.value), f"at {a.partition}/{a.offset}: got {r}, acked {a}"
        if headers:
            assert r.headers == a.headers, f"headers at {a.partition}/{a.offset}: {r.headers} != {a.headers}"
        if timestamps:
            assert r.timestamp == a.timestamp, f"timestamp at {a.partition}/{a.offset}: {r} vs {a}"
        assert counts[a.value] == 1, f"{a.value!r} arrived {counts[a.value]} times"


def check_arrived_intact(sent_values: dict, got: list[Rec], headers: bool = True) -> None:
    """For unacknowledged sends (acks=0): every record that arrived is one we sent, once, in order.

    ``sent_values`` maps value -> (key, headers). Per partition, the records appear in the order
    they were sent (values carry their send index after the last '-').
    """
    check_in_order(got)
    counts = collections.Counter(r.value for r in got)
    assert all(c == 1 for c in counts.values()), [v for v, c in counts.items() if c > 1][:5]
    last = {}
    for r in got:
        assert r.value in sent_values, f"never sent: {r}"
        key, hdrs = sent_values[r.value]
        assert r.key == key and (not headers or r.headers == hdrs), r
        seq = int(r.value.rsplit(b"-", 1)[1])
        assert seq > last.get(r.partition, -1), f"partition {r.partition}: {r.value!r} arrived after a later send"
        last[r.partition] = seq


def check_key_partitioning(recs: list[Rec], min_partitions: int = 2) -> dict:
    """The same key always landed on the same partition; the keys spread over several partitions."""
    where = collections.defaultdict(set)
    for r in recs:
        where[r.key].add(r.partition)
    split = {k: p for k, p in where.items() if len(p) != 1}
    assert not split, f"keys on several partitions: {split}"
    used = {next(iter(p)) for p in where.values()}
    assert len(used) >= min_partitions, f"all keys on partitions {used}"
    return {k: next(iter(p)) for k, p in where.items()}


def expected_from_offset(acked: list[Rec], partition: int, offset: int) -> list[Rec]:
    return sorted((a for a in acked if a.partition == partition and a.offset >= offset), key=lambda a: a.offset)


def first_offset_at_or_after(recs: list[Rec], partition: int, ts: int) -> int:
    """What offsetsForTimes must answer (-1: no such record) — records of one partition by offset."""
    for r in sorted((r for r in recs if r.partition == partition), key=lambda r: r.offset):
        if r.timestamp >= ts:
            return r.offset
    return -1


def wait_until(predicate, timeout: float = DEADLINE, interval: float = 0.1):
    """Poll ``predicate`` until it returns truthy or ``timeout`` passes; returns its last value."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > end:
            return value
        time.sleep(interval)


def start_broker(tmp_path_factory, name: str, overrides: dict | None = None) -> BrokerProcess:
    data = str(tmp_path_factory.mktemp(name) / "data")
    return BrokerProcess(data, overrides).start()


def finish_broker(b: BrokerProcess) -> None:
    """Clean stop; the shutdown must succeed (exit status 0) for a healthy broker."""
    try:
        code = b.stop()
    finally:
        b.close()
    assert code == 0, f"broker exited with {code}; stderr tail: {b.stderr()[-2000:]}"


def clean_marker(data_dir: str) -> bool:
    return os.path.exists(os.path.join(data_dir, ".kafka_cleanshutdown"))


def kafka_python_group_consumer(topic: str, **conf):
    """A kafka-python group member that knows its topic's partitions before it first joins: kafka-python
    3.0.12 leads an assignment without them, rejoins when they arrive, and if a poll times out during
    that second join it never applies the join's result (no partitions, no heartbeats)."""
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(topic, **conf)
    end = time.monotonic() + DEADLINE
    while not consumer.partitions_for_topic(topic) and time.monotonic() < end:
        time.sleep(0.1)
    return consumer
