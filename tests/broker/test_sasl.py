"""SASL PLAIN and SCRAM-SHA-256/512 on a real broker process: every client, the SCRAM admin APIs,
the pre-authentication gate and its frame limit, re-authentication (KIP-368), restarts, clusters.

The cases of the other tiers: tests/cluster/test_sasl.py, tests/unit/test_sasl.py.
"""
import asyncio
import os
import resource
import shutil
import socket
import subprocess
import time
import uuid

import pytest

from pybroker.protocol import REQUESTS
from tests.broker import BrokerProcess
from tests.kafka_wire import ConnectionClosed, WireClient
from tests.sasl_wire import (JAAS, admin_client, alter, can_login, describe, error_codes, gate_cases, login,
                              refusals, response_fields, run_steps, sample_request, upsertion)

SASL = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.replication.factor": "1"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PASSWORDS = {"PLAIN": "alice-secret", "SCRAM-SHA-256": "carol-256", "SCRAM-SHA-512": "carol-512"}
USERS = {"PLAIN": "alice", "SCRAM-SHA-256": "carol", "SCRAM-SHA-512": "carol"}
DEADLINE = 30.0
KAFKA_HOME = os.path.expanduser("~/.cache/pybroker-kafka/kafka_2.13-3.8.0")
KAFKA_38_LAST_API = 75  # DescribeTopicPartitions: the newest API a Kafka 3.8 broker serves


def wait_until(predicate, timeout: float = DEADLINE, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


# ---- mechanisms, JAAS and config without a broker ------------------------------------------


# ---- fixtures -------------------------------------------------------------------------------

def start(tmp_path_factory, name: str, extra: dict | None = None) -> BrokerProcess:
    data = str(tmp_path_factory.mktemp(name) / "data")
    return BrokerProcess(data, {**SASL, **(extra or {})}).start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start(tmp_path_factory, "sasl")
    try:
        with admin_client(b.port) as admin:
            assert alter(admin, [upsertion("carol", "SCRAM-SHA-256", PASSWORDS["SCRAM-SHA-256"]),
                                 upsertion("carol", "SCRAM-SHA-512", PASSWORDS["SCRAM-SHA-512"], 8192)]) \
                == {"carol": (0, None)}
        yield b
    finally:
        b.stop()
        b.close()


def topic_name() -> str:
    return f"sasl-{uuid.uuid4().hex[:10]}"


def confluent_conf(b, mechanism: str, user=None, password=None) -> dict:
    return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user or USERS[mechanism], "sasl.password": password or PASSWORDS[mechanism]}


# ---- each client, each mechanism ------------------------------------------------------------

def _confluent(b, mechanism, topic, values):
    return _confluent_round_trip(confluent_conf(b, mechanism), topic, values)


