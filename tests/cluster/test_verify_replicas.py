"""``pybroker verify-replicas`` and the debugging-consumer Fetch (replica id -2) it relies on: a single
broker, and a real 3-broker cluster (real ZooKeeper, real ``pybroker serve`` processes) where one
follower's copy of a committed batch is altered on disk.

The cases of the other tiers: tests/broker/test_verify_replicas.py, tests/unit/test_verify_replicas.py.
"""
import glob
import os
import subprocess
import sys

import pytest

from pybroker import core
from pybroker.protocol import REQUESTS
from pybroker.records import build_batch
from tests.kafka_wire import WireClient
from tests.replication_checks import LoggedProducer, check_replicas, high_watermark
from tests.cluster.test_replication import create_topic, wait_full_isr

NOT_LEADER_OR_FOLLOWER = 6


def verify(bootstrap: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybroker", "verify-replicas", "--bootstrap-server", bootstrap,
                           "--command-timeout-ms", "20000", *args], capture_output=True, text=True, timeout=120)


def fetch(client: WireClient, topic: str, partition: int, offset: int, replica_id: int, version: int = 11):
    """One partition's Fetch response, as a consumer (-1) or a debugging consumer (-2)."""
    req = REQUESTS[1]
    request = req(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                  session_id=0, session_epoch=-1, topics=[req.FetchTopic(topic=topic, partitions=[
                      req.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                         log_start_offset=-1, partition_max_bytes=1 << 20)])],
                  forgotten_topics_data=[], rack_id="")
    return client.request(request, version).responses[0].partitions[0]


def produce_batches(client: WireClient, topic: str, partition: int, batches: int, per_batch: int = 5) -> None:
    for i in range(batches):
        values = [f"value-{i}-{j}".encode() for j in range(per_batch)]
        assert client.produce(topic, partition, bytes(build_batch(values)), acks=-1).error_code == 0


# ---- a single broker


# ---- a cluster

@pytest.fixture(scope="module")
def cluster(shared_cluster):
    """The session's shared three-broker cluster (tests/conftest.py); this module's topics are its own."""
    return shared_cluster


def leader_and_followers(cluster, topic: str, partition: int = 0) -> tuple[int, list]:
    state = cluster.wait_for(lambda: (s := cluster.partition_state(topic, partition)) and s["leader"] > 0 and s,
                             30, f"a leader of {topic}-{partition}")
    return state["leader"], [b for b in (1, 2, 3) if b != state["leader"]]


def test_replicas_produced_by_confluent_kafka_agree(cluster):
    """(a) RF 3, acks=all data from librdkafka: one pass exits 0 with a lag line; a timed run under a
    live load keeps verifying and reports each interval."""
    from confluent_kafka import Producer
    topic = create_topic(cluster, "agree")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(3000):
        producer.produce(topic, key=str(i).encode(), value=f"record-{i}".encode())
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    check_replicas(cluster, topic, 3)  # the followers have caught up
    out = verify(cluster.bootstrap, "--topics-include", topic)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "max lag is 0 for partition agree-" in out.stdout and "among 3 partitions" in out.stdout, out.stdout
    assert "all replicas agree below the high watermark (3 partitions)" in out.stdout

    load = LoggedProducer(cluster.bootstrap, topic).start()
    try:
        load.wait_acked(100)
        out = verify(cluster.bootstrap, "--broker-list", cluster.bootstrap, "--topics-include", "agr.*",
                     "--time-limit-ms", "3000", "--report-interval-ms", "1000", "--max-wait-ms", "200")
    finally:
        load.stop()
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("max lag is") >= 3, out.stdout  # one per interval, and the last
    assert "all replicas agree" in out.stdout


