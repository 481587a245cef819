"""Broker-to-broker links over secured listeners: a 3-broker cluster (real ZooKeeper) whose only
listener is SASL_PLAINTEXT (sessions of 2 s: links re-authenticate), or SSL with client
certificates required, replicates an acks=all
workload with RF 3 (min.insync.replicas=3: every acknowledgement needs both followers' fetches) and
keeps a full ISR; the controller's requests and a restarted broker's fetchers reconnect securely.

The cases of the other tiers: tests/unit/test_cluster_security.py.
"""
import time
import uuid

import pytest

import tests.cluster as cluster_harness
from pybroker.client import AdminClient, Consumer, NewTopic, Producer
from tests.cluster import Cluster, free_ports
from tests.secure_brokers import make_certs

pytestmark = pytest.mark.skipif(
    not __import__("importlib").util.find_spec("pybroker.security.tls") or
    not __import__("importlib").util.find_spec("pybroker.api.sasl_authenticate"),
    reason="the broker has no TLS or SASL listeners")

PARTITIONS, RECORDS = 3, 600
SESSION_S = 2.0  # SASL session lifetime on the SASL cluster
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
              'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')
COMMON = {"default.replication.factor": 3, "offsets.topic.num.partitions": 3, "min.insync.replicas": 3,
          "zookeeper.session.timeout.ms": 6000, "replica.lag.time.max.ms": 3000}


def sasl_cluster(tmp_path, zookeeper):
    ports = free_ports(3)
    overrides = {**COMMON, "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                 "connections.max.reauth.ms": int(SESSION_S * 1000)}  # links re-authenticate during the test
    listeners = {i: {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{ports[i - 1]}"} for i in (1, 2, 3)}
    client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
              "sasl.password": "alice-secret"}
    return Cluster(tmp_path, 3, zk=zookeeper, overrides=overrides, broker_overrides=listeners), client


def ssl_cluster(tmp_path, zookeeper, monkeypatch):
    certs = make_certs(tmp_path / "certs")
    ports = free_ports(3)
    overrides = {**COMMON, "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.broker,
                 "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca, "ssl.client.auth": "required"}
    listeners = {i: {"listeners": f"SSL://127.0.0.1:{ports[i - 1]}"} for i in (1, 2, 3)}
    client = {"security.protocol": "SSL", "ssl.ca.location": certs.ca,
              "ssl.certificate.location": certs.client_cert, "ssl.key.location": certs.client_key}

    def answers_over_tls(port, timeout=10.0, host="127.0.0.1"):
        from pybroker.client import config as client_config
        from pybroker.tools.wire import Connection
        security = client_config.parse({"bootstrap.servers": f"{host}:{port}", **client}, "admin").security
        Connection(host, port, timeout, security).close()  # TLS handshake + ApiVersions

    monkeypatch.setattr(cluster_harness, "answers_requests", answers_over_tls)  # the harness probes in plaintext
    return Cluster(tmp_path, 3, zk=zookeeper, overrides=overrides, broker_overrides=listeners), client


def wait_full_isr(cluster, topic, timeout=90):
    for p in range(PARTITIONS):
        cluster.wait_for(lambda: len((cluster.partition_state(topic, p) or {}).get("isr", ())) == 3,
                         timeout, f"{topic}-{p} to have a full ISR")


def produce_all(conf, topic, start, count):
    producer = Producer({**conf, "acks": "all", "linger.ms": 5})
    errors = []
    for i in range(start, start + count):
        producer.produce(topic, value=b"%d" % i, key=b"%d" % i,
                         on_delivery=lambda err, md: err is not None and errors.append(err))
    left = producer.flush(60)
    producer.close()
    assert left == 0 and errors == [], (left, errors[:3])


def consume_all(conf, topic, count):
    seen = set()
    with Consumer({**conf, "group.id": f"check-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(seen) < count and time.monotonic() < deadline:
            seen.update(r.value for r in c.poll(timeout_ms=500))
    return seen


def keep_producing(cluster, conf, topic, start, seconds) -> int:
    """acks=all for ``seconds`` (several session lifetimes): the links must re-authenticate in
    place, so no broker logs a failed fetch or controller request meanwhile. Returns the count."""
    marks = {i: len(cluster.broker(i).stderr()) for i in (1, 2, 3)}
    producer = Producer({**conf, "acks": "all", "linger.ms": 5})
    errors, n = [], start
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i in range(n, n + 20):
            producer.produce(topic, value=b"%d" % i, on_delivery=lambda err, md: err is not None and errors.append(err))
        assert producer.flush(30) == 0
        n += 20
    producer.close()
    assert errors == []
    logged = "".join(cluster.broker(i).stderr()[marks[i]:] for i in (1, 2, 3))
    assert "failed" not in logged and "lost" not in logged, logged[-2000:]
    return n - start


def replicate_and_check(cluster, conf, restart: bool):
    conf = {"bootstrap.servers": cluster.bootstrap, **conf}
    topic = f"secure-{uuid.uuid4().hex[:6]}"
    with AdminClient(conf) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)])
    cluster.wait_for(lambda: all((cluster.partition_state(topic, p) or {}).get("leader", -1) >= 0
                                 for p in range(PARTITIONS)), 60, "leaders")
    produce_all(conf, topic, 0, RECORDS)
    wait_full_isr(cluster, topic)
    if restart:  # a follower comes back: the controller tells it, its fetchers log in again
        victim = next(b for b in (1, 2, 3) if b != cluster.controller_id())
        cluster.stop(victim)
        cluster.restart(victim)
        wait_full_isr(cluster, topic)
        produce_all(conf, topic, RECORDS, RECORDS)
        total = 2 * RECORDS + keep_producing(cluster, conf, topic, 2 * RECORDS, SESSION_S * 3)
    else:
        total = RECORDS
    assert consume_all(conf, topic, total) == {b"%d" % i for i in range(total)}
    wait_full_isr(cluster, topic)


@pytest.mark.slow
def test_sasl_plaintext_cluster_replicates_with_a_full_isr(tmp_path, zookeeper):
    cluster, client = sasl_cluster(tmp_path, zookeeper)
    with cluster:
        replicate_and_check(cluster, client, restart=True)


def test_ssl_cluster_with_client_certificates_replicates_with_a_full_isr(tmp_path, zookeeper, monkeypatch):
    cluster, client = ssl_cluster(tmp_path, zookeeper, monkeypatch)
    with cluster:
        replicate_and_check(cluster, client, restart=False)


