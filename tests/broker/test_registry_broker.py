"""The schema registry served by a broker process: schemas stored in the compacted topic ``_schemas``,
confluent-kafka's SchemaRegistryClient against it, restarts (clean and kill -9) that keep every schema,
id and version, and a Kafka listener that keeps serving while the registry is sent garbage."""
import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from pybroker.client import AdminClient, ConfigResource, Consumer, Producer
from tests.registryutil import registry_ready, start_registry_broker

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def call(url: str, method: str, path: str, body=None, timeout: float = 10.0):
    """(HTTP status, decoded JSON body) of one request to the registry."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def record(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "regtest",
                       "fields": [{"name": f, "type": "string", "default": ""} for f in fields]})


def register(url: str, subject: str, schema: str, schema_type: str | None = None) -> int:
    body = {"schema": schema, **({"schemaType": schema_type} if schema_type else {})}
    status, answer = call(url, "POST", f"/subjects/{subject}/versions", body)
    assert status == 200, answer
    return answer["id"]


def snapshot(url: str) -> dict:
    """Every subject's versions (soft-deleted ones included) as {(subject, version): (id, schema)},
    plus the global and subject compatibility levels."""
    status, subjects = call(url, "GET", "/subjects?deleted=true")
    assert status == 200, subjects
    out = {}
    for subject in subjects:
        out[("live versions", subject)] = call(url, "GET", f"/subjects/{subject}/versions")  # soft deletes stay
        status, versions = call(url, "GET", f"/subjects/{subject}/versions?deleted=true")
        assert status == 200, versions
        for v in versions:
            status, got = call(url, "GET", f"/subjects/{subject}/versions/{v}?deleted=true")
            assert status == 200, got
            out[(subject, v)] = (got["id"], json.loads(got["schema"]) if got.get("schemaType") in (None, "AVRO",
                                                                                                  "JSON")
                                 else got["schema"])
    out["config"] = call(url, "GET", "/config")[1]
    out["config:restart-b"] = call(url, "GET", "/config/restart-b")
    return out


@pytest.fixture
def registry_broker(tmp_path):
    """A broker serving the registry: (broker, url); stopped after the test."""
    started = []

    def start(data_dir=str(tmp_path / "data")):
        broker, url = start_registry_broker(data_dir)
        started.append(broker)
        return broker, url
    yield start
    for b in started:
        try:
            b.stop()
        finally:
            b.close()


def test_register_stores_in_a_compacted_topic_and_confluent_client_works(registry_broker):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    broker, url = registry_broker()
    first = register(url, "orders-value", record("Order", "id"))
    assert call(url, "GET", "/subjects")[1] == ["orders-value"]
    status, got = call(url, "GET", f"/schemas/ids/{first}")
    assert status == 200 and json.loads(got["schema"])["name"] == "Order"

    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        topic = admin.describe_topics(["_schemas"])["_schemas"]
        assert len(topic.partitions) == 1
        configs = admin.describe_configs([ConfigResource("topic", "_schemas")])
        values = next(iter(configs.values()))
        policy = values["cleanup.policy"]
        assert getattr(policy, "value", policy) == "compact"

    # the record is Confluent's layout: a SCHEMA key and a value with subject, version, id and schema
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([("_schemas", 0, 0)])
        records, deadline = [], time.monotonic() + 20
        while not records and time.monotonic() < deadline:
            records = [r for r in consumer.poll(timeout_ms=500) if json.loads(r.key)["keytype"] == "SCHEMA"]
    assert records, "no SCHEMA record in _schemas"
    key, value = json.loads(records[0].key), json.loads(records[0].value)
    assert (key["subject"], key["version"]) == ("orders-value", 1)
    assert (value["subject"], value["version"], value["id"]) == ("orders-value", 1, first)

    client = SchemaRegistryClient({"url": url})
    second = client.register_schema("users-value", Schema(record("User", "name"), "AVRO"))
    assert second != first
    assert client.register_schema("users-value", Schema(record("User", "name"), "AVRO")) == second  # idempotent
    latest = client.get_latest_version("users-value")
    assert (latest.schema_id, latest.version) == (second, 1)
    assert json.loads(client.get_schema(first).schema_str)["name"] == "Order"
    assert sorted(client.get_subjects()) == ["orders-value", "users-value"]


def _populate(url: str) -> dict:
    ids = {}
    ids["a1"] = register(url, "restart-a", record("A", "x"))
    ids["a2"] = register(url, "restart-a", record("A", "x", "y"))
    ids["b1"] = register(url, "restart-b", record("B", "x"))
    ids["p1"] = register(url, "restart-p", 'syntax = "proto3";\npackage regtest;\n\nmessage P {\n  string q = 1;\n}\n',
                         "PROTOBUF")
    assert call(url, "PUT", "/config/restart-b", {"compatibility": "NONE"})[0] == 200
    assert call(url, "DELETE", "/subjects/restart-a/versions/1")[0] == 200  # soft: kept with ?deleted=true
    return ids


@pytest.mark.parametrize("how", ["sigterm", "kill"])
def test_restart_keeps_every_schema_id_and_version(registry_broker, tmp_path, how):
    data = str(tmp_path / "data")
    broker, url = registry_broker(data)
    ids = _populate(url)
    assert len(set(ids.values())) == len(ids)
    before = snapshot(url)
    if how == "sigterm":
        assert broker.stop() == 0
    else:
        broker.kill()
    broker.close()

    broker, url = registry_broker(data)
    assert snapshot(url) == before
    newer = register(url, "restart-c", record("C", "x"))
    assert newer > max(ids.values())  # ids go on past the old ones, never reused
    assert call(url, "GET", "/subjects/restart-b/versions/1")[1]["id"] == ids["b1"]


def _kafka_round_trip(bootstrap: str, topic: str, n: int = 20) -> None:
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(n):
            producer.produce(topic, value=b"v%d" % i)
        assert producer.flush(20) == 0
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(topic, 0, 0)])
        got, deadline = [], time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            got += consumer.poll(timeout_ms=500)
    assert [r.value for r in got] == [b"v%d" % i for i in range(n)]


def test_kafka_listener_keeps_serving_while_the_registry_gets_garbage(registry_broker):
    broker, url = registry_broker()
    host, port = url.rsplit("/", 1)[1].split(":")
    held = []
    try:
        for junk in (b"\x00\xff" * 512 + b"\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
                     b"POST /subjects/x/versions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n{"):
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(junk)
            held.append(s)
        half = socket.create_connection((host, int(port)), timeout=10)  # half-open: headers never finished
        half.sendall(b"POST /subjects/slow/versions HTTP/1.1\r\nHost: x\r\nContent-Le")
        held.append(half)
        idle = socket.create_connection((host, int(port)), timeout=10)  # connected, silent
        held.append(idle)

        _kafka_round_trip(broker.bootstrap, "registry-garbage-topic")
        # the registry itself still answers, and its JSON errors are Confluent's
        assert call(url, "GET", "/subjects")[0] == 200
        status, answer = call(url, "POST", "/subjects/bad/versions", {"schema": "{not json"})
        assert status == 422 and answer["error_code"] == 42201
        req = urllib.request.Request(url + "/subjects/bad/versions", data=b"{{{", method="POST",
                                     headers={"Content-Type": CONTENT_TYPE})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert 400 <= err.value.code < 500 and "error_code" in json.loads(err.value.read())
        for s in held[:3]:  # each junk sender got an answer or a close, never a hang
            s.settimeout(10)
            try:
                s.recv(65536)
            except ConnectionResetError:
                pass
    finally:
        for s in held:
            s.close()
    registry_ready(url, 10)
    assert broker.alive()


def test_kafka_schema_log_appends_in_order_and_a_new_reader_catches_up(shared_broker):
    """The storage alone, against a real broker: offsets from acks=all appends, records (tombstones
    included) handed over in order, wait_applied/catch_up bounded, and a second reader sees it all."""
    import asyncio

    from pybroker.registry.kafka_log import KafkaSchemaLog, LogTimeout

    async def scenario():
        seen = []
        writer = KafkaSchemaLog(shared_broker.bootstrap, {}, "_schemas_log_test")
        await writer.start(lambda k, v, o: seen.append((k, v, o)))
        try:
            await writer.catch_up(10)
            offsets = []
            for i in range(5):
                offsets.append(await writer.append(b"k%d" % (i % 2), None if i == 3 else b"v%d" % i))
            await writer.wait_applied(offsets[-1], 10)
            assert offsets == list(range(5))
            assert seen == [(b"k%d" % (i % 2), None if i == 3 else b"v%d" % i, i) for i in range(5)]
            with pytest.raises(LogTimeout):
                await writer.wait_applied(offsets[-1] + 1, 0.2)  # nothing there: bounded, not stuck
        finally:
            await writer.close()
        again = []
        reader = KafkaSchemaLog(shared_broker.bootstrap, {}, "_schemas_log_test")
        await reader.start(lambda k, v, o: again.append(o))
        try:
            await reader.catch_up(10)
            assert again == offsets
        finally:
            await reader.close()

    asyncio.run(scenario())
    with AdminClient({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        values = next(iter(admin.describe_configs([ConfigResource("topic", "_schemas_log_test")]).values()))
        policy = values["cleanup.policy"]
        assert getattr(policy, "value", policy) == "compact"


def test_basic_authentication_with_the_broker_sasl_users(tmp_path):
    """A broker whose listener speaks SASL: the registry's own client logs in as the broker does
    (inter-broker PLAIN), and HTTP clients must give a PLAIN user or a SCRAM user's password."""
    import base64

    from tests.broker import BrokerProcess
    from tests.registryutil import free_port
    from tests.sasl_wire import JAAS, admin_client, alter, upsertion

    url = f"http://127.0.0.1:{free_port()}"
    broker = BrokerProcess(str(tmp_path / "data"), {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "schema.registry.listeners": url}).start()
    try:
        with admin_client(broker.port) as admin:
            assert alter(admin, [upsertion("carol", "SCRAM-SHA-256", "carol-256")]) == {"carol": (0, None)}

        def status(user=None, password=None, method="GET", path="/subjects", body=None):
            headers = {"Content-Type": CONTENT_TYPE}
            if user is not None:
                headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            req = urllib.request.Request(url + path, method=method, headers=headers,
                                         data=None if body is None else json.dumps(body).encode())
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                return exc.code, None
            except OSError:
                return None, None

        deadline = time.monotonic() + 30
        while status("alice", "alice-secret")[0] != 200:  # the registry is up once it answers a user
            assert time.monotonic() < deadline, broker.stderr()[-2000:]
            time.sleep(0.05)
        assert status()[0] == 401
        assert status("alice", "wrong")[0] == 401
        assert status("nobody", "alice-secret")[0] == 401
        assert status("carol", "carol-256")[0] == 200  # a SCRAM user, checked against its stored key
        assert status("carol", "carol-25")[0] == 401
        # a write goes through the registry's SASL client into _schemas
        code, answer = status("carol", "carol-256", "POST", "/subjects/secure-value/versions",
                              {"schema": record("Secure", "x")})
        assert code == 200 and answer["id"] >= 1
        assert status("alice", "alice-secret", path="/subjects")[1] == ["secure-value"]
    finally:
        broker.stop()
        broker.close()


