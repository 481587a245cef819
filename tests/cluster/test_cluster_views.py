"""Cluster views: DescribeCluster, DescribeLogDirs and DescribeProducers, kafka-topics' partition
filters, ``pybroker cluster --describe`` and ``pybroker log-dirs --describe``, driven by real
clients (confluent-kafka, kafka-python), our CLI and, when it is installed, Kafka's own CLI.

* DescribeCluster names the live brokers on the caller's listener, the controller and the cluster id
  (the same as Metadata and ZooKeeper); a broker refuses endpoint type 2 (controllers).
* DescribeLogDirs lists every partition of each log dir with its size on disk (the sum of its
  segments' .log files), offset lag 0 and is_future false; v4 adds the volume's sizes.
* DescribeProducers lists the idempotent producers of a partition the broker leads, as its log's
  batch headers record them; a follower answers NOT_LEADER_OR_FOLLOWER (6), an unknown partition
  UNKNOWN_TOPIC_OR_PARTITION (3).
* The filters list exactly the partitions Kafka's definitions select, as brokers stop and die.

The cases of the other tiers: tests/broker/test_cluster_views.py.
"""
import glob
import json
import os
import struct
import subprocess
import sys

import pytest

from pybroker.protocol import REQUESTS
from tests.broker import ROOT
from tests.cluster import Cluster
from tests.kafka_wire import WireClient
from tests.replication_checks import LoggedProducer
from tests.cluster.test_replication import OVERRIDES, create_topic, wait_full_isr

KAFKA_BIN = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "pybroker-kafka", "kafka_2.13-3.8.0", "bin")
DESCRIBE_LOG_DIRS, DESCRIBE_CLUSTER, DESCRIBE_PRODUCERS = 35, 60, 61
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 3, 6
MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE = 114, 115
NO_OPERATIONS = -2147483648
CLUSTER_OPERATIONS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                      "IDEMPOTENT_WRITE"}
FILTERS = ("--under-replicated-partitions", "--unavailable-partitions", "--under-min-isr-partitions",
           "--at-min-isr-partitions")
TIMEOUT = 60
# a batch header: base offset, length, leader epoch, magic, crc, attributes, last offset delta,
# first and max timestamp, producer id, producer epoch, base sequence, record count
_BATCH = struct.Struct(">qiibIhiqqqhii")


# ---- helpers -----------------------------------------------------------------------------------

