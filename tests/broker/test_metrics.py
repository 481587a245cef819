"""/metrics and /health (``metrics.listener``) on real broker processes with real clients.

Counters are checked by exact deltas: records and batch bytes produced with the wire client
(bytes known exactly) and with librdkafka (bytes checked against the log files on disk); the
request histograms' counts against requests sent; gauges against the broker's state.

The cases of the other tiers: tests/cluster/test_metrics.py.
"""
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer

from pybroker.config import BrokerConfig, ConfigError
from pybroker.records import build_batch
from tests.broker import ROOT, BrokerProcess
from tests.clientutil import wait_until
from tests.cluster import free_ports
from tests.kafka_wire import WireClient

DASHBOARD = os.path.join(ROOT, "dashboards", "pybroker.json")
_SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


# ---- helpers -----------------------------------------------------------------------------------

def parse(text: str) -> dict:
    """{(name, frozenset(labels)): value} of a text exposition; checks HELP/TYPE precede samples."""
    out, typed = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.fullmatch(line)
        assert m, f"bad exposition line {line!r}"
        name, labels, value = m.groups()
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in typed or family in typed, f"{name} has no TYPE line"
        key = (name, frozenset(_LABEL.findall(labels or "")))
        assert key not in out, f"duplicate series {key}"
        out[key] = float(value)
    return out


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())), 0.0)


def series(samples: dict, name: str) -> dict:
    """labels dict (as a frozenset) -> value, for every series of ``name``."""
    return {labels: v for (n, labels), v in samples.items() if n == name}


def http(port: int, path: str, method: str = "GET") -> tuple[int, str, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def scrape(port: int) -> dict:
    status, body, headers = http(port, "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4"), (status, body)
    return parse(body)


def raw_http(port: int, data: bytes, timeout: float = 10) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process listens on (its socket inodes in /proc/net/tcp{,6}, state LISTEN)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def log_bytes(data_dir: str, topic: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(data_dir, f"{topic}-*", "*.log")))


def check_histograms(samples: dict, request: str, missing_ok: bool = False) -> int:
    """Every time histogram of ``request`` is cumulative, ends at +Inf == _count, all counts equal."""
    counts = set()
    for name in ("totaltimems", "requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems",
                 "requestbytes"):
        family = f"kafka_network_requestmetrics_{name}"
        buckets = sorted(((float(dict(labels)["le"]), v) for labels, v in series(samples, family + "_bucket").items()
                          if dict(labels)["request"] == request), key=lambda b: b[0])
        if not buckets and missing_ok:
            counts.add(0)
            continue
        assert buckets, f"no {family} for {request}"
        assert [v for _, v in buckets] == sorted(v for _, v in buckets), f"{family} not cumulative"
        count = value(samples, family + "_count", request=request)
        assert buckets[-1] == (float("inf"), count)
        counts.add(count)
    assert len(counts) == 1, counts
    return counts.pop()


# ---- one broker with metrics for most tests ----------------------------------------------------

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    port, = free_ports(1)
    data = str(tmp_path_factory.mktemp("metrics") / "data")
    b = BrokerProcess(data, {"metrics.listener": f"http://127.0.0.1:{port}", "num.partitions": 3,
                             "group.initial.rebalance.delay.ms": 0}).start()
    b.metrics_port = port
    try:
        yield b
    finally:
        code = b.stop()
        b.close()
    log = b.stderr()
    assert code == 0 and "Traceback" not in log, log[-3000:]


def test_health_says_ready_and_only_the_given_host_is_bound(broker):
    status, body, _ = http(broker.metrics_port, "/health")
    assert (status, body) == (200, "ready\n")
    assert http(broker.metrics_port, "/health", "HEAD")[:2] == (200, "")
    assert broker.metrics_port in listening_ports(broker.proc.pid)
    with pytest.raises(OSError):  # bound to 127.0.0.1 only: another address of this host is refused
        socket.create_connection(("127.0.0.2", broker.metrics_port), timeout=2).close()
    samples = scrape(broker.metrics_port)
    assert value(samples, "pybroker_ready") == 1
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "process_resident_memory_bytes") > 1 << 20
    assert value(samples, "process_open_fds") > 3
    assert wait_until(lambda: value(scrape(broker.metrics_port), "pybroker_event_loop_lag_seconds_count") >= 2,
                      timeout=10)  # the lag probe fires every 0.25 s


