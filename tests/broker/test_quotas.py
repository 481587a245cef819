"""Client quotas against real broker processes: AlterClientQuotas / DescribeClientQuotas (raw
requests: neither confluent-kafka nor kafka-python exposes them), Kafka's matching rules,
durability across a restart, bad input, and enforcement seen by confluent-kafka: a client-id held
to its producer_byte_rate (or consumer_byte_rate) while another client-id is unaffected, and the
throttle reported to the client (throttle_cb).

The cases of the other tiers: tests/unit/test_quotas.py.
"""
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.messages import REQUESTS
from tests.kafka_wire import WireClient

ALTER, DESCRIBE = REQUESTS[49], REQUESTS[48]
MB = 1024 * 1024
INVALID_REQUEST, UNSUPPORTED_VERSION = 42, 35
DEADLINE = 60


def alter(port, entity: dict, ops: dict, version=1, validate_only=False):
    """``entity``: {type: name or None}; ``ops``: {key: value or None (remove)}; the response entries."""
    req = ALTER(entries=[ALTER.EntryData(
        entity=[ALTER.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[ALTER.OpData(key=k, value=float(v or 0), remove=v is None) for k, v in ops.items()])],
        validate_only=validate_only)
    with WireClient(port) as w:
        return w.request(req, version).entries


def describe(port, components=(), strict=False, version=1):
    """{((type, name), ...): {key: value}} or the response when it failed."""
    req = DESCRIBE(components=[DESCRIBE.ComponentData(entity_type=t, match_type=m, match=n)
                               for t, m, n in components], strict=strict)
    with WireClient(port) as w:
        resp = w.request(req, version)
    if resp.error_code:
        return resp
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in resp.entries}


def create_topic(b, name, partitions=1):
    ad = AdminClient({"bootstrap.servers": b.bootstrap})  # kept alive until the result
    ad.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(DEADLINE)


# ---- the rate and the matching rules (no broker) --------------------------------------------


# ---- AlterClientQuotas / DescribeClientQuotas -------------------------------------------------

def test_alter_describe_round_trip_and_filters(broker):
    p = broker.port
    assert [e.error_code for e in alter(p, {"client-id": "limited"}, {"producer_byte_rate": MB})] == [0]
    assert [e.error_code for e in alter(p, {"client-id": None}, {"consumer_byte_rate": 2 * MB}, version=0)] == [0]
    assert [e.error_code for e in alter(p, {"user": "alice", "client-id": "x"},
                                        {"request_percentage": 12.5})] == [0]
    assert [e.error_code for e in alter(p, {"user": "bob"}, {"producer_byte_rate": 5},
                                        validate_only=True)] == [0]
    everything = describe(p)
    assert everything == {(("client-id", "limited"),): {"producer_byte_rate": MB},
                          (("client-id", None),): {"consumer_byte_rate": 2 * MB},
                          (("client-id", "x"), ("user", "alice")): {"request_percentage": 12.5}}
    assert describe(p, [("client-id", 0, "limited")], strict=True) == {
        (("client-id", "limited"),): {"producer_byte_rate": MB}}
    assert list(describe(p, [("client-id", 1, None)], strict=True)) == [(("client-id", None),)]
    assert len(describe(p, [("client-id", 2, None)], strict=True)) == 2  # any name, user-less only
    assert list(describe(p, [("user", 0, "alice")], version=0)) == [(("client-id", "x"), ("user", "alice"))]
    # removing the last key removes the entity
    assert [e.error_code for e in alter(p, {"client-id": None}, {"consumer_byte_rate": None})] == [0]
    assert (("client-id", None),) not in describe(p)