def test_registry_reaches_a_tls_only_broker_with_its_inter_broker_security(tmp_path):
    """The broker's only listener is SSL: the registry's client connects with the broker's own
    inter-broker TLS settings (its truststore), so registrations are stored."""
    from tests.broker import BrokerProcess
    from tests.registryutil import free_port
    from tests.secure_brokers import make_certs

    certs = make_certs(tmp_path / "certs")
    url = f"http://127.0.0.1:{free_port()}"
    broker = BrokerProcess(str(tmp_path / "data"), {
        "listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.broker,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca, "schema.registry.listeners": url}).start()
    try:
        registry_ready(url)
        sid = register(url, "tls-value", record("Tls", "x"))
        assert call(url, "GET", "/subjects/tls-value/versions/latest")[1]["id"] == sid
    finally:
        broker.stop()
        broker.close()


def test_port_zero_binds_a_free_port_and_logs_the_url(tmp_path):
    import re

    from tests.broker import BrokerProcess

    broker = BrokerProcess(str(tmp_path / "data"), {"schema.registry.listeners": "http://127.0.0.1:0"}).start()
    try:
        deadline, found = time.monotonic() + 30, None
        while found is None:
            assert time.monotonic() < deadline, broker.stderr()[-2000:]
            found = re.search(r"schema registry on (http://127\.0\.0\.1:(\d+))", broker.stderr())
            time.sleep(0.02)
        url = found.group(1)
        assert int(found.group(2)) > 0
        registry_ready(url, 10)
        assert register(url, "port-zero-value", record("Zero", "x")) >= 1
    finally:
        broker.stop()
        broker.close()
