"""Partition reassignment on a real cluster (real ZooKeeper, 4 real brokers, real clients).

* A partition of RF 3 moves to a different set of 3 brokers under an idempotent acks=all load:
  nothing acknowledged is lost or duplicated (D1-D5), the new replicas hold the same batches
  (``pybroker verify-replicas`` passes), the removed broker deletes its copy, the leader moves last.
* A throttled move cannot go faster than its rate allows; ``--verify`` removes the throttles.
* ``--cancel`` reverts a move in progress; a controller killed mid-move is replaced by one that
  finishes it (the move is recorded in the topic's znode).
* ``--generate --broker-list`` drains a broker; a broker that joins later gets partitions only by
  reassignment.
* Bad plans (unknown brokers, duplicate replicas, missing partitions) are refused whole, with
  Kafka's error codes from the API and a message naming the problem from the CLI.

The cases of the other tiers: tests/broker/test_reassignment.py.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from pybroker.protocol import REQUESTS
from tests.cluster import Cluster
from tests.kafka_wire import WireClient
from tests.replication_checks import LoggedConsumer, LoggedProducer, check_data
from tests.cluster.test_replication import OVERRIDES, wait_consumed

ALTER, LIST = 45, 46
UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER, INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS = 3, 41, 39, 85
# a 2-second rate window: a throttled move's first burst is about one second's worth of its rate
THROTTLE_OVERRIDES = {**OVERRIDES, "replication.quota.window.num": 2}


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path, 4, zk=zookeeper, overrides=THROTTLE_OVERRIDES) as c:
        yield c


def create(cluster, topic: str, assignment: list) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment)])[topic].result(60)
    for p in range(len(assignment)):
        cluster.wait_for(lambda: len((cluster.partition_state(topic, p) or {}).get("isr", ())) == len(assignment[p]),
                         60, f"{topic}-{p} to have a full ISR")
    return topic


def fill(cluster, topic: str, partition: int, count: int, size: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for _ in range(count):
        p.produce(topic, value=os.urandom(size), partition=partition)
        p.poll(0)
    assert p.flush(60) == 0


def tool(cluster, *args, check: int | None = 0) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "pybroker", *args, "--bootstrap-server", cluster.bootstrap],
                       capture_output=True, text=True, timeout=120)
    if check is not None:
        assert r.returncode == check, f"{args}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def write_plan(tmp_path, moves: dict, name: str = "plan.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]}))
    return str(path)


def assignment(cluster, topic: str) -> dict:
    return {int(p): r for p, r in json.loads(cluster._get(f"/brokers/topics/{topic}"))["partitions"].items()}


def wait_done(cluster, plan: str, timeout: float = 120) -> str:
    def done():
        r = tool(cluster, "reassign-partitions", "--verify", "--reassignment-json-file", plan, check=None)
        return r.returncode == 0 and "in progress" not in r.stdout and r.stdout
    return cluster.wait_for(done, timeout, "the reassignment to finish", interval=0.5)


def hosts(cluster, broker_id: int, topic: str, partition: int) -> bool:
    return os.path.isdir(os.path.join(cluster.broker(broker_id).data_dir, f"{topic}-{partition}"))


def test_move_to_other_brokers_under_load_loses_nothing(cluster, tmp_path):
    topic = create(cluster, "moving", [[1, 2, 3], [2, 3, 1]])
    producer = LoggedProducer(cluster.bootstrap, topic).start()
    consumer = LoggedConsumer(cluster.bootstrap, topic, "g-moving").start()
    try:
        producer.wait_acked(300)
        plan = write_plan(tmp_path, {(topic, 0): [4, 3, 2], (topic, 1): [3, 4, 2]})
        out = tool(cluster, "reassign-partitions", "--execute", "--reassignment-json-file", plan).stdout
        assert "Successfully started partition reassignments for moving-0,moving-1" in out
        assert '"replicas":[1,2,3]' in out  # the rollback plan
        assert "Reassignment of partition moving-0 is completed." in wait_done(cluster, plan)
        producer.wait_acked(len(producer.acked) + 300)
    finally:
        producer.stop()
    assert not producer.errors, f"the producer got final errors: {producer.errors[:3]}"
    assert assignment(cluster, topic) == {0: [4, 3, 2], 1: [3, 4, 2]}
    state = cluster.partition_state(topic, 0)
    assert state["leader"] in (4, 3, 2) and sorted(state["isr"]) == [2, 3, 4]
    cluster.wait_for(lambda: not hosts(cluster, 1, topic, 0) and not hosts(cluster, 1, topic, 1), 30,
                     "broker 1 to delete its removed replicas")
    assert tool(cluster, "reassign-partitions", "--list").stdout.strip() == "No partition reassignments found."
    wait_consumed(consumer, producer)
    consumer.stop()
    check_data(cluster, topic, 2, producer, [consumer])
    r = tool(cluster, "verify-replicas", "--topics-include", topic)
    assert "mismatch" not in r.stdout.lower()


def test_throttled_move_keeps_to_its_rate_and_verify_clears_the_throttle(cluster, tmp_path):
    topic = create(cluster, "throttled", [[1, 2, 3]])
    count, size, rate = 6000, 1000, 1_000_000  # 6 MB at 1 MB/s
    fill(cluster, topic, 0, count, size)
    plan = write_plan(tmp_path, {(topic, 0): [4, 2, 3]})
    began = time.monotonic()
    out = tool(cluster, "reassign-partitions", "--execute", "--reassignment-json-file", plan,
               "--throttle", str(rate)).stdout
    assert f"The inter-broker throttle limit was set to {rate} B/s" in out
    described = describe_configs(cluster, 4, "broker", "4")
    assert described["leader.replication.throttled.rate"] == str(rate)
    assert describe_configs(cluster, 1, "topic", topic)["leader.replication.throttled.replicas"] == "0:1,0:2,0:3"
    assert describe_configs(cluster, 1, "topic", topic)["follower.replication.throttled.replicas"] == "0:4"
    out = wait_done(cluster, plan, timeout=180)
    elapsed = time.monotonic() - began
    # the throttle's lower bound: the copy cannot beat its rate (less a first window's burst)
    floor = (count * size - 2 * rate) / rate
    assert elapsed >= floor * 0.8, f"a {count * size} B move at {rate} B/s took only {elapsed:.1f} s"
    assert "Clearing broker-level throttles on brokers 1,2,3,4" in out
    assert describe_configs(cluster, 4, "broker", "4")["leader.replication.throttled.rate"] == str(2**63 - 1)
    assert describe_configs(cluster, 1, "topic", topic)["leader.replication.throttled.replicas"] == ""
    assert assignment(cluster, topic) == {0: [4, 2, 3]}


def describe_configs(cluster, broker_id: int, kind: str, name: str) -> dict:
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.broker(broker_id).port}"})
    res = ConfigResource(kind, name)
    return {k: e.value for k, e in admin.describe_configs([res])[res].result(30).items()}


def test_cancel_reverts_a_move_in_progress(cluster, tmp_path):
    topic = create(cluster, "cancelled", [[1, 2, 3]])
    fill(cluster, topic, 0, 3000, 1000)
    plan = write_plan(tmp_path, {(topic, 0): [4, 2, 3]})
    tool(cluster, "reassign-partitions", "--execute", "--reassignment-json-file", plan, "--throttle", "100000")
    listed = tool(cluster, "reassign-partitions", "--list").stdout
    assert "cancelled-0: replicas: 4,2,3,1. adding: 4. removing: 1." in listed
    cluster.wait_for(lambda: hosts(cluster, 4, topic, 0), 30, "the adding replica to open its log")
    out = tool(cluster, "reassign-partitions", "--cancel", "--reassignment-json-file", plan).stdout
    assert "Successfully cancelled partition reassignments for: cancelled-0" in out
    assert assignment(cluster, topic) == {0: [1, 2, 3]}
    assert sorted(cluster.partition_state(topic, 0)["isr"]) == [1, 2, 3]
    cluster.wait_for(lambda: not hosts(cluster, 4, topic, 0), 30, "broker 4 to delete the cancelled replica")
    assert tool(cluster, "reassign-partitions", "--list").stdout.strip() == "No partition reassignments found."
    assert "None of the specified partition reassignments are active." in tool(
        cluster, "reassign-partitions", "--cancel", "--reassignment-json-file", plan).stdout


def test_a_new_controller_finishes_a_move_the_old_one_started(cluster, tmp_path):
    """kill -9 of the controller mid-move: the next controller reads the move from the topic's znode
    and finishes it (restarting the old controller first when it is one of the target replicas)."""
    topic = create(cluster, "resumed", [[1, 2, 3]])
    fill(cluster, topic, 0, 4000, 1000)
    controller = cluster.controller_id()
    target = [4, 3, 2] if controller != 4 else [4, 1, 2]
    plan = write_plan(tmp_path, {(topic, 0): target})
    tool(cluster, "reassign-partitions", "--execute", "--reassignment-json-file", plan, "--throttle", "1000000")
    znode = json.loads(cluster._get(f"/brokers/topics/{topic}"))
    assert znode["adding_replicas"] == {"0": [4]}, znode  # 4 MB at 1 MB/s: still moving
    epoch = cluster.controller_epoch()
    cluster.kill(controller)
    if controller in target:
        cluster.restart(controller)
    cluster.wait_for(lambda: (cluster.controller_epoch() or 0) > epoch, 60, "a new controller")
    cluster.wait_for(lambda: assignment(cluster, topic) == {0: target}, 120, "the new controller to finish the move")
    znode = json.loads(cluster._get(f"/brokers/topics/{topic}"))
    assert not znode["adding_replicas"] and not znode["removing_replicas"]
    cluster.wait_for(lambda: sorted(cluster.partition_state(topic, 0)["isr"]) == sorted(target), 60, "the target ISR")
    if controller not in target:
        cluster.restart(controller)
    wait_done(cluster, plan)
    for removed in {1, 2, 3} - set(target):  # one may have been down when the move finished
        cluster.wait_for(lambda: not hosts(cluster, removed, topic, 0), 30, f"broker {removed} to drop its copy")


def test_generate_drains_a_broker_and_a_new_broker_gets_partitions_only_by_reassignment(cluster, tmp_path):
    assert cluster.stop(4) == 0
    cluster.wait_for(lambda: 4 not in cluster.live_brokers(), 30, "broker 4 to leave")
    topic = create(cluster, "spread", [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    cluster.restart(4)  # joins: no partition moves to it by itself
    cluster.wait_for(lambda: 4 in cluster.live_brokers(), 30, "broker 4 back")
    assert all(4 not in r for r in assignment(cluster, topic).values())
    assert not any(hosts(cluster, 4, topic, p) for p in range(3))
    moves = tmp_path / "topics.json"
    moves.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))

    def generate(brokers: str) -> str:
        out = tool(cluster, "reassign-partitions", "--generate", "--topics-to-move-json-file", str(moves),
                   "--broker-list", brokers).stdout
        assert out.startswith("Current partition replica assignment\n")
        proposed = out.split("Proposed partition reassignment configuration\n")[1].strip()
        path = tmp_path / f"plan-{brokers}.json"
        path.write_text(proposed)
        return str(path)
    plan = generate("1,2,3,4")  # spread onto the new broker
    tool(cluster, "reassign-partitions", "--execute", "--reassignment-json-file", plan)
    wait_done(cluster, plan)
    assert any(4 in r for r in assignment(cluster, topic).values())
    plan = generate("2,3,4")  # drain broker 1
    tool(cluster, "reassign-partitions", "--execute", "--reassignment-json-file", plan)
    wait_done(cluster, plan)
    assert all(1 not in r and len(set(r)) == 3 for r in assignment(cluster, topic).values())
    cluster.wait_for(lambda: not any(hosts(cluster, 1, topic, p) for p in range(3)), 30, "broker 1 drained")


def test_bad_plans_are_refused_whole_with_kafkas_errors(cluster, tmp_path):
    topic = create(cluster, "refused", [[1, 2, 3], [2, 3, 1]])
    before = assignment(cluster, topic)
    cases = {
        "unknown broker": ({(topic, 0): [1, 2, 9]}, "unknown broker ids: 9"),
        "duplicate replicas": ({(topic, 0): [1, 2, 2]}, "has duplicates"),
        "missing partition": ({(topic, 0): [4, 2, 3], (topic, 7): [1, 2, 3]}, "do not exist: refused-7"),
        "missing topic": ({("no-such-topic", 0): [1, 2, 3]}, "do not exist: no-such-topic-0"),
    }
    for name, (moves, message) in cases.items():
        plan = write_plan(tmp_path, moves, f"{name.replace(' ', '-')}.json")
        r = tool(cluster, "reassign-partitions", "--execute", "--reassignment-json-file", plan, check=1)
        assert message in r.stderr, f"{name}: {r.stderr}"
    empty = tmp_path / "empty.json"
    empty.write_text('{"version":1,"partitions":[]}')
    assert "list is empty" in tool(cluster, "reassign-partitions", "--execute", "--reassignment-json-file",
                                   str(empty), check=1).stderr
    assert assignment(cluster, topic) == before
    assert tool(cluster, "reassign-partitions", "--list").stdout.strip() == "No partition reassignments found."

    api = REQUESTS[ALTER]

    def alter(port, moves):
        topics = {}
        for (t, p), r in moves.items():
            topics.setdefault(t, []).append(api.ReassignablePartition(partition_index=p, replicas=r))
        with WireClient(port) as w:
            return w.request(api(timeout_ms=30000, topics=[api.ReassignableTopic(name=t, partitions=ps)
                                                            for t, ps in topics.items()]), 0)
    controller = cluster.controller_id()
    other = next(b for b in (1, 2, 3, 4) if b != controller)
    assert alter(cluster.broker(other).port, {(topic, 0): [4, 2, 3]}).error_code == NOT_CONTROLLER
    resp = alter(cluster.broker(controller).port, {
        (topic, 0): [1, 2, 9], (topic, 1): [1, 1, 2], ("refused", 5): [1, 2, 3], ("nothing", 0): None})
    codes = {(t.name, p.partition_index): p.error_code for t in resp.responses for p in t.partitions}
    assert codes == {(topic, 0): INVALID_REPLICA_ASSIGNMENT, (topic, 1): INVALID_REPLICA_ASSIGNMENT,
                     (topic, 5): UNKNOWN_TOPIC_OR_PARTITION, ("nothing", 0): UNKNOWN_TOPIC_OR_PARTITION}
    resp = alter(cluster.broker(controller).port, {(topic, 0): None, (topic, 1): []})
    codes = {(t.name, p.partition_index): p.error_code for t in resp.responses for p in t.partitions}
    assert codes == {(topic, 0): NO_REASSIGNMENT_IN_PROGRESS, (topic, 1): INVALID_REPLICA_ASSIGNMENT}
    assert assignment(cluster, topic) == before
    with WireClient(cluster.broker(controller).port) as w:  # the connection and the broker still work
        listed = w.request(REQUESTS[LIST](timeout_ms=30000, topics=None), 0)
    assert listed.error_code == 0 and listed.topics == []


KAFKA_BIN = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "pybroker-kafka", "kafka_2.13-3.8.0", "bin")


@pytest.mark.skipif(not os.path.isdir(KAFKA_BIN), reason="Apache Kafka's tools are not built here")
def test_kafkas_own_reassign_tool_drives_a_throttled_move(cluster, tmp_path):
    """kafka-reassign-partitions.sh of Kafka 3.8 against pybroker: generate, execute with a throttle,
    list, verify (which clears Kafka's throttle keys on every broker)."""
    topic = create(cluster, "kafka-tool", [[1, 2, 3], [2, 3, 1]])
    fill(cluster, topic, 0, 500, 1000)
    moves = tmp_path / "topics.json"
    moves.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))

    def kafka(*args):
        r = subprocess.run([os.path.join(KAFKA_BIN, "kafka-reassign-partitions.sh"), "--bootstrap-server",
                            cluster.bootstrap, *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{args}: {r.stdout}\n{r.stderr[-3000:]}"
        return r.stdout
    proposed = kafka("--generate", "--topics-to-move-json-file", str(moves), "--broker-list", "2,3,4").split(
        "Proposed partition reassignment configuration\n")[1].strip()
    plan = tmp_path / "plan.json"
    plan.write_text(proposed)
    target = {p["partition"]: p["replicas"] for p in json.loads(proposed)["partitions"]}
    assert "Successfully started partition reassignments" in kafka(
        "--execute", "--reassignment-json-file", str(plan), "--throttle", "50000000")
    cluster.wait_for(lambda: "is completed" in (out := kafka("--verify", "--reassignment-json-file", str(plan)))
                     and "in progress" not in out and out, 120, "Kafka's tool to see the moves done", interval=0.5)
    assert assignment(cluster, topic) == target
    assert describe_configs(cluster, 2, "broker", "2")["follower.replication.throttled.rate"] == str(2**63 - 1)


def broker_id(w) -> int:
    return w.metadata().brokers[0].node_id
