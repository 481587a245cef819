"""Real clients against a 3-broker cluster (RF=3, min.insync.replicas=2) while brokers die.

* Every client library (librdkafka via confluent-kafka, kafka-python, aiokafka, pybroker's own)
  produces with acks=all to a one-partition topic, keeps producing with the same producer while
  the partition's leader is killed (kill -9), and afterwards reads everything back with the same
  library: every acknowledged value is there exactly once, at the offset it was acknowledged at.
* A confluent-kafka group consumer committing by hand survives the death of its group
  coordinator (the leader of the group's ``__consumer_offsets`` partition): it keeps consuming,
  its commits succeed again, committed offsets never go backwards, and a new member of the
  group starts exactly at the committed offsets.

Waits are on conditions with bounded timeouts (the machine may be slow and shared).
"""
import asyncio
import threading
import time

import pytest

from pybroker.coordinator.records import offsets_partition
from tests.cluster import Cluster
from tests.replication_checks import LoggedProducer, check_data, replica_batches
from tests.cluster.test_replication import OVERRIDES, create_topic, wait_full_isr

N = 300
OFFSETS_TOPIC = "__consumer_offsets"
DELIVERY_TIMEOUT_MS = 45000  # covers a leader election (ZooKeeper session timeout 6 s) with room
REQUEST_TIMEOUT_MS = 10000
CASE_BOUND_S = 60  # one client case, cluster start excluded


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as c:
        yield c


def wait_leader_moved(cluster, topic: str, partition: int, old: int, old_epoch: int, timeout: float = 60) -> int:
    def moved():
        s = cluster.partition_state(topic, partition)
        return s["leader"] not in (old, -1) and s["leader_epoch"] > old_epoch and s["leader"]
    return cluster.wait_for(moved, timeout, f"a new leader of {topic}-{partition}")


# ---- one adapter per client library: produce (acks=all, kept across the fault) and read back -------

class Confluent:
    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Producer
        self.bootstrap, self.topic = bootstrap, topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": DELIVERY_TIMEOUT_MS,
                                  "retry.backoff.ms": 200, "topic.metadata.refresh.interval.ms": 1000})

    def produce(self, values: list) -> list:
        acked, errors = [], []

        def on_delivery(err, msg):
            if err is None:
                acked.append((msg.offset(), msg.value()))
            else:
                errors.append((err, msg.value()))
        for v in values:
            self.producer.produce(self.topic, value=v, partition=0, on_delivery=on_delivery)
            self.producer.poll(0)
        left = self.producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 15)
        assert left == 0 and not errors, f"{left} unresolved, errors {errors[:3]}"
        return acked

    def close(self) -> None:
        self.producer.flush(5)

    def read_all(self) -> list:
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"verify-{time.monotonic_ns()}",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            end = c.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=30)[1]
            c.assign([TopicPartition(self.topic, 0, 0)])
            got, position, deadline = [], 0, time.monotonic() + 60
            while position < end:
                assert time.monotonic() < deadline, f"read stalled at {position} of {end}"
                for msg in c.consume(500, 0.5):
                    if msg.error() is None:
                        got.append((msg.offset(), msg.value()))
                        position = msg.offset() + 1
            return got
        finally:
            c.close()


class KafkaPython:
    def __init__(self, bootstrap: str, topic: str):
        from kafka import KafkaProducer
        self.bootstrap, self.topic = bootstrap.split(","), topic
        self.producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True,
                                      retries=10, retry_backoff_ms=1000, request_timeout_ms=REQUEST_TIMEOUT_MS,
                                      delivery_timeout_ms=DELIVERY_TIMEOUT_MS, linger_ms=5,
                                      metadata_max_age_ms=1000, reconnect_backoff_max_ms=1000)

    def produce(self, values: list) -> list:
        futures = [self.producer.send(self.topic, value=v, partition=0) for v in values]
        self.producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 15)
        return [(f.get(1).offset, v) for f, v in zip(futures, values)]

    def close(self) -> None:
        self.producer.close(10)

    def read_all(self) -> list:
        from kafka import KafkaConsumer, TopicPartition
        tp = TopicPartition(self.topic, 0)
        c = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                          request_timeout_ms=30000)
        try:
            c.assign([tp])
            c.seek_to_beginning(tp)
            end = c.end_offsets([tp])[tp]
            got, position, deadline = [], 0, time.monotonic() + 60
            while position < end:
                assert time.monotonic() < deadline, f"read stalled at {position} of {end}"
                for records in c.poll(timeout_ms=500).values():
                    for m in records:
                        got.append((m.offset, m.value))
                        position = m.offset + 1
            return got
        finally:
            c.close()


