"""The ``local`` metadata store: persistence, meta.properties, name rules, crash safety (SIGKILL)."""
import base64
import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

from pybroker.config import ConfigError, check_cluster_id
from pybroker.properties import parse_properties
from pybroker.controller import metadata_store as ms
from pybroker.controller.metadata_store import (
    InconsistentClusterIdError, InconsistentNodeIdError, InvalidConfigError, InvalidPartitionsError,
    InvalidReplicationFactorError, InvalidTopicError, LocalMetadataStore, MetadataCorruptError,
    TopicExistsError, UnknownTopicError, new_cluster_id)
from pybroker.errors import BrokerError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def snapshot(store: LocalMetadataStore) -> dict:
    return {n: (str(r.topic_id), r.partitions, r.replication_factor, dict(r.configs))
            for n, r in store.topics.items()}


def test_changes_persist_across_reopen(tmp_path):
    s = LocalMetadataStore(str(tmp_path), node_id=3)
    a = s.create_topic("orders", 6, 1, {"retention.ms": "1000", "cleanup.policy": "delete"})
    s.create_topic("__consumer_offsets", 50, 1, {"cleanup.policy": "compact"})
    s.create_topic("gone", 1, 1, {})
    assert s.delete_topic("gone").name == "gone"
    s.set_partitions("orders", 8)
    s.set_configs("orders", {"retention.ms": None, "segment.bytes": "1048576", "absent": None})
    assert s.generation == 6
    before = snapshot(s)
    assert before["orders"] == (str(a.topic_id), 8, 1, {"cleanup.policy": "delete", "segment.bytes": "1048576"})
    assert a.partitions == 6 and a.configs["retention.ms"] == "1000"  # handed-out records are snapshots

    again = LocalMetadataStore(str(tmp_path), node_id=3)
    assert snapshot(again) == before
    assert again.cluster_id == s.cluster_id and again.node_id == 3 and again.generation == 6
    assert isinstance(again.topics["orders"].topic_id, uuid.UUID)
    assert sorted(os.listdir(tmp_path)) == ["meta.properties", "pybroker-metadata.json"]
    with pytest.raises(TypeError):
        again.topics["x"] = a  # a read-only view


def test_errors_and_codes(tmp_path):
    s = LocalMetadataStore(str(tmp_path), 0)
    s.create_topic("t", 2, 1, {})
    with pytest.raises(TopicExistsError, match="'t' already exists") as info:
        s.create_topic("t", 1, 1, {})
    assert info.value.code == 36 and isinstance(info.value, KeyError) and isinstance(info.value, BrokerError)
    for call in (lambda: s.delete_topic("nope"), lambda: s.set_partitions("nope", 3),
                 lambda: s.set_configs("nope", {"a": "b"})):
        with pytest.raises(UnknownTopicError, match="unknown topic 'nope'") as info:
            call()
        assert info.value.code == 3 and isinstance(info.value, KeyError)
    for count in (2, 1, 0):
        with pytest.raises(InvalidPartitionsError, match="has 2 partitions") as info:
            s.set_partitions("t", count)
        assert info.value.code == 37
    with pytest.raises(InvalidPartitionsError, match="at least 1"):
        s.create_topic("u", 0, 1, {})
    with pytest.raises(InvalidReplicationFactorError, match="at least 1") as info:
        s.create_topic("u", 1, 0, {})
    assert info.value.code == 38
    with pytest.raises(InvalidReplicationFactorError, match="available brokers: 1"):
        s.create_topic("u", 1, 3, {})
    with pytest.raises(InvalidConfigError) as info:
        s.create_topic("u", 1, 1, {"retention.ms": 5})
    assert info.value.code == 40
    with pytest.raises(InvalidConfigError):
        s.set_configs("t", {"": "x"})
    assert snapshot(s) == snapshot(LocalMetadataStore(str(tmp_path), 0)) and s.generation == 1


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a b", "a/b", "tópico", "a\nb", "x:y", None])
def test_invalid_topic_names(tmp_path, name):
    s = LocalMetadataStore(str(tmp_path), 0)
    with pytest.raises(InvalidTopicError) as info:
        s.create_topic(name, 1, 1, {})
    assert info.value.code == 17 and isinstance(info.value, ValueError)
    assert s.topics == {} and s.generation == 0


def test_valid_names_and_collisions(tmp_path):
    s = LocalMetadataStore(str(tmp_path), 0)
    for name in ("a" * 249, "A-b_c.9", "...", "-x", "_"):
        s.create_topic(name, 1, 1, {})
    s.create_topic("metrics.cpu", 1, 1, {})
    with pytest.raises(InvalidTopicError, match="collides with existing topic 'metrics.cpu'"):
        s.create_topic("metrics_cpu", 1, 1, {})
    assert len(LocalMetadataStore(str(tmp_path), 0).topics) == 6


