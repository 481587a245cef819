"""TLS listeners: real broker processes, real clients (confluent-kafka, kafka-python, aiokafka, kcat,
Kafka's console tools when built), certificates made in the test.

One broker serves three listeners: PLAINTEXT, INTERNAL (SSL, client certificates required, a
principal mapping rule) and EXTERNAL (SSL, server authentication only), named through
listener.security.protocol.map. The principal a certificate maps to is observed in the broker's
DEBUG log line for the handshake.

The cases of the other tiers: tests/unit/test_tls.py.
"""
import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import time
import uuid

import pytest

from pybroker.security.ssl_principal import subject_dn
from pybroker.security.tls import client_context
from tests.broker import BrokerProcess
from tests.clientutil import DEADLINE, finish_broker, wait_until
from tests.tlsutil import Authority

KAFKA_HOME = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "pybroker-kafka", "kafka_2.13-3.8.0")
COUNT = 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    ca = Authority(d)
    other = Authority(d, "other-ca")
    return {
        "dir": d, "ca": ca.cert_path, "other_ca": other.cert_path,
        "broker": ca.issue("broker", {"O": "acme", "CN": "broker"}, hosts=("127.0.0.1", "localhost")),
        "broker_secret": ca.issue("broker-secret", {"CN": "broker"}, hosts=("127.0.0.1",), password="s3cret"),
        "alice": ca.issue("alice", {"O": "acme", "OU": "eng", "CN": "alice"}),
        "bob": ca.issue("bob", {"O": "acme", "OU": "ops", "CN": "Bob"}),
        "expired": ca.issue("expired", {"CN": "old"}, expired=True),
        "stranger": other.issue("stranger", {"CN": "mallory"}),
    }


class TlsBroker:
    def __init__(self, proc: BrokerProcess, ports: dict):
        self.proc, self.ports = proc, ports

    def addr(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def log(self) -> str:
        return self.proc.stderr()


def start_tls_broker(tmp_path_factory, name: str, pki, extra: dict | None = None) -> TlsBroker:
    ports = {"INTERNAL": free_port(), "EXTERNAL": free_port()}
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:{ports['INTERNAL']},"
                     f"EXTERNAL://localhost:{ports['EXTERNAL']}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,EXTERNAL:SSL",
        "ssl.keystore.location": pki["broker"]["pem"],
        "ssl.keystore.type": "PEM",
        "ssl.truststore.location": pki["ca"],
        "ssl.truststore.type": "PEM",
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.internal.ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT",
        "ssl.endpoint.identification.algorithm": "",  # Kafka-only keys load unchanged
        "ssl.keymanager.algorithm": "SunX509",
        "log.level": "DEBUG",
        **(extra or {}),
    }
    data = str(tmp_path_factory.mktemp(name) / "data")
    proc = BrokerProcess(data, overrides).start()
    ports["PLAINTEXT"] = proc.port
    return TlsBroker(proc, ports)


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    b = start_tls_broker(tmp_path_factory, "tls", pki)
    yield b
    finish_broker(b.proc)


def confluent_conf(b: TlsBroker, pki, listener: str = "INTERNAL", who: str | None = "alice", **extra) -> dict:
    conf = {"bootstrap.servers": b.addr(listener), "security.protocol": "SSL", "ssl.ca.location": pki["ca"],
            "socket.timeout.ms": 10000, **extra}
    if who:
        conf.update({"ssl.certificate.location": pki[who]["cert"], "ssl.key.location": pki[who]["key"]})
    return conf


def confluent_roundtrip(conf: dict, topic: str, count: int = COUNT, size: int = 1024) -> list[bytes]:
    from confluent_kafka import Consumer, Producer
    p = Producer({**conf, "linger.ms": 5, "acks": "all"})
    values = [b"%06d" % i + b"x" * (size - 6) for i in range(count)]
    for v in values:
        p.produce(topic, v)
    assert p.flush(DEADLINE) == 0
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    end = time.monotonic() + DEADLINE
    try:
        while len(got) < count and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    assert got == values
    return got


def topic() -> str:
    return "t-" + uuid.uuid4().hex[:10]