def pybroker(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybroker", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def ok(*args) -> str:
    done = pybroker(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def kafka_tool(name: str, *args) -> subprocess.CompletedProcess:
    """Kafka's own CLI (Apache Kafka 3.8); the test is skipped where it is not installed."""
    path = os.path.join(KAFKA_BIN, name)
    if not os.path.exists(path):
        pytest.skip(f"Apache Kafka's CLI is not installed ({path})")
    done = subprocess.run([path, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def listed(output: str) -> set:
    """(topic, partition) of each kafka-topics partition line."""
    out = set()
    for line in output.splitlines():
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t") if ": " in f)
        if "Partition" in fields:
            out.add((fields["Topic"], int(fields["Partition"])))
    return out


def log_dirs_json(output: str) -> dict:
    """kafka-log-dirs' report as {broker: {partition name: (size, offset lag, is future)}}."""
    doc = json.loads(output.strip().splitlines()[-1])
    assert doc["version"] == 1
    return {b["broker"]: {p["partition"]: (p["size"], p["offsetLag"], p["isFuture"])
                          for d in b["logDirs"] for p in d["partitions"]} for b in doc["brokers"]}


def size_on_disk(data_dir: str, topic: str, partition: int) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(data_dir, f"{topic}-{partition}", "*.log")))


def log_producers(port: int, topic: str, partition: int) -> dict:
    """{producer id: (epoch, last sequence, last max timestamp)} from the batch headers of a leader's log."""
    out, offset = {}, 0
    with WireClient(port) as c:
        while True:
            records = c.fetch(topic, partition, offset).records
            if not records:
                return out
            view, pos = memoryview(records), 0
            while pos + _BATCH.size <= len(view):
                (base, length, _, _, _, _, delta, _, max_ts, pid, epoch, base_seq, _) = _BATCH.unpack_from(view, pos)
                if pos + 12 + length > len(view):
                    break
                if pid >= 0:
                    out[pid] = (epoch, base_seq + delta, max_ts)
                offset, pos = base + delta + 1, pos + 12 + length


def produce_idempotent(bootstrap: str, topic: str, partition: int, count: int) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(TIMEOUT) == 0


def describe_producers(port: int, topics: dict):
    req = REQUESTS[DESCRIBE_PRODUCERS]
    with WireClient(port) as c:
        resp = c.request(req(topics=[req.TopicRequest(name=t, partition_indexes=ps) for t, ps in topics.items()]), 0)
    return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}


def log_dir_sizes(admin) -> dict:
    """kafka-python's describe_log_dirs as {broker: {(topic, partition): size}}."""
    return {b["broker"]: {(t["name"], p["partition_index"]): p["partition_size"]
                          for d in b["log_dirs"] for t in d["topics"] for p in t["partitions"]}
            for b in admin.describe_log_dirs()}


# ---- a single node -------------------------------------------------------------------------------

def test_describe_cluster_on_a_single_node(broker):
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient
    req = REQUESTS[DESCRIBE_CLUSTER]
    with WireClient(broker.port) as c:
        meta = c.metadata([])
        for version in (0, 1):
            resp = c.request(req(include_cluster_authorized_operations=False, endpoint_type=1), version)
            assert resp.error_code == 0 and resp.cluster_id == meta.cluster_id
            assert resp.controller_id == meta.controller_id >= 0
            assert [(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers] == [
                (b.node_id, "127.0.0.1", broker.port, None) for b in meta.brokers]
            assert resp.cluster_authorized_operations == NO_OPERATIONS
        for endpoint_type, code in ((2, MISMATCHED_ENDPOINT_TYPE), (0, UNSUPPORTED_ENDPOINT_TYPE),
                                    (-7, UNSUPPORTED_ENDPOINT_TYPE)):
            resp = c.request(req(include_cluster_authorized_operations=False, endpoint_type=endpoint_type), 1)
            assert resp.error_code == code and resp.brokers == []
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        described = admin.describe_cluster()
    assert described["cluster_id"] == meta.cluster_id and described["controller_id"] == meta.controller_id
    assert [b["broker_id"] for b in described["brokers"]] == [meta.controller_id]
    assert set(described["authorized_operations"]) == CLUSTER_OPERATIONS  # no authorizer: all allowed
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # held: the future needs a live handle
    cluster = admin.describe_cluster().result(TIMEOUT)
    assert cluster.cluster_id == meta.cluster_id and [n.id for n in cluster.nodes] == [meta.controller_id]


# ---- a cluster -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(shared_cluster):
    """The session's shared three-broker cluster (tests/conftest.py); this module's topics are its own."""
    return shared_cluster


@pytest.fixture(scope="module")
def views(cluster):
    """Topic ``views`` (3 partitions, 3 replicas) with records in each, every replica caught up."""
    from confluent_kafka import Producer
    create_topic(cluster, "views")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for p in range(3):
        for i in range(20 * (p + 1)):
            producer.produce("views", value=b"x" * 100, partition=p)
    assert producer.flush(TIMEOUT) == 0
    wait_full_isr(cluster, "views")
    for p in range(3):  # followers have what the leader has: the same bytes on every replica
        cluster.wait_for(lambda: len({size_on_disk(b.data_dir, "views", p) for b in cluster.brokers.values()}) == 1,
                         TIMEOUT, f"views-{p} the same size on every replica")
    return "views"


def test_cluster_describe_matches_zookeeper_metadata_and_log_dirs(cluster, views):
    from kafka.admin import KafkaAdminClient
    report = json.loads(ok("cluster", "--describe", "--json", "--bootstrap-server", cluster.bootstrap))
    zk_id = json.loads(cluster._get("/cluster/id"))["id"]
    assert report["clusterId"] == zk_id and report["controller"] == cluster.controller_id()
    assert [(b["id"], b["port"]) for b in report["brokers"]] == [(i, cluster.broker(i).port) for i in (1, 2, 3)]
    with WireClient(cluster.broker(1).port) as c:
        partitions = [p for t in c.metadata(None).topics for p in t.partitions]
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        sizes = log_dir_sizes(admin)
        described = admin.describe_cluster()
    assert described["cluster_id"] == zk_id and described["controller_id"] == cluster.controller_id()
    assert sorted(b["broker_id"] for b in described["brokers"]) == [1, 2, 3]
    for b in report["brokers"]:
        assert b["leaderPartitions"] == sum(p.leader_id == b["id"] for p in partitions)
        assert b["replicas"] == sum(b["id"] in p.replica_nodes for p in partitions)
        [d] = b["logDirs"]
        assert d["logDir"] == os.path.abspath(cluster.broker(b["id"]).data_dir) and d["error"] is None
        assert d["size"] == sum(sizes[b["id"]].values()) and d["partitions"] == len(sizes[b["id"]])
        assert d["usableBytes"] > 0
        for p in range(3):
            assert sizes[b["id"]][("views", p)] == size_on_disk(cluster.broker(b["id"]).data_dir, "views", p) > 0
    assert report["underReplicatedPartitions"] == report["unavailablePartitions"] == 0
    assert report["offlineBrokers"] == []
    text = ok("cluster", "--describe", "--bootstrap-server", cluster.bootstrap)
    assert f"Cluster ID: {zk_id}" in text and f"Broker {cluster.controller_id()} (controller) at 127.0.0.1:" in text
    assert "Partitions: " in text and "under-replicated: 0, unavailable: 0" in text

    ours = log_dirs_json(ok("log-dirs", "--describe", "--bootstrap-server", cluster.bootstrap,
                            "--topic-list", "views", "--broker-list", "1,3"))
    assert sorted(ours) == [1, 3]
    for b in (1, 3):
        assert ours[b] == {f"views-{p}": (sizes[b][("views", p)], 0, False) for p in range(3)}
    refused = pybroker("log-dirs", "--describe", "--bootstrap-server", cluster.bootstrap, "--broker-list", "1,7")
    assert refused.returncode == 1 and "do not exist from --broker-list: 7" in refused.stderr


def test_describe_producers_on_leader_and_followers(cluster):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    topic = create_topic(cluster, "idem-cluster", partitions=1)
    wait_full_isr(cluster, topic, partitions=1)
    produce_idempotent(cluster.bootstrap, topic, 0, 30)
    leader = cluster.leader(topic, 0)
    in_log = log_producers(cluster.broker(leader).port, topic, 0)
    [(pid, (epoch, last_seq, last_ts))] = in_log.items()
    assert last_seq == 29
    answer = describe_producers(cluster.broker(leader).port, {topic: [0, 1], "no-such-topic": [0]})
    assert answer[(topic, 0)].error_code == 0
    assert [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch,
             s.current_txn_start_offset) for s in answer[(topic, 0)].active_producers] == [
        (pid, epoch, last_seq, last_ts, -1, -1)]
    assert answer[(topic, 1)].error_code == answer[("no-such-topic", 0)].error_code == UNKNOWN_TOPIC_OR_PARTITION
    for follower in {1, 2, 3} - {leader}:  # as Kafka: a replica answers from its own log's producer state
        def copied(follower=follower):
            got = describe_producers(cluster.broker(follower).port, {topic: [0]})[(topic, 0)]
            return got.error_code == 0 and [(s.producer_id, s.last_sequence) for s in got.active_producers] == \
                [(pid, last_seq)]
        cluster.wait_for(copied, 30, f"broker {follower}'s copy of the producer state")
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap) as admin:  # it finds the leader itself
        [state] = admin.describe_producers([TopicPartition(topic, 0)]).values()
    assert [s.producer_id for s in state.active_producers] == [pid]


