"""Test material for secured connections: a throwaway CA with broker and client certificates, and
one broker with PLAINTEXT, SSL (client certificates required), SASL_PLAINTEXT (PLAIN, SCRAM-SHA-512)
and SASL_SSL (PLAIN, SCRAM-SHA-256/512; sessions expire after ``reauth_ms``) listeners, the same
users on both: Apache Kafka 3.8 (KRaft), the oracle, or pybroker. Each is ended by its PID."""
import datetime
import ipaddress
import os
import subprocess
from dataclasses import dataclass

KAFKA_HOME = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "pybroker-kafka", "kafka_2.13-3.8.0")
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
KEY_PASSWORD = "key-secret"


@dataclass
class Certs:
    dir: str
    ca: str            # CA certificate (PEM): the truststore
    broker: str        # broker key (PKCS#8) + certificate chain in one PEM: a PEM keystore
    broker_cert: str
    broker_key: str
    client_cert: str
    client_key: str
    client_key_encrypted: str  # the client key under KEY_PASSWORD
    client_bundle: str  # client key + certificate in one PEM (Kafka's PEM keystore for clients)
    rogue_ca: str      # a CA that signed nothing here: verification against it must fail


def _name(cn):
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject_key, cn, issuer_key, issuer_cn, *, ca=False, sans=()):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(issuer_cn))
         .public_key(subject_key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def make_certs(directory) -> Certs:
    """A CA, a broker certificate for 127.0.0.1/localhost and a client certificate, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization as ser
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    ca_key, rogue_key = _key(), _key()
    ca = _cert(ca_key, "pybroker test CA", ca_key, "pybroker test CA", ca=True)
    rogue = _cert(rogue_key, "rogue CA", rogue_key, "rogue CA", ca=True)
    broker_key, client_key = _key(), _key()
    broker = _cert(broker_key, "localhost", ca_key, "pybroker test CA",
                   sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client = _cert(client_key, "alice", ca_key, "pybroker test CA")

    def pem(cert):
        return cert.public_bytes(ser.Encoding.PEM)

    def key_pem(key, password=None):
        enc = ser.BestAvailableEncryption(password.encode()) if password else ser.NoEncryption()
        return key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, enc)

    files = {"ca.pem": pem(ca), "rogue-ca.pem": pem(rogue),
             "broker.pem": key_pem(broker_key) + pem(broker) + pem(ca),
             "broker-cert.pem": pem(broker) + pem(ca), "broker-key.pem": key_pem(broker_key),
             "client-cert.pem": pem(client), "client-key.pem": key_pem(client_key),
             "client-key-enc.pem": key_pem(client_key, KEY_PASSWORD),
             "client.pem": key_pem(client_key) + pem(client)}
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    p = lambda n: os.path.join(directory, n)  # noqa: E731
    return Certs(directory, p("ca.pem"), p("broker.pem"), p("broker-cert.pem"), p("broker-key.pem"),
                 p("client-cert.pem"), p("client-key.pem"), p("client-key-enc.pem"), p("client.pem"),
                 p("rogue-ca.pem"))


@dataclass
class SecureBroker:
    plaintext: str
    ssl: str
    sasl_plaintext: str
    sasl_ssl: str
    certs: Certs
    reauth_ms: int


def kafka_available() -> bool:
    return os.path.isfile(os.path.join(KAFKA_HOME, "bin", "kafka-server-start.sh"))


def start_secure_kafka(tmp, certs: Certs, reauth_ms: int = 3000):
    """(process, SecureBroker): one KRaft Kafka 3.8 with PLAINTEXT, SSL (client certificates required),
    SASL_PLAINTEXT (PLAIN, SCRAM-SHA-512) and SASL_SSL (PLAIN, SCRAM-SHA-256/512; sessions last
    ``reauth_ms``), users from USERS. The caller kills the process."""
    from tests.cluster import Cluster, answers_requests, free_ports
    tmp = str(tmp)
    plain, tls, sasl_plain, sasl_tls, controller = free_ports(5)
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    lines = [
        "process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{controller}",
        f"listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},SASL_PLAINTEXT://127.0.0.1:{sasl_plain},"
        f"SASL_SSL://127.0.0.1:{sasl_tls},CONTROLLER://127.0.0.1:{controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},"
        f"SASL_PLAINTEXT://127.0.0.1:{sasl_plain},SASL_SSL://127.0.0.1:{sasl_tls}",
        "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        f"log.dirs={os.path.join(tmp, 'kafka-data')}", "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0", "num.partitions=2",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={certs.broker}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={certs.ca}",
        "listener.name.ssl.ssl.client.auth=required",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
        f"listener.name.sasl_ssl.connections.max.reauth.ms={reauth_ms}",
    ]
    for listener in ("sasl_plaintext", "sasl_ssl"):
        lines.append(f"listener.name.{listener}.plain.sasl.jaas.config="
                     f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};")
        for mech in ("scram-sha-256", "scram-sha-512"):
            lines.append(f"listener.name.{listener}.{mech}.sasl.jaas.config="
                         "org.apache.kafka.common.security.scram.ScramLoginModule required;")
    os.makedirs(tmp, exist_ok=True)
    props = os.path.join(tmp, "kafka-secure.properties")
    with open(props, "w") as f:
        f.write("\n".join(lines) + "\n")
    env = {**os.environ, "LOG_DIR": os.path.join(tmp, "kafka-logs"), "KAFKA_HEAP_OPTS": "-Xmx512M -Xms512M"}
    bin_dir = os.path.join(KAFKA_HOME, "bin")
    scram = []
    for user, password in USERS.items():
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            scram += ["--add-scram", f"{mech}=[name={user},password={password}]"]
    subprocess.run([os.path.join(bin_dir, "kafka-storage.sh"), "format", "-t", "secure-test-cluster-001",
                    "-c", props, *scram], check=True, capture_output=True, env=env, timeout=120)
    proc = subprocess.Popen([os.path.join(bin_dir, "kafka-server-start.sh"), props], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        Cluster.wait_for(lambda: proc.poll() is None and answers_requests(plain) is None, 120, "Kafka to listen",
                         interval=0.5)
    except BaseException:
        proc.kill()
        proc.wait(60)
        raise
    addr = lambda port: f"127.0.0.1:{port}"  # noqa: E731
    return proc, SecureBroker(addr(plain), addr(tls), addr(sasl_plain), addr(sasl_tls), certs, reauth_ms)


def stop(proc) -> None:
    proc.kill()
    proc.wait(60)


def start_secure_pybroker(tmp, certs: Certs, reauth_ms: int = 3000):
    """(BrokerProcess, SecureBroker): pybroker with the listeners and users of start_secure_kafka;
    SCRAM users are created with AlterUserScramCredentials over the PLAINTEXT listener."""
    from tests.broker import BrokerProcess
    from tests.cluster import free_ports
    plain, tls, sasl_plain, sasl_tls = free_ports(4)
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},SASL_PLAINTEXT://127.0.0.1:{sasl_plain},"
                     f"SASL_SSL://127.0.0.1:{sasl_tls}",
        "inter.broker.listener.name": "PLAINTEXT", "num.partitions": 2, "offsets.topic.replication.factor": 1,
        "group.initial.rebalance.delay.ms": 0,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.broker,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca,
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.connections.max.reauth.ms": reauth_ms,
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        overrides[f"listener.name.{listener}.plain.sasl.jaas.config"] = \
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
    os.makedirs(str(tmp), exist_ok=True)
    broker = BrokerProcess(os.path.join(str(tmp), "pybroker-data"), overrides, plain).start()
    try:
        _add_scram_users(f"127.0.0.1:{plain}")
    except BaseException:
        broker.close()
        raise
    addr = lambda port: f"127.0.0.1:{port}"  # noqa: E731
    return broker, SecureBroker(addr(plain), addr(tls), addr(sasl_plain), addr(sasl_tls), certs, reauth_ms)


def _add_scram_users(bootstrap: str) -> None:
    import asyncio
    import hashlib
    import secrets
    from pybroker.client.connection import BrokerConnection
    from pybroker.protocol import REQUESTS
    api = REQUESTS[51]
    upserts = []
    for user, password in USERS.items():
        for mech_type, digest in ((1, "sha256"), (2, "sha512")):
            salt = secrets.token_bytes(16)
            upserts.append(api.ScramCredentialUpsertion(
                name=user, mechanism=mech_type, iterations=4096, salt=salt,
                salted_password=hashlib.pbkdf2_hmac(digest, password.encode(), salt, 4096)))

    async def send():
        host, port = bootstrap.rsplit(":", 1)
        conn = await BrokerConnection.open(host, int(port))
        try:
            resp = await conn.request(api(deletions=[], upsertions=upserts), 0)
        finally:
            await conn.close()
        assert all(r.error_code == 0 for r in resp.results), [(r.user, r.error_message) for r in resp.results]
    asyncio.run(asyncio.wait_for(send(), 30))