# ---- clients over SSL -------------------------------------------------------------------------


def test_confluent_mtls_principal_from_certificate(broker, pki):
    confluent_roundtrip(confluent_conf(broker, pki, "INTERNAL", "alice"), topic())
    # the mapping rule of the INTERNAL listener: CN of the eng unit, lower case
    assert wait_until(lambda: "is principal User:alice" in broker.log(), 5)
    assert "client certificate CN=alice,OU=eng,O=acme is principal User:alice" in broker.log()


def test_principal_rule_falls_through_to_default(broker, pki):
    confluent_roundtrip(confluent_conf(broker, pki, "INTERNAL", "bob"), topic(), count=10)
    assert wait_until(lambda: "is principal User:CN=Bob,OU=ops,O=acme" in broker.log(), 5)


def test_confluent_server_auth_only_large_fetch(broker, pki):
    # 4 MiB of 64 KiB records: fetch responses far larger than one TLS write chunk
    confluent_roundtrip(confluent_conf(broker, pki, "EXTERNAL", None, **{"ssl.endpoint.identification.algorithm":
                                                                       "https"}), topic(), count=64, size=65536)


def test_kafka_python_over_ssl(broker, pki):
    from kafka import KafkaConsumer, KafkaProducer
    t = topic()
    common = dict(bootstrap_servers=broker.addr("INTERNAL"), security_protocol="SSL", ssl_cafile=pki["ca"],
                  ssl_certfile=pki["alice"]["cert"], ssl_keyfile=pki["alice"]["key"])
    p = KafkaProducer(acks="all", linger_ms=5, **common)
    values = [b"kp-%d" % i for i in range(COUNT)]
    for v in values:
        p.send(t, v)
    p.flush(DEADLINE)
    p.close()
    c = KafkaConsumer(t, auto_offset_reset="earliest", consumer_timeout_ms=DEADLINE * 1000, **common)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == COUNT:
            break
    c.close()
    assert got == values


def test_aiokafka_over_ssl_with_our_client_context(broker, pki):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    t = topic()
    ctx = client_context(cafile=pki["ca"], certfile=pki["alice"]["cert"], keyfile=pki["alice"]["key"])

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=broker.addr("INTERNAL"), security_protocol="SSL", ssl_context=ctx)
        await p.start()
        try:
            for i in range(COUNT):
                await p.send(t, b"ak-%d" % i)
            await p.flush()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(t, bootstrap_servers=broker.addr("INTERNAL"), security_protocol="SSL",
                             ssl_context=ctx, auto_offset_reset="earliest")
        await c.start()
        got = []
        try:
            async with asyncio.timeout(DEADLINE):
                async for m in c:
                    got.append(m.value)
                    if len(got) == COUNT:
                        break
        finally:
            await c.stop()
        return got

    assert asyncio.run(main()) == [b"ak-%d" % i for i in range(COUNT)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_ssl(broker, pki):
    t = topic()
    ssl_opts = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki['ca']}",
                "-X", f"ssl.certificate.location={pki['alice']['cert']}",
                "-X", f"ssl.key.location={pki['alice']['key']}"]
    lines = "".join(f"kc-{i}\n" for i in range(COUNT))
    subprocess.run(["kcat", "-b", broker.addr("INTERNAL"), *ssl_opts, "-P", "-t", t], input=lines.encode(),
                   check=True, timeout=DEADLINE)
    out = subprocess.run(["kcat", "-b", broker.addr("INTERNAL"), *ssl_opts, "-C", "-t", t, "-o", "beginning",
                          "-c", str(COUNT), "-e"], capture_output=True, check=True, timeout=DEADLINE)
    assert out.stdout.decode().splitlines() == [f"kc-{i}" for i in range(COUNT)]


@pytest.mark.skipif(not os.path.isfile(os.path.join(KAFKA_HOME, "bin", "kafka-console-producer.sh")),
                    reason="Apache Kafka's console tools are not built (~/.cache/pybroker-kafka)")
