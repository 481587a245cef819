"""pybroker's clients over TLS and SASL, against Apache Kafka 3.8 (the oracle) and against pybroker,
with certificates made in the test. Each broker serves the whole module: PLAINTEXT, SSL (client
certificates required), SASL_PLAINTEXT and SASL_SSL (PLAIN and SCRAM users; SASL_SSL sessions
expire after 3 s, so clients must re-authenticate).

The cases of the other tiers: tests/unit/test_client_security.py.
"""
import asyncio
import logging
import time
import uuid

import pytest

from pybroker.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from pybroker.client import config as client_config
from pybroker.client.connection import BrokerConnection
from pybroker.client.errors import AuthenticationError, ConfigError, KafkaError
from pybroker.protocol import REQUESTS
from tests.secure_brokers import (KEY_PASSWORD, kafka_available, make_certs, start_secure_kafka,
                                  start_secure_pybroker, stop)

METADATA = 3


def run(coro, timeout=60):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module", params=["kafka", "pybroker"])
def target(request, tmp_path_factory, certs):
    """A secured broker: Apache Kafka 3.8, then pybroker."""
    if request.param == "kafka":
        if not kafka_available():
            pytest.skip("Apache Kafka 3.8 is not built here (~/.cache/pybroker-kafka, see "
                        "../shared/tools/build-kafka.sh)")
        proc, k = start_secure_kafka(tmp_path_factory.mktemp("kafka"), certs)
        try:
            yield k
        finally:
            stop(proc)
    else:
        broker, k = start_secure_pybroker(tmp_path_factory.mktemp("pybroker"), certs)
        try:
            yield k
        finally:
            broker.close()


def settings(k, case: str) -> dict:
    """Client settings for one way in: listener, protocol, mechanism and credentials."""
    c = k.certs
    tls = {"ssl.ca.location": c.ca}
    return {
        "ssl-client-cert": {"bootstrap.servers": k.ssl, "security.protocol": "SSL", **tls,
                            "ssl.certificate.location": c.client_cert, "ssl.key.location": c.client_key},
        "ssl-encrypted-key": {"bootstrap.servers": k.ssl, "security.protocol": "SSL", **tls,
                              "ssl.certificate.location": c.client_cert,
                              "ssl.key.location": c.client_key_encrypted, "ssl.key.password": KEY_PASSWORD},
        "sasl-plain": {"bootstrap.servers": k.sasl_plaintext, "security.protocol": "SASL_PLAINTEXT",
                       "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"},
        "sasl-scram-512": {"bootstrap.servers": k.sasl_plaintext, "security.protocol": "SASL_PLAINTEXT",
                           "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bob",
                           "sasl.password": "bob-secret"},
        "sasl-ssl-scram-256": {"bootstrap.servers": k.sasl_ssl, "security.protocol": "SASL_SSL", **tls,
                               "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                               "sasl.password": "alice-secret"},
        "sasl-ssl-plain": {"bootstrap.servers": k.sasl_ssl, "security.protocol": "sasl_ssl", **tls,
                           "sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": "bob-secret"},
    }[case]


def produce_and_consume(conf: dict, topic: str, n: int = 50) -> list:
    with AdminClient(conf) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    producer = Producer({**conf, "linger.ms": 2})
    errors = []
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i, key=b"k%d" % i,
                         on_delivery=lambda err, md: err is not None and errors.append(err))
    assert producer.flush(30) == 0
    producer.close()
    assert errors == []
    seen = []
    with Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(seen) < n and time.monotonic() < deadline:
            seen += [r.value for r in consumer.poll(timeout_ms=500)]
        consumer.commit()
        committed = consumer.committed([tp for tp in consumer.assignment()])
    assert sum(o.offset for o in committed.values() if o is not None) == n
    return seen


# ---- against each broker -----------------------------------------------------------------------

@pytest.mark.parametrize("case", ["ssl-client-cert", "ssl-encrypted-key", "sasl-plain", "sasl-scram-512",
                                  "sasl-ssl-scram-256", "sasl-ssl-plain"])
def test_produce_consume_and_group_over_each_protocol(target, case):
    topic = f"sec-{case}-{uuid.uuid4().hex[:6]}"
    seen = produce_and_consume(settings(target, case), topic)
    assert sorted(seen) == sorted(b"v%d" % i for i in range(50))


