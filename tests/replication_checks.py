"""Load and data checks for replication fault tests.

A ``LoggedProducer`` (confluent-kafka, idempotent, acks=all) sends unique values and logs every
acknowledged (partition, offset, value); a ``LoggedConsumer`` logs every record it reads. After the
faults heal, ``check_data`` verifies:

* D1 no acknowledged record is missing from the partitions;
* D2 no value appears twice;
* D3 one value per (partition, offset), the one that was acknowledged there;
* D4 each consumer's offsets strictly increase within an assignment;
* D5 every in-sync replica holds identical batches (offset, leader epoch, CRC) up to the HW,
  read from the replicas' own segment files.
"""
import glob
import os
import threading
import time

from pybroker import core

RATE_PER_S = 400


class LoggedProducer:
    """Produces ``prefix-<n>`` values at a bounded rate until ``stop()`` (or ``max_seconds``)."""

    def __init__(self, bootstrap: str, topic: str, prefix: str = "v", rate: int = RATE_PER_S,
                 max_seconds: float = 300, **settings):
        from confluent_kafka import Producer
        self.topic, self.prefix, self.rate, self.max_seconds = topic, prefix, rate, max_seconds
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                                  "topic.metadata.refresh.interval.ms": 1000, **settings})
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list = []
        self.sent = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.errors.append((err.code(), msg.value()))

    def start(self) -> "LoggedProducer":
        self._thread.start()
        return self

    def _run(self) -> None:
        end = time.monotonic() + self.max_seconds
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._halt.is_set() and time.monotonic() < end:
            try:
                self.producer.produce(self.topic, value=f"{self.prefix}-{self.sent}".encode(),
                                      on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def wait_acked(self, count: int, timeout: float = 60) -> None:
        """Until at least ``count`` more records than now are acknowledged (progress after a fault)."""
        target = len(self.acked) + count
        deadline = time.monotonic() + timeout
        while len(self.acked) < target:
            assert time.monotonic() < deadline, f"no progress: {len(self.acked)} acked, errors {self.errors[-3:]}"
            time.sleep(0.05)

    def stop(self, flush_timeout: float = 120) -> None:
        self._halt.set()
        self._thread.join(30)
        left = self.producer.flush(flush_timeout)
        assert left == 0, f"{left} records never resolved"


class LoggedConsumer:
    """A group consumer logging (partition, offset, value) and assignment changes."""

    def __init__(self, bootstrap: str, topic: str, group: str, max_seconds: float = 300, **settings):
        from confluent_kafka import Consumer
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": True,
                                  "auto.commit.interval.ms": 500, "session.timeout.ms": 10000,
                                  "topic.metadata.refresh.interval.ms": 1000, **settings})
        self.topic, self.max_seconds = topic, max_seconds
        self.log: list = []  # ("assign", None) markers and (partition, offset, value)
        self.errors: list = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "LoggedConsumer":
        self.consumer.subscribe([self.topic], on_assign=lambda c, ps: self.log.append(("assign", None)),
                                on_revoke=lambda c, ps: self.log.append(("assign", None)))
        self._thread.start()
        return self

    def _run(self) -> None:
        end = time.monotonic() + self.max_seconds
        while not self._halt.is_set() and time.monotonic() < end:
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(msg.error())
                continue
            self.log.append((msg.partition(), msg.offset(), msg.value()))

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(30)
        self.consumer.close()

    def records(self) -> list:
        return [r for r in self.log if r[0] != "assign"]