def test_bad_input_gets_kafkas_errors_and_the_connection_keeps_working(broker):
    p = broker.port
    assert alter(p, {"group": "g"}, {"producer_byte_rate": 1})[0].error_code == INVALID_REQUEST
    assert alter(p, {"client-id": "c"}, {"bogus_rate": 1})[0].error_code == INVALID_REQUEST
    assert alter(p, {"client-id": "c"}, {"producer_byte_rate": -5})[0].error_code == INVALID_REQUEST
    assert alter(p, {"client-id": "c"}, {"producer_byte_rate": 1.5})[0].error_code == INVALID_REQUEST
    assert alter(p, {"client-id": ""}, {"producer_byte_rate": 1})[0].error_code == INVALID_REQUEST
    assert alter(p, {}, {"producer_byte_rate": 1})[0].error_code == INVALID_REQUEST
    assert describe(p, [("group", 0, "g")]).error_code == UNSUPPORTED_VERSION
    assert describe(p, [("user", 0, None)]).error_code == INVALID_REQUEST
    with WireClient(p) as w:  # several requests on one connection, good after bad
        bad = ALTER(entries=[ALTER.EntryData(entity=[ALTER.EntityData(entity_type="user", entity_name="u")],
                                             ops=[ALTER.OpData(key="nope", value=1.0, remove=False)])],
                    validate_only=False)
        assert w.request(bad, 1).entries[0].error_code == INVALID_REQUEST
        assert w.request(DESCRIBE(components=[], strict=False), 1).error_code == 0
        assert w.metadata().brokers
    assert describe(p) == {}  # nothing bad was stored


def test_quotas_survive_a_restart(broker_factory, tmp_path):
    data = str(tmp_path / "persist")
    b = broker_factory(data_dir=data)
    alter(b.port, {"client-id": "limited"}, {"producer_byte_rate": MB})
    alter(b.port, {"user": None}, {"request_percentage": 50})
    before = describe(b.port)
    b.stop()
    b.start()
    assert describe(b.port) == before and len(before) == 2


def test_api_versions_advertises_the_quota_apis(broker):
    with WireClient(broker.port) as w:
        keys = {k.api_key: (k.min_version, k.max_version) for k in w.api_versions().api_keys}
    assert keys[48] == (0, 1) and keys[49] == (0, 1)


# ---- enforcement seen by confluent-kafka --------------------------------------------------------

def _produce_for(bootstrap, topic, client_id, seconds, offered_bps, out):
    """Offer ``offered_bps`` for ``seconds``; ``out``: delivered bytes per report time, throttle events."""
    throttles, delivered = [], []
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    value = b"x" * 10_000

    def report(err, msg):
        if err is None:
            delivered.append((time.monotonic(), len(msg.value())))
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        if sent < offered_bps * (time.monotonic() - start):
            try:
                p.produce(topic, value, on_delivery=report)
                sent += len(value)
            except BufferError:
                pass
            p.poll(0)
        else:
            p.poll(0.01)
    p.purge()  # what is still queued was never sent: it does not count
    p.flush(10)
    out[client_id] = (delivered, throttles)


def _rate_over(delivered, seconds):
    t0 = delivered[0][0]
    return sum(n for t, n in delivered if t - t0 <= seconds) / seconds


def test_producer_byte_rate_holds_one_client_within_20_percent(broker_factory):
    b = broker_factory()
    create_topic(b, "quota-produce")
    assert alter(b.port, {"client-id": "limited"}, {"producer_byte_rate": MB})[0].error_code == 0
    out = {}
    threads = [threading.Thread(target=_produce_for, args=(b.bootstrap, "quota-produce", cid, 12, 5 * MB, out))
               for cid in ("limited", "free")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE + 30)
    limited, free = out["limited"], out["free"]
    limited_rate, free_rate = _rate_over(limited[0], 10), _rate_over(free[0], 10)
    print(f"limited {limited_rate / MB:.3f} MB/s, free {free_rate / MB:.3f} MB/s, throttles {limited[1][:8]}")
    assert 0.8 * MB <= limited_rate <= 1.2 * MB, f"limited client: {limited_rate / MB:.2f} MB/s"
    assert free_rate >= 3 * MB, f"unlimited client: {free_rate / MB:.2f} MB/s"
    assert limited[1] and max(limited[1]) > 0, "confluent-kafka reported no throttle"
    assert not free[1], f"the unlimited client was throttled: {free[1][:5]}"


