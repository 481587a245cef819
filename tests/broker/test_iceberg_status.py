"""``pybroker iceberg status`` run as a subprocess against a real broker translating topics into tables:
a table that cannot have caught up yet (a ten-minute target lag) and one that has, the DLQ table's rows,
the catalog named explicitly and through a broker's server.properties."""
import json
import subprocess
import sys
import time

import pytest

from tests.broker import ROOT
from tests.clientutil import wait_until
from tests.icebergutil import DEADLINE
from tests.registryutil import start_registry_broker

pytest.importorskip("pyiceberg")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

OLD_S = 100  # the first record of each partition is this old: the lag in seconds of an untouched table


def create(bootstrap, topic, partitions, configs=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result(30)


def produce(bootstrap, topic, n, partitions, old_first=False):
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    now = int(time.time() * 1000)
    for i in range(n):
        stamp = now - OLD_S * 1000 if old_first and i < partitions else now
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % partitions, timestamp=stamp)
    assert p.flush(30) == 0


def tool(*args) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "pybroker", "iceberg", "status", *args], cwd=ROOT,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def explicit(b) -> list[str]:
    """The broker's default catalog, in its first log dir, named explicitly."""
    return ["--bootstrap-server", b.bootstrap, "--catalog-uri", f"sqlite:///{b.data_dir}/iceberg/catalog.db",
            "--warehouse", f"file://{b.data_dir}/iceberg/warehouse"]


def status(*args) -> dict:
    """{topic: topic entry} of the JSON output."""
    return {t["topic"]: t for t in json.loads(tool(*args, "--json").stdout)["topics"]}


def text_rows(out: str) -> list[list[str]]:
    """The partition table's rows (after its header, up to the blank line), split on whitespace."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["TOPIC", "PARTITION"])
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def broker_config(tmp_path, b, **extra) -> str:
    path = tmp_path / "server.properties"
    lines = ["broker.id=0", f"log.dirs={b.data_dir},{tmp_path}/second-dir", "iceberg.target.file.size.bytes=1048576",
             *(f"{k}={v}" for k, v in extra.items())]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_table_not_caught_up_shows_no_offset_and_the_whole_topic_as_lag(broker_factory, tmp_path):
    b = broker_factory()
    create(b.bootstrap, "slow", 3, {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "600000"})
    create(b.bootstrap, "plain", 1)
    produce(b.bootstrap, "slow", 30, 3, old_first=True)
    produce(b.bootstrap, "plain", 5, 1)
    for args in (explicit(b), ["--bootstrap-server", b.bootstrap, "--broker-config", broker_config(tmp_path, b)]):
        topics = status(*args)
        assert list(topics) == ["slow"]  # only topics with iceberg.mode set
        slow = topics["slow"]
        assert slow["mode"] == "key_value" and slow["table"] == "kafka.slow" and slow["dlq_rows"] is None
        parts = slow["partitions"]
        assert [p["partition"] for p in parts] == [0, 1, 2]
        assert all(p["table_offset"] is None and p["end_offset"] == 10 and p["lag"] == 10 for p in parts), parts
        assert sum(p["lag"] for p in parts) == 30
        # the first record the table lacks is each partition's first: OLD_S old
        assert all(OLD_S <= p["lag_seconds"] < OLD_S + DEADLINE for p in parts), parts
    rows = text_rows(tool(*explicit(b)).stdout.decode())
    assert [r[:5] for r in rows] == [["slow", str(p), "-", "10", "10"] for p in range(3)]
    assert all(OLD_S <= float(r[5]) < OLD_S + DEADLINE for r in rows), rows


@pytest.fixture
def registry_broker(tmp_path):
    broker, _ = start_registry_broker(str(tmp_path / "data"), {"iceberg.catalog.retry.ms": 200})
    yield broker
    broker.stop()
    broker.close()


def test_a_caught_up_table_shows_the_end_offset_and_no_lag(registry_broker, tmp_path):
    b = registry_broker
    create(b.bootstrap, "fast", 3, {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "1000"})
    # values without the schema id prefix: every record goes to the DLQ table
    create(b.bootstrap, "typed", 2, {"iceberg.mode": "value_schema_id_prefix", "iceberg.target.lag.ms": "1000"})
    produce(b.bootstrap, "fast", 30, 3)
    produce(b.bootstrap, "typed", 10, 2)

    def caught_up():
        topics = status(*explicit(b))
        fast = topics["fast"]["partitions"]
        done = all(p["table_offset"] == p["end_offset"] == 10 for p in fast) and topics["typed"]["dlq_rows"] == 10
        return topics if done else None
    topics = wait_until(caught_up, timeout=DEADLINE, interval=0.5)
    assert topics, status(*explicit(b))
    fast = topics["fast"]
    assert fast["table_exists"] and fast["dlq_rows"] is None
    assert all(p["lag"] == 0 and p["lag_seconds"] == 0 for p in fast["partitions"]), fast
    assert topics["typed"]["dlq_table"] == "kafka.typed~dlq"

    rows = text_rows(tool(*explicit(b)).stdout.decode())
    assert [["fast", str(p), "10", "10", "0", "0"] for p in range(3)] == [r for r in rows if r[0] == "fast"]

    config = ["--bootstrap-server", b.bootstrap, "--broker-config", broker_config(tmp_path, b)]
    assert status(*config)["fast"]["partitions"] == fast["partitions"]
    # an explicit option wins over the broker config: no tables in another namespace
    elsewhere = status(*config, "--namespace", "elsewhere")["fast"]
    assert elsewhere["table"] == "elsewhere.fast" and not elsewhere["table_exists"]
    assert [(p["table_offset"], p["lag"]) for p in elsewhere["partitions"]] == [(None, 10)] * 3
    # the broker config's own namespace
    other = status("--bootstrap-server", b.bootstrap, "--broker-config",
                   broker_config(tmp_path, b, **{"iceberg.namespace": "other"}))["fast"]
    assert other["table"] == "other.fast" and not other["table_exists"]


def test_aborted_records_are_lag_in_offsets_but_not_in_seconds(broker_factory):
    """read_committed: the first record the table lacks is the first committed one, past aborted records."""
    b = broker_factory(overrides={"transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1})
    create(b.bootstrap, "txns", 1, {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "600000"})
    tx = ck.Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "status-tx"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for _ in range(5):
        tx.produce("txns", value=b"aborted", partition=0)
    assert tx.flush(30) == 0  # in the log before the abort
    tx.abort_transaction(30)
    [p] = status(*explicit(b))["txns"]["partitions"]
    assert (p["table_offset"], p["end_offset"], p["lag"], p["lag_seconds"]) == (None, 6, 6, 0)  # 5 records, marker
    tx.begin_transaction()
    tx.produce("txns", value=b"committed", partition=0, timestamp=int(time.time() * 1000) - OLD_S * 1000)
    tx.commit_transaction(30)
    [p] = status(*explicit(b))["txns"]["partitions"]
    assert (p["end_offset"], p["lag"]) == (8, 8) and OLD_S <= p["lag_seconds"] < OLD_S + DEADLINE, p
