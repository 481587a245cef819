"""Every advertised version of the data and admin APIs carries real traffic and answers with the
right content, not only a response that decodes (tests/broker/test_api_versions_all.py guards the table;
the group APIs' life cycle per version is in tests/broker/test_group_versions.py).

Records produced at every Produce version are read back at every Fetch version (by name below v13,
by topic id from v13); ListOffsets, Metadata, DescribeTopicPartitions, OffsetCommit/OffsetFetch,
FindCoordinator, CreateTopics/DeleteTopics, CreatePartitions, DescribeConfigs, DescribeCluster,
InitProducerId, OffsetForLeaderEpoch, DeleteRecords and DescribeLogDirs answer what the broker holds
at each of their versions. The remaining APIs' harmless requests answer the error Kafka gives."""
import struct
import time

import pytest

from pybroker.api import TABLE
from pybroker.protocol import API_NAMES, REQUESTS
from pybroker.records import build_batch, decode_records
from tests.clientutil import wait_until
from tests.kafka_wire import WireClient
from tests.broker.test_api_versions_all import sample

TOPIC = "answers"
UNSUPPORTED_VERSION, NOT_COORDINATOR = 35, 16


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


@pytest.fixture(scope="module")
def w(broker):
    with WireClient(broker.port) as client:
        yield client


@pytest.fixture(scope="module")
def topic_id(w):
    w.create_topic(TOPIC, 2)
    t = wait_until(lambda: _leaders(w, TOPIC, 2))
    assert t is not None
    return t.topic_id


def _leaders(w, name, partitions):
    t = w.metadata([name], version=12).topics[0]
    return t if t.error_code == 0 and len(t.partitions) == partitions and all(
        p.leader_id >= 0 for p in t.partitions) else None


def versions(key: int) -> range:
    return range(TABLE[key].MIN_VERSION, TABLE[key].MAX_VERSION + 1)


def batch(*values):
    """A record batch stamped now (a zero timestamp would be past retention.ms at once)."""
    return bytes(build_batch(list(values), base_timestamp=int(time.time() * 1000)))


def values_of(records) -> list:
    out, pos, records = [], 0, bytes(records or b"")
    while pos + 12 <= len(records):
        size = 12 + struct.unpack_from(">i", records, pos + 8)[0]
        out += [r.value for r in decode_records(records[pos:pos + size])]
        pos += size
    return out


def test_produce_every_version_then_fetch_every_version(w, topic_id):
    """Every record-batch version of Produce appends, every record-batch version of Fetch reads it back
    (the message-set versions, Produce v0-2 and Fetch v0-3: tests/broker/test_api_versions_all.py)."""
    Produce, Fetch = REQUESTS[0], REQUESTS[1]
    produced = []
    for version in range(3, TABLE[0].MAX_VERSION + 1):
        value = b"produce-v%d" % version
        r = w.request(Produce(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
            Produce.TopicProduceData(name=TOPIC, partition_data=[
                Produce.PartitionProduceData(index=0, records=batch(value))])]), version)
        p = r.responses[0].partition_responses[0]
        assert (r.responses[0].name, p.index, p.error_code, p.base_offset) == (TOPIC, 0, 0, len(produced)), \
            (version, p)
        produced.append(value)
    for version in range(4, TABLE[1].MAX_VERSION + 1):
        by_id = version >= 13
        r = w.request(Fetch(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                            session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[
                                Fetch.FetchTopic(topic=None if by_id else TOPIC, topic_id=topic_id if by_id else None,
                                                 partitions=[Fetch.FetchPartition(
                                                     partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                     log_start_offset=-1, partition_max_bytes=1 << 20)])]), version)
        t = r.responses[0]
        assert (t.topic_id if by_id else t.topic) == (topic_id if by_id else TOPIC), version
        p = t.partitions[0]
        assert (p.error_code, p.high_watermark) == (0, len(produced)), (version, p)
        assert values_of(p.records) == produced, version