def _confluent_round_trip(conf, topic, values):
    """Produce ``values`` with confluent-kafka, then read partition 0 back from the start."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    for v in values:
        p.produce(topic, v)
    assert p.flush(DEADLINE) == 0
    c = Consumer({**conf, "group.id": topic, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + DEADLINE
    while len(got) < len(values) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    return got


def _kafka_python(b, mechanism, topic, values):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    conf = dict(bootstrap_servers=b.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username=USERS[mechanism], sasl_plain_password=PASSWORDS[mechanism])
    p = KafkaProducer(acks="all", **conf)
    for v in values:
        p.send(topic, v)
    p.flush(DEADLINE)
    p.close()
    c = KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=int(DEADLINE * 1000), **conf)
    c.assign([TopicPartition(topic, 0)])
    c.seek(TopicPartition(topic, 0), 0)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == len(values):
            break
    c.close()
    return got


def _aiokafka(b, mechanism, topic, values):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run():
        conf = dict(bootstrap_servers=b.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                    sasl_plain_username=USERS[mechanism], sasl_plain_password=PASSWORDS[mechanism])
        p = AIOKafkaProducer(acks="all", **conf)
        await p.start()
        try:
            for v in values:
                await p.send_and_wait(topic, v)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(enable_auto_commit=False, **conf)
        await c.start()
        got = []
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            while len(got) < len(values):
                batch = await asyncio.wait_for(c.getmany(timeout_ms=500), DEADLINE)
                got += [m.value for msgs in batch.values() for m in msgs]
        finally:
            await c.stop()
        return got
    return asyncio.run(asyncio.wait_for(run(), DEADLINE * 2))


def _kcat(b, mechanism, topic, values):
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    conf = ["-b", b.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanism={mechanism}",
            "-X", f"sasl.username={USERS[mechanism]}", "-X", f"sasl.password={PASSWORDS[mechanism]}"]
    subprocess.run(["kcat", *conf, "-P", "-t", topic, "-p", "0"], input=b"\n".join(values) + b"\n",
                   check=True, timeout=DEADLINE)
    out = subprocess.run(["kcat", *conf, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q"],
                         check=True, timeout=DEADLINE, capture_output=True).stdout
    return out.split(b"\n")[:len(values)]


CLIENTS = {"confluent": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka, "kcat": _kcat}


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_produces_and_consumes(broker, client, mechanism):
    topic = topic_name()
    values = [f"{client}-{mechanism}-{i}".encode() for i in range(20)]
    assert CLIENTS[client](broker, mechanism, topic, values) == values


# ---- failures -------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_is_58_then_closed(broker, mechanism):
    with WireClient(broker.port) as client:
        started = time.monotonic()
        resp = login(client, mechanism, USERS[mechanism], "not-the-password")
        assert time.monotonic() - started >= 0.09  # connection.failed.authentication.delay.ms (100)
        assert resp.error_code == 58
        expected = ("Authentication failed: Invalid username or password" if mechanism == "PLAIN" else
                    f"Authentication failed during authentication due to invalid credentials with SASL "
                    f"mechanism {mechanism}")
        assert resp.error_message == expected
        assert client.is_closed_by_peer()
    line = wait_until(lambda: [ln for ln in broker.stderr().splitlines() if "authentication failed" in ln
                               and f"mechanism={mechanism}" in ln], what="the audit line")[-1]
    assert f"username={USERS[mechanism]}" in line and "client_host=127.0.0.1" in line
    assert "listener=SASL_PLAINTEXT" in line and "not-the-password" not in broker.stderr()


def test_unknown_user_and_confluent_sees_the_failure(broker):
    from confluent_kafka import KafkaError, Producer
    assert can_login(broker.port, "SCRAM-SHA-256", "nobody", "x") == 58
    errors = []
    p = Producer({**confluent_conf(broker, "SCRAM-SHA-512", "carol", "wrong"), "error_cb": errors.append})
    wait_until(lambda: p.poll(0.2) is not None and errors, what="an authentication error")
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()


def test_unsupported_mechanism_is_33_with_the_enabled_list(broker):
    with WireClient(broker.port) as client:
        resp = client.request(REQUESTS[17](mechanism="GSSAPI"), 1)
        assert resp.error_code == 33
        assert sorted(resp.mechanisms) == sorted(MECHANISMS)
        assert client.is_closed_by_peer()


# What Apache Kafka 3.8 does in each state (checked against it in test_gate_matches_kafka):
# before the handshake or after a v0 one, a stray request closes the connection unanswered; after
# a v1 handshake it gets its own response with ILLEGAL_SASL_STATE (34), then the connection closes.
ANSWER, ILLEGAL, CLOSED = ("answer", [0]), ("answer", [34]), ("closed",)
GATE = {
    "metadata first": [CLOSED],
    "authenticate first": [CLOSED],
    "versions, metadata": [ANSWER, CLOSED],
    "versions twice": [ANSWER, CLOSED],
    "versions, authenticate": [ANSWER, CLOSED],
    "v1 handshake, metadata": [ANSWER, ANSWER, ILLEGAL, CLOSED],
    "v1 handshake, heartbeat": [ANSWER, ILLEGAL, CLOSED],
    "v1 handshake, versions": [ANSWER, ILLEGAL, CLOSED],
    "v1 handshake, unsupported versions": [ANSWER, ILLEGAL, CLOSED],  # a v0 answer (KIP-511)
    "v1 handshake, handshake": [ANSWER, ANSWER, ILLEGAL, CLOSED],
    "v1 handshake, produce acks=1": [ANSWER, ILLEGAL, CLOSED],
    "v1 handshake, produce acks=0": [ANSWER, CLOSED],
    "v1 handshake, unknown api": [ANSWER, CLOSED],
    "mid-exchange, metadata": [ANSWER, ANSWER, ILLEGAL, CLOSED],
    "v0 handshake, metadata": [ANSWER, CLOSED],
    "v0 handshake, handshake": [ANSWER, CLOSED],
    "authenticated, handshake": [ANSWER, ANSWER, ILLEGAL, ("open",)],  # no re-authentication: not fatal
}


def test_requests_before_authentication_as_kafka(broker):
    assert {name: run_steps(broker.port, steps) for name, steps in gate_cases().items()} == GATE
    log = broker.stderr()
    assert "Metadata before SASL authentication completed" in log
    assert "reason=\"Metadata request during SASL authentication\"" in log


def test_every_api_is_refused_with_34_during_the_exchange(broker):
    """Each API at its lowest and highest version, right after SaslHandshake v1: its own response,
    echoing the request's items with ILLEGAL_SASL_STATE, then the connection closes."""
    from pybroker.api import TABLE
    from pybroker.api.error_response import error_response
    cases = [(k, v) for k, api in sorted(TABLE.items()) if k != 36 for v in {api.MIN_VERSION, api.MAX_VERSION}]
    answers = refusals(broker.port, cases)
    for (key, version), answer in answers.items():
        assert answer is not None, (key, version)
        codes = error_codes(answer, version)
        assert set(codes) == ({34} if (key, version) != (35, 0) else set()), (key, version, codes)  # v0-2: no code
        expected = error_response(key, version, sample_request(key, version), 34, "SASL authentication")
        assert response_fields(answer, version) == response_fields(expected, version), (key, version)


