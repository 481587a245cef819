"""``pybroker groups`` (kafka-consumer-groups) run as a subprocess against a real broker, with
confluent-kafka consumers making and committing to the groups.

The cases of the other tiers: tests/unit/test_cli_groups.py.
"""
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pybroker.tools.wire import Connection, parse_hostport
from tests.broker import ROOT

DEADLINE = 30
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT = 8, 9, 10, 11, 12
LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 13, 14, 15, 16, 42
NAMES = {OFFSET_COMMIT: "OffsetCommit", OFFSET_FETCH: "OffsetFetch", FIND_COORDINATOR: "FindCoordinator",
         JOIN_GROUP: "JoinGroup", HEARTBEAT: "Heartbeat", LEAVE_GROUP: "LeaveGroup", SYNC_GROUP: "SyncGroup",
         DESCRIBE_GROUPS: "DescribeGroups", LIST_GROUPS: "ListGroups", DELETE_GROUPS: "DeleteGroups"}
TOOL_APIS = (LIST_GROUPS, DESCRIBE_GROUPS, OFFSET_FETCH, DELETE_GROUPS)
CONSUMER_APIS = (FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH)


def require_apis(broker, keys) -> None:
    """Skip unless the broker's ApiVersions lists every API in ``keys``."""
    conn = Connection(*parse_hostport(broker.bootstrap), 10)
    try:
        versions = conn.broker_versions
    finally:
        conn.close()
    for key in keys:
        if key not in versions:
            pytest.skip(f"broker does not advertise {NAMES[key]} (api key {key}) in ApiVersions")


def tool(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybroker", "groups", *args], cwd=ROOT,
                          capture_output=True, timeout=60)


def ok(*args) -> str:
    r = tool(*args)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout.decode()


def fails(*args) -> str:
    r = tool(*args)
    assert r.returncode != 0, (args, r.stdout, r.stderr)
    return r.stderr.decode()