def test_kafka_console_tools_over_ssl_with_pem_truststore(broker, pki, tmp_path):
    t = topic()
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SSL\nssl.truststore.type=PEM\n"
                     f"ssl.truststore.location={pki['ca']}\n")
    bin_dir = os.path.join(KAFKA_HOME, "bin")
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"}
    bootstrap = f"localhost:{broker.ports['EXTERNAL']}"
    subprocess.run([f"{bin_dir}/kafka-console-producer.sh", "--bootstrap-server", bootstrap, "--topic", t,
                    "--producer.config", str(props)], input="".join(f"jv-{i}\n" for i in range(20)),
                   text=True, check=True, timeout=120, env=env, capture_output=True)
    out = subprocess.run([f"{bin_dir}/kafka-console-consumer.sh", "--bootstrap-server", bootstrap, "--topic", t,
                          "--from-beginning", "--max-messages", "20", "--consumer.config", str(props),
                          "--timeout-ms", "60000"], capture_output=True, text=True, check=True, timeout=120, env=env)
    assert out.stdout.splitlines() == [f"jv-{i}" for i in range(20)]


# ---- refusals ----------------------------------------------------------------------------------


def tls_connect(b: TlsBroker, listener: str, ctx: ssl.SSLContext, server_hostname="127.0.0.1"):
    """Handshake, then one ApiVersions round trip (TLS 1.3 reports a refused client certificate
    only at the first read). Returns the response size or raises."""
    raw = socket.create_connection(("127.0.0.1", b.ports[listener]), timeout=10)
    with ctx.wrap_socket(raw, server_hostname=server_hostname) as s:
        s.sendall(b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test")
        head = s.recv(4)
        if not head:
            raise ConnectionError("closed by the broker")
        return int.from_bytes(head, "big")


def plaintext_still_serves(b: TlsBroker) -> None:
    with socket.create_connection(("127.0.0.1", b.ports["PLAINTEXT"]), timeout=10) as s:
        s.sendall(b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test")
        assert len(s.recv(4)) == 4


def test_our_client_context_passes_mtls(broker, pki):
    ctx = client_context(cafile=pki["ca"], certfile=pki["alice"]["cert"], keyfile=pki["alice"]["key"])
    assert tls_connect(broker, "INTERNAL", ctx) > 0


@pytest.mark.parametrize("who", ["stranger", "expired", None])
def test_untrusted_expired_or_missing_client_certificate_refused(broker, pki, who):
    ctx = client_context(cafile=pki["ca"], certfile=pki[who]["cert"] if who else None,
                         keyfile=pki[who]["key"] if who else None)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_connect(broker, "INTERNAL", ctx)
    plaintext_still_serves(broker)


def test_confluent_refused_without_client_certificate(broker, pki):
    from confluent_kafka.admin import AdminClient
    admin = AdminClient(confluent_conf(broker, pki, "INTERNAL", None))
    with pytest.raises(Exception):
        admin.list_topics(timeout=5)


def test_client_that_does_not_trust_the_broker_fails(broker, pki):
    ctx = client_context(cafile=pki["other_ca"])
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_connect(broker, "EXTERNAL", ctx)
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": broker.addr("EXTERNAL"), "security.protocol": "SSL",
                         "ssl.ca.location": pki["other_ca"]})
    with pytest.raises(Exception):
        admin.list_topics(timeout=5)


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
def test_tls_1_1_client_refused(broker, pki):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki["ca"])
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls_connect(broker, "EXTERNAL", ctx)
    # TLS 1.2 on the same port still works
    ctx12 = client_context(cafile=pki["ca"])
    ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert tls_connect(broker, "EXTERNAL", ctx12) > 0


def closed_by_peer(sock: socket.socket, timeout: float = 10) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


