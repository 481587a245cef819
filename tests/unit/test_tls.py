"""TLS settings in-process: listener config, key passwords, inline PEM and PKCS12, subject DNs as Java writes
them, principal mapping rules (real brokers and clients: tests/broker/test_tls.py)."""
import pytest

from pybroker.config import BrokerConfig, ConfigError
from pybroker.security.ssl_principal import NoMatchingRule, PrincipalMapper, subject_dn
from tests.broker.test_tls import pki  # noqa: F401 - the certificates fixture, shared with the broker cases


def load(pki, **props) -> BrokerConfig:
    base = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": pki["broker"]["pem"]}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return BrokerConfig.from_properties({k: v for k, v in base.items() if v is not None})


def config_error(pki, **props) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(pki, **props)
    return info.value


def test_config_accepts_ssl_listener_and_kafka_only_keys(pki):
    cfg = load(pki, ssl_keymanager_algorithm="SunX509", ssl_secure_random_implementation="SHA1PRNG",
               ssl_endpoint_identification_algorithm="https", ssl_truststore_password="x")
    assert cfg.security_protocol("SSL") == "SSL"
    assert "ssl.keymanager.algorithm" in cfg.ignored


def test_config_custom_listener_names_through_the_map(pki):
    cfg = BrokerConfig.from_properties({
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0,CLIENTS://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL,CLIENTS:SSL",
        "ssl.keystore.location": pki["broker"]["pem"]})
    assert [cfg.security_protocol(n) for n in ("INTERNAL", "EXTERNAL", "CLIENTS")] == ["PLAINTEXT", "SSL", "SSL"]
    with pytest.raises(ConfigError, match="EXTERNAL"):  # a name the map does not know
        BrokerConfig.from_properties({"listeners": "EXTERNAL://127.0.0.1:0",
                                      "listener.security.protocol.map": "INTERNAL:SSL"})


@pytest.mark.parametrize("props,words", [
    ({"ssl_keystore_location": "/nonexistent/k.pem"}, ["ssl.keystore.location", "/nonexistent/k.pem"]),
    ({"ssl_keystore_type": "JKS"}, ["ssl.keystore.type", "JKS", "PKCS12"]),
    ({"ssl_enabled_protocols": "TLSv1.1,TLSv1.2"}, ["ssl.enabled.protocols", "TLSv1.1"]),
    ({"ssl_client_auth": "sometimes"}, ["ssl.client.auth", "sometimes"]),
    ({"ssl_client_auth": "required"}, ["ssl.client.auth", "truststore"]),
    ({"ssl_truststore_location": "/nonexistent/ca.pem"}, ["ssl.truststore.location"]),
    ({"ssl_principal_mapping_rules": "RULE:^CN=(.*$/$1/"}, ["ssl.principal.mapping.rules"]),
    ({"ssl_principal_mapping_rules": "NOPE"}, ["ssl.principal.mapping.rules"]),
    ({"ssl_protocol": "SSLv3"}, ["ssl.protocol"]),
    ({"ssl_cipher_suites": "TLS_NOPE_WITH_NOTHING"}, ["ssl.cipher.suites"]),
    ({"ssl_keystore_location": None}, ["ssl.keystore.location", "SSL"]),
    ({"ssl_keystore_location": None, "ssl_keystore_key": "-----BEGIN PRIVATE KEY-----"},
     ["ssl.keystore.certificate.chain"]),
    ({"ssl_bogus_key": "1"}, ["ssl.bogus.key"]),
    ({"max_connections_per_ip": "0"}, ["max.connections.per.ip", "overrides"]),
    ({"max_connections_per_ip_overrides": "nohostcount"}, ["max.connections.per.ip.overrides"]),
    ({"listener_name_nope_max_connections": "2"}, ["listener.name.nope.max.connections", "no listener named NOPE"]),
    ({"listener_name_ssl_max_connections": "-1"}, ["listener.name.ssl.max.connections"]),
])
def test_config_errors_name_the_key(pki, props, words):
    msg = str(config_error(pki, **props))
    for word in words:
        assert word in msg, (word, msg)


def test_config_wrong_key_password(pki):
    err = config_error(pki, ssl_keystore_location=pki["broker_secret"]["pem"], ssl_key_password="wrong")
    assert err.key == "ssl.keystore.location"
    load(pki, ssl_keystore_location=pki["broker_secret"]["pem"], ssl_key_password="s3cret")
    err = config_error(pki, ssl_keystore_location=pki["broker_secret"]["pem"])
    assert "ssl.keystore.location" in str(err)


def test_config_listener_prefix_wins_and_client_auth_on_sasl_ssl(pki):
    from pybroker.security.tls import listener_settings
    raw = {"ssl.client.auth": "required", "listener.name.ext.ssl.client.auth": "none",
           "ssl.keystore.location": "a", "listener.name.ext.ssl.keystore.location": "b"}
    s = listener_settings(raw, "EXT", "SSL")
    assert s["ssl.client.auth"] == ("none", "listener.name.ext.ssl.client.auth")
    assert s["ssl.keystore.location"][0] == "b"
    # on SASL_SSL only a listener-prefixed ssl.client.auth counts
    assert "ssl.client.auth" not in listener_settings(raw, "SECURE", "SASL_SSL")
    assert listener_settings({"listener.name.secure.ssl.client.auth": "requested"}, "SECURE",
                             "SASL_SSL")["ssl.client.auth"][0] == "requested"


def test_config_inline_pem_and_pkcs12(pki, tmp_path):
    load(pki, ssl_keystore_location=None, ssl_keystore_key=pki["broker"]["key_pem"].replace("\n", " "),
         ssl_keystore_certificate_chain=pki["broker"]["cert_pem"].replace("\n", " "),
         ssl_truststore_certificates=open(pki["ca"]).read())
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    key = serialization.load_pem_private_key(pki["broker"]["key_pem"].encode(), None)
    cert = x509.load_pem_x509_certificates(pki["broker"]["cert_pem"].encode())
    p12 = tmp_path / "broker.p12"
    p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", key, cert[0], cert[1:], serialization.BestAvailableEncryption(b"pw")))
    load(pki, ssl_keystore_location=str(p12), ssl_keystore_type="PKCS12", ssl_keystore_password="pw")
    err = config_error(pki, ssl_keystore_location=str(p12), ssl_keystore_type="PKCS12", ssl_keystore_password="no")
    assert "ssl.keystore.password" in str(err)


def test_subject_dn_is_rfc2253_as_java_writes_it():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc."),),
                        (("organizationalUnitName", "eng"), ("commonName", "x")),
                        (("commonName", " alice+1"),), (("emailAddress", "a@b.c"),))}
    assert subject_dn(cert) == ("1.2.840.113549.1.9.1=#16056140622e63,CN=\\ alice\\+1,OU=eng+CN=x,"
                                "O=Acme\\, Inc.,C=US")


def test_principal_mapping_rules():
    m = PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/ , RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L,\n"
                        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT")
    assert m.name("CN=kafka1,OU=ServiceUsers,O=Unknown") == "kafka1"
    assert m.name("CN=Adam,OU=Eng,O=x") == "adam@eng"
    assert m.name("OU=x,cn=duke") == "DUKE"
    assert PrincipalMapper("").name("O=x,CN=y") == "O=x,CN=y"
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=admin$/root/").name("CN=alice")
    assert PrincipalMapper("RULE:^CN=a\\/b,(.*)$/$1\\/x/").name("CN=a/b,O=z") == "O=z/x"