def test_gate_matches_kafka(tmp_path, broker):
    """Apache Kafka 3.8 as the oracle: the same steps have the same outcomes, and its refusals have
    the same fields and values as ours (messages aside) for every API version it also speaks."""
    from pybroker.api import TABLE
    from tests.secure_brokers import kafka_available, make_certs, start_secure_kafka, stop
    if not kafka_available():
        pytest.skip("Apache Kafka 3.8 is not installed")
    proc, kafka = start_secure_kafka(tmp_path, make_certs(str(tmp_path / "certs")))
    try:
        port = int(kafka.sasl_plaintext.rsplit(":", 1)[1])
        assert {name: run_steps(port, steps) for name, steps in gate_cases("alice").items()} == GATE
        with WireClient(port) as client:  # KRaft leaves the ZooKeeper-era APIs out: those are compared too
            ranges = {a.api_key: (a.min_version, a.max_version) for a in client.api_versions().api_keys}
        # APIs newer than Kafka 3.8 (the share groups of Kafka 4.2) have nothing to be compared with
        cases = [(k, v) for k, api in sorted(TABLE.items()) if k != 36 and (k in ranges or k <= KAFKA_38_LAST_API)
                 for v in {api.MIN_VERSION, api.MAX_VERSION}
                 if ranges.get(k, (v, v))[0] <= v <= ranges.get(k, (v, v))[1]]
        theirs = refusals(port, cases)
    finally:
        stop(proc)
    ours = refusals(broker.port, cases)
    for key, version in cases:
        assert theirs[key, version] is not None, (key, version)
        assert response_fields(ours[key, version], version) == response_fields(theirs[key, version], version), \
            (key, version)


def test_sasl_requests_after_authentication(broker):
    with WireClient(broker.port) as client:
        assert login(client, "PLAIN", "alice", "alice-secret").error_code == 0
        resp = client.request(REQUESTS[36](auth_bytes=b"x"), 2)
        assert resp.error_code == 34
        assert resp.error_message == "SaslAuthenticate request received after successful authentication"
        hs = client.request(REQUESTS[17](mechanism="PLAIN"), 1)  # no re-authentication without a lifetime
        assert (hs.error_code, hs.mechanisms) == (34, [])
        assert client.metadata().brokers  # still open