@pytest.mark.parametrize("payload", [
    b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test",  # a Kafka request in plaintext
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    os.urandom(3000),
], ids=["kafka-request", "http", "random-bytes"])  # fixed ids: parallel workers must collect the same tests
def test_plaintext_or_garbage_on_tls_port_closes_that_connection_only(broker, pki, payload):
    ctx = client_context(cafile=pki["ca"], certfile=pki["alice"]["cert"], keyfile=pki["alice"]["key"])
    raw = socket.create_connection(("127.0.0.1", broker.ports["INTERNAL"]), timeout=10)
    good = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        with socket.create_connection(("127.0.0.1", broker.ports["INTERNAL"]), timeout=10) as bad:
            bad.sendall(payload)
            assert closed_by_peer(bad)
        # an established TLS connection on the same listener keeps working
        good.sendall(b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test")
        assert len(good.recv(4)) == 4
    finally:
        good.close()
    plaintext_still_serves(broker)


def test_silent_client_closed_after_handshake_timeout(tmp_path_factory, pki):
    b = start_tls_broker(tmp_path_factory, "tls-idle", pki, {"connections.max.idle.ms": "1500"})
    try:
        with socket.create_connection(("127.0.0.1", b.ports["EXTERNAL"]), timeout=10) as s:
            s.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
            start = time.monotonic()
            assert closed_by_peer(s, 10)
            assert time.monotonic() - start < 8
        assert "no TLS handshake within 1500 ms" in b.log()
    finally:
        finish_broker(b.proc)


# ---- connection limits -------------------------------------------------------------------------


def open_count(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(n)]


def serves(sock: socket.socket) -> bool:
    try:
        sock.sendall(b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test")
        return len(sock.recv(4)) == 4
    except OSError:
        return False


def plain_broker(tmp_path_factory, name, overrides):
    data = str(tmp_path_factory.mktemp(name) / "data")
    return BrokerProcess(data, overrides).start()


def test_max_connections_per_ip(tmp_path_factory):
    b = plain_broker(tmp_path_factory, "limits-ip", {"max.connections.per.ip": "3"})
    socks = []
    try:
        socks = open_count(b.port, 3)
        assert all(serves(s) for s in socks)
        extra = socket.create_connection(("127.0.0.1", b.port), timeout=10)
        socks.append(extra)
        assert closed_by_peer(extra)
        assert all(serves(s) for s in socks[:3])  # the open ones keep working
        socks.pop().close()
        socks.pop(0).close()
        # a slot is free again once the broker has seen the close
        assert wait_until(lambda: serves(_fresh(b.port, socks)), 10)
    finally:
        for s in socks:
            s.close()
        finish_broker(b)


def _fresh(port: int, keep: list) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    keep.append(s)
    return s


def test_max_connections_per_ip_overrides(tmp_path_factory):
    b = plain_broker(tmp_path_factory, "limits-override", {"max.connections.per.ip": "1",
                                                           "max.connections.per.ip.overrides": "127.0.0.1:4"})
    socks = []
    try:
        socks = open_count(b.port, 4)
        assert all(serves(s) for s in socks)
        socks.append(socket.create_connection(("127.0.0.1", b.port), timeout=10))
        assert closed_by_peer(socks[-1])
    finally:
        for s in socks:
            s.close()
        finish_broker(b)


def test_max_connections_broker_wide_counts_every_listener(tmp_path_factory, pki):
    b = start_tls_broker(tmp_path_factory, "limits-all", pki, {"max.connections": "2",
                                                               "inter.broker.listener.name": "INTERNAL"})
    socks = []
    try:
        socks = open_count(b.ports["PLAINTEXT"], 1) + open_count(b.ports["EXTERNAL"], 1)
        assert serves(socks[0])
        third = socket.create_connection(("127.0.0.1", b.ports["PLAINTEXT"]), timeout=10)
        socks.append(third)
        assert closed_by_peer(third)
        assert serves(socks[0])
        # the inter-broker listener is exempt from the broker-wide limit
        ctx = client_context(cafile=pki["ca"], certfile=pki["alice"]["cert"], keyfile=pki["alice"]["key"])
        assert tls_connect(b, "INTERNAL", ctx) > 0
        assert "max.connections: 2" in b.log()
    finally:
        for s in socks:
            s.close()
        finish_broker(b.proc)


# ---- configuration -----------------------------------------------------------------------------


def test_max_connections_of_one_listener(tmp_path_factory, pki):
    """listener.name.<l>.max.connections limits that listener only; the others keep accepting."""
    b = start_tls_broker(tmp_path_factory, "limits-listener", pki, {"listener.name.plaintext.max.connections": "2"})
    socks = []
    try:
        socks = open_count(b.ports["PLAINTEXT"], 2)
        assert all(serves(s) for s in socks)
        third = socket.create_connection(("127.0.0.1", b.ports["PLAINTEXT"]), timeout=10)
        socks.append(third)
        assert closed_by_peer(third)
        ctx = client_context(cafile=pki["ca"])
        assert tls_connect(b, "EXTERNAL", ctx) > 0  # another listener: not counted against it
        assert "listener.name.plaintext.max.connections: 2" in b.log()
        socks.pop().close()
        socks.pop(0).close()
        assert wait_until(lambda: serves(_fresh(b.ports["PLAINTEXT"], socks)), 10)  # a slot is free again
    finally:
        for s in socks:
            s.close()
        finish_broker(b.proc)


def test_serve_with_a_bad_keystore_exits_with_one_line(tmp_path, pki):
    out = subprocess.run([os.sys.executable, "-m", "pybroker", "serve", "--override", "listeners=SSL://127.0.0.1:0",
                          "--override", f"log.dirs={tmp_path}", "--override",
                          f"ssl.keystore.location={pki['broker_secret']['pem']}", "--override",
                          "ssl.key.password=wrong"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "invalid configuration" in out.stderr and "ssl.keystore.location" in out.stderr
    assert "Traceback" not in out.stderr


# ---- principal names ---------------------------------------------------------------------------


# ---- SASL over TLS -----------------------------------------------------------------------------


def test_sasl_ssl_plain_handshake_first_then_sasl(tmp_path_factory, pki):
    port = free_port()
    data = str(tmp_path_factory.mktemp("sasl-ssl") / "data")
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
    proc = BrokerProcess(data, {
        "listeners": f"PLAINTEXT://127.0.0.1:0,SECURE://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
        "ssl.keystore.location": pki["broker"]["pem"], "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.secure.plain.sasl.jaas.config": jaas,
        "ssl.client.auth": "required",  # not prefixed: does not apply to a SASL_SSL listener, as in Kafka
    }).start()
    try:
        conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL",
                "ssl.ca.location": pki["ca"], "sasl.mechanism": "PLAIN", "socket.timeout.ms": 10000}
        confluent_roundtrip({**conf, "sasl.username": "alice", "sasl.password": "alice-secret"}, topic(), count=50)
        from confluent_kafka.admin import AdminClient
        bad = AdminClient({**conf, "sasl.username": "alice", "sasl.password": "wrong"})
        with pytest.raises(Exception):
            bad.list_topics(timeout=5)
    finally:
        finish_broker(proc)


JAVA_DN = """import java.security.cert.*; import java.io.*;
public class Dn { public static void main(String[] a) throws Exception {
  X509Certificate c = (X509Certificate) CertificateFactory.getInstance("X.509")
      .generateCertificate(new FileInputStream(a[0]));
  System.out.print(c.getSubjectX500Principal().getName()); } }
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="no Java to compare with")
def test_subject_dn_matches_java_x500principal(tmp_path):
    """Differential: Java's X500Principal.getName() (what Kafka maps) on the same certificate."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    rdn = lambda *attrs: x509.RelativeDistinguishedName([x509.NameAttribute(o, v) for o, v in attrs])  # noqa: E731
    name = x509.Name([rdn((NameOID.COUNTRY_NAME, "US")), rdn((NameOID.ORGANIZATION_NAME, "Acme, Inc.")),
                      rdn((NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"), (NameOID.COMMON_NAME, "x")),
                      rdn((NameOID.COMMON_NAME, " alice+1")), rdn((NameOID.EMAIL_ADDRESS, "a@b.c")),
                      rdn((NameOID.DOMAIN_COMPONENT, "com")), rdn((NameOID.LOCALITY_NAME, 'Zürich<>;"'))])
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    path = tmp_path / "dn.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "Dn.java").write_text(JAVA_DN)
    java = subprocess.run(["java", str(tmp_path / "Dn.java"), str(path)], capture_output=True, timeout=120)
    assert java.returncode == 0, java.stderr
    ours = subject_dn(ssl._ssl._test_decode_cert(str(path)))  # the dict getpeercert() gives
    assert ours == java.stdout.decode("utf-8")
