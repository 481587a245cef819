"""Kafka 3.8's Java command-line tools against pybroker at the current protocol versions.

``kafka-console-consumer --consumer-property group.protocol=consumer --group G`` (the Java client's
KIP-848 consumer) reads every record, commits, and a second run in the same group starts where the
first stopped; its traffic holds ConsumerGroupHeartbeat and never a classic JoinGroup. ``kafka-topics
--describe`` asks DescribeTopicPartitions and prints each topic's id, leaders, replicas and ISR as
the cluster's metadata has them. Skipped when Kafka 3.8 is not installed."""
import os
import re
import subprocess
import time
import uuid

import pytest

from pybroker.protocol import REQUESTS
from pybroker.records import build_batch
from tests.clientutil import wait_until
from tests.kafka_wire import WireClient
from tests.secure_brokers import KAFKA_HOME, kafka_available
from tests.broker.test_consumer_group_protocol import create_topic, describe, produce, wait_for_coordinator
from tests.broker.test_fetch_sessions import CountingProxy
from tests.broker.test_topic_ids import b64, create

pytestmark = pytest.mark.skipif(not kafka_available(), reason=f"Apache Kafka 3.8 is not installed at {KAFKA_HOME}")
TOOL_TIMEOUT = 120
CONSUMER_GROUP_HEARTBEAT, JOIN_GROUP, DESCRIBE_TOPIC_PARTITIONS = 68, 11, 75


def run_tool(name: str, args: list, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "LOG_DIR": str(tmp_path)}
    return subprocess.run([os.path.join(KAFKA_HOME, "bin", name), *args], capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT, env=env)


@pytest.fixture
def proxied(broker_factory):
    """A broker whose every connection goes through a proxy that records each request's api key."""
    proxy = CountingProxy(lifetime=300)
    b = broker_factory(overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
                                  "group.initial.rebalance.delay.ms": 0,
                                  "group.consumer.heartbeat.interval.ms": 500,
                                  "group.consumer.session.timeout.ms": 6000})
    proxy.start(b.port)
    wait_for_coordinator(b.port)
    yield b, proxy
    proxy.close()


def api_keys(proxy) -> set:
    with proxy._lock:
        return {key for key, _, _, _ in proxy.requests.values()}