@pytest.mark.parametrize("case", ["sasl-plain", "sasl-ssl-scram-256", "sasl-scram-512"])
def test_wrong_password_fails_fast_with_the_brokers_message(target, case):
    conf = {**settings(target, case), "sasl.password": "not-the-password"}
    start = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        with AdminClient(conf) as admin:
            admin.list_topics()
    assert info.value.code == 58 and info.value.name == "SASL_AUTHENTICATION_FAILED"
    assert "Authentication failed" in info.value.message and "not-the-password" not in str(info.value)
    assert not info.value.retriable
    # the producer reports it to each record instead of waiting out max.block.ms
    producer = Producer({**conf, "linger.ms": 0})
    errors = []
    producer.produce("anything", value=b"x", on_delivery=lambda err, md: errors.append(err))
    producer.flush(30)
    producer.close(5)
    assert len(errors) == 1 and isinstance(errors[0], AuthenticationError), errors
    # and the consumer raises it from poll, in a group or not
    for join in (True, False):
        with Consumer({**conf, "group.id": "never"}) as consumer:
            if join:
                consumer.subscribe(["anything"])
            else:
                consumer.assign([TopicPartition("anything", 0)])
            with pytest.raises(AuthenticationError):
                for _ in range(20):
                    consumer.poll(timeout_ms=500)
    assert time.monotonic() - start < 30


def test_unknown_user_and_disabled_mechanism(target):
    conf = {**settings(target, "sasl-scram-512"), "sasl.username": "mallory"}
    with pytest.raises(AuthenticationError, match="mallory"):
        with AdminClient(conf) as admin:
            admin.list_topics()
    conf = {**settings(target, "sasl-scram-512"), "sasl.mechanisms": "SCRAM-SHA-256"}
    with pytest.raises(AuthenticationError, match=r"does not enable SASL mechanism SCRAM-SHA-256 \(enabled: "
                                                  r"PLAIN, SCRAM-SHA-512\)") as info:
        with AdminClient(conf) as admin:
            admin.list_topics()
    assert info.value.code == 33
    conf = {**settings(target, "sasl-ssl-plain"), "security.protocol": "SASL_PLAINTEXT",
            "bootstrap.servers": target.plaintext}  # a PLAINTEXT listener offers no SASL at all
    with pytest.raises(AuthenticationError):
        with AdminClient({**conf, "socket.connection.setup.timeout.ms": 5000}) as admin:
            admin.list_topics()


def test_tls_rejects_an_unknown_ca_and_a_missing_client_certificate(target):
    conf = {**settings(target, "sasl-ssl-plain"), "ssl.ca.location": target.certs.rogue_ca}
    with pytest.raises(AuthenticationError, match="certificate") as info:
        with AdminClient(conf) as admin:
            admin.list_topics()
    assert info.value.name == "SSL_HANDSHAKE_FAILED"
    # no client certificate on a listener that requires one: refused, within the timeouts
    conf = {"bootstrap.servers": target.ssl, "security.protocol": "SSL", "ssl.ca.location": target.certs.ca,
            "default.api.timeout.ms": 5000, "request.timeout.ms": 2000}
    start = time.monotonic()
    with pytest.raises(KafkaError):
        with AdminClient(conf) as admin:
            admin.list_topics()
    assert time.monotonic() - start < 20
    # hostname checks off still verifies the chain; verification off accepts any certificate
    conf = {**settings(target, "sasl-ssl-plain"), "ssl.endpoint.identification.algorithm": "none"}
    with AdminClient(conf) as admin:
        assert admin.list_topics() is not None
    conf = {**settings(target, "sasl-ssl-plain"), "ssl.ca.location": target.certs.rogue_ca,
            "enable.ssl.certificate.verification": False}
    with AdminClient(conf) as admin:
        assert admin.list_topics() is not None


def test_plaintext_client_on_a_tls_listener_fails_with_a_hint(target):
    conf = {"bootstrap.servers": target.sasl_ssl, "default.api.timeout.ms": 3000, "request.timeout.ms": 1500,
            "socket.connection.setup.timeout.ms": 1500}
    start = time.monotonic()
    with pytest.raises(KafkaError, match="security.protocol"):
        with AdminClient(conf) as admin:
            admin.list_topics()
    assert time.monotonic() - start < 20


def test_connection_reauthenticates_in_place_before_the_session_expires(target):
    """Kafka closes a SASL_SSL connection whose 3 s session ran out; ours re-authenticates on the
    same connection (KIP-368) while requests keep flowing, pipelined, across several lifetimes."""
    cfg = client_config.parse(settings(target, "sasl-ssl-scram-256"), "admin")

    async def main():
        conn = await BrokerConnection.open(*cfg.bootstrap[0], security=cfg.security)
        try:
            assert conn.session_lifetime_ms == target.reauth_ms
            api = REQUESTS[METADATA]
            deadline = time.monotonic() + 30
            answered = 0
            while conn.reauthentications < 3 and time.monotonic() < deadline:
                replies = await asyncio.gather(*[conn.request(api(topics=None, allow_auto_topic_creation=False), 4)
                                                 for _ in range(4)])
                answered += len(replies)
            assert conn.reauthentications >= 3 and not conn.closed, (conn.reauthentications, answered)
        finally:
            await conn.close()
    run(main())