def test_user_quota_applies_to_the_authenticated_user(broker):
    from pybroker.records import build_batch
    topic = topic_name()
    Q, P = REQUESTS[49], REQUESTS[0]

    def produce(client):
        batch = bytes(build_batch([os.urandom(1000) for _ in range(100)]))
        req = P(transactional_id=None, acks=1, timeout_ms=10000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])])
        return client.request(req, 8).throttle_time_ms

    with admin_client(broker.port) as admin, WireClient(broker.port) as alice:
        admin.create_topic(topic)
        entity = [Q.EntityData(entity_type="user", entity_name="alice")]
        resp = admin.request(Q(entries=[Q.EntryData(entity=entity, ops=[Q.OpData(
            key="producer_byte_rate", value=10000.0, remove=False)])], validate_only=False), 1)
        assert resp.entries[0].error_code == 0
        try:
            assert login(alice, "PLAIN", "alice", "alice-secret").error_code == 0
            assert produce(alice) > 0  # 100 KB against 10 KB/s (then alice's connection is muted)
            assert produce(admin) == 0  # another user: no quota
        finally:
            admin.request(Q(entries=[Q.EntryData(entity=entity, ops=[Q.OpData(
                key="producer_byte_rate", value=0.0, remove=True)])], validate_only=False), 1)


def test_api_versions_advertises_the_sasl_apis(broker):
    with WireClient(broker.port) as client:
        ranges = {k.api_key: (k.min_version, k.max_version) for k in client.api_versions().api_keys}
    assert ranges[17] == (0, 1) and ranges[36] == (0, 2) and ranges[50] == (0, 0) and ranges[51] == (0, 0)


def test_handshake_v0_raw_tokens(broker):
    """SaslHandshake v0: the PLAIN token and the answer travel as bare size-prefixed frames."""
    with WireClient(broker.port) as client:
        assert client.request(REQUESTS[17](mechanism="PLAIN"), 0).error_code == 0
        client.send_frame(b"\0alice\0alice-secret")
        assert client.recv_frame() == b""
        assert client.metadata().brokers
    with WireClient(broker.port) as client:
        assert client.request(REQUESTS[17](mechanism="PLAIN"), 0).error_code == 0
        client.send_frame(b"\0alice\0wrong-password")
        assert client.is_closed_by_peer()


def test_pre_auth_frame_limit_does_not_allocate(broker):
    """A size prefix of 600 KiB before authentication (limit 512 KiB) closes the connection at once."""
    before = rss_kib(broker.proc.pid)
    for _ in range(200):
        with WireClient(broker.port) as client:
            client.send_raw((600 * 1024).to_bytes(4, "big"))
            assert client.is_closed_by_peer()
    assert rss_kib(broker.proc.pid) - before < 16 * 1024  # 200 x 600 KiB would be 117 MiB
    assert "is larger than sasl.server.max.receive.size (524288)" in broker.stderr()
    # still serving; and after authentication a frame of 600 KiB is fine
    with admin_client(broker.port) as client:
        topic = topic_name()
        client.create_topic(topic)
    big = os.urandom(600 * 1024)
    from confluent_kafka import Producer
    p = Producer({**confluent_conf(broker, "PLAIN"), "message.max.bytes": 2 << 20})
    p.produce(topic, big)
    assert p.flush(DEADLINE) == 0


def test_many_idle_unauthenticated_connections(broker):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    idle = []
    try:
        for _ in range(1000):
            idle.append(socket.create_connection(("127.0.0.1", broker.port), timeout=10))
        topic = topic_name()
        values = [f"v{i}".encode() for i in range(50)]
        assert _confluent(broker, "SCRAM-SHA-256", topic, values) == values
        idle[0].sendall(b"\0\0")  # half a size prefix: still waiting, still open
        assert WireClient(broker.port).api_versions().error_code == 0
    finally:
        for s in idle:
            s.close()


# ---- SCRAM credentials: the admin APIs ------------------------------------------------------

def test_user_created_can_log_in_and_deleted_cannot(broker):
    with admin_client(broker.port) as admin:
        assert alter(admin, [upsertion("dave", "SCRAM-SHA-512", "dave-pw")]) == {"dave": (0, None)}
        assert can_login(broker.port, "SCRAM-SHA-512", "dave", "dave-pw") == 0
        assert can_login(broker.port, "SCRAM-SHA-256", "dave", "dave-pw") == 58  # no 256 credential
        assert alter(admin, deletions=[("dave", "SCRAM-SHA-512")]) == {"dave": (0, None)}
        assert can_login(broker.port, "SCRAM-SHA-512", "dave", "dave-pw") == 58