def drain(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> dict:
    """Every record of ``topic`` from its start to the current end: {(partition, offset): value}."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"drain-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {}
        for p in range(partitions):
            _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            ends[p] = high
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, deadline = {}, time.monotonic() + timeout
        positions = {p: 0 for p in range(partitions)}
        while any(positions[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"drain stalled at {positions}, ends {ends}"
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            key = (msg.partition(), msg.offset())
            assert key not in out or out[key] == msg.value(), f"two values at {key}"
            out[key] = msg.value()
            positions[msg.partition()] = msg.offset() + 1
        return out
    finally:
        c.close()


def replica_batches(log_dir: str, topic: str, partition: int, below: int) -> list:
    """(base offset, last offset, leader epoch, CRC) of every batch below ``below`` in one replica."""
    out = []
    for path in sorted(glob.glob(os.path.join(log_dir, f"{topic}-{partition}", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 61 <= len(data):
            b = core.batch.parse_header(data, pos)
            if pos + b.size > len(data):
                break
            if b.base_offset < below:
                out.append((b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc))
            pos += b.size
    return out


def check_replicas(cluster, topic: str, partitions: int, timeout: float = 60) -> None:
    """D5: the ISR of each partition is full and its replicas hold identical batches below the HW."""
    for p in range(partitions):
        state = cluster.wait_for(lambda: (s := cluster.partition_state(topic, p)) and len(s["isr"]) == 3 and s,
                                 timeout, f"{topic}-{p} to have a full ISR")

        def same():
            hw = high_watermark(cluster, topic, p)
            views = {b: replica_batches(cluster.broker(b).data_dir, topic, p, hw) for b in state["isr"]}
            first = next(iter(views.values()))
            return all(v == first for v in views.values()) and (hw, first)
        hw, batches = cluster.wait_for(same, timeout, f"identical replicas of {topic}-{p}")
        covered = batches[-1][1] + 1 if batches else 0
        assert covered >= hw, f"{topic}-{p}: batches end at {covered}, HW {hw}"


def high_watermark(cluster, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "hw-probe"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1]
    finally:
        c.close()


def check_data(cluster, topic: str, partitions: int, producer: LoggedProducer, consumers=()) -> dict:
    """D1-D5 after the faults healed; returns the drained records."""
    stored = drain(cluster.bootstrap, topic, partitions)
    values = list(stored.values())
    acked = {(p, o): v for p, o, v in producer.acked if o is not None}
    missing = [(k, v) for k, v in acked.items() if stored.get(k) != v]
    # librdkafka acknowledges a retried batch that the leader already holds without its offset
    # (delivered, offset unknown): such a record must be stored somewhere in its partition
    held = {}
    for (p, _), v in stored.items():
        held.setdefault(p, set()).add(v)
    missing += [((p, None), v) for p, o, v in producer.acked if o is None and v not in held.get(p, ())]
    assert not missing, f"D1/D3: {len(missing)} acknowledged records missing or moved, e.g. {missing[:3]}"
    dup = len(values) - len(set(values))
    assert dup == 0, f"D2: {dup} duplicate values"
    acked_values = {v for _, _, v in producer.acked}
    for consumer in consumers:
        last = {}
        for rec in consumer.log:
            if rec[0] == "assign":
                last = {}
                continue
            p, o, v = rec
            assert stored.get((p, o)) == v, f"D3: consumed {v!r} at {p}/{o}, stored {stored.get((p, o))!r}"
            assert o > last.get(p, -1), f"D4: offset {o} after {last.get(p)} in partition {p}"
            last[p] = o
    check_replicas(cluster, topic, partitions)
    return {"stored": stored, "acked_values": acked_values}


class EndOffsetWatcher:
    """Calls ``ask() -> end offset`` over and over from its own thread, as a consumer's lag check does;
    keeps every answer in order, and the failures of ``retried`` types (a leader moving, or
    OFFSET_NOT_AVAILABLE: asked again)."""

    def __init__(self, name: str, ask, retried=(Exception,), on_stop=None):
        self.name, self.ask, self.retried, self.on_stop = name, ask, retried, on_stop
        self.seen: list[int] = []
        self.failures: list[str] = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "EndOffsetWatcher":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                self.seen.append(self.ask())
            except self.retried as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            self._halt.wait(0.02)

    def wait_answers(self, count: int, timeout: float = 60) -> None:
        """Until ``count`` more answers than now arrived (the end offset is served again)."""
        target = len(self.seen) + count
        deadline = time.monotonic() + timeout
        while len(self.seen) < target:
            assert time.monotonic() < deadline, f"{self.name}: no end offset for {timeout} s: {self.failures[-3:]}"
            time.sleep(0.05)

    def went_back(self) -> list[tuple[int, int]]:
        """(before, after) wherever an answer was lower than the one before it."""
        return [(a, b) for a, b in zip(self.seen, self.seen[1:]) if b < a]

    def stop(self) -> None:
        if self._halt.is_set():
            return
        self._halt.set()
        self._thread.join(30)
        if self.on_stop is not None:
            self.on_stop()


def librdkafka_end_offset_watcher(bootstrap: str, topic: str, partition: int = 0) -> EndOffsetWatcher:
    """librdkafka's watermark query (ListOffsets latest), uncached, as the watcher's question."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watch-{topic}",
                        "topic.metadata.refresh.interval.ms": 500})
    tp = TopicPartition(topic, partition)
    return EndOffsetWatcher("librdkafka", lambda: consumer.get_watermark_offsets(tp, timeout=2, cached=False)[1],
                            (KafkaException,), consumer.close)