def test_consumer_keeps_consuming_across_session_lifetimes(target):
    conf = settings(target, "sasl-ssl-scram-256")
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    with AdminClient(conf) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    producer = Producer({**conf, "linger.ms": 0})
    got = []
    with Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([topic])
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < 3 * target.reauth_ms / 1000 and time.monotonic() - start < 60:
            producer.produce(topic, value=b"%d" % sent)
            sent += 1
            producer.flush(10)
            got += [r.value for r in consumer.poll(timeout_ms=200)]
        deadline = time.monotonic() + 20
        while len(got) < sent and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout_ms=200)]
    producer.close()
    assert got == [b"%d" % i for i in range(sent)]


def test_passwords_never_reach_reprs_or_logs(target, caplog):
    conf = {**settings(target, "ssl-encrypted-key"), "sasl.password": "unused-secret-value"}
    cfg = client_config.parse({**settings(target, "sasl-ssl-plain"), "ssl.key.password": KEY_PASSWORD}, "admin")
    for text in (repr(cfg), repr(cfg.security), str(cfg.security)):
        assert "bob-secret" not in text and KEY_PASSWORD not in text
    with pytest.raises(ConfigError) as info:
        client_config.parse({**settings(target, "sasl-plain"), "sasl.password": 12345}, "admin")
    assert "12345" not in str(info.value)
    caplog.set_level(logging.DEBUG)
    with AdminClient({**settings(target, "sasl-plain"), "sasl.password": "wrong-secret-value"}) as admin:
        with pytest.raises(AuthenticationError):
            admin.list_topics()
    with AdminClient(conf) as admin:
        admin.list_topics()
    assert "wrong-secret-value" not in caplog.text and "unused-secret-value" not in caplog.text


# ---- no broker needed ---------------------------------------------------------------------------


# ---- Kafka's client properties: the CLI's --command-config and the Spark options -----------------

def java_properties(k, case: str) -> str:
    c = k.certs
    return {
        "sasl-ssl-scram-512": f"""security.protocol=SASL_SSL
ssl.truststore.type=PEM
ssl.truststore.location={c.ca}
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="alice" password="alice-secret";
""",
        "sasl-plain": """security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="bob-secret";
""",
        "ssl-keystore": f"""security.protocol=SSL
ssl.truststore.location={c.ca}
ssl.keystore.type=PEM
ssl.keystore.location={c.client_bundle}
ssl.endpoint.identification.algorithm=
""",
    }[case]


def cli(*argv, stdin=None, timeout=60):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "pybroker", *argv], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("case, listener", [("sasl-ssl-scram-512", "sasl_ssl"), ("sasl-plain", "sasl_plaintext"),
                                            ("ssl-keystore", "ssl")])
def test_cli_commands_take_kafkas_client_properties(target, tmp_path, case, listener):
    props = tmp_path / "client.properties"
    props.write_text(java_properties(target, case))
    server = getattr(target, listener)
    topic = f"cli-{case}"
    r = cli("topics", "--bootstrap-server", server, "--command-config", str(props), "--create", "--topic", topic,
            "--partitions", "2", "--replication-factor", "1")
    assert r.returncode == 0, r.stderr
    r = cli("produce", "--bootstrap-server", server, "--producer.config", str(props), "--topic", topic,
            stdin="one\ntwo\nthree\n")
    assert r.returncode == 0, r.stderr
    r = cli("consume", "--bootstrap-server", server, "--consumer.config", str(props), "--topic", topic,
            "--from-beginning", "--max-messages", "3")
    assert r.returncode == 0 and sorted(r.stdout.split()) == ["one", "three", "two"], r.stderr
    r = cli("groups", "--bootstrap-server", server, "--command-config", str(props), "--list")
    assert r.returncode == 0, r.stderr
    # without the properties the tool says what is missing instead of hanging
    r = cli("topics", "--bootstrap-server", server, "--list", "--command-timeout-ms", "5000")
    assert r.returncode != 0


def test_cli_reports_bad_credentials_and_bad_properties(target, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text(java_properties(target, "sasl-plain").replace("bob-secret", "wrong"))
    r = cli("topics", "--bootstrap-server", target.sasl_plaintext, "--command-config", str(props), "--list")
    assert r.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in r.stderr and "wrong" not in r.stderr
    props.write_text("security.protocol=SSL\nssl.truststore.location=/etc/hostname\nssl.truststore.type=JKS\n")
    r = cli("topics", "--bootstrap-server", target.ssl, "--command-config", str(props), "--list")
    assert r.returncode == 1 and "PEM" in r.stderr


def test_tool_connection_reauthenticates_between_requests(target):
    from pybroker.client.java_props import translate
    from pybroker.tools import wire
    props = dict(line.split("=", 1) for line in java_properties(target, "sasl-plain").splitlines())
    props = translate({**props, "security.protocol": "SASL_SSL", "ssl.truststore.location": target.certs.ca})
    security = client_config.parse({"bootstrap.servers": target.sasl_ssl, **props}, "admin").security
    with wire.Client(target.sasl_ssl, 10000, security=security) as client:
        conn = client.any_conn()
        deadline = time.monotonic() + 30
        while conn.reauthentications < 2 and time.monotonic() < deadline:
            client.metadata(None)
        assert conn.reauthentications >= 2