def test_describe_lists_mechanisms_and_iterations_only(broker):
    with admin_client(broker.port) as admin:
        resp = describe(admin)
        assert resp.error_code == 0
        carol = {r.user: r for r in resp.results}["carol"]
        assert sorted((c.mechanism, c.iterations) for c in carol.credential_infos) == [(1, 4096), (2, 8192)]
        resp = describe(admin, ["carol", "nobody", "carol", ""])
        by_user = {r.user: (r.error_code, r.error_message) for r in resp.results}
        assert len(resp.results) == 3
        assert by_user["carol"][0] == 92 and by_user["nobody"][0] == 91 and by_user[""][0] == 91
        assert by_user["nobody"][1] == "Attempt to describe a user credential that does not exist: nobody"


def test_alter_errors_as_kafka(broker):
    with admin_client(broker.port) as admin:
        bad_mech = REQUESTS[51].ScramCredentialUpsertion(name="erin", mechanism=7, iterations=4096, salt=b"s",
                                                         salted_password=b"p" * 32)
        result = alter(admin, [upsertion("", "SCRAM-SHA-256", "x"), bad_mech,
                               upsertion("few", "SCRAM-SHA-256", "x", 1000),
                               upsertion("many", "SCRAM-SHA-256", "x", 20000),
                               upsertion("twice", "SCRAM-SHA-256", "x"), upsertion("twice", "SCRAM-SHA-256", "y")],
                       deletions=[("ghost", "SCRAM-SHA-512")])
        assert result == {"": (93, "Username must not be empty"), "erin": (33, "Unknown SCRAM mechanism"),
                          "few": (93, "Too few iterations"), "many": (93, "Too many iterations"),
                          "twice": (92, "A user credential cannot be altered twice in the same request"),
                          "ghost": (91, "Attempt to delete a user credential that does not exist")}
        assert {r.user for r in describe(admin).results}.isdisjoint({"erin", "few", "many", "twice"})


def test_kafka_configs_cli_creates_and_describes_users(broker, tmp_path):
    tool = os.path.join(KAFKA_HOME, "bin", "kafka-configs.sh")
    if not os.path.exists(tool) or shutil.which("java") is None:
        pytest.skip("Apache Kafka's CLI is not available")
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      f"sasl.jaas.config={JAAS.split(' user_admin')[0]};\n")
    base = [tool, "--bootstrap-server", broker.bootstrap, "--command-config", str(config)]
    subprocess.run([*base, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=frank-pw]",
                    "--entity-type", "users", "--entity-name", "frank"], check=True, timeout=120, capture_output=True)
    out = subprocess.run([*base, "--describe", "--entity-type", "users", "--entity-name", "frank"], check=True,
                         timeout=120, capture_output=True, text=True).stdout
    assert "SCRAM-SHA-256=iterations=8192" in out and "frank-pw" not in out
    assert can_login(broker.port, "SCRAM-SHA-256", "frank", "frank-pw") == 0
    scram = tmp_path / "frank.properties"  # Kafka's Java client logging in with SCRAM as frank
    scram.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config="
                     "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"frank\" "
                     "password=\"frank-pw\";\n")
    out = subprocess.run([tool, "--bootstrap-server", broker.bootstrap, "--command-config", str(scram), "--describe",
                          "--entity-type", "users", "--entity-name", "carol"], check=True, timeout=120,
                         capture_output=True, text=True).stdout
    assert "SCRAM-SHA-256=iterations=4096" in out and "SCRAM-SHA-512=iterations=8192" in out
    subprocess.run([*base, "--alter", "--delete-config", "SCRAM-SHA-256", "--entity-type", "users",
                    "--entity-name", "frank"], check=True, timeout=120, capture_output=True)
    assert can_login(broker.port, "SCRAM-SHA-256", "frank", "frank-pw") == 58


def test_credentials_survive_a_restart_and_hold_no_password(tmp_path_factory):
    b = start(tmp_path_factory, "sasl-restart")
    try:
        with admin_client(b.port) as admin:
            assert alter(admin, [upsertion("gina", "SCRAM-SHA-256", "gina-password")]) == {"gina": (0, None)}
        b.stop()
        path = os.path.join(b.data_dir, "scram-credentials.json")
        text = open(path).read()
        assert "stored_key=" in text and "gina-password" not in text
        assert os.stat(path).st_mode & 0o077 == 0
        b.start()
        assert can_login(b.port, "SCRAM-SHA-256", "gina", "gina-password") == 0
        assert can_login(b.port, "SCRAM-SHA-256", "gina", "wrong") == 58
    finally:
        b.stop()
        b.close()