def test_list_offsets_every_version(w, topic_id):
    req = REQUESTS[2]
    w.produce(TOPIC, 1, batch(b"a", b"b", b"c"))
    for version in versions(2):
        answers = {}
        for timestamp in (-2, -1):
            r = w.request(req(replica_id=-1, isolation_level=0, timeout_ms=1000, topics=[req.ListOffsetsTopic(
                name=TOPIC, partitions=[req.ListOffsetsPartition(partition_index=1, current_leader_epoch=-1,
                                                                 timestamp=timestamp, max_num_offsets=1)])]), version)
            p = r.topics[0].partitions[0]
            assert p.error_code == 0, (version, p)
            answers[timestamp] = p.offset if version >= 1 else p.old_style_offsets[0]
        assert answers[-2] == 0 and answers[-1] >= 3, (version, answers)


def test_metadata_every_version(w, topic_id, broker):
    for version in versions(3):
        r = w.metadata([TOPIC], version=version)
        assert [(b.node_id, b.port) for b in r.brokers] == [(0, broker.port)], version
        t = r.topics[0]
        assert (t.error_code, t.name, sorted(p.partition_index for p in t.partitions)) == (0, TOPIC, [0, 1]), version
        assert all(p.leader_id == 0 and p.replica_nodes == [0] and p.isr_nodes == [0] for p in t.partitions)
        if version >= 10:
            assert t.topic_id == topic_id, version


def test_describe_topic_partitions_every_version(w, topic_id):
    req = REQUESTS[75]
    for version in versions(75):
        r = w.request(req(topics=[req.TopicRequest(name=TOPIC)], response_partition_limit=1), version)
        t = r.topics[0]
        assert (t.error_code, t.name, t.topic_id) == (0, TOPIC, topic_id), version
        assert [p.partition_index for p in t.partitions] == [0] and r.next_cursor.partition_index == 1  # paged


def test_offset_commit_then_fetch_every_version(w, topic_id):
    commit, fetch = REQUESTS[8], REQUESTS[9]

    def commit_at(version):
        r = w.request(commit(group_id=f"answers-commit-{version}", generation_id_or_member_epoch=-1, member_id="",
                             retention_time_ms=-1, topics=[commit.OffsetCommitRequestTopic(name=TOPIC, partitions=[
                                 commit.OffsetCommitRequestPartition(partition_index=1, committed_offset=10 + version,
                                                                     committed_metadata=f"m{version}")])]), version)
        return r.topics[0].partitions[0].error_code
    # as clients do: FindCoordinator first (it creates __consumer_offsets), NOT_COORDINATOR until it is led here
    find = REQUESTS[10]
    assert wait_until(lambda: w.request(find(key="answers-commit-2", key_type=0), 3).error_code == 0 and
                      commit_at(TABLE[8].MIN_VERSION) != NOT_COORDINATOR, timeout=30)
    for version in versions(8):
        assert commit_at(version) == 0, version
    for version in versions(9):
        for committed_at in versions(8):
            group = f"answers-commit-{committed_at}"
            if version >= 8:
                g = w.request(fetch(groups=[fetch.OffsetFetchRequestGroup(
                    group_id=group, member_id=None, member_epoch=-1,
                    topics=[fetch.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[1])])]), version).groups[0]
                assert g.error_code == 0
                p = g.topics[0].partitions[0]
            else:
                r = w.request(fetch(group_id=group, topics=[fetch.OffsetFetchRequestTopic(
                    name=TOPIC, partition_indexes=[1])]), version)
                p = r.topics[0].partitions[0]
            assert (p.error_code, p.committed_offset, p.metadata) == (0, 10 + committed_at, f"m{committed_at}"), \
                (version, committed_at, p)


def test_find_coordinator_every_version(w, broker):
    req = REQUESTS[10]
    for version in versions(10):
        r = w.request(req(key="answers-group", key_type=0, coordinator_keys=["answers-group"]), version)
        found = r.coordinators[0] if version >= 4 else r
        assert (found.error_code, found.node_id, found.port) == (0, 0, broker.port), (version, found)