def test_wire_produce_and_fetch_move_the_counters_by_exact_amounts(broker):
    topic = "wire-orders"
    with WireClient(broker.port) as c:
        c.create_topic(topic, 2)
        before = scrape(broker.metrics_port)
        batches = [bytes(build_batch([b"v%d-%d" % (i, j) * (i + 1) for j in range(i + 1)], base_timestamp=1000))
                   for i in range(6)]
        for i, batch in enumerate(batches):
            assert c.produce(topic, i % 2, batch, acks=1).error_code == 0
        assert c.produce(topic, 7, batches[0], acks=1).error_code == 3  # no such partition: a failure
        fetched = [c.fetch(topic, p, 0).records for p in (0, 1)]
        assert c.fetch(topic, 0, 10_000).error_code == 1  # OFFSET_OUT_OF_RANGE: a failed fetch
        for _ in range(5):
            c.metadata([topic])
    after = scrape(broker.metrics_port)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    sent_bytes = sum(map(len, batches))
    sent_records = sum(i + 1 for i in range(6))
    for labels in ({"topic": topic}, {}):
        assert delta("kafka_server_brokertopicmetrics_messagesinpersec_total", **labels) == sent_records
        assert delta("kafka_server_brokertopicmetrics_bytesinpersec_total", **labels) == sent_bytes
        assert delta("kafka_server_brokertopicmetrics_bytesoutpersec_total", **labels) == sum(map(len, fetched))
        assert delta("kafka_server_brokertopicmetrics_failedproducerequestspersec_total", **labels) == 1
        assert delta("kafka_server_brokertopicmetrics_failedfetchrequestspersec_total", **labels) == 1
        assert delta("kafka_server_brokertopicmetrics_totalproducerequestspersec_total", **labels) == 7
        assert delta("kafka_server_brokertopicmetrics_totalfetchrequestspersec_total", **labels) == 3
    assert sum(map(len, fetched)) == sent_bytes  # the stored batches are the ones sent
    for p in (0, 1):
        assert value(after, "kafka_log_log_size", topic=topic, partition=p) == sum(map(len, batches[p::2]))
        assert value(after, "kafka_log_log_logendoffset", topic=topic, partition=p) == sum(
            i + 1 for i in range(p, 6, 2))
        assert value(after, "kafka_log_log_logstartoffset", topic=topic, partition=p) == 0
    # request counts and histograms: exactly the requests this connection sent
    assert delta("kafka_network_requestmetrics_requestspersec_total", request="Produce", version=8) == 7
    assert delta("kafka_network_requestmetrics_requestspersec_total", request="Fetch", version=11) == 3
    assert delta("kafka_network_requestmetrics_requestspersec_total", request="Metadata", version=8) == 5
    assert value(after, "kafka_network_requestmetrics_requestspersec_total", request="CreateTopics", version=4) >= 1
    for request, n in (("Produce", 7), ("Fetch", 3), ("Metadata", 5)):
        assert check_histograms(after, request) - check_histograms(before, request, missing_ok=True) == n
    assert delta("kafka_network_requestmetrics_requestbytes_sum", request="Produce") > sent_bytes
    assert value(after, "kafka_server_socket_server_metrics_connection_creation_total", listener="PLAINTEXT") >= 1
    assert delta("kafka_server_socket_server_metrics_connection_close_total", listener="PLAINTEXT") >= 1
    assert delta("kafka_server_socket_server_metrics_incoming_byte_total", listener="PLAINTEXT") > sent_bytes
    assert delta("kafka_server_socket_server_metrics_outgoing_byte_total", listener="PLAINTEXT") > sent_bytes