# ---- re-authentication (KIP-368) ------------------------------------------------------------

@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory):
    b = start(tmp_path_factory, "sasl-reauth", {"connections.max.reauth.ms": "2000", "log.level": "DEBUG"})
    try:
        with admin_client(b.port) as admin:
            assert alter(admin, [upsertion("carol", "SCRAM-SHA-256", PASSWORDS["SCRAM-SHA-256"])]) \
                == {"carol": (0, None)}
        yield b
    finally:
        b.stop()
        b.close()


def test_session_expires_without_reauthentication(reauth_broker):
    with WireClient(reauth_broker.port) as client:
        started = time.monotonic()
        resp = login(client, "PLAIN", "alice", "alice-secret")
        assert resp.error_code == 0 and resp.session_lifetime_ms == 2000

        def closed():
            try:
                client.api_versions()
                return False
            except (ConnectionClosed, OSError):
                return True
        wait_until(closed, 15, "the expired session to be closed")
        assert time.monotonic() - started >= 1.9
    assert "after the session expired" in reauth_broker.stderr()


def relogin(client, mechanism: str, user: str, password: str):
    """Re-authenticate on the live connection once the broker allows it (a second after the last login)."""
    return wait_until(lambda: (r := login(client, mechanism, user, password)).error_code != 34 and r,
                      what="re-authentication to be allowed")


def test_reauthentication_on_the_live_connection(reauth_broker):
    with WireClient(reauth_broker.port) as client:
        assert login(client, "SCRAM-SHA-256", "carol", PASSWORDS["SCRAM-SHA-256"]).session_lifetime_ms == 2000
        hs = client.request(REQUESTS[17](mechanism="SCRAM-SHA-256"), 1)  # at once: too early, as Kafka
        assert (hs.error_code, hs.mechanisms) == (34, [])
        resp = relogin(client, "SCRAM-SHA-256", "carol", PASSWORDS["SCRAM-SHA-256"])  # same connection
        assert resp.error_code == 0 and resp.session_lifetime_ms == 2000
        assert client.metadata().brokers
        resp = relogin(client, "PLAIN", "alice", "alice-secret")
        assert resp.error_code == 33  # the mechanism may not change
    with WireClient(reauth_broker.port) as client:
        assert login(client, "PLAIN", "alice", "alice-secret").error_code == 0
        resp = relogin(client, "PLAIN", "admin", "admin-secret")
        assert resp.error_code == 58
        assert resp.error_message == "Cannot change principals during re-authentication from User.alice: User.admin"
        assert client.is_closed_by_peer()