def test_create_and_delete_topics_every_version(w):
    create, delete = REQUESTS[19], REQUESTS[20]
    for version in versions(19):
        name = f"answers-created-v{version}"
        r = w.request(create(timeout_ms=10000, validate_only=False, topics=[create.CreatableTopic(
            name=name, num_partitions=3, replication_factor=1, assignments=[],
            configs=[create.CreatableTopicConfig(name="retention.ms", value="123456")])]), version)
        t = r.topics[0]
        assert (t.name, t.error_code) == (name, 0), (version, t)
        if version >= 5:  # the topic as made, with its configs
            assert (t.num_partitions, t.replication_factor) == (3, 1)
            assert {c.name: c.value for c in t.configs}["retention.ms"] == "123456"
        if version >= 7:
            assert t.topic_id.int != 0
        assert wait_until(lambda: _leaders(w, name, 3)), version
    for version in versions(20):  # DeleteTopics v1-v6 delete the topics CreateTopics v2-v7 made
        name = f"answers-created-v{min(version + 1, TABLE[19].MAX_VERSION)}"
        by_id = version >= 6
        if by_id:
            tid = w.metadata([name], version=12).topics[0].topic_id
            req = delete(timeout_ms=10000, topics=[delete.DeleteTopicState(name=None, topic_id=tid)])
        else:
            req = delete(timeout_ms=10000, topic_names=[name])
        r = w.request(req, version)
        assert r.responses[0].error_code == 0, (version, r)
        assert wait_until(lambda: w.metadata([name], version=12).topics[0].error_code == 3), version


def test_create_partitions_every_version(w):
    req = REQUESTS[37]
    w.create_topic("answers-grow", 1)
    count = 1
    for version in versions(37):
        count += 1
        r = w.request(req(timeout_ms=10000, validate_only=False, topics=[
            req.CreatePartitionsTopic(name="answers-grow", count=count, assignments=None)]), version)
        assert r.results[0].error_code == 0, (version, r)
        assert wait_until(lambda: _leaders(w, "answers-grow", count)), version


def test_describe_configs_every_version(w, topic_id):
    req = REQUESTS[32]
    for version in versions(32):
        r = w.request(req(include_synonyms=True, include_documentation=True, resources=[req.DescribeConfigsResource(
            resource_type=2, resource_name=TOPIC, configuration_keys=["cleanup.policy", "retention.ms"])]), version)
        res = r.results[0]
        assert (res.error_code, res.resource_name) == (0, TOPIC), version
        assert {c.name: c.value for c in res.configs} == {"cleanup.policy": "delete", "retention.ms": "604800000"}


def test_describe_cluster_every_version(w, broker):
    req = REQUESTS[60]
    for version in versions(60):
        r = w.request(req(include_cluster_authorized_operations=False, endpoint_type=1), version)
        assert r.error_code == 0 and r.controller_id == 0, version
        assert [(b.broker_id, b.port) for b in r.brokers] == [(0, broker.port)], version


def test_init_producer_id_every_version(w):
    ids = []
    for version in versions(22):
        r = w.init_producer_id(version=version)
        assert r.error_code == 0 and r.producer_id >= 0 and r.producer_epoch == 0, (version, r)
        ids.append(r.producer_id)
    assert len(set(ids)) == len(ids)  # a new idempotent producer each time


def test_offset_for_leader_epoch_every_version(w, topic_id):
    req = REQUESTS[23]
    end = w.list_offset(TOPIC, 0)
    for version in versions(23):
        r = w.request(req(replica_id=-1, topics=[req.OffsetForLeaderTopic(topic=TOPIC, partitions=[
            req.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])]), version)
        p = r.topics[0].partitions[0]
        epoch = 0 if version >= 1 else -1  # v0 answers no epoch
        assert (p.error_code, p.leader_epoch, p.end_offset) == (0, epoch, end), (version, p)