def test_debugging_fetch_reads_any_replica_up_to_its_log_end(cluster):
    """(c) a follower answers replica id -2 (with its own HW) but refuses a consumer (-1) below Fetch v11
    (from v11 it serves consumers up to its HW, KIP-392); the leader serves -2 beyond its HW, up to its log
    end, while consumers stop at the HW."""
    topic = create_topic(cluster, "debug-fetch", partitions=1)
    leader, followers = leader_and_followers(cluster, topic)
    with WireClient(cluster.broker(leader).port, timeout=30) as c:
        produce_batches(c, topic, 0, 3)
    wait_full_isr(cluster, topic, partitions=1)
    follower = followers[0]
    with WireClient(cluster.broker(follower).port, timeout=30) as c:
        assert fetch(c, topic, 0, 0, -1, version=10).error_code == NOT_LEADER_OR_FOLLOWER
        debug = cluster.wait_for(lambda: (r := fetch(c, topic, 0, 0, -2)).error_code == 0
                                 and r.high_watermark == 15 and r, 30, "the follower's HW to reach 15")
        assert [b.base_offset for b in batches(debug.records)] == [0, 5, 10]
        assert fetch(c, topic, 0, 15, -2).records in (None, b"")  # at its log end: nothing, no error
        assert fetch(c, topic, 0, 16, -2).error_code == 1  # OFFSET_OUT_OF_RANGE past it

    for f in followers:  # no follower fetches: the leader's log end moves ahead of its HW
        cluster.pause(f)
    try:
        with WireClient(cluster.broker(leader).port, timeout=30) as c:
            assert c.produce(topic, 0, bytes(build_batch([b"beyond-hw"])), acks=1).error_code == 0
            consumer = fetch(c, topic, 0, 15, -1)
            assert consumer.error_code == 0 and consumer.high_watermark == 15 and not consumer.records
            debug = fetch(c, topic, 0, 15, -2)
            assert debug.error_code == 0 and debug.high_watermark == 15
            assert [b.base_offset for b in batches(debug.records)] == [15]
    finally:
        for f in followers:
            cluster.resume(f)
    wait_full_isr(cluster, topic, partitions=1)


def batches(records) -> list:
    data, pos, out = bytes(records or b""), 0, []
    while pos + 61 <= len(data):
        b = core.batch.parse_header(data, pos)
        out.append(b)
        pos += b.size
    return out


def alter_batch(log_dir: str, topic: str, partition: int, base_offset: int) -> None:
    """Change one value byte of the batch at ``base_offset`` and give it a valid CRC again, so that
    the replica loads and serves it as a healthy batch that differs from the others'."""
    for path in sorted(glob.glob(os.path.join(log_dir, f"{topic}-{partition}", "*.log"))):
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            pos = 0
            while pos + 61 <= len(data):
                b = core.batch.parse_header(data, pos)
                if b.base_offset == base_offset:
                    batch = data[pos:pos + b.size]
                    at = batch.index(b"value-")
                    batch[at] = ord("V")
                    batch[17:21] = core.crc.crc32c(bytes(batch[21:])).to_bytes(4, "big")
                    f.seek(pos)
                    f.write(batch)
                    return
                pos += b.size
    raise AssertionError(f"no batch at offset {base_offset} in {log_dir}")


def test_an_altered_follower_batch_is_reported(cluster):
    """(b) a stopped follower is unreadable (exit 1, named); after one of its committed batches is
    rewritten on disk (valid CRC, different bytes) and it is back in the ISR, the tool names the
    partition, the offset and the replica, and exits 1."""
    topic = create_topic(cluster, "altered", partitions=2)
    leader, followers = leader_and_followers(cluster, topic)
    with WireClient(cluster.broker(leader).port, timeout=30) as c:
        produce_batches(c, topic, 0, 10)
    check_replicas(cluster, topic, 2)
    victim = followers[-1]
    assert cluster.stop(victim) == 0

    down = verify(cluster.bootstrap, "--topics-include", "altered")
    assert down.returncode == 1, down.stdout + down.stderr
    assert f"Partition {topic}-0: replica {victim} could not be read" in down.stdout, down.stdout

    alter_batch(cluster.broker(victim).data_dir, topic, 0, 20)
    cluster.restart(victim)
    wait_full_isr(cluster, topic, partitions=2)
    assert high_watermark(cluster, topic, 0) == 50
    out = cluster.wait_for(lambda: (o := verify(cluster.bootstrap, "--topics-include", "alt.*d")).returncode == 1
                           and "crc" in o.stdout and o, 60, "the mismatch to be reported")
    lines = [line for line in out.stdout.splitlines() if "crc" in line]
    assert len(lines) == 1, out.stdout
    assert lines[0].startswith(f"Partition {topic}-0: replica {victim}'s batch at offset 20 has crc "), lines
    assert f"while replica {leader}'s has crc" in lines[0]
    assert "FAILED: 1 mismatch(es), 0 unreadable" in out.stdout
    assert "among 2 partitions" in out.stdout


# ---- the comparison, on hand-made answers