def test_kafka_cli_reads_the_cluster_views(cluster, views):
    """Kafka 3.8's own kafka-log-dirs, kafka-cluster, kafka-topics and kafka-transactions."""
    theirs = log_dirs_json(kafka_tool("kafka-log-dirs.sh", "--bootstrap-server", cluster.bootstrap, "--describe",
                                      "--topic-list", views).stdout)
    ours = log_dirs_json(ok("log-dirs", "--describe", "--bootstrap-server", cluster.bootstrap, "--topic-list", views))
    assert theirs == ours and sorted(theirs) == [1, 2, 3]
    assert all(len(parts) == 3 and all(size > 0 for size, _, _ in parts.values()) for parts in theirs.values())
    zk_id = json.loads(cluster._get("/cluster/id"))["id"]
    assert f"Cluster ID: {zk_id}" in kafka_tool("kafka-cluster.sh", "cluster-id", "--bootstrap-server",
                                                 cluster.bootstrap).stdout
    assert listed(kafka_tool("kafka-topics.sh", "--bootstrap-server", cluster.bootstrap, "--describe",
                             "--under-replicated-partitions").stdout) == set()
    produce_idempotent(cluster.bootstrap, views, 1, 5)
    pid = next(iter(log_producers(cluster.broker(cluster.leader(views, 1)).port, views, 1)))
    out = kafka_tool("kafka-transactions.sh", "--bootstrap-server", cluster.bootstrap, "describe-producers",
                     "--topic", views, "--partition", "1").stdout
    assert [line.split()[:4] for line in out.splitlines()[1:]] == [[str(pid), "0", "-1", "4"]]