class AioKafka:
    """aiokafka on a private event loop, driven from the test's thread (the loop runs only within
    a call; the producer's sender resumes with the next one)."""

    def __init__(self, bootstrap: str, topic: str):
        from aiokafka import AIOKafkaProducer
        self.bootstrap, self.topic = bootstrap, topic
        self.loop = asyncio.new_event_loop()

        async def start():
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                                 request_timeout_ms=DELIVERY_TIMEOUT_MS, retry_backoff_ms=200,
                                 metadata_max_age_ms=1000)
            await p.start()
            return p
        self.producer = self._run(start())

    def _run(self, coro, timeout: float = DELIVERY_TIMEOUT_MS / 1000 + 30):
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def produce(self, values: list) -> list:
        async def send_all():
            futures = [await self.producer.send(self.topic, value=v, partition=0) for v in values]
            return [(md.offset, v) for md, v in zip(await asyncio.gather(*futures), values)]
        return self._run(send_all())

    def close(self) -> None:
        try:
            self._run(self.producer.stop(), 30)
        finally:
            self.loop.close()

    def read_all(self) -> list:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def read():
            tp = TopicPartition(self.topic, 0)
            c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest")
            await c.start()
            try:
                c.assign([tp])
                await c.seek_to_beginning(tp)
                end = (await c.end_offsets([tp]))[tp]
                got, position, deadline = [], 0, time.monotonic() + 60
                while position < end:
                    assert time.monotonic() < deadline, f"read stalled at {position} of {end}"
                    for records in (await c.getmany(timeout_ms=500)).values():
                        for m in records:
                            got.append((m.offset, m.value))
                            position = m.offset + 1
                return got
            finally:
                await c.stop()
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(asyncio.wait_for(read(), 90))
        finally:
            loop.close()


