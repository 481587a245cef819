"""Inter-broker security follows the inter-broker listener, in-process
(secured links on a real cluster: tests/cluster/test_cluster_security.py)."""
from tests.cluster.test_cluster_security import PLAIN_JAAS
from tests.secure_brokers import make_certs


def test_inter_broker_security_follows_the_inter_broker_listener(tmp_path):
    from pybroker.config import BrokerConfig
    from pybroker.security.inter_broker import inter_broker_security
    certs = make_certs(tmp_path / "certs")
    base = {"listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.broker,
            "ssl.truststore.location": certs.ca, "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.internal.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.internal.scram-sha-512.sasl.jaas.config":
                'org.apache.kafka.common.security.scram.ScramLoginModule required username="ib" password="ib-pw";'}
    assert inter_broker_security(BrokerConfig.from_properties(base)) is None  # the first listener: PLAINTEXT
    cfg = BrokerConfig.from_properties({**base, "inter.broker.listener.name": "INTERNAL",
                                        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"})
    sec = inter_broker_security(cfg)
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_SSL", "SCRAM-SHA-512", "ib", "ib-pw")
    assert "ib-pw" not in repr(sec) and inter_broker_security(cfg) is sec  # built once per config
    ctx = sec.ssl_context()
    assert ctx.check_hostname and ctx.get_ca_certs()[0]["subject"][0][0][1] == "pybroker test CA"
    cfg = BrokerConfig.from_properties({**base, "inter.broker.listener.name": "INTERNAL",
                                        "sasl.mechanism.inter.broker.protocol": "PLAIN",
                                        "ssl.endpoint.identification.algorithm": ""})
    sec = inter_broker_security(cfg)
    assert (sec.mechanism, sec.username) == ("PLAIN", "broker") and not sec.ssl_context().check_hostname