def test_consumer_byte_rate_holds_one_consumer(broker_factory):
    b = broker_factory()
    create_topic(b, "quota-fetch")
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20})
    for _ in range(2000):
        p.produce("quota-fetch", b"y" * 10_000)
        p.poll(0)
    assert p.flush(DEADLINE) == 0
    assert alter(b.port, {"client-id": "slow-reader"}, {"consumer_byte_rate": MB})[0].error_code == 0

    def consume(client_id, seconds, out):
        throttles = []
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": client_id, "client.id": client_id,
                      "enable.auto.commit": False, "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
        c.assign([TopicPartition("quota-fetch", 0, 0)])
        got, start = [], None
        while start is None or time.monotonic() - start < seconds:
            for m in c.consume(100, 0.2):
                if m.error() is None:
                    start = start or time.monotonic()
                    got.append((time.monotonic(), len(m.value())))
            if start is None and not got and len(throttles) > 100:
                break
        c.close()
        out[client_id] = (got, throttles)
    out = {}
    consume("slow-reader", 10, out)
    consume("fast-reader", 3, out)
    slow, fast = out["slow-reader"], out["fast-reader"]
    slow_rate = _rate_over(slow[0], 10)
    fast_total = sum(n for _, n in fast[0])
    print(f"slow {slow_rate / MB:.3f} MB/s, fast total {fast_total / MB:.1f} MB, throttles {slow[1][:8]}")
    # librdkafka fetches ahead (up to its queue), so the first response lands before any throttle
    assert 0.6 * MB <= slow_rate <= 1.6 * MB, f"throttled consumer: {slow_rate / MB:.2f} MB/s"
    assert slow[1] and max(slow[1]) > 0
    assert sum(n for _, n in fast[0]) >= 15 * MB and not fast[1]


# ---- pybroker configs (kafka-configs.sh) -------------------------------------------------------

def _configs_tool(b, *args):
    import subprocess
    import sys
    from tests.broker import ROOT
    return subprocess.run([sys.executable, "-m", "pybroker", "configs", "--bootstrap-server", b.bootstrap, *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=DEADLINE)


def test_configs_tool_alters_and_describes_quotas_and_broker_configs(broker):
    r = _configs_tool(broker, "--alter", "--entity-type", "clients", "--entity-name", "limited",
                      "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2048")
    assert r.returncode == 0 and "Completed updating config for client-id 'limited'." in r.stdout, r.stderr
    r = _configs_tool(broker, "--alter", "--entity-type", "users", "--entity-default", "--add-config",
                      "request_percentage=50")
    assert r.returncode == 0, r.stderr
    r = _configs_tool(broker, "--alter", "--entity-type", "clients", "--entity-name", "limited",
                      "--delete-config", "consumer_byte_rate")
    assert r.returncode == 0, r.stderr
    r = _configs_tool(broker, "--describe", "--entity-type", "clients", "--entity-name", "limited")
    assert r.stdout.strip() == "Quota configs for client-id 'limited' are producer_byte_rate=1048576.0"
    assert describe(broker.port) == {(("client-id", "limited"),): {"producer_byte_rate": MB},
                                     (("user", None),): {"request_percentage": 50.0}}
    r = _configs_tool(broker, "--alter", "--entity-type", "brokers", "--entity-default",
                      "--add-config", "log.retention.ms=3600000")
    assert r.returncode == 0 and "Completed updating default config for brokers in the cluster." in r.stdout
    r = _configs_tool(broker, "--alter", "--entity-type", "brokers", "--entity-name", "0",
                      "--add-config", "message.max.bytes=20000")
    assert r.returncode == 0, r.stderr
    r = _configs_tool(broker, "--describe", "--entity-type", "brokers", "--entity-name", "0")
    assert "message.max.bytes=20000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=20000" \
        in r.stdout, r.stdout
    r = _configs_tool(broker, "--describe", "--entity-type", "brokers", "--entity-default")
    assert "log.retention.ms=3600000" in r.stdout and "message.max.bytes" not in r.stdout
    r = _configs_tool(broker, "--alter", "--entity-type", "brokers", "--entity-name", "0", "--add-config",
                      "log.dirs=/x")
    assert r.returncode == 1 and "Cannot update these configs dynamically: log.dirs" in r.stderr
    r = _configs_tool(broker, "--alter", "--entity-type", "clients", "--entity-name", "c",
                      "--add-config", "producer_byte_rate=-1")
    assert r.returncode == 1 and "INVALID_REQUEST" in r.stderr  # as Kafka answers a bad quota value