class PyBroker:
    def __init__(self, bootstrap: str, topic: str):
        from pybroker.client import Producer
        self.bootstrap, self.topic = bootstrap, topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "delivery.timeout.ms": DELIVERY_TIMEOUT_MS,
                                  "request.timeout.ms": REQUEST_TIMEOUT_MS, "metadata.max.age.ms": 1000})

    def produce(self, values: list) -> list:
        futures = [self.producer.send(self.topic, value=v, partition=0) for v in values]
        self.producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 15)
        return [(f.result(1).offset, v) for f, v in zip(futures, values)]

    def close(self) -> None:
        self.producer.close(10)

    def read_all(self) -> list:
        from pybroker.client import Consumer
        with Consumer({"bootstrap.servers": self.bootstrap, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest"}) as c:
            c.assign([(self.topic, 0, 0)])
            end = next(iter(c.end_offsets([(self.topic, 0)]).values()))
            got, position, deadline = [], 0, time.monotonic() + 60
            while position < end:
                assert time.monotonic() < deadline, f"read stalled at {position} of {end}"
                for r in c.poll(timeout_ms=500):
                    got.append((r.offset, r.value))
                    position = r.offset + 1
            return got


CLIENTS = {"confluent": Confluent, "kafka-python": KafkaPython, "aiokafka": AioKafka, "pybroker": PyBroker}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_client_produces_through_a_leader_kill_and_reads_back_exactly_once(cluster, client):
    topic = create_topic(cluster, f"clients-{client}", partitions=1)
    wait_full_isr(cluster, topic, 1)
    began = time.monotonic()
    values = [f"{client}-{i}".encode() for i in range(2 * N)]
    impl = CLIENTS[client](cluster.bootstrap, topic)
    try:
        acked = impl.produce(values[:N])
        state = cluster.partition_state(topic, 0)
        old = state["leader"]
        cluster.kill(old)
        acked += impl.produce(values[N:])  # the same producer: it has to find the new leader itself
    finally:
        impl.close()
    new = cluster.partition_state(topic, 0)
    assert new["leader"] != old and new["leader_epoch"] > state["leader_epoch"], (state, new)
    cluster.restart(old)
    wait_full_isr(cluster, topic, 1)

    got = impl.read_all()
    assert len(acked) == 2 * N
    by_offset = {}
    for offset, value in got:
        assert offset not in by_offset, f"offset {offset} read twice"
        by_offset[offset] = value
    assert sorted(by_offset) == list(range(len(got))), "offsets with gaps"
    wrong = [(o, v, by_offset.get(o)) for o, v in acked if by_offset.get(o) != v]
    assert not wrong, f"{len(wrong)} acknowledged records not at their offset, e.g. {wrong[:3]}"
    counts = {}
    for _, v in got:
        counts[v] = counts.get(v, 0) + 1
    dup = {v: n for v, n in counts.items() if n > 1}
    assert not dup, f"values stored more than once: {list(dup.items())[:5]}"
    assert set(counts) == set(values) and len(got) == 2 * N, f"{len(got)} records, expected {2 * N}"
    # the first half was written under the killed leader's epoch, the second under a newer one
    first_new = min(o for o, v in acked if v in set(values[N:]))
    batches = replica_batches(cluster.broker(new["leader"]).data_dir, topic, 0, 2 * N)
    assert batches and batches[-1][1] == 2 * N - 1, batches[-3:]
    epochs = {(b[0] >= first_new, b[2]) for b in batches}
    assert all(e == state["leader_epoch"] for late, e in epochs if not late), (state, epochs)
    assert all(e > state["leader_epoch"] for late, e in epochs if late), (state, epochs)
    elapsed = time.monotonic() - began
    assert elapsed < CASE_BOUND_S, f"{client}: {elapsed:.1f} s"


# ---- coordinator failover ------------------------------------------------------------------------

class CommittingConsumer:
    """A confluent-kafka group member that commits each poll batch synchronously (auto commit off)
    and, after each successful commit, reads the group's committed offsets back."""

    def __init__(self, bootstrap: str, topic: str, group: str, partitions: int, max_seconds: float = 300):
        from confluent_kafka import Consumer
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "session.timeout.ms": 10000, "topic.metadata.refresh.interval.ms": 1000,
                                  "socket.timeout.ms": 10000})
        self.topic, self.partitions, self.max_seconds = topic, partitions, max_seconds
        self.log: list = []        # (partition, offset, value) in consumption order
        self.commits: list = []    # (monotonic time, {partition: offset}) of successful commits
        self.commit_errors: list = []  # (monotonic time, error)
        self.observed: list = []   # (monotonic time, {partition: committed offset}) read back
        self.errors: list = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "CommittingConsumer":
        self.consumer.subscribe([self.topic])
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition
        end = time.monotonic() + self.max_seconds
        while not self._halt.is_set() and time.monotonic() < end:
            batch = self.consumer.consume(100, 0.5)
            upto = {}
            for msg in batch:
                if msg.error():
                    self.errors.append(msg.error())
                    continue
                self.log.append((msg.partition(), msg.offset(), msg.value()))
                upto[msg.partition()] = msg.offset() + 1
            if not upto:
                continue
            try:
                result = self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in upto.items()],
                                              asynchronous=False)
                failed = [tp for tp in result or () if tp.error]
                if failed:
                    self.commit_errors.append((time.monotonic(), failed[0].error))
                    continue
                self.commits.append((time.monotonic(), upto))
            except KafkaException as exc:
                self.commit_errors.append((time.monotonic(), exc.args[0]))
                continue
            try:
                tps = self.consumer.committed([TopicPartition(self.topic, p) for p in range(self.partitions)],
                                              timeout=10)
                self.observed.append((time.monotonic(), {tp.partition: tp.offset for tp in tps}))
            except KafkaException:
                pass

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the consumer thread did not stop"
        self.consumer.close()

    def values(self) -> set:
        return {v for _, _, v in self.log}

    def last_committed(self) -> dict:
        out = {}
        for _, upto in self.commits:
            out.update(upto)
        return out


def value_index(value: bytes) -> int:
    return int(value.rsplit(b"-", 1)[1])


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-probe"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        c.close()