def test_confluent_consumer_keeps_working_across_lifetimes(reauth_broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    b = reauth_broker
    topic = topic_name()
    p = Producer({**confluent_conf(b, "SCRAM-SHA-256"), "linger.ms": 0})
    c = Consumer({**confluent_conf(b, "SCRAM-SHA-256"), "group.id": topic, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    closes_before = b.stderr().count("after the session expired")
    sent, got = 0, []
    deadline = time.monotonic() + 8.0  # four session lifetimes
    while time.monotonic() < deadline:
        p.produce(topic, f"r{sent}".encode())
        sent += 1
        p.poll(0)
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
    assert p.flush(DEADLINE) == 0
    wait_until(lambda: ((m := c.poll(0.2)) is not None and not m.error() and got.append(m.value()))
               or len(got) >= sent, what="every record")
    c.close()
    assert got == [f"r{i}".encode() for i in range(sent)]
    assert b.stderr().count("after the session expired") == closes_before  # re-authenticated, never expired
    assert b.stderr().count("re-authentication as User:carol with SCRAM-SHA-256") >= 3


def test_kafka_python_consumer_reauthenticates(reauth_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    b = reauth_broker
    conf = dict(bootstrap_servers=b.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                sasl_plain_username="carol", sasl_plain_password=PASSWORDS["SCRAM-SHA-256"])
    topic = topic_name()
    p = KafkaProducer(acks=1, **conf)
    c = KafkaConsumer(enable_auto_commit=False, **conf)
    tp = TopicPartition(topic, 0)
    closes_before = b.stderr().count("after the session expired")
    reauths_before = b.stderr().count("re-authentication as User:carol")
    sent, got = 0, []
    try:
        p.send(topic, b"r0").get(DEADLINE)
        sent = 1
        c.assign([tp])
        c.seek(tp, 0)
        deadline = time.monotonic() + 7.0  # three and a half session lifetimes
        while time.monotonic() < deadline or len(got) < sent:
            if time.monotonic() < deadline:
                p.send(topic, f"r{sent}".encode())
                sent += 1
            got += [m.value for msgs in c.poll(timeout_ms=200).values() for m in msgs]
            assert time.monotonic() < deadline + DEADLINE, "records missing"
    finally:
        p.close()
        c.close()
    assert got == [f"r{i}".encode() for i in range(sent)]
    assert b.stderr().count("after the session expired") == closes_before
    assert b.stderr().count("re-authentication as User:carol") >= reauths_before + 3


def test_mechanisms_per_listener(tmp_path_factory):
    from tests.cluster import free_ports
    inner, = free_ports(1)
    b = start(tmp_path_factory, "sasl-listeners", {
        "listeners": f"OUTER://127.0.0.1:0,INNER://127.0.0.1:{inner}",
        "listener.security.protocol.map": "OUTER:SASL_PLAINTEXT,INNER:SASL_PLAINTEXT",
        "listener.name.outer.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.outer.plain.sasl.jaas.config": JAAS,
        "listener.name.inner.sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    try:
        with WireClient(inner) as client:
            resp = client.request(REQUESTS[17](mechanism="PLAIN"), 1)
            assert (resp.error_code, resp.mechanisms) == (33, ["SCRAM-SHA-512"])
        with admin_client(b.port) as admin:
            assert alter(admin, [upsertion("ivy", "SCRAM-SHA-512", "ivy-pw")]) == {"ivy": (0, None)}
        assert can_login(inner, "SCRAM-SHA-512", "ivy", "ivy-pw") == 0
        assert can_login(b.port, "SCRAM-SHA-512", "ivy", "ivy-pw") == 33
    finally:
        b.stop()
        b.close()


# ---- a cluster: credentials in ZooKeeper, next to client quotas --------------------------------


# ---- SASL over TLS ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ssl_broker(tmp_path_factory):
    pytest.importorskip("cryptography")
    from tests.tlsutil import Authority
    pki = str(tmp_path_factory.mktemp("sasl-pki"))
    ca = Authority(pki)
    cert = ca.issue("broker", {"CN": "broker"}, hosts=("127.0.0.1", "localhost"))
    b = start(tmp_path_factory, "sasl-ssl", {
        "listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": cert["pem"], "ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS})
    b.ca = ca.cert_path
    try:
        with tls_client(b) as admin:
            assert login(admin, "PLAIN", "admin", "admin-secret").error_code == 0
            assert alter(admin, [upsertion("carol", "SCRAM-SHA-256", PASSWORDS["SCRAM-SHA-256"]),
                                 upsertion("carol", "SCRAM-SHA-512", PASSWORDS["SCRAM-SHA-512"])]) \
                == {"carol": (0, None)}
        yield b
    finally:
        b.stop()
        b.close()


def tls_client(b) -> WireClient:
    import ssl
    client = WireClient(b.port)
    client.sock = ssl.create_default_context(cafile=b.ca).wrap_socket(client.sock, server_hostname="127.0.0.1")
    return client


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_sasl_ssl_confluent(ssl_broker, mechanism):
    conf = {**confluent_conf(ssl_broker, mechanism), "security.protocol": "SASL_SSL", "ssl.ca.location": ssl_broker.ca}
    topic = topic_name()
    values = [f"ssl-{mechanism}-{i}".encode() for i in range(20)]
    assert _confluent_round_trip(conf, topic, values) == values


def test_sasl_ssl_wrong_password_and_gate(ssl_broker):
    with tls_client(ssl_broker) as client:
        resp = login(client, "SCRAM-SHA-512", "carol", "wrong")
        assert resp.error_code == 58 and client.is_closed_by_peer()
    with tls_client(ssl_broker) as client:
        client.send_only(REQUESTS[3](topics=None), 8)
        assert client.is_closed_by_peer()
    with tls_client(ssl_broker) as client:
        client.send_raw((600 * 1024).to_bytes(4, "big"))
        assert client.is_closed_by_peer()