def test_meta_properties_format_written_once(tmp_path):
    cid = new_cluster_id()
    s = LocalMetadataStore(str(tmp_path), 5, cluster_id=cid)
    assert s.cluster_id == cid
    path = tmp_path / "meta.properties"
    text = path.read_text()
    assert text.startswith("#\n#") and text.endswith("\n")
    props = {k: v for k, v, _ in parse_properties(text)}
    assert props["version"] == "1" and props["node.id"] == "5" and props["cluster.id"] == cid
    check_cluster_id(props["directory.id"])
    assert set(props) == {"version", "node.id", "cluster.id", "directory.id"}
    # reopening without a cluster id adopts the stored one and never rewrites the file
    assert LocalMetadataStore(str(tmp_path), 5).cluster_id == cid
    assert LocalMetadataStore(str(tmp_path), 5, cluster_id=cid).cluster_id == cid
    assert path.read_text() == text


def test_meta_properties_mismatch(tmp_path):
    s = LocalMetadataStore(str(tmp_path), 1)
    with pytest.raises(InconsistentNodeIdError, match="written by node 1, but this is node 2"):
        LocalMetadataStore(str(tmp_path), 2)
    other = new_cluster_id()
    with pytest.raises(InconsistentClusterIdError, match=f"belongs to cluster {s.cluster_id}") as info:
        LocalMetadataStore(str(tmp_path), 1, cluster_id=other)
    assert info.value.code == 104 and other in str(info.value)
    with pytest.raises(ConfigError, match="cluster.id"):
        LocalMetadataStore(str(tmp_path), 1, cluster_id="not-a-cluster-id")


def test_meta_properties_versions_and_damage(tmp_path):
    path = tmp_path / "meta.properties"
    cid = new_cluster_id()
    path.write_text(f"version=0\nbroker.id=4\ncluster.id={cid}\n")  # a ZooKeeper-era Kafka dir
    assert LocalMetadataStore(str(tmp_path), 4).cluster_id == cid
    for text, words in [("version=7\nnode.id=4\ncluster.id=x\n", "unsupported version '7'"),
                        ("version=1\ncluster.id=abc\n", "needs node.id and cluster.id"),
                        ("version=1\nnode.id=x\ncluster.id=abc\n", "needs node.id"),
                        ("version=1\nnode.id=4\n", "needs node.id and cluster.id")]:
        path.write_text(text)
        with pytest.raises(MetadataCorruptError, match=words):
            LocalMetadataStore(str(tmp_path), 4)


def test_table_of_another_cluster_is_refused(tmp_path):
    s = LocalMetadataStore(str(tmp_path), 0)
    s.create_topic("t", 1, 1, {})
    os.unlink(tmp_path / "meta.properties")  # a new cluster id gets generated
    with pytest.raises(InconsistentClusterIdError, match="pybroker-metadata.json belongs to cluster"):
        LocalMetadataStore(str(tmp_path), 0)


def test_leftover_temp_file_is_discarded(tmp_path):
    s = LocalMetadataStore(str(tmp_path), 0)
    s.create_topic("t", 2, 1, {"a": "b"})
    before = snapshot(s)
    tmp = tmp_path / "pybroker-metadata.json.tmp"
    tmp.write_bytes(b'{"format": 1, "generation": 9, "topics": [{"na')  # torn write of a newer table
    again = LocalMetadataStore(str(tmp_path), 0)
    assert snapshot(again) == before and again.generation == 1
    assert not tmp.exists()
    again.create_topic("u", 1, 1, {})
    assert set(LocalMetadataStore(str(tmp_path), 0).topics) == {"t", "u"}


