"""``pybroker mirror`` between two real pybroker clusters (each under its own chroot of one
ZooKeeper), checked with confluent-kafka on both sides: every source record reaches the same
target partition in order, with its key, headers and timestamp; duplicates only as one replay after
a kill -9; committed source offsets equal the source's ends; new topics and partitions followed.

The cases of the other tiers: tests/unit/test_mirror.py.
"""
import glob
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from pybroker import core
from tests.cluster import Cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OVERRIDES = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}
GROUP = "test-mirror"
PARTITIONS = 3
TIMEOUT = 90


@pytest.fixture(scope="module")
def clusters(tmp_path_factory, zookeeper):
    """A 2-broker source and a 1-broker target on the session's ZooKeeper (two chroots)."""
    base = tmp_path_factory.mktemp("mirror")
    (base / "source").mkdir()
    (base / "target").mkdir()
    with Cluster(base / "source", 2, zk=zookeeper, overrides=OVERRIDES) as source, \
            Cluster(base / "target", 1, zk=zookeeper, overrides=OVERRIDES) as target:
        assert source.chroot != target.chroot
        yield source, target


class MirrorProcess:
    """``python -m pybroker mirror`` with its output in a file; ended by its PID."""
    started: list = []  # every one, so that teardown kills any a failed test left running

    def __init__(self, tmp_path, source, target, topics: str, *extra):
        MirrorProcess.started.append(self)
        self.out_path = tmp_path / f"mirror-{time.monotonic_ns()}.out"
        self.out = open(self.out_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "mirror", "--source", source.bootstrap, "--target",
             target.bootstrap, "--topics", topics, "--group", GROUP, "--commit-interval-ms", "200",
             "--lag-interval-ms", "500", "--metadata-refresh-ms", "500",
             # a killed member leaves the group within seconds (its partitions wait for it until then)
             "--source-property", "session.timeout.ms=6000", "--source-property", "heartbeat.interval.ms=1000",
             *extra],
            cwd=ROOT, stdout=self.out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.out_path.read_text()

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait()

    def wait(self, timeout: float = TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(30)
            self.out.close()


@pytest.fixture(autouse=True)
def no_mirror_left():
    yield
    while MirrorProcess.started:
        m = MirrorProcess.started.pop(0)
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait(30)
        m.out.close()
        print(f"--- {m.out_path.name} (exit {m.proc.returncode}):\n{m.output()}")  # shown when a test fails


def produce(bootstrap: str, topic: str, start: int, count: int, partitions: int = PARTITIONS) -> None:
    """``count`` records numbered from ``start``: keyed, with headers and a distinct old timestamp."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2})
    base_ts = int(time.time() * 1000) - 3_600_000
    for i in range(start, start + count):
        p.produce(topic, value=b"value-%d" % i, key=b"key-%d" % i, partition=i % partitions,
                  timestamp=base_ts + i, headers=[("seq", b"%d" % i), ("empty", None)])
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def read_all(bootstrap: str, topic: str, partitions: int) -> dict:
    """{partition: [(key, value, headers, timestamp), ...]} from the start to the current end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + TIMEOUT
        while any(len(out[p]) < ends[p] for p in out):
            assert time.monotonic() < deadline, f"reading {topic} stalled at {[len(v) for v in out.values()]}"
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            out[msg.partition()].append((msg.key(), msg.value(), tuple(msg.headers() or ()), msg.timestamp()))
        return out
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-probe"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        c.close()


def target_total(target, topic: str) -> int:
    try:
        return sum(end_offsets(target.bootstrap, topic, PARTITIONS))
    except Exception:
        return 0


def replays(source_seq: list, target_seq: list) -> int:
    """Check that ``target_seq`` is ``source_seq`` with only contiguous replays (a stretch copied
    again from an earlier point up to where copying had got); returns how many replays there were."""
    at = {rec: i for i, rec in enumerate(source_seq)}
    assert len(at) == len(source_seq), "source records are unique"
    expected, count, t = 0, 0, 0
    while t < len(target_seq):
        rec = target_seq[t]
        assert rec in at, f"target record {rec!r} is not in the source"
        i = at[rec]
        if i == expected:
            expected, t = expected + 1, t + 1
            continue
        assert i < expected, f"target skips from source index {expected} to {i}: a record is missing"
        count += 1
        while i < expected:  # the replay runs on, record by record, back up to where it left off
            assert t < len(target_seq) and target_seq[t] == source_seq[i], \
                f"replay from source index {at[rec]} breaks at {i} (resumed before {expected})"
            i, t = i + 1, t + 1
    assert expected == len(source_seq), f"target ends after {expected} of {len(source_seq)} source records"
    return count


def test_mirror_copies_everything_across_restarts(clusters, tmp_path):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
    source, target = clusters
    topic = "orders"
    src_admin = AdminClient({"bootstrap.servers": source.bootstrap})
    futures = src_admin.create_topics([NewTopic(topic, PARTITIONS, 2, config={
        "retention.ms": "86400000", "min.insync.replicas": "2"})])
    futures[topic].result(30)
    source.wait_for(lambda: all(source.leader(topic, p) for p in range(PARTITIONS)), 30, "leaders")
    produce(source.bootstrap, topic, 0, 3000)

    first = MirrorProcess(tmp_path, source, target, "ord.*")  # SIGTERM midway: a clean stop
    source.wait_for(lambda: target_total(target, topic) >= 1000, TIMEOUT, "the first copies")
    produce(source.bootstrap, topic, 3000, 1500)
    assert first.stop() == 0, first.output()
    assert "stopped after copying" in first.output()
    produce(source.bootstrap, topic, 4500, 1500)  # while no mirror runs

    # kill -9 while records keep coming: the restart copies again what followed the last commit
    second = MirrorProcess(tmp_path, source, target, "ord.*")
    more = threading.Thread(target=produce, args=(source.bootstrap, topic, 6000, 6000))
    more.start()
    try:
        seen = target_total(target, topic)
        source.wait_for(lambda: target_total(target, topic) >= seen + 2000, TIMEOUT, "the second mirror copying")
        assert second.stop(signal.SIGKILL) == -signal.SIGKILL
        third = MirrorProcess(tmp_path, source, target, "ord.*", "--max-idle-ms", "1500")
    finally:
        more.join(TIMEOUT)
    assert third.wait() == 0, third.output()
    out = third.output()
    assert f"lag 0 ({topic} 0)" in out, out

    # the target topic: same partition count, the override copied, min.insync.replicas fitted to RF 1
    tgt_admin = AdminClient({"bootstrap.servers": target.bootstrap})
    meta = tgt_admin.list_topics(topic, timeout=30).topics[topic]
    assert len(meta.partitions) == PARTITIONS
    assert all(len(p.replicas) == 1 for p in meta.partitions.values())
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = tgt_admin.describe_configs([res])[res].result(30)
    assert configs["retention.ms"].value == "86400000"
    assert configs["min.insync.replicas"].value == "1"

    src, tgt = read_all(source.bootstrap, topic, PARTITIONS), read_all(target.bootstrap, topic, PARTITIONS)
    assert sum(map(len, src.values())) == 12000
    total_replays = 0
    for p in range(PARTITIONS):  # key, value, headers and CreateTime timestamp of each record
        assert all(r[3][0] == 1 for r in tgt[p]), "CreateTime timestamps on the target"
        total_replays += replays(src[p], tgt[p])
    assert total_replays <= PARTITIONS, f"at most one replay per partition (the kill -9): {total_replays}"

    c = Consumer({"bootstrap.servers": source.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        assert [tp.offset for tp in committed] == end_offsets(source.bootstrap, topic, PARTITIONS)
    finally:
        c.close()


def test_mirror_follows_new_topics_and_partitions(clusters, tmp_path):
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
    source, target = clusters
    src_admin = AdminClient({"bootstrap.servers": source.bootstrap})
    tgt_admin = AdminClient({"bootstrap.servers": target.bootstrap})
    mirror = MirrorProcess(tmp_path, source, target, "fresh-.*")
    try:
        for name in ("fresh-1", "other"):
            src_admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)
        source.wait_for(lambda: source.leader("fresh-1", 1) is not None, 30, "fresh-1 led")
        produce(source.bootstrap, "fresh-1", 0, 100, partitions=2)
        source.wait_for(lambda: sum(end_offsets(target.bootstrap, "fresh-1", 2)) == 100, TIMEOUT,
                        "fresh-1 copied")

        src_admin.create_partitions([NewPartitions("fresh-1", 3)])["fresh-1"].result(30)
        source.wait_for(lambda: source.leader("fresh-1", 2) is not None, 30, "the new partition led")
        source.wait_for(lambda: len(tgt_admin.list_topics("fresh-1", timeout=10).topics["fresh-1"].partitions) == 3,
                        TIMEOUT, "the target topic grown to 3 partitions")
        produce(source.bootstrap, "fresh-1", 100, 90, partitions=3)
        source.wait_for(lambda: end_offsets(target.bootstrap, "fresh-1", 3) ==
                        end_offsets(source.bootstrap, "fresh-1", 3), TIMEOUT, "every partition copied")
    finally:
        assert mirror.stop() == 0, mirror.output()
    out = mirror.output()
    assert "created topic fresh-1 on the target" in out and "adding 1" in out, out
    assert "other" not in tgt_admin.list_topics(timeout=10).topics and "created topic __" not in out
    src, tgt = read_all(source.bootstrap, "fresh-1", 3), read_all(target.bootstrap, "fresh-1", 3)
    assert src == tgt  # a clean run: no duplicates at all


def test_mirror_keeps_compression_and_the_timestamps_consumers_saw(clusters, tmp_path):
    """Compressed batches are copied compressed; a LogAppendTime source's records arrive with the
    source's append times (rebuilt: the target may not receive LogAppendTime batches), and the
    target topic keeps CreateTime so it does not stamp its own."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
    source, target = clusters
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    admin.create_topics([NewTopic("zipped", 1, 1), NewTopic("stamped", 1, 1, config={
        "message.timestamp.type": "LogAppendTime"})])["stamped"].result(30)
    source.wait_for(lambda: source.leader("stamped", 0) is not None and source.leader("zipped", 0) is not None,
                    30, "leaders")
    p = Producer({"bootstrap.servers": source.bootstrap, "acks": "all", "compression.type": "lz4",
                  "linger.ms": 20, "enable.idempotence": True})
    for i in range(400):
        for topic in ("zipped", "stamped"):
            p.produce(topic, value=b"v%d" % i * 20, key=b"k%d" % i, headers=[("i", b"%d" % i)],
                      timestamp=1_600_000_000_000 + i)
    assert p.flush(60) == 0
    mirror = MirrorProcess(tmp_path, source, target, "zipped|stamped")
    try:
        for topic in ("zipped", "stamped"):
            source.wait_for(lambda: end_offsets(target.bootstrap, topic, 1) == [400], TIMEOUT, f"{topic} copied")
    finally:
        assert mirror.stop() == 0, mirror.output()
    assert read_all(target.bootstrap, "zipped", 1) == read_all(source.bootstrap, "zipped", 1)
    src, tgt = read_all(source.bootstrap, "stamped", 1)[0], read_all(target.bootstrap, "stamped", 1)[0]
    assert [r[:3] for r in tgt] == [r[:3] for r in src]
    assert {r[3][0] for r in src} == {2} and {r[3][0] for r in tgt} == {1}  # LogAppendTime there, CreateTime here
    assert [r[3][1] for r in tgt] == [r[3][1] for r in src], "the times the source's consumers saw"
    assert src[0][3][1] > 1_600_000_000_000 + 10**9, "the source's append times, not the produced ones"
    res = ConfigResource("topic", "stamped")
    target_admin = AdminClient({"bootstrap.servers": target.bootstrap})
    configs = target_admin.describe_configs([res])[res].result(30)
    assert configs["message.timestamp.type"].value == "CreateTime"
    codecs = set()
    for path in glob.glob(os.path.join(target.broker(1).data_dir, "zipped-0", "*.log")):
        data = open(path, "rb").read()
        pos = 0
        while pos + 61 <= len(data):
            header = core.batch.parse_header(data, pos)
            codecs.add(header.attributes & 0x07)
            pos += header.size
    assert codecs == {3}, f"the target's batches use codecs {codecs}, not lz4 (3) as the source's"


KAFKA_HOME = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "pybroker-kafka", "kafka_2.13-3.8.0")


@pytest.fixture
def kafka(tmp_path):
    """A single Apache Kafka 3.8 broker in KRaft mode on free ports, ended by its PID."""
    from tests.cluster import answers_requests, free_ports
    port, controller = free_ports(2)
    props = tmp_path / "server.properties"
    props.write_text("\n".join([
        "process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{controller}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={tmp_path / 'kafka-data'}", "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0", ""]))
    env = {**os.environ, "LOG_DIR": str(tmp_path / "kafka-logs"), "KAFKA_HEAP_OPTS": "-Xmx512M -Xms512M"}
    bin_dir = os.path.join(KAFKA_HOME, "bin")
    subprocess.run([os.path.join(bin_dir, "kafka-storage.sh"), "format", "-t", "mirror-test-cluster-0001",
                    "-c", str(props)], check=True, capture_output=True, env=env, timeout=120)
    proc = subprocess.Popen([os.path.join(bin_dir, "kafka-server-start.sh"), str(props)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        Cluster.wait_for(lambda: proc.poll() is None and answers_requests(port) is None, 120, "Kafka to listen",
                         interval=0.5)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(60)


@pytest.mark.skipif(not os.path.isdir(KAFKA_HOME), reason="Apache Kafka is not built here")
def test_mirror_from_apache_kafka_drops_transaction_markers(clusters, kafka, tmp_path):
    """Kafka as the source, with committed and aborted transactions: the copy holds every record
    (read_uncommitted, as the mirror reads), never a control batch, and in the source's order."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    _, target = clusters
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic("kafka-side", 2, 1)])["kafka-side"].result(60)
    p = Producer({"bootstrap.servers": kafka, "transactional.id": "mirror-test", "linger.ms": 5})
    p.init_transactions(60)
    for round_ in range(4):
        p.begin_transaction()
        for i in range(100):
            n = round_ * 100 + i
            p.produce("kafka-side", value=b"v%d" % n, key=b"k%d" % n, partition=n % 2, headers=[("n", b"%d" % n)])
        assert p.flush(60) == 0  # written before the end of the transaction (an abort drops what is queued)
        (p.commit_transaction if round_ % 2 == 0 else p.abort_transaction)(60)
    source_ends = end_offsets(kafka, "kafka-side", 2)
    assert sum(source_ends) > 400  # 400 records and the transaction markers
    mirror = subprocess.Popen([sys.executable, "-m", "pybroker", "mirror", "--source", kafka, "--target",
                               target.bootstrap, "--topics", "kafka-side", "--group", "from-kafka",
                               "--max-idle-ms", "3000"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    out, _ = mirror.communicate(timeout=TIMEOUT)
    assert mirror.returncode == 0, out
    copied = read_all(target.bootstrap, "kafka-side", 2)
    for part in range(2):
        values = [v for _, v, _, _ in copied[part]]
        assert values == [b"v%d" % n for n in range(part, 400, 2)], f"partition {part}: {values[:5]}..."
    assert sum(end_offsets(target.bootstrap, "kafka-side", 2)) == 400  # the markers stayed behind


@pytest.mark.skipif(not os.path.isdir(KAFKA_HOME), reason="Apache Kafka is not built here")
def test_mirror_into_apache_kafka(clusters, kafka, tmp_path):
    """Apache Kafka as the target takes the mirror's batches (its own producer id and sequences)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    source, _ = clusters
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    admin.create_topics([NewTopic("to-kafka", PARTITIONS, 1)])["to-kafka"].result(30)
    source.wait_for(lambda: all(source.leader("to-kafka", p) is not None for p in range(PARTITIONS)), 30, "leaders")
    produce(source.bootstrap, "to-kafka", 0, 900)
    mirror = subprocess.Popen([sys.executable, "-m", "pybroker", "mirror", "--source", source.bootstrap, "--target",
                               kafka, "--topics", "to-kafka", "--group", "into-kafka", "--max-idle-ms", "3000"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = mirror.communicate(timeout=TIMEOUT)
    assert mirror.returncode == 0, out
    assert read_all(kafka, "to-kafka", PARTITIONS) == read_all(source.bootstrap, "to-kafka", PARTITIONS)
