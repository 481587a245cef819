"""Leader election on a single node: nothing to elect, as a one-broker cluster
(operating a real cluster: tests/cluster/test_cluster_ops.py)."""
import subprocess
import sys



def test_leader_election_on_a_single_node_needs_none(broker):
    """No ZooKeeper: the broker is its own controller and already leads everything (84); an unknown
    partition is 3. The CLI says so and exits 1 only for the unknown one."""
    from tests.kafka_wire import WireClient
    with WireClient(broker.port) as w:
        w.create_topic("solo", partitions=1)

    def election(*args):
        return subprocess.run([sys.executable, "-m", "pybroker", "leader-election", "--bootstrap-server",
                               f"127.0.0.1:{broker.port}", "--election-type", "preferred", *args],
                              capture_output=True, text=True, timeout=60)
    r = election("--topic", "solo", "--partition", "0")
    assert r.returncode == 0 and "Valid replica already elected for partitions solo-0" in r.stdout, r
    r = election("--topic", "solo", "--partition", "5")
    assert r.returncode == 1 and "solo-5: UNKNOWN_TOPIC_OR_PARTITION" in r.stdout, r
    assert election("--all-topic-partitions").stdout.startswith("No partitions needed a leader election")

