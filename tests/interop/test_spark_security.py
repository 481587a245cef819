"""The "pybroker" Spark source and sink against a secured broker (Apache Kafka 3.8, then pybroker),
configured with the ``kafka.*`` security options a job written for Spark's own Kafka source carries."""
import pytest

from tests.secure_brokers import kafka_available, make_certs, start_secure_kafka, start_secure_pybroker, stop
from tests.spark_fixtures import *  # noqa: F401,F403 - fixtures and helpers

SCRAM = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
         'username="alice" password="alice-secret";')
PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="bob-secret";'


@pytest.fixture(scope="module", params=["kafka", "pybroker"])
def kafka(request, tmp_path_factory):
    """A secured broker (the name of Spark's source for any Kafka-protocol broker)."""
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    if request.param == "pybroker":
        broker, k = start_secure_pybroker(tmp_path_factory.mktemp("pybroker"), certs)
        try:
            yield k
        finally:
            broker.close()
        return
    if not kafka_available():
        pytest.skip("Apache Kafka 3.8 is not built here")
    proc, k = start_secure_kafka(tmp_path_factory.mktemp("kafka"), certs)
    try:
        yield k
    finally:
        stop(proc)


def sasl_ssl(k) -> dict:
    return {"kafka.bootstrap.servers": k.sasl_ssl, "kafka.security.protocol": "SASL_SSL",
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": k.certs.ca,
            "kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.jaas.config": SCRAM}


def sasl_plaintext(k) -> dict:
    return {"kafka.bootstrap.servers": k.sasl_plaintext, "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config": PLAIN}


def ssl_keystore(k) -> dict:
    return {"kafka.bootstrap.servers": k.ssl, "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.location": k.certs.ca, "kafka.ssl.keystore.type": "PEM",
            "kafka.ssl.keystore.location": k.certs.client_bundle}


def test_write_then_read_back_over_sasl_and_tls(spark, kafka):
    from pybroker.client import AdminClient, NewTopic
    topic = unique_topic("secure")
    with AdminClient({"bootstrap.servers": kafka.sasl_plaintext, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": "bob-secret"}) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    df = spark.range(200).selectExpr("CAST(id AS STRING) AS key", "concat('value-', id) AS value")
    df.write.format("pybroker").options(**sasl_ssl(kafka), topic=topic).mode("append").save()
    expected = sorted(f"value-{i}" for i in range(200))
    for opts in (sasl_plaintext(kafka), ssl_keystore(kafka), sasl_ssl(kafka)):
        rows = spark.read.format("pybroker").options(**opts, subscribe=topic).load() \
            .selectExpr("CAST(value AS STRING) AS v").collect()
        assert sorted(r["v"] for r in rows) == expected, opts["kafka.security.protocol"]


def test_wrong_password_fails_the_query_with_the_brokers_reason(spark, kafka):
    opts = {**sasl_plaintext(kafka), "kafka.sasl.jaas.config": PLAIN.replace("bob-secret", "nope")}
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED|Authentication failed"):
        spark.read.format("pybroker").options(**opts, subscribe="anything").load().collect()