def table(out: str, header_first: str = "GROUP") -> list[list[str]]:
    """Rows of the table printed after its header line, split on whitespace."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [header_first])
    return [line.split() for line in lines[start + 1:] if line.strip()]


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for part, n in counts.items():
        for i in range(n):
            p.produce(topic, value=b"v%d" % i, partition=part)
    assert p.flush(DEADLINE) == 0


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    r = subprocess.run([sys.executable, "-m", "pybroker", "topics", "--bootstrap-server", bootstrap, "--create",
                        "--topic", topic, "--partitions", str(partitions), "--replication-factor", "1"],
                       cwd=ROOT, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr


# --- no broker needed ---------------------------------------------------------------------------


# --- against a broker ---------------------------------------------------------------------------

def _consume_until_assigned(c: Consumer, want: int) -> int:
    """Poll (bounded) until the consumer is assigned ``want`` partitions and has read something."""
    got = 0
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end and (got == 0 or len(c.assignment()) < want):
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    assert len(c.assignment()) == want, c.assignment()
    assert got > 0
    return got


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_describe_list_members_delete_with_a_live_group(broker, protocol):
    """The same tool answers for a classic group and a KIP-848 one (ConsumerGroupDescribe)."""
    require_apis(broker, TOOL_APIS + CONSUMER_APIS)
    g1, orders = f"g1-{protocol}", f"orders-{protocol}"
    bs = ("--bootstrap-server", broker.bootstrap)
    create_topic(broker.bootstrap, orders, 2)
    produce(broker.bootstrap, orders, {0: 10, 1: 6})

    conf = {"bootstrap.servers": broker.bootstrap, "group.id": g1, "client.id": "cli-test",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "group.protocol": protocol}
    if protocol == "classic":
        conf["session.timeout.ms"] = 10000
    c = Consumer(conf)
    try:
        c.subscribe([orders])
        _consume_until_assigned(c, 2)
        c.commit(offsets=[TopicPartition(orders, 0, 7), TopicPartition(orders, 1, 6)], asynchronous=False)
        member = c.memberid()
        assert member

        assert g1 in ok(*bs, "--list").split()

        out = ok(*bs, "--describe", "--group", g1)
        assert "no active members" not in out
        assert out.splitlines()[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                               "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        rows = table(out)
        assert [r[:6] for r in rows] == [[g1, orders, "0", "7", "10", "3"], [g1, orders, "1", "6", "6", "0"]]
        for r in rows:
            assert r[6] == member and r[8] == "cli-test" and "127.0.0.1" in r[7]

        # the log grows: the log end and lag follow, the committed offset stays
        produce(broker.bootstrap, orders, {1: 4})
        rows = table(ok(*bs, "--describe", "--group", g1))
        assert rows[1][:6] == [g1, orders, "1", "6", "10", "4"]

        rows = table(ok(*bs, "--describe", "--group", g1, "--members", "--verbose"))
        assert len(rows) == 1
        assert rows[0][0] == g1 and rows[0][1] == member and rows[0][3] == "cli-test"
        assert rows[0][4:] == ["2", f"{orders}(0,1)"]

        rows = table(ok(*bs, "--describe", "--group", g1, "--state"))
        assert rows[0][0] == g1 and rows[0][-3:] == [
            "uniform" if protocol == "consumer" else "range", "Stable", "1"]  # the server's or the client's assignor

        err = fails(*bs, "--delete", "--group", g1)
        assert "NON_EMPTY_GROUP (68)" in err and f"'{g1}'" in err
    finally:
        c.close()  # leaves the group: it becomes Empty but keeps its offsets

    out = ok(*bs, "--describe", "--group", g1)
    assert f"Consumer group '{g1}' has no active members." in out
    assert table(out) == [[g1, orders, "0", "7", "10", "3", "-", "-", "-"],
                          [g1, orders, "1", "6", "10", "4", "-", "-", "-"]]

    assert ok(*bs, "--delete", "--group", g1) == f"Deletion of requested consumer groups ('{g1}') was successful.\n"
    assert g1 not in ok(*bs, "--list").split()
    err = fails(*bs, "--describe", "--group", g1)
    assert f"'{g1}' does not exist" in err


def test_offsets_only_group_and_unknown_groups(broker):
    require_apis(broker, TOOL_APIS + (FIND_COORDINATOR, OFFSET_COMMIT))
    bs = ("--bootstrap-server", broker.bootstrap)
    create_topic(broker.bootstrap, "events", 1)
    produce(broker.bootstrap, "events", {0: 5})
    # a group that never joins: manual assignment and an explicit commit (Kafka's "simple" consumer)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "simple", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("events", 0, 2)], asynchronous=False)
    finally:
        c.close()

    assert ok(*bs, "--list").split() == ["simple"]
    out = ok(*bs, "--describe", "--group", "simple")
    assert "Consumer group 'simple' has no active members." in out
    assert table(out) == [["simple", "events", "0", "2", "5", "3", "-", "-", "-"]]
    assert table(ok(*bs, "--describe", "--all-groups")) == table(out)

    err = fails(*bs, "--describe", "--group", "ghost")
    assert "GROUP_ID_NOT_FOUND (69)" in err and "'ghost' does not exist" in err
    err = fails(*bs, "--delete", "--group", "ghost")
    assert "GROUP_ID_NOT_FOUND (69)" in err and "'ghost'" in err

    assert ok(*bs, "--delete", "--group", "simple") == (
        "Deletion of requested consumer groups ('simple') was successful.\n")
    assert ok(*bs, "--list") == ""


def test_usage_errors_and_missing_group_apis(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    assert "needs --group or --all-groups" in fails(*bs, "--describe")
    assert "needs --group or --all-groups" in fails(*bs, "--delete")
    assert tool(*bs, "--list", "--describe").returncode == 2  # argparse: one action only
    conn = Connection(*parse_hostport(broker.bootstrap), 10)
    try:
        versions = conn.broker_versions
    finally:
        conn.close()
    if LIST_GROUPS not in versions:  # until the group APIs exist, the tool says so plainly
        assert "does not support ListGroups" in fails(*bs, "--list")
    else:
        assert tool(*bs, "--list").returncode == 0
