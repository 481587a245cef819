"""Topic ids (KIP-516) and the admin/metadata APIs at their current versions, against real brokers.

A topic's id is made once, stored with the topic and written as ``partition.metadata`` in each
partition directory in Kafka's format; it survives restarts, a delete/recreate makes a new one, and
a directory holding another id is refused (INCONSISTENT_TOPIC_ID). Metadata v10+ answers ids (v12
asks by id), CreateTopics v5-7 describes what it made, DeleteTopics v6 deletes by id, ListOffsets
v7-v9 answers the special timestamps, ApiVersions v3-v4 the features; confluent-kafka and Kafka 3.8's
kafka-topics.sh see the same ids.

The cases of the other tiers: tests/cluster/test_topic_ids.py, tests/unit/test_topic_ids.py.
"""
import base64
import os
import subprocess
import time
import uuid

import pytest

from pybroker.protocol import REQUESTS
from tests.clientutil import DEADLINE
from tests.kafka_wire import WireClient

KAFKA_BIN = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "pybroker-kafka", "kafka_2.13-3.8.0", "bin")
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, INVALID_REQUEST = 3, 5, 6, 42
UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID, KAFKA_STORAGE_ERROR = 100, 103, 56
ZERO = uuid.UUID(int=0)


def b64(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


def create(w, name, partitions=1, version=7, configs=None, validate_only=False):
    req = REQUESTS[19]
    topic = req.CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1, assignments=[],
                               configs=[req.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])
    return w.request(req(topics=[topic], timeout_ms=10000, validate_only=validate_only), version).topics[0]


def metadata(w, names=None, ids=None, version=12):
    req = REQUESTS[3]
    topics = None
    if names is not None or ids is not None:
        topics = [req.MetadataRequestTopic(name=n) for n in names or ()]
        topics += [req.MetadataRequestTopic(name=None, topic_id=i) for i in ids or ()]
    return w.request(req(topics=topics, allow_auto_topic_creation=False), version)


def delete(w, names=(), ids=(), version=6):
    req = REQUESTS[20]
    if version >= 6:
        topics = [req.DeleteTopicState(name=n) for n in names] + [req.DeleteTopicState(name=None, topic_id=i)
                                                                 for i in ids]
        return w.request(req(topics=topics, timeout_ms=10000), version)
    return w.request(req(topic_names=list(names), timeout_ms=10000), version)


