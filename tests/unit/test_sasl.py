"""SASL PLAIN and SCRAM in-process: RFC 7677, bad proofs and messages, JAAS syntax, config keys, the error
response of every API (on a real broker process: tests/broker/test_sasl.py)."""
import base64

import pytest

from pybroker.protocol import REQUESTS
from tests.sasl_wire import JAAS, error_codes, sample_request


def test_scram_sha256_rfc7677_example(monkeypatch):
    """RFC 7677 section 3: user "user", password "pencil"; our server must accept its client proof
    and answer its server signature."""
    from pybroker.security.sasl import scram
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = scram.credential_from_password(scram.MECHANISMS["SCRAM-SHA-256"], "pencil", 4096, salt)
    server = scram.ScramServer(scram.MECHANISMS["SCRAM-SHA-256"], lambda u, m: cred if u == "user" else None)
    monkeypatch.setattr(scram.secrets, "token_urlsafe", lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"
    assert scram.ScramCredential.from_text(cred.to_text()) == cred and "pencil" not in repr(cred)


def test_scram_refuses_a_bad_proof_and_bad_messages():
    from pybroker.security.sasl import scram
    from pybroker.security.sasl.plain import InvalidCredentials
    mech = scram.MECHANISMS["SCRAM-SHA-512"]
    cred = scram.credential_from_password(mech, "pw")
    for messages in ([b"garbage"], [b"y,,n=u,r=abc"], [b"n,,n=u,r=abc", b"c=biws,r=wrong,p=AAAA"],
                     [b"n,,n=bad=name,r=abc"], [b"n,,n=nobody,r=abc"]):
        server = scram.ScramServer(mech, lambda u, m: cred if u in ("u", "bad=name") else None)
        with pytest.raises(InvalidCredentials):
            for m in messages:
                server.evaluate(m)
    server = scram.ScramServer(mech, lambda u, m: cred)
    nonce = bytes(server.evaluate(b"n,,n=u,r=abc")).decode().split(",")[0][2:]
    with pytest.raises(InvalidCredentials):
        server.evaluate(f"c=biws,r={nonce},p={base64.b64encode(bytes(64)).decode()}".encode())
    assert scram.username("a=2Cb=3Dc") == "a,b=c"


def test_plain_messages_as_kafka():
    from pybroker.security.sasl.plain import AuthenticationFailed, PlainServer
    cases = {b"\0alice\0wrong": "Authentication failed: Invalid username or password",
             b"\0nobody\0x": "Authentication failed: Invalid username or password",
             b"\0\0x": "Authentication failed: username not specified",
             b"\0alice\0": "Authentication failed: password not specified",
             b"alice": "Invalid SASL/PLAIN response: expected 3 tokens, got 1",
             b"bob\0alice\0alice-secret": "Authentication failed: Client requested an authorization id that is "
                                          "different from username"}
    for token, message in cases.items():
        with pytest.raises(AuthenticationFailed, match="^" + message.replace("/", ".") + "$"):
            PlainServer({"alice": "alice-secret"}).evaluate(token)
    server = PlainServer({"alice": "alice-secret"})
    assert server.evaluate(b"alice\0alice\0alice-secret") == b"" and server.authorization_id == "alice"


def test_jaas_syntax():
    from pybroker import jaas
    entry = jaas.parse_one('org.apache.kafka.common.security.scram.ScramLoginModule required /* c */ '
                           'username="ad\\"min" // comment\n password=s3cret;')
    assert entry.options == {"username": 'ad"min', "password": "s3cret"} and "s3cret" not in repr(entry)
    for bad in ("", "x", "x required a=;", "x bogus;", "x required a=b", "a required; b required;"):
        with pytest.raises(ValueError):
            jaas.parse_one(bad)


def test_sasl_config_keys_and_errors():
    from pybroker.config import BrokerConfig, ConfigError
    base = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_plaintext.scram-sha-512.connections.max.reauth.ms": "60000",
            "sasl.mechanism.inter.broker.protocol": "PLAIN", "sasl.kerberos.service.name": "kafka"}
    cfg = BrokerConfig.from_properties(base).sasl
    lst = cfg.listeners["SASL_PLAINTEXT"]
    assert lst.mechanisms == ("PLAIN", "SCRAM-SHA-512") and lst.reauth_ms == {"PLAIN": 0, "SCRAM-SHA-512": 60000}
    assert lst.plain_users == {"admin": "admin-secret", "alice": "alice-secret"}
    assert cfg.inter_broker_credentials("SASL_PLAINTEXT") == ("admin", "admin-secret")
    assert cfg.inter_broker_credentials("PLAINTEXT") is None and list(cfg.listeners) == ["SASL_PLAINTEXT"]
    assert (cfg.failed_auth_delay_ms, cfg.max_receive_bytes) == (100, 524288)
    bad = [({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI"),
           ({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": ""}, "sasl.enabled.mechanisms"),
           ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "x required;"}, "PlainLoginModule"),
           ({"connection.failed.authentication.delay.ms": "-1"}, "connection.failed.authentication.delay.ms"),
           ({"sasl.enabled.mechnisms": "PLAIN"}, "unknown config key")]
    for extra, words in bad:
        props = {**base, **extra}
        if extra.get("listener.name.sasl_plaintext.sasl.enabled.mechanisms") == "":
            del props["listener.name.sasl_plaintext.sasl.enabled.mechanisms"]
        with pytest.raises(ConfigError, match=words):
            BrokerConfig.from_properties(props)
    no_plain_jaas = {k: v for k, v in base.items() if "jaas" not in k}
    with pytest.raises(ConfigError, match="listener.name.sasl_plaintext.plain.sasl.jaas.config"):
        BrokerConfig.from_properties(no_plain_jaas)


def test_error_response_for_every_api():
    """Every API at its lowest and highest version: the refusal encodes, and decodes with the generated
    response codec, carrying 34 at each item the request named (one of each in a sample request)."""
    from pybroker.api import TABLE
    from pybroker.api.error_response import error_response
    from pybroker.protocol import decode_request, decode_response, encode_request, encode_response
    from pybroker.protocol import response_header_version
    for key, api in sorted(TABLE.items()):
        for version in {api.MIN_VERSION, api.MAX_VERSION}:
            _, request = decode_request(encode_request(version, 1, "c", sample_request(key, version)))
            response = error_response(key, version, request, 34, "refused")
            header, decoded = decode_response(encode_response(response_header_version(key, version), 7,
                                                              response, version), key, version)
            codes = error_codes(decoded, version)
            assert header.correlation_id == 7
            assert set(codes) == ({34} if (key, version) != (35, 0) else set()), (key, version, codes)  # v0-2: none
    P = REQUESTS[0]
    assert error_response(0, 8, P(acks=0, topic_data=[P.TopicProduceData(name="t")]), 34) is None