def console_consume(b, topic, group, count, tmp_path) -> list[str]:
    r = run_tool("kafka-console-consumer.sh", [
        "--bootstrap-server", b.bootstrap, "--topic", topic, "--group", group, "--max-messages", str(count),
        "--timeout-ms", "30000", "--consumer-property", "group.protocol=consumer",
        "--consumer-property", "auto.offset.reset=earliest"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.splitlines()


def test_console_consumer_with_the_consumer_group_protocol(proxied, tmp_path):
    b, proxy = proxied
    topic, _ = create_topic(b.port, 4)
    group = f"java-{uuid.uuid4().hex[:8]}"
    first = produce(b, topic, 0, 120, 4)
    got = console_consume(b, topic, group, 120, tmp_path)
    assert sorted(got) == sorted(v.decode() for v in first)  # every record, once
    keys = api_keys(proxy)
    assert CONSUMER_GROUP_HEARTBEAT in keys and JOIN_GROUP not in keys, sorted(keys)
    with WireClient(b.port) as w:
        d = describe(w, group)
        assert d.error_code == 0 and d.group_state == "Empty" and not d.members  # it left when done
        listed = w.request(REQUESTS[16](states_filter=[], types_filter=["consumer"]), 5).groups
        assert [g.group_type for g in listed if g.group_id == group] == ["consumer"]
    second = produce(b, topic, 120, 40, 4)
    got = console_consume(b, topic, group, 40, tmp_path)  # same group: from the committed offsets
    assert sorted(got) == sorted(v.decode() for v in second)


def test_kafka_topics_describe_asks_describe_topic_partitions(proxied, tmp_path):
    b, proxy = proxied
    topic, topic_id = create_topic(b.port, 3)
    r = run_tool("kafka-topics.sh", ["--bootstrap-server", b.bootstrap, "--describe", "--topic", topic], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert DESCRIBE_TOPIC_PARTITIONS in api_keys(proxy)
    assert f"Topic: {topic}\tTopicId: {b64(topic_id)}\tPartitionCount: 3\tReplicationFactor: 1" in r.stdout, r.stdout
    rows = re.findall(r"Partition: (\d+)\tLeader: (\d+)\tReplicas: ([\d,]+)\tIsr: ([\d,]+)", r.stdout)
    assert sorted(int(p) for p, _, _, _ in rows) == [0, 1, 2], r.stdout


def test_kafka_topics_describe_on_a_cluster_shows_leaders_and_isr(tmp_path, zookeeper):
    from tests.cluster import Cluster
    from tests.cluster.test_replication import OVERRIDES
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as cluster:
        with WireClient(cluster.broker(1).port) as w:
            assert create(w, "described", partitions=4).error_code == 0  # default.replication.factor: 3

            def full_isr():
                t = w.metadata(["described"], version=12).topics[0]
                return t if t.error_code == 0 and len(t.partitions) == 4 and all(
                    p.leader_id >= 0 and len(p.isr_nodes) == 3 for p in t.partitions) else None
            meta = cluster.wait_for(full_isr, 60, "every partition to have a leader and a full ISR")
        r = run_tool("kafka-topics.sh", ["--bootstrap-server", cluster.bootstrap, "--describe", "--topic", "described"],
                     tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"Topic: described\tTopicId: {b64(meta.topic_id)}\tPartitionCount: 4\tReplicationFactor: 3" in r.stdout
        rows = {int(p): (int(leader), replicas, isr) for p, leader, replicas, isr in re.findall(
            r"Partition: (\d+)\tLeader: (\d+)\tReplicas: ([\d,]+)\tIsr: ([\d,]+)", r.stdout)}
        want = {p.partition_index: (p.leader_id, ",".join(map(str, p.replica_nodes)), ",".join(map(str, p.isr_nodes)))
                for p in meta.partitions}
        assert rows == want, r.stdout


@pytest.mark.parametrize("second", ["consumer", "classic"])
def test_two_console_consumers_share_a_group(proxied, tmp_path, second):
    """Two Java consumers in one group, the first a KIP-848 one, the second (KIP-848, or classic:
    JoinGroup/SyncGroup inside the consumer group) joining after the first took every partition: the
    partitions are shared and each record is printed by exactly one of them."""
    b, _ = proxied
    topic, _ = create_topic(b.port, 4)
    group = f"java-pair-{uuid.uuid4().hex[:8]}"
    sent = produce(b, topic, 0, 200, 4)
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "LOG_DIR": str(tmp_path)}

    def args(protocol):
        return [os.path.join(KAFKA_HOME, "bin", "kafka-console-consumer.sh"), "--bootstrap-server", b.bootstrap,
                "--topic", topic, "--group", group, "--timeout-ms", "8000", "--property", "print.partition=true",
                "--consumer-property", f"group.protocol={protocol}",
                "--consumer-property", "auto.offset.reset=earliest"]
    procs = [subprocess.Popen(args("consumer"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)]
    try:
        with WireClient(b.port) as w:  # the second joins once the first is a member
            assert wait_until(lambda: len(describe(w, group).members) == 1, timeout=60)
        procs.append(subprocess.Popen(args(second), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=env))
        with WireClient(b.port) as w:  # both hold partitions before the next records are written

            def both_hold():
                d = describe(w, group)
                return d.group_state == "Stable" and len(d.members) == 2 and all(
                    m.assignment.topic_partitions for m in d.members)
            assert wait_until(both_hold, timeout=60)
        more = produce(b, topic, 200, 200, 4)
        outs = [p.communicate(timeout=TOOL_TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
    lines = [line.split("\t")[-1] for out, _ in outs for line in out.splitlines()]
    assert sorted(lines) == sorted(v.decode() for v in {**sent, **more}), [err[-2000:] for _, err in outs]
    assert all(out.strip() for out, _ in outs), "one consumer never got a partition"


def test_console_consumer_of_1000_partitions_keeps_a_session_by_topic_id(proxied, tmp_path):
    """Kafka 3.8's consumer fetches by topic id (Fetch v13+); over 1 000 partitions its first fetch names
    them all, then, idle, its incremental fetches carry only the session id and epoch."""
    b, proxy = proxied
    with WireClient(b.port, timeout=60) as w:  # a thousand partition directories take a while
        w.create_topic("wide", partitions=1000)
        assert wait_until(lambda: all(p.leader_id >= 0 for p in w.metadata(["wide"], version=12).topics[0].partitions),
                          timeout=60)
        for i in (0, 500, 999):
            assert w.produce("wide", i, bytes(build_batch([b"wide-%d" % i], base_timestamp=int(time.time() * 1000)))
                             ).error_code == 0
    r = run_tool("kafka-console-consumer.sh", [
        "--bootstrap-server", b.bootstrap, "--topic", "wide", "--group", f"wide-{uuid.uuid4().hex[:8]}",
        "--timeout-ms", "15000", "--property", "print.partition=true",  # after the records: 15 s idle
        "--consumer-property", "group.protocol=consumer", "--consumer-property", "auto.offset.reset=earliest",
        "--consumer-property", "fetch.max.wait.ms=100"], tmp_path)
    assert sorted(r.stdout.splitlines()) == sorted(f"Partition:{i}\twide-{i}" for i in (0, 500, 999)), \
        r.stderr[-2000:]
    fetches = proxy.fetches()
    assert fetches and min(v for _, v, _, _ in fetches) >= 13, fetches[:3]  # by topic id
    full = max(req for _, _, req, _ in fetches)
    steady = fetches[-10:]
    assert full > 20 * 1000, full  # the full fetch names every partition
    assert all(req < 120 and resp < 120 for _, _, req, resp in steady), steady


def test_console_consumer_follows_a_recreated_topic(proxied, tmp_path):
    """Kafka 3.8's consumer fetches by topic id: when the topic is deleted and created again under the
    same name, its fetches by the old id fail, it learns the new id from metadata and reads the new
    topic's records from offset 0. (No --group: the tool then commits nothing.)"""
    import threading
    b, _ = proxied
    topic, first_id = create_topic(b.port, 2)
    old = produce(b, topic, 0, 6, 2)
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "LOG_DIR": str(tmp_path)}
    proc = subprocess.Popen([os.path.join(KAFKA_HOME, "bin", "kafka-console-consumer.sh"), "--bootstrap-server",
                             b.bootstrap, "--topic", topic, "--timeout-ms", "60000", "--property", "print.offset=true",
                             "--consumer-property", "group.protocol=consumer",
                             "--consumer-property", "auto.offset.reset=earliest",
                             "--consumer-property", "metadata.max.age.ms=1000",
                             # else its metadata refresh may re-create the deleted topic before the test does
                             "--consumer-property", "allow.auto.create.topics=false"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()

    def printed():  # {value: offset} of what the tool printed so far
        return {line.split("\t")[-1].strip(): int(line.split("Offset:")[1].split("\t")[0])
                for line in list(lines) if "Offset:" in line}
    try:
        assert wait_until(lambda: set(printed()) >= {v.decode() for v in old}, timeout=60), (lines, proc.poll())
        with WireClient(b.port) as w:
            r = w.request(REQUESTS[20](topic_names=[topic], timeout_ms=10000), 5)
            assert r.responses[0].error_code == 0
            assert wait_until(lambda: w.metadata([topic], version=12).topics[0].error_code != 0, timeout=30)
        _, second_id = create_topic(b.port, 2, topic)
        assert second_id != first_id
        new = produce(b, topic, 100, 6, 2)
        want = {v.decode(): o for v, (_, o) in new.items()}
        assert wait_until(lambda: {v: o for v, o in printed().items() if v in want} == want, timeout=60), \
            (lines, proc.poll())
    finally:
        proc.kill()
        proc.wait(30)
        reader.join(10)
