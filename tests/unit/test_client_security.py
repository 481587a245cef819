"""Our clients' SASL and TLS settings in-process: SCRAM as RFC 7677, PLAIN tokens, settings checked up front,
certificate files, Java properties (against brokers: tests/broker/test_client_security.py)."""
import base64

import pytest

from pybroker.client import config as client_config, sasl
from pybroker.client.errors import ConfigError
from pybroker.client.security import ClientSecurity


def test_scram_sha_256_matches_rfc_7677_and_checks_the_server():
    mech = sasl.ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert mech.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert mech.step(server_first) == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                       b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    forged = ScramCopy(mech)
    assert mech.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None and mech.done
    with pytest.raises(sasl.SaslError, match="signature"):
        forged.step(b"v=" + base64.b64encode(b"\0" * 32))


def ScramCopy(mech):
    """A second client at the same point of the same exchange (to try a forged server answer)."""
    other = sasl.ScramMechanism(mech.name, mech.username, "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    other.step(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    return other


@pytest.mark.parametrize("server_first, why", [
    (b"r=someone-elses-nonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
    (b"r=abcXYZ,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1", "iteration"),
    (b"r=abcXYZ,s=!!!,i=4096", "salt"),
    (b"e=unknown-user", "refused"),
    (b"garbage", "malformed"),
])
def test_scram_refuses_bad_server_messages(server_first, why):
    mech = sasl.ScramMechanism("SCRAM-SHA-512", "u", "p", nonce="abc")
    with pytest.raises(sasl.SaslError, match=why):
        mech.step(server_first)


def test_plain_token_and_escaped_scram_names():
    assert sasl.PlainMechanism("alice", "pw").first() == b"\0alice\0pw"
    assert sasl.ScramMechanism("SCRAM-SHA-256", "a,b=c", "p", nonce="n").first() == b"n,,n=a=2Cb=3Dc,r=n"
    assert "pw" not in repr(sasl.PlainMechanism("alice", "pw"))


@pytest.mark.parametrize("props, message", [
    ({"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"}, "sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.username"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, "not one of"),
    ({"security.protocol": "TLS"}, "not one of"),
    ({"security.protocol": "SSL", "ssl.key.location": "/k.pem"}, "ssl.certificate.location"),
    ({"ssl.endpoint.identification.algorithm": "dns"}, "not one of"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256",
      "sasl.username": "u", "sasl.password": "p"}, "aliases"),
])
def test_security_settings_are_checked_up_front(props, message):
    with pytest.raises(ConfigError, match=message):
        client_config.parse({"bootstrap.servers": "127.0.0.1:9", **props}, "producer")


def test_bad_certificate_files_name_the_setting(tmp_path):
    sec = ClientSecurity(protocol="SSL", ca_location=str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match="ssl.ca.location"):
        sec.ssl_context()
    (tmp_path / "junk.pem").write_text("not a certificate")
    sec = ClientSecurity(protocol="SSL", certificate_location=str(tmp_path / "junk.pem"))
    with pytest.raises(ConfigError, match="ssl.certificate.location"):
        sec.ssl_context()


def test_java_properties_translate_to_client_settings(tmp_path):
    from pybroker.client.java_props import parse_jaas, translate
    module, options = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                 'username="a b" password="p\\"q;x" extra=1;')
    assert module.endswith("PlainLoginModule") and options == {"username": "a b", "password": 'p"q;x', "extra": "1"}
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    out = translate({"security.protocol": "sasl_ssl", "ssl.truststore.location": str(pem),
                     "ssl.keystore.location": str(pem), "ssl.keystore.type": "PEM", "ssl.key.password": "k",
                     "ssl.endpoint.identification.algorithm": "", "sasl.mechanism": "SCRAM-SHA-256",
                     "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                         'username="u" password="p";', "client.id": "x"})
    assert out == {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pem),
                   "ssl.certificate.location": str(pem), "ssl.key.location": str(pem), "ssl.key.password": "k",
                   "ssl.endpoint.identification.algorithm": "none", "sasl.mechanism": "SCRAM-SHA-256",
                   "sasl.username": "u", "sasl.password": "p", "client.id": "x"}
    assert translate({"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                          'username="u" password="p";'})["sasl.mechanism"] == "PLAIN"
    for bad, why in [({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}, "not supported"),
                     ({"sasl.mechanism": "PLAIN", "sasl.jaas.config":
                       'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'},
                      "SCRAM-SHA-256 or SCRAM-SHA-512"),
                     ({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required;"},
                      "username"),
                     ({"ssl.truststore.location": str(pem), "ssl.truststore.type": "PKCS12"}, "PEM"),
                     ({"ssl.truststore.certificates": "-----BEGIN"}, "not supported")]:
        with pytest.raises(ConfigError, match=why):
            translate(bad)