@pytest.mark.slow
def test_group_coordinator_kill(cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition
    partitions = 3
    topic = create_topic(cluster, "coordinator-failover", partitions)
    group = "g-coordinator-failover"
    offsets_p = offsets_partition(group, OVERRIDES["offsets.topic.num.partitions"])
    producer = LoggedProducer(cluster.bootstrap, topic).start()
    consumer = CommittingConsumer(cluster.bootstrap, topic, group, partitions).start()
    try:
        producer.wait_acked(200)
        cluster.wait_for(lambda: len(consumer.commits) >= 3, 60, "commits before the fault")
        wait_full_isr(cluster, OFFSETS_TOPIC, OVERRIDES["offsets.topic.num.partitions"])
        state = cluster.partition_state(OFFSETS_TOPIC, offsets_p)
        coordinator = state["leader"]
        before = consumer.last_committed()
        sent_at_kill = producer.sent
        cluster.kill(coordinator)
        killed_at = time.monotonic()
        wait_leader_moved(cluster, OFFSETS_TOPIC, offsets_p, coordinator, state["leader_epoch"])
        # progress: records produced after the kill are consumed, and commits succeed again
        cluster.wait_for(lambda: any(value_index(v) > sent_at_kill + 100 for _, _, v in consumer.log[-2000:]),
                         90, "records produced after the kill to be consumed")
        cluster.wait_for(lambda: any(t > killed_at for t, _ in consumer.commits[-50:]), 90,
                         "a successful commit after the coordinator died")
        after = consumer.last_committed()
        assert all(after[p] >= before[p] for p in before), (before, after)
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]

    ends = high_watermarks(cluster.bootstrap, topic, partitions)
    cluster.wait_for(lambda: consumer.last_committed() == ends, 90,
                     f"the commits to reach the end {ends} (last {consumer.last_committed()})")
    consumer.stop()
    missing = {v for _, _, v in producer.acked} - consumer.values()
    assert not missing, f"{len(missing)} acknowledged values never consumed, e.g. {sorted(missing)[:3]}"

    # committed offsets never went backwards: neither the successful commits nor what was read back
    for name, series in (("commits", consumer.commits), ("read back", consumer.observed)):
        last = {}
        for t, offsets in series:
            for p, o in offsets.items():
                if p not in last and o < 0:
                    continue  # nothing committed for this partition yet (librdkafka: -1001)
                assert o >= last.get(p, -1), f"{name}: partition {p} went back from {last.get(p)} to {o} " \
                                             f"({t - killed_at:+.1f} s after the kill)"
                last[p] = o
    post_kill = [o for t, o in consumer.observed if t > killed_at]
    assert post_kill, "no committed offsets read back after the failover"

    # a new member of the group starts exactly at the committed offsets
    extra = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    more = []
    for i in range(60):
        extra.produce(topic, value=f"after-{i}".encode(), partition=i % partitions,
                      on_delivery=lambda err, msg: more.append((err, msg.partition(), msg.offset())))
    assert extra.flush(60) == 0 and all(err is None for err, _, _ in more), more[:3]
    second = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    try:
        committed = {tp.partition: tp.offset for tp in
                     second.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)}
        assert committed == ends, (committed, ends)
        second.subscribe([topic])
        got, deadline = [], time.monotonic() + 60
        while len(got) < len(more):
            assert time.monotonic() < deadline, f"the new member read {len(got)} of {len(more)}"
            got += [(m.partition(), m.offset(), m.value()) for m in second.consume(100, 0.5) if not m.error()]
    finally:
        second.close()
    below = [r for r in got if r[1] < committed[r[0]]]
    assert not below, f"the new member read below the committed offsets: {below[:3]}"
    firsts = {p: min(o for q, o, _ in got if q == p) for p in range(partitions)}
    assert firsts == committed, (firsts, committed)
    assert sorted(v for _, _, v in got) == sorted(f"after-{i}".encode() for i in range(60))

    cluster.restart(coordinator)
    wait_full_isr(cluster, topic, partitions)
    wait_full_isr(cluster, OFFSETS_TOPIC, OVERRIDES["offsets.topic.num.partitions"])
    check_data(cluster, topic, partitions, producer)