def test_librdkafka_produce_and_consume(broker, tmp_path):
    topic = "orders"
    stats = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all",
                         "enable.idempotence": True, "statistics.interval.ms": 100,
                         "stats_cb": stats.append})
    producer.produce(topic, b"warm-up", partition=0)  # creates the topic (3 partitions)
    producer.flush(30)
    before = scrape(broker.metrics_port)
    before_disk = log_bytes(broker.data_dir, topic)
    n = 3000
    for i in range(n):
        producer.produce(topic, b"value-%06d" % i * 5, key=b"k%d" % (i % 17))
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    after = scrape(broker.metrics_port)
    disk = log_bytes(broker.data_dir, topic) - before_disk
    in_bytes = (value(after, "kafka_server_brokertopicmetrics_bytesinpersec_total", topic=topic)
                - value(before, "kafka_server_brokertopicmetrics_bytesinpersec_total", topic=topic))
    assert (value(after, "kafka_server_brokertopicmetrics_messagesinpersec_total", topic=topic)
            - value(before, "kafka_server_brokertopicmetrics_messagesinpersec_total", topic=topic)) == n
    assert in_bytes == disk > n * 50  # bytes in == the batch bytes appended to the logs
    log_size = sum(series(after, "kafka_log_log_size")[frozenset({("topic", topic), ("partition", str(p))})]
                   for p in range(3))
    assert log_size == log_bytes(broker.data_dir, topic)
    produces = (value(after, "kafka_network_requestmetrics_totaltimems_count", request="Produce")
                - value(before, "kafka_network_requestmetrics_totaltimems_count", request="Produce"))
    assert 1 <= produces <= n
    # librdkafka's own count of the Produce requests it sent, when its statistics carry one
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not stats:
        producer.poll(0.2)
    producer.poll(0.5)
    sent = sum(b.get("req", {}).get("Produce", 0) for b in json.loads(stats[-1])["brokers"].values()) \
        if stats else None
    if sent:
        requests = series(after, "kafka_network_requestmetrics_requestspersec_total")
        total_produce = sum(v for labels, v in requests.items() if dict(labels)["request"] == "Produce")
        assert total_produce >= sent  # (other tests' produces are counted too)

    # consume it all in a group and commit: bytes out, group gauges and lag
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "billing",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got, deadline = 0, time.monotonic() + 60
        while got < n + 1 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got += 1
        assert got == n + 1
        consumer.commit(asynchronous=False)
        samples = scrape(broker.metrics_port)
        assert value(samples, "kafka_consumergroup_members", group="billing") == 1
        assert value(samples, "kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1
        out_bytes = value(samples, "kafka_server_brokertopicmetrics_bytesoutpersec_total", topic=topic)
        assert out_bytes >= log_bytes(broker.data_dir, topic)  # every batch went out at least once
        hw = {p: value(samples, "kafka_cluster_partition_highwatermark", topic=topic, partition=p) for p in range(3)}
        for p in range(3):
            labels = {"group": "billing", "topic": topic, "partition": p}
            assert value(samples, "kafka_consumergroup_group_offset", **labels) == hw[p]
            assert value(samples, "kafka_consumergroup_group_lag", **labels) == 0
        producer.produce(topic, b"late", partition=1)
        producer.produce(topic, b"later", partition=1)
        producer.flush(30)
        samples = scrape(broker.metrics_port)
        assert value(samples, "kafka_consumergroup_group_lag", group="billing", topic=topic, partition=1) == 2
        assert value(samples, "kafka_consumergroup_group_sum_lag", group="billing") == 2
        assert value(samples, "kafka_consumergroup_group_max_lag", group="billing") == 2
    finally:
        consumer.close()
    check_histograms(samples, "Fetch")
    check_histograms(samples, "JoinGroup")
    assert value(samples, "kafka_network_requestmetrics_remotetimems_sum", request="Fetch") > 0  # long polls


def test_dashboard_references_only_exported_series(broker):
    """Group series exist once a group has committed: this test makes its own, whatever ran before it."""
    with WireClient(broker.port) as w:
        w.create_topic("dashboard", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("dashboard", b"x")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dashboard",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["dashboard"])
        assert wait_until(lambda: (m := consumer.poll(0.2)) is not None and not m.error(), timeout=30)
        consumer.commit(asynchronous=False)
        with open(DASHBOARD) as f:
            dash = json.load(f)
        names = {n for n, _ in scrape(broker.metrics_port)}
    finally:
        consumer.close()
    exprs = []

    def walk(panels):
        for p in panels:
            exprs.extend(t["expr"] for t in p.get("targets", []) if "expr" in t)
            walk(p.get("panels", []))
    walk(dash["panels"])
    assert len(exprs) >= 10
    referenced = {tok for e in exprs for tok in re.findall(r"\b((?:kafka|process|pybroker)_[a-z0-9_]+)", e)}
    missing = sorted(referenced - names)
    assert not missing, f"dashboard series not exported: {missing}"


def test_bad_http_input_is_refused_and_kafka_keeps_serving(broker):
    port = broker.metrics_port
    assert http(port, "/nope")[0] == 404
    assert http(port, "/metrics", "POST")[0] == 405
    assert raw_http(port, b"hello there\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw_http(port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64) + b"\n").startswith(
        b"HTTP/1.1 400 ")  # a TLS ClientHello
    assert raw_http(port, b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw_http(port, b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 100 + b"\r\n").startswith(b"HTTP/1.1 400 ")
    # a client that never finishes its request does not hold up scrapes or Kafka clients
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stuck:
        stuck.sendall(b"GET /metr")
        assert http(port, "/health")[0] == 200
        with WireClient(broker.port) as c:
            assert c.api_versions().error_code == 0
            c.create_topic("after-bad-http")  # its own topic: the tests of this module may run in any order
            assert c.produce("after-bad-http", 0, bytes(build_batch([b"after-bad-http"])), acks=1).error_code == 0
    assert scrape(port)  # still serving


def test_off_by_default_opens_no_port(tmp_path):
    b = BrokerProcess(str(tmp_path / "data")).start()
    try:
        assert listening_ports(b.proc.pid) == {b.port}
        with WireClient(b.port) as c:
            assert c.api_versions().error_code == 0
    finally:
        assert b.stop() == 0
        b.close()


def test_bad_metrics_listener_is_a_config_error(tmp_path):
    for bad in ("127.0.0.1:9644", "https://127.0.0.1:9644", "http://127.0.0.1:70000", "http://h:1/metrics"):
        with pytest.raises(ConfigError, match="metrics.listener"):
            BrokerConfig.load(overrides=[f"metrics.listener={bad}"], env={})
    assert BrokerConfig.load(overrides=["metrics.listener=http://:9644"], env={}).metrics_listener == \
        ("127.0.0.1", 9644)
    proc = subprocess.run([sys.executable, "-m", "pybroker", "serve", "--override", f"log.dirs={tmp_path}",
                           "--override", "metrics.listener=tcp://x:1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "metrics.listener" in proc.stderr


def test_metrics_port_in_use_fails_the_start(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "pybroker", "serve", "--override", f"log.dirs={tmp_path}",
                               "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                               "--override", f"metrics.listener=http://127.0.0.1:{port}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "metrics.listener" in proc.stderr and "Traceback" not in proc.stderr


def test_not_ready_until_registered(tmp_path):
    """A cluster broker that cannot reach ZooKeeper yet: /health answers 503 all along."""
    zk_port, metrics_port = free_ports(2)  # nothing listens on zk_port
    args = [sys.executable, "-m", "pybroker", "serve", "--override", f"log.dirs={tmp_path}",
            "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", "broker.id=1",
            "--override", f"zookeeper.connect=127.0.0.1:{zk_port}",
            "--override", "zookeeper.session.timeout.ms=8000",
            "--override", f"metrics.listener=http://127.0.0.1:{metrics_port}"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def health():
            try:
                return http(metrics_port, "/health")
            except OSError:
                return None
        answer = wait_until(health, timeout=30)
        assert answer is not None and answer[0] == 503 and answer[1].startswith("not ready"), answer
        assert value(scrape(metrics_port), "pybroker_ready") == 0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stderr.close()


# ---- a 3-broker cluster: replication gauges ----------------------------------------------------