@pytest.mark.parametrize("damage", [
    lambda b: b[: len(b) // 2],
    lambda b: b"",
    lambda b: b.replace(b'"format": 1', b'"format": 9'),
    lambda b: b.replace(b'"partitions": 2', b'"partitions": "x"'),
    lambda b: b.replace(b'"name": "t"', b'"name": "bad name"'),
    lambda b: b"[]",
])
def test_damaged_table_is_an_error_not_an_empty_cluster(tmp_path, damage):
    LocalMetadataStore(str(tmp_path), 0).create_topic("t", 2, 1, {})
    path = tmp_path / "pybroker-metadata.json"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(MetadataCorruptError, match="unreadable topic table"):
        LocalMetadataStore(str(tmp_path), 0)


def test_failed_write_changes_nothing(tmp_path, monkeypatch):
    s = LocalMetadataStore(str(tmp_path), 0)
    s.create_topic("t", 1, 1, {})
    before = snapshot(s)

    def broken(path, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(ms, "_write_atomically", broken)
    for call in (lambda: s.create_topic("u", 1, 1, {}), lambda: s.delete_topic("t"),
                 lambda: s.set_partitions("t", 4), lambda: s.set_configs("t", {"a": "b"})):
        with pytest.raises(OSError):
            call()
        assert snapshot(s) == before and s.generation == 1
    monkeypatch.undo()
    assert snapshot(LocalMetadataStore(str(tmp_path), 0)) == before


def test_cluster_id_format():
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert len(cid) == 22 and "=" not in cid and not cid.startswith("-")
        assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16
        assert check_cluster_id(cid) == cid


def test_generated_cluster_id_on_first_start(tmp_path):
    a = LocalMetadataStore(str(tmp_path / "a"), 0)
    b = LocalMetadataStore(str(tmp_path / "b"), 0)
    assert a.cluster_id != b.cluster_id
    check_cluster_id(a.cluster_id)


# -- crash safety: a child applies OPS and is killed with SIGKILL ------------------------------

def make_ops(n: int) -> list[tuple]:
    """A deterministic update sequence: every op is valid after the ones before it."""
    ops, live, parts = [], [], {}
    for i in range(n):
        kind = i % 4
        if kind == 0 or not live:
            name = f"topic-{i}"
            ops.append(("create", name, 1 + i % 3, {"retention.ms": str(i)}))
            live.append(name)
            parts[name] = 1 + i % 3
        elif kind == 1:
            name = live[-1]
            parts[name] += 1
            ops.append(("grow", name, parts[name]))
        elif kind == 2:
            ops.append(("configs", live[-1], {"retention.ms": None, "segment.bytes": str(1000 + i)}))
        else:
            name = live.pop(0) if len(live) > 2 else live[0]
            if name in live:
                ops.append(("configs", name, {"flush.ms": str(i)}))
            else:
                ops.append(("delete", name))
    return ops


def apply(store, op):
    if op[0] == "create":
        return store.create_topic(op[1], op[2], 1, op[3])
    if op[0] == "grow":
        return store.set_partitions(op[1], op[2])
    if op[0] == "configs":
        return store.set_configs(op[1], op[2])
    return store.delete_topic(op[1])


class Model:
    """The store's expected content after a prefix of the ops (topic ids aside)."""

    def __init__(self):
        self.topics = {}

    def create_topic(self, name, partitions, rf, configs):
        self.topics[name] = (partitions, rf, dict(configs))

    def set_partitions(self, name, count):
        p, rf, c = self.topics[name]
        self.topics[name] = (count, rf, c)

    def set_configs(self, name, configs):
        p, rf, c = self.topics[name]
        c = dict(c)
        for k, v in configs.items():
            if v is None:
                c.pop(k, None)
            else:
                c[k] = v
        self.topics[name] = (p, rf, c)

    def delete_topic(self, name):
        del self.topics[name]


def model_after(ops, count) -> dict:
    model = Model()
    for op in ops[:count]:
        apply(model, op)
    return model.topics


CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from pybroker.controller.metadata_store import LocalMetadataStore
from tests.unit.test_metadata_store import apply, make_ops
store = LocalMetadataStore(sys.argv[2], 0)
ops = make_ops(int(sys.argv[3]))
print("R", store.generation, flush=True)
for i in range(store.generation, len(ops)):
    record = apply(store, ops[i])
    print("A", i + 1, record.topic_id if ops[i][0] == "create" else "-", flush=True)
print("D", flush=True)
sys.stdin.read()
"""


def test_sigkill_during_updates_leaves_a_prefix(tmp_path):
    total = 120
    ops = make_ops(total)
    directory = str(tmp_path / "data")
    ids = {}  # op number -> topic id acknowledged by a child
    acked = 0
    for kill_after in (0, 1, 7, 19, 30, 45, 200):
        child = subprocess.Popen([sys.executable, "-c", CHILD, ROOT, directory, str(total)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            tag, start = child.stdout.readline().split()
            assert tag == "R" and int(start) >= acked
            seen = 0
            while seen < kill_after:
                line = child.stdout.readline().split()
                assert line, "child exited early"
                if line[0] == "D":
                    break
                seen += 1
                acked = int(line[1])
                if line[2] != "-":
                    ids[acked] = line[2]
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
            child.stdout.close()
            child.stdin.close()
        store = LocalMetadataStore(directory, 0)
        g = store.generation
        assert acked <= g <= total
        got = {n: (r.partitions, r.replication_factor, r.configs) for n, r in store.topics.items()}
        assert got == model_after(ops, g)
        for n, topic_id in ids.items():
            name = ops[n - 1][1]
            if n <= g and name in store.topics:
                assert str(store.topics[name].topic_id) == topic_id
        assert not os.path.exists(os.path.join(directory, "pybroker-metadata.json.tmp"))
    assert LocalMetadataStore(directory, 0).generation == total


def test_file_is_plain_json(tmp_path):
    s = LocalMetadataStore(str(tmp_path), 0)
    s.create_topic("t", 3, 1, {"k": "v"})
    body = json.loads((tmp_path / "pybroker-metadata.json").read_text())
    assert body == {"format": 1, "cluster_id": s.cluster_id, "generation": 1,
                    "topics": [{"name": "t", "topic_id": str(s.topics["t"].topic_id), "partitions": 3,
                                "replication_factor": 1, "configs": {"k": "v"}}]}