def expected_filters(cluster, min_isr: dict) -> dict:
    """What each filter must list, from ZooKeeper's partition states and live brokers (Kafka's rules)."""
    live = set(cluster.live_brokers())
    out = {f: set() for f in FILTERS}
    for topic, floor in min_isr.items():
        for p in range(3):
            s = cluster.partition_state(topic, p)
            leader, isr = s["leader"], s["isr"]
            replicas = json.loads(cluster._get(f"/brokers/topics/{topic}"))["partitions"][str(p)]
            key = (topic, p)
            if len(isr) < len(replicas):
                out["--under-replicated-partitions"].add(key)
            if leader < 0 or leader not in live:
                out["--unavailable-partitions"].add(key)
            if leader < 0 or len(isr) < floor:
                out["--under-min-isr-partitions"].add(key)
            if len(isr) == floor:
                out["--at-min-isr-partitions"].add(key)
    return out


def check_filters(cluster, min_isr: dict, with_kafka: bool) -> dict:
    """Every filter of ``pybroker topics --describe`` lists what ZooKeeper's state says (waiting,
    bounded, for the brokers' metadata to catch up); Kafka's kafka-topics agrees when installed."""
    bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in cluster.brokers.values() if b.alive())
    expected = expected_filters(cluster, min_isr)
    for flag, want in expected.items():
        cluster.wait_for(lambda: listed(ok("topics", "--describe", "--bootstrap-server", bootstrap, flag)) == want,
                         30, f"topics --describe {flag} to list {sorted(want)}")
        if with_kafka and os.path.exists(os.path.join(KAFKA_BIN, "kafka-topics.sh")):
            out = kafka_tool("kafka-topics.sh", "--bootstrap-server", bootstrap, "--describe", flag).stdout
            assert listed(out) == want, (flag, out)
    return expected


@pytest.mark.slow
def test_partition_filters_follow_stopped_and_killed_brokers(tmp_path, zookeeper):
    """3 brokers, min.insync.replicas=2: ``views`` has 3 replicas per partition, ``single`` one
    (min.insync.replicas=1). Stop broker 3, then kill broker 2: the filters list exactly what
    Kafka's definitions select from ZooKeeper's state, and ``cluster --describe`` counts them."""
    from confluent_kafka.admin import AdminClient, NewTopic
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as cluster:
        create_topic(cluster, "views")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("single", 3, 1, config={"min.insync.replicas": "1"})])["single"].result(TIMEOUT)
        wait_full_isr(cluster, "views")
        min_isr = {"views": 2, "single": 1}
        on = {p: cluster.partition_state("single", p)["isr"][0] for p in range(3)}
        assert sorted(on.values()) == [1, 2, 3]  # one single-replica partition on each broker
        before = check_filters(cluster, min_isr, with_kafka=False)
        assert before["--at-min-isr-partitions"] == {("single", p) for p in range(3)}
        assert not any(before[f] for f in FILTERS[:3])

        # writes keep the high watermark moving past the stopped broker's log end, so a leader never
        # takes it back into the ISR (it re-admits any follower at the HW, fetching or not)
        writer = LoggedProducer(cluster.bootstrap, "views", rate=100).start()
        try:
            writer.wait_acked(50)
            assert cluster.stop(3) == 0
            cluster.wait_for(lambda: 3 not in cluster.live_brokers() and all(
                3 not in cluster.partition_state("views", p)["isr"] for p in range(3)), TIMEOUT, "broker 3 gone")
            writer.wait_acked(50)
            after = check_filters(cluster, min_isr, with_kafka=True)
        finally:
            writer.stop()
        gone = next(p for p, b in on.items() if b == 3)
        assert after["--under-replicated-partitions"] == {("views", p) for p in range(3)}
        assert after["--unavailable-partitions"] == {("single", gone)}
        assert ("single", gone) in after["--under-min-isr-partitions"]
        assert {("views", p) for p in range(3)} <= after["--at-min-isr-partitions"]
        report = json.loads(ok("cluster", "--describe", "--json", "--bootstrap-server", cluster.bootstrap))
        assert [b["id"] for b in report["brokers"]] == [1, 2]
        assert report["offlineBrokers"] == [{"id": 3, "replicas": 4}]
        assert report["underReplicatedPartitions"] == 3 and report["unavailablePartitions"] == 1
        assert "Broker 3: not live; a replica of 4 partitions" in ok(
            "cluster", "--describe", "--bootstrap-server", cluster.bootstrap)

        cluster.kill(2)
        cluster.wait_for(lambda: cluster.live_brokers() == [1] and all(
            cluster.partition_state("views", p)["isr"] == [1] for p in range(3)), TIMEOUT,
            "broker 2's session to expire and the ISRs to shrink to broker 1")
        last = check_filters(cluster, min_isr, with_kafka=True)
        assert {("views", p) for p in range(3)} <= last["--under-min-isr-partitions"]
        assert last["--unavailable-partitions"] == {("single", p) for p, b in on.items() if b != 1}
