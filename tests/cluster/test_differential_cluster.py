"""The same request sequences sent to three Kafka 3.8 brokers (ZooKeeper mode) and to three pybroker
brokers, each set on its own chroot of the test ZooKeeper: every client-facing API, and the answers
that only a cluster gives (a broker that does not host the partition, a follower, not the coordinator),
compared field by field (tests/differential.py). Skipped where Kafka 3.8 is not built.
"""
import uuid

import pytest

from tests.cluster import Cluster
from tests.differential import (COMMON_SETTINGS, KAFKA_HOME, Env, Target, check, kafka_available, run_case,
                                start_kafka_zk, wait)
from tests.differential_cases import CLUSTER

pytestmark = pytest.mark.skipif(not kafka_available(), reason=f"Apache Kafka 3.8 is not built at {KAFKA_HOME}")

SETTINGS = {**COMMON_SETTINGS, "offsets.topic.replication.factor": 3, "transaction.state.log.replication.factor": 3,
            "transaction.state.log.min.isr": 2, "zookeeper.session.timeout.ms": 6000,
            "replica.lag.time.max.ms": 3000}
NODES = [1, 2, 3]


def formed(target: Target) -> None:
    """Every broker of ``target`` sees all of them, and a controller."""
    env = Env(target)
    try:
        wait(lambda: all(len(m.brokers) == len(NODES) and m.controller_id in NODES
                         for m in (env.metadata([], node) for node in NODES)), f"{target.name} formed", 60)
    finally:
        env.close()


@pytest.fixture(scope="module")
def sides(tmp_path_factory, zookeeper):
    from pybroker.controller.zk import ensure_chroot
    chroot = f"/kafka-differential-{uuid.uuid4().hex[:8]}"
    base = tmp_path_factory.mktemp("differential-cluster")
    cluster = Cluster(base, len(NODES), zk=zookeeper, overrides=SETTINGS)
    kafkas = []
    try:
        ensure_chroot(zookeeper.connect, chroot, 30)
        kafkas = start_kafka_zk(str(base / "kafka"), zookeeper.connect + chroot, NODES, SETTINGS)
        kafka = Target("kafka", {n: k.port for n, k in zip(NODES, kafkas)})
        pybroker = Target("pybroker", {n: cluster.broker(n).port for n in NODES})
        formed(kafka)
        formed(pybroker)
        yield kafka, pybroker
    finally:
        for k in kafkas:
            k.kill()
        cluster.close()


@pytest.mark.parametrize("case", CLUSTER, ids=lambda c: c.name)
def test_same_answers_as_kafka_cluster(sides, case):
    check(run_case(case, *sides), "cluster")