def test_delete_records_every_version(w):
    req = REQUESTS[21]
    w.create_topic("answers-trim", 1)
    w.produce("answers-trim", 0, batch(*[b"%d" % i for i in range(5)]))
    for version in versions(21):
        r = w.request(req(timeout_ms=10000, topics=[req.DeleteRecordsTopic(name="answers-trim", partitions=[
            req.DeleteRecordsPartition(partition_index=0, offset=version + 1)])]), version)
        p = r.topics[0].partitions[0]
        assert (p.error_code, p.low_watermark) == (0, version + 1), (version, p)
        assert w.list_offset("answers-trim", 0, timestamp=-2) == version + 1


def test_describe_log_dirs_every_version(w, topic_id):
    req = REQUESTS[35]
    assert w.produce(TOPIC, 0, batch(b"sized")).error_code == 0
    for version in versions(35):
        r = w.request(req(topics=[req.DescribableLogDirTopic(topic=TOPIC, partitions=[0])]), version)
        assert getattr(r, "error_code", 0) == 0, version
        parts = [(t.name, p.partition_index,
                  p.partition_size) for d in r.results for t in d.topics for p in t.partitions]
        assert [(n, i) for n, i, _ in parts] == [(TOPIC, 0)] and parts[0][2] > 0, (version, parts)


# the error codes the harmless requests of tests/broker/test_api_versions_all.py get, as Kafka answers them
NONE, INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID, UNKNOWN_MEMBER_ID = 0, 23, 24, 25
ILLEGAL_SASL_STATE, INVALID_REQUEST, INVALID_PRODUCER_ID_MAPPING, SECURITY_DISABLED = 34, 42, 49, 54
GROUP_ID_NOT_FOUND = 69
TXN_UNKNOWN = {NOT_COORDINATOR, INVALID_PRODUCER_ID_MAPPING}  # NOT_COORDINATOR until __transaction_state exists
EXPECTED = {
    11: {INVALID_GROUP_ID}, 12: {INVALID_GROUP_ID}, 13: {INVALID_GROUP_ID},
    14: {INVALID_GROUP_ID, INCONSISTENT_GROUP_PROTOCOL},  # v5 checks protocol type and name first
    # NOT_COORDINATOR until a FindCoordinator made __consumer_offsets; v6 says an unknown group is not found
    15: {NONE, NOT_COORDINATOR, GROUP_ID_NOT_FOUND},
    16: {NONE}, 17: {ILLEGAL_SASL_STATE},  # a SASL handshake on a PLAINTEXT listener
    18: {NONE}, 22: {NONE}, 25: TXN_UNKNOWN, 26: TXN_UNKNOWN, 28: TXN_UNKNOWN | {UNKNOWN_MEMBER_ID},
    29: {SECURITY_DISABLED},  # no authorizer configured
    42: {NONE, GROUP_ID_NOT_FOUND}, 48: {NONE}, 50: {NONE}, 60: {NONE}, 65: {NONE}, 66: {NONE},
    68: {INVALID_REQUEST, UNKNOWN_MEMBER_ID}, 69: {NONE, GROUP_ID_NOT_FOUND},
}


def error_codes(obj, depth=0) -> set:
    """Every error_code field anywhere in a decoded response."""
    found = set()
    if depth > 6 or obj is None or isinstance(obj, (bytes, bytearray, str, int, float, memoryview)):
        return found
    if isinstance(obj, (list, tuple)):
        for item in obj:
            found |= error_codes(item, depth + 1)
        return found
    for name in getattr(type(obj), "__slots__", ()):
        value = getattr(obj, name, None)
        if name == "error_code":
            found.add(value)
        elif not name.startswith("_"):
            found |= error_codes(value, depth + 1)
    return found


@pytest.mark.parametrize("api_key", sorted(EXPECTED), ids=lambda k: API_NAMES[k])
def test_harmless_requests_answer_kafkas_errors(broker, api_key):
    if api_key not in TABLE:
        pytest.skip(f"{API_NAMES[api_key]} is not served")
    for version in versions(api_key):
        with WireClient(broker.port) as c:
            got = error_codes(c.request(sample(api_key, version), version))
        assert got <= EXPECTED[api_key], (API_NAMES[api_key], version, got)