def wait_until(predicate, what: str, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# ---- partition.metadata, without a broker ------------------------------------------------------


# ---- one broker ------------------------------------------------------------------------------

def test_ids_stable_across_restart_and_written_per_partition(broker_factory, tmp_path):
    data = str(tmp_path / "ids")
    b = broker_factory(data_dir=data)
    with WireClient(b.port) as w:
        made = create(w, "ids-a", partitions=3)
        assert made.error_code == 0 and made.topic_id != ZERO
        assert (made.num_partitions, made.replication_factor) == (3, 1)
        configs = {c.name: (c.value, c.config_source) for c in made.configs}
        assert configs["cleanup.policy"] == ("delete", 5) and "retention.ms" in configs
        t = metadata(w, ["ids-a"]).topics[0]
        assert (t.error_code, t.topic_id) == (0, made.topic_id)
        assert metadata(w, ["ids-a"], version=9).topics[0].topic_id == ZERO  # before v10 there is no id
    for p in range(3):
        with open(os.path.join(data, f"ids-a-{p}", "partition.metadata")) as f:
            assert f.read() == f"version: 0\ntopic_id: {b64(made.topic_id)}"
    b.stop()
    b = broker_factory(data_dir=data)
    with WireClient(b.port) as w:
        assert metadata(w, ["ids-a"]).topics[0].topic_id == made.topic_id
        assert metadata(w, ids=[made.topic_id]).topics[0].name == "ids-a"


def test_a_directory_of_another_incarnation_is_refused(broker_factory, tmp_path):
    data = str(tmp_path / "stray")
    b = broker_factory(data_dir=data)
    with WireClient(b.port) as w:
        create(w, "ids-stray", partitions=2)
        assert w.produce("ids-stray", 1, _batch()).error_code == 0
    b.stop()
    stranger = uuid.uuid4()
    with open(os.path.join(data, "ids-stray-1", "partition.metadata"), "w") as f:
        f.write(f"version: 0\ntopic_id: {b64(stranger)}")
    b = broker_factory(data_dir=data)
    with WireClient(b.port) as w:
        parts = {p.partition_index: p for p in metadata(w, ["ids-stray"]).topics[0].partitions}
        assert parts[0].error_code == 0 and parts[1].error_code == LEADER_NOT_AVAILABLE
        assert w.produce("ids-stray", 0, _batch()).error_code == 0
        assert w.produce("ids-stray", 1, _batch()).error_code == NOT_LEADER_OR_FOLLOWER  # nobody leads it
    with open(os.path.join(data, "ids-stray-1", "partition.metadata")) as f:
        assert b64(stranger) in f.read()  # refused, never overwritten
    assert "INCONSISTENT_TOPIC_ID" in b.stderr() or "another incarnation" in b.stderr()


def test_metadata_by_id_and_its_refusals(broker):
    with WireClient(broker.port) as w:
        made = create(w, "ids-meta", partitions=2)
        other = uuid.uuid4()
        resp = metadata(w, ids=[made.topic_id, other])
        got = {t.topic_id: t for t in resp.topics}
        assert got[other].error_code == UNKNOWN_TOPIC_ID and got[other].name is None
        assert got[made.topic_id].name == "ids-meta" and len(got[made.topic_id].partitions) == 2
        for version in (10, 11):  # ids and null names are v12's
            assert metadata(w, ids=[made.topic_id], version=version).topics[0].error_code == INVALID_REQUEST
        everything = metadata(w, version=12)
        assert any(t.name == "ids-meta" and t.topic_id == made.topic_id for t in everything.topics)
        r = w.request(REQUESTS[3](topics=[], include_cluster_authorized_operations=True,
                                  include_topic_authorized_operations=True), 10)
        assert r.cluster_authorized_operations > 0  # no authorizer: every cluster operation
        r = w.request(REQUESTS[3](topics=[REQUESTS[3].MetadataRequestTopic(name="ids-meta")],
                                  include_topic_authorized_operations=True), 12)
        assert r.topics[0].topic_authorized_operations > 0 and r.cluster_authorized_operations == -2147483648


def test_create_topics_v5_to_v7_describe_what_they_make(broker):
    with WireClient(broker.port) as w:
        dry = create(w, "ids-dry", partitions=4, configs={"retention.ms": "1234"}, validate_only=True)
        assert dry.error_code == 0 and dry.topic_id == ZERO and dry.num_partitions == 4
        assert {c.name: (c.value, c.config_source) for c in dry.configs}["retention.ms"] == ("1234", 1)
        assert metadata(w, ["ids-dry"]).topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
        v5 = create(w, "ids-v5", partitions=2, version=5)
        assert v5.error_code == 0 and v5.num_partitions == 2 and v5.topic_id == ZERO  # ids from v7
        again = create(w, "ids-v5", partitions=2)
        assert again.error_code == 36 and again.num_partitions == -1 and again.configs == []
        req = REQUESTS[19]
        twice = w.request(req(topics=[req.CreatableTopic(name="ids-dup", num_partitions=1, replication_factor=1)] * 2,
                              timeout_ms=10000), 7)
        assert [t.error_code for t in twice.topics] == [INVALID_REQUEST]  # as KRaft Kafka: answered once


def test_delete_topics_by_id_and_recreate_gets_a_new_id(broker):
    with WireClient(broker.port) as w:
        first = create(w, "ids-del").topic_id
        both = w.request(REQUESTS[20](topics=[REQUESTS[20].DeleteTopicState(name="ids-del", topic_id=first)],
                                      timeout_ms=10000), 6)
        assert both.responses[0].error_code == INVALID_REQUEST
        stranger = uuid.uuid4()
        r = delete(w, ids=[stranger]).responses[0]
        assert (r.error_code, r.name, r.topic_id) == (UNKNOWN_TOPIC_ID, None, stranger)
        r = delete(w, ids=[first]).responses[0]
        assert (r.error_code, r.name, r.topic_id) == (0, "ids-del", first)
        assert metadata(w, ["ids-del"]).topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
        second = create(w, "ids-del").topic_id
        assert second not in (ZERO, first)
        r = delete(w, ["ids-del"], version=5).responses[0]
        assert r.error_code == 0
        r = delete(w, ["ids-del"], version=6).responses[0]
        assert r.error_code == UNKNOWN_TOPIC_OR_PARTITION and r.error_message


def test_list_offsets_special_timestamps(broker):
    with WireClient(broker.port) as w:
        create(w, "ids-lo")
        now = int(time.time() * 1000)
        for ts in (now - 3000, now + 5000, now - 1000):
            assert w.produce("ids-lo", 0, _batch(ts)).error_code == 0
        req = REQUESTS[2]

        def ask(timestamp, version=10):
            r = w.request(req(replica_id=-1, topics=[req.ListOffsetsTopic(name="ids-lo", partitions=[
                req.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])]), version)
            p = r.topics[0].partitions[0]
            return p.error_code, p.offset, p.timestamp
        assert ask(-3) == (0, 1, now + 5000)       # the record with the largest timestamp
        assert ask(-4) == (0, 0, -1)               # earliest local: everything is local
        assert ask(-5) == (0, -1, -1)              # latest tiered: nothing is tiered
        assert ask(-1, version=6) == (0, 3, -1)
        assert ask(now - 2000, version=7)[:2] == (0, 1)


def test_api_versions_features(broker):
    with WireClient(broker.port) as w:
        v4 = w.api_versions(version=4)
        assert v4.error_code == 0 and v4.finalized_features_epoch >= 0
        supported = {f.name: (f.min_version, f.max_version) for f in v4.supported_features}
        assert supported["transaction.version"] == (0, 0)
        v3 = w.api_versions(version=3)
        assert all(f.min_version > 0 for f in v3.supported_features)  # v3 readers cannot take a 0
        ranges = {k.api_key: (k.min_version, k.max_version) for k in v4.api_keys}
        assert ranges[3] == (0, 12) and ranges[19][1] == 7 and ranges[20][1] == 6 and ranges[2][1] == 10
        bad = w.request(REQUESTS[18](client_software_name="not valid!", client_software_version="1"), 3)
        assert bad.error_code == INVALID_REQUEST


def _batch(ts: int | None = None):
    from pybroker.records import Record, build_batch
    ts = int(time.time() * 1000) if ts is None else ts
    return bytes(build_batch([Record(key=None, value=b"v", timestamp=ts)], base_timestamp=ts))


# ---- real clients ----------------------------------------------------------------------------

def test_recreated_topic_seen_by_a_live_confluent_consumer(broker):
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka import TopicCollection
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def topic_id():
        desc = admin.describe_topics(TopicCollection(["ids-live"]))["ids-live"].result(DEADLINE)
        return desc.topic_id

    def make():
        admin.create_topics([NewTopic("ids-live", 1, 1)])["ids-live"].result(DEADLINE)
    make()
    first = topic_id()
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ids-live-g",
                            "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500})
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
    try:
        consumer.subscribe(["ids-live"])
        for i in range(5):
            producer.produce("ids-live", value=b"old-%d" % i)
        producer.flush(DEADLINE)
        got = _consume(consumer, 5)
        assert [m.value() for m in got] == [b"old-%d" % i for i in range(5)]
        admin.delete_topics(["ids-live"])["ids-live"].result(DEADLINE)
        wait_until(lambda: "ids-live" not in admin.list_topics(timeout=DEADLINE).topics, "the deletion")
        make()
        second = wait_until(topic_id, "the new topic id")
        assert str(second) != str(first)
        with WireClient(broker.port) as w:  # the id confluent-kafka sees is the broker's
            assert metadata(w, ["ids-live"]).topics[0].topic_id == as_uuid(second)
        for i in range(3):
            producer.produce("ids-live", value=b"new-%d" % i)
        producer.flush(DEADLINE)
        got = _consume(consumer, 3)
        assert [(m.offset(), m.value()) for m in got] == [(i, b"new-%d" % i) for i in range(3)]
    finally:
        consumer.close()


def as_uuid(ck_uuid) -> uuid.UUID:
    """confluent-kafka's Uuid as a UUID (its str() is standard base64, Kafka's is URL-safe)."""
    mask = (1 << 64) - 1
    return uuid.UUID(int=(ck_uuid.get_most_significant_bits() & mask) << 64
                     | ck_uuid.get_least_significant_bits() & mask)


def _consume(consumer, n: int) -> list:
    got, deadline = [], time.monotonic() + DEADLINE
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            got.append(m)
    assert len(got) == n, got
    return got


@pytest.mark.skipif(not os.path.isdir(KAFKA_BIN), reason="Apache Kafka's tools are not built here")
def test_kafka_topics_describe_and_delete(broker):
    with WireClient(broker.port) as w:
        made = create(w, "ids-kafka", partitions=2)
    tool = os.path.join(KAFKA_BIN, "kafka-topics.sh")
    r = subprocess.run([tool, "--bootstrap-server", broker.bootstrap, "--describe", "--topic", "ids-kafka"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"Topic: ids-kafka\tTopicId: {b64(made.topic_id)}\t" in r.stdout, r.stdout
    r = subprocess.run([tool, "--bootstrap-server", broker.bootstrap, "--delete", "--topic", "ids-kafka"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with WireClient(broker.port) as w:
        wait_until(lambda: metadata(w, ["ids-kafka"]).topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION,
                   "the topic to be gone")
        again = create(w, "ids-kafka", partitions=1)
        assert again.topic_id not in (ZERO, made.topic_id)


# ---- a cluster -------------------------------------------------------------------------------

