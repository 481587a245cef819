"""Every version of every API the broker advertises answers a wire request: the request is encoded
at that version (request header v1 or v2 as the version is flexible), the broker answers it with a
response that decodes at that version (response header v0 or v1), carrying the request's
correlation id, and the connection stays usable afterwards.

The requests are small and harmless: empty lists, unknown groups or transactional ids, stale
controller and broker epochs (so a controller request never applies). Whole flows per version are
in the API's own tests (groups: tests/broker/test_group_versions.py); this file guards the table itself:
nothing is advertised that a client cannot actually use; and everything Kafka 3.8 (a ZooKeeper-mode
broker) advertises is advertised, from its lowest version.

Old record formats end to end: what today's producers write is read back by Fetch v0-3 as message
sets of magic 0 (v0-1) and 1 (v2-3), by the wire and by kafka-python pinned to old broker versions;
message sets produced with Produce v0-2 are read back by every Fetch version.
"""
import struct

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from pybroker.api import TABLE
from pybroker.protocol import API_NAMES, REQUESTS
from pybroker.records import Record, build_batch, decode_records
from tests.clientutil import wait_until
from tests.kafka_wire import WireClient

API_VERSIONS = 18
STALE = {"controller_id": 999, "controller_epoch": -1, "broker_epoch": -1}
NO_TXN = {"transactional_id": "no-such-txn", "producer_id": -1, "producer_epoch": -1}


def _add_partitions_to_txn(version):
    if version >= 4:
        return {"transactions": []}
    return {"v3_and_below_transactional_id": "no-such-txn", "v3_and_below_producer_id": -1,
            "v3_and_below_producer_epoch": -1, "v3_and_below_topics": []}


def _offset_fetch(version):
    req = REQUESTS[9]
    return {"group_id": "api-versions-group", "topics": [],
            "groups": [req.OffsetFetchRequestGroup(group_id="api-versions-group", member_id=None, member_epoch=-1,
                                                   topics=None)]}


# api key -> request fields (or a function of the version giving them); unlisted APIs use the defaults
SAMPLES = {
    0: {"acks": -1, "timeout_ms": 1000, "topic_data": []},
    1: {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "session_id": 0,
        "session_epoch": -1, "topics": [], "forgotten_topics_data": []},
    2: {"replica_id": -1, "topics": []},
    3: {"topics": []},
    4: dict(STALE), 5: dict(STALE), 6: dict(STALE),
    7: {"broker_id": 999, "broker_epoch": -1},
    8: {"group_id": "api-versions-group", "generation_id_or_member_epoch": -1, "retention_time_ms": -1, "topics": []},
    9: _offset_fetch,
    10: {"key": "api-versions-group", "coordinator_keys": ["api-versions-group"]},
    11: {"group_id": "", "session_timeout_ms": 6000, "protocol_type": "consumer"},  # INVALID_GROUP_ID at once
    15: {"groups": ["api-versions-group"]},
    17: {"mechanism": "PLAIN"},
    18: {"client_software_name": "pybroker-tests", "client_software_version": "1.0"},
    19: {"topics": [], "timeout_ms": 1000},
    20: {"topics": [], "topic_names": [], "timeout_ms": 1000},
    21: {"topics": [], "timeout_ms": 1000},
    22: {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1},
    23: {"replica_id": -1, "topics": []},
    24: _add_partitions_to_txn,
    25: dict(NO_TXN, group_id="api-versions-group"),
    26: dict(NO_TXN, committed=False),
    27: {"markers": []},
    28: dict(NO_TXN, group_id="api-versions-group", generation_id=-1, member_id="", topics=[]),
    29: {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1},
    32: {"resources": []},
    35: {"topics": []},
    43: {"election_type": 0, "topic_partitions": [], "timeout_ms": 1000},
    45: {"timeout_ms": 1000, "topics": []},
    46: {"timeout_ms": 1000, "topics": []},
    47: {"group_id": "api-versions-group", "topics": []},
    48: {"components": [], "strict": False},
    50: {"users": []},
    61: {"topics": []},
    65: {"transactional_ids": []},
    75: {"topics": [], "response_partition_limit": 10},
    34: {"dirs": []},
    38: {"renewers": [], "max_lifetime_ms": -1},
    39: {"hmac": b"", "renew_period_ms": -1},
    40: {"hmac": b"", "expiry_time_period_ms": -1},
    41: {"owners": []},
    57: {"timeout_ms": 1000, "feature_updates": []},
}

# Kafka 3.8's ApiVersions on a ZooKeeper-mode broker: every API whose spec lists the zkBroker listener,
# (lowest, highest) version as its 3.8 spec has them
KAFKA_38_ZK_BROKER = {
    0: (0, 11), 1: (0, 16), 2: (0, 8), 3: (0, 12), 4: (0, 7), 5: (0, 4), 6: (0, 8), 7: (0, 3), 8: (0, 9),
    9: (0, 9), 10: (0, 5), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 17: (0, 1),
    18: (0, 3), 19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 5), 23: (0, 4), 24: (0, 5), 25: (0, 4), 26: (0, 4),
    27: (0, 1), 28: (0, 4), 29: (0, 3), 30: (0, 3), 31: (0, 3), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 4),
    36: (0, 2), 37: (0, 3), 38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1),
    45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 56: (0, 3), 57: (0, 1),
    58: (0, 0), 60: (0, 1), 61: (0, 0), 65: (0, 0), 66: (0, 1), 67: (0, 0), 68: (0, 0), 69: (0, 0),
}
# sent only by brokers to a ZooKeeper-mode controller, never by clients: AlterPartition (pybroker's
# leaders write the ISR to ZooKeeper themselves), Envelope (only with KRaft migration forwarding;
# Kafka closes the connection otherwise, as here) and AllocateProducerIds (ids come from ZooKeeper)
BROKER_TO_CONTROLLER_ONLY = {56, 58, 67}


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


@pytest.fixture(scope="module")
def advertised(broker):
    with WireClient(broker.port) as w:
        resp = w.api_versions()
    assert resp.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def sample(api_key: int, version: int):
    fields = SAMPLES.get(api_key, {})
    if callable(fields):
        fields = fields(version)
    return REQUESTS[api_key](**fields)


def test_advertised_versions_are_the_api_table(advertised):
    assert advertised == {k: (m.MIN_VERSION, m.MAX_VERSION) for k, m in TABLE.items()}
    for key, (low, high) in advertised.items():  # within what Kafka's specs define
        assert REQUESTS[key].MIN_VERSION <= low <= high <= REQUESTS[key].MAX_VERSION, API_NAMES[key]


def test_every_version_kafka_38_serves_is_advertised(advertised):
    for key, (low, high) in KAFKA_38_ZK_BROKER.items():
        if key in BROKER_TO_CONTROLLER_ONLY:
            assert key not in advertised, API_NAMES[key]
            continue
        assert key in advertised, API_NAMES[key]
        ours = advertised[key]
        assert ours[0] <= low and ours[1] >= high, (API_NAMES[key], ours, (low, high))


def test_controller_apis_advertise_every_version_of_their_specs(advertised):
    """LeaderAndIsr, StopReplica and UpdateMetadata from v0
    (whole flows: tests/cluster/test_interbroker_versions.py)."""
    for key in (4, 5, 6):
        assert advertised[key] == (REQUESTS[key].MIN_VERSION, REQUESTS[key].MAX_VERSION) == (0, (7, 4, 8)[key - 4])


def test_offset_delete_and_add_partitions_to_txn_v5_are_advertised(broker, advertised):
    """OffsetDelete v0 (an unknown group: GROUP_ID_NOT_FOUND once the coordinator answers) and the
    brokers' AddPartitionsToTxn up to v5 (KIP-890)."""
    assert advertised[47] == (0, 0) and advertised[24] == (0, 5)
    with WireClient(broker.port) as w:
        assert w.request(sample(24, 5), 5).error_code == 0
        assert w.request(sample(47, 0), 0).error_code in (69, 14, 15, 16)  # or: still loading / electing


@pytest.mark.parametrize("api_key", sorted(TABLE), ids=lambda k: API_NAMES[k])
def test_every_advertised_version_answers(broker, advertised, api_key):
    low, high = advertised[api_key]
    for version in range(low, high + 1):
        with WireClient(broker.port, client_id=f"all-{api_key}-{version}") as w:
            response = w.request(sample(api_key, version), version)  # asserts the correlation id
            assert response is not None, (API_NAMES[api_key], version)
            # the connection still serves the next request (no hang-up after an odd answer)
            assert w.api_versions().error_code == 0, (API_NAMES[api_key], version)


def test_an_unadvertised_version_closes_the_connection(broker, advertised):
    """As Kafka: a version past the advertised range gets no answer and the connection closes."""
    for api_key, (_, high) in sorted(advertised.items()):
        if api_key == API_VERSIONS or high >= REQUESTS[api_key].MAX_VERSION:
            continue  # ApiVersions answers any version; a codec cannot encode past the spec
        with WireClient(broker.port) as w:
            w.send_only(sample(api_key, high + 1), high + 1)
            assert w.is_closed_by_peer(), API_NAMES[api_key]


# ---- answers of the APIs a Kafka 3.8 ZooKeeper broker has and the old versions ----------------------

def test_delegation_tokens_are_refused_as_on_a_broker_without_them(broker):
    """Over PLAINTEXT, Kafka's first check answers DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (64), naming the
    caller as the owner."""
    with WireClient(broker.port) as w:
        for version in range(4):
            r = w.request(sample(38, version), version)
            assert (r.error_code, r.principal_type, r.principal_name, r.hmac) == (64, "User", "ANONYMOUS", b"")
            assert w.request(sample(41, version), version).error_code == 64
        for key in (39, 40):
            r = w.request(sample(key, 2), 2)
            assert (r.error_code, r.expiry_timestamp_ms) == (64, -1)


def test_alter_replica_log_dirs_answers_per_partition(broker):
    topic = "alter-log-dirs"
    with WireClient(broker.port) as w:
        w.create_topic(topic)
        log_dir = w.request(REQUESTS[35](topics=None), 1).results[0].log_dir
        req = REQUESTS[34]
        request = req(dirs=[
            req.AlterReplicaLogDir(path=log_dir, topics=[req.AlterReplicaLogDirTopic(name=topic, partitions=[0, 7])]),
            req.AlterReplicaLogDir(path="/no/such/dir",
                                   topics=[req.AlterReplicaLogDirTopic(name="other", partitions=[0])]),
        ])
        for version in range(3):
            results = {(t.topic_name, p.partition_index): p.error_code
                       for t in w.request(request, version).results for p in t.partitions}
            # already there; no replica here (REPLICA_NOT_AVAILABLE); not a log dir (LOG_DIR_NOT_FOUND)
            assert results == {(topic, 0): 0, (topic, 7): 9, ("other", 0): 57}


def test_update_features_judges_each_update(broker):
    req = REQUESTS[57]
    with WireClient(broker.port) as w:
        r = w.request(req(timeout_ms=1000, feature_updates=[
            req.FeatureUpdateKey(feature="group.version", max_version_level=1, upgrade_type=1),
            req.FeatureUpdateKey(feature="", max_version_level=1, upgrade_type=1)]), 1)
        assert r.error_code == 0
        assert [(x.feature, x.error_code) for x in r.results] == [("group.version", 42), ("", 42)]
        assert "same value" in r.results[0].error_message and "empty" in r.results[1].error_message


def test_offset_commit_v0_v1_and_offset_fetch_v0(broker):
    """Simple commits of the old versions are read back by every OffsetFetch version up to v7."""
    topic, group = "old-offsets", "old-offsets-group"
    commit, fetch = REQUESTS[8], REQUESTS[9]
    with WireClient(broker.port) as w:
        w.create_topic(topic, partitions=2)
        find = REQUESTS[10]  # as a client does first: it creates __consumer_offsets, whose leader then coordinates
        wait_until(lambda: w.request(find(key=group, key_type=0), 1).error_code == 0)
        for version, (partition, offset) in ((0, (0, 11)), (1, (1, 22))):
            request = commit(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
                commit.OffsetCommitRequestTopic(name=topic, partitions=[commit.OffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset, committed_metadata="m")])])
            answers = []
            # the group coordinator may still be loading on a fresh broker: retried until it answers
            wait_until(lambda: answers.append(w.request(request, version).topics[0].partitions[0])  # noqa: B023
                       or answers[-1].error_code not in (14, 15, 16))
            assert answers[-1].error_code == 0, (version, answers[-1])
        asked = fetch(group_id=group, topics=[fetch.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])])
        for version in range(8):
            parts = w.request(asked, version).topics[0].partitions
            assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in parts] == \
                [(0, 11, "m", 0), (1, 22, "m", 0)], version


def test_old_versions_of_topic_and_epoch_apis(broker):
    """CreateTopics v0-1, DeleteTopics v0, OffsetForLeaderEpoch v0-1 and ControlledShutdown v0-1 (its v0
    request header has no client id) act or answer as their newer versions do."""
    create, delete, epochs = REQUESTS[19], REQUESTS[20], REQUESTS[23]
    with WireClient(broker.port) as w:
        for version in (0, 1):
            name = f"old-create-v{version}"
            r = w.request(create(timeout_ms=10000, topics=[create.CreatableTopic(
                name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])]), version)
            assert r.topics[0].error_code == 0, r
            w.produce(name, 0, bytes(build_batch([b"x"])))
            ends = w.request(epochs(topics=[epochs.OffsetForLeaderTopic(topic=name, partitions=[
                epochs.OffsetForLeaderPartition(partition=0, leader_epoch=0)])]), version)
            assert (ends.topics[0].partitions[0].error_code, ends.topics[0].partitions[0].end_offset) == (0, 1)
            r = w.request(sample(7, version), version)  # single node: no controller takes it over the wire
            assert r.error_code == 41
        r = w.request(delete(topic_names=["old-create-v0", "old-create-v1"], timeout_ms=10000), 0)
        assert [(x.name, x.error_code) for x in r.responses] == [("old-create-v0", 0), ("old-create-v1", 0)]


# ---- old record formats ---------------------------------------------------------------------------

def _legacy_set(magic: int, codec: int, values) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i if magic else None, key=b"k%d" % i, value=value)
    return bytes(builder.build())


def _read_set(data: bytes) -> list:
    """[(offset, magic, key, value)] of a message set, read by kafka-python's own decoder."""
    records, out = MemoryRecords(data), []
    while (batch := records.next_batch()) is not None:
        out += [(r.offset, batch.magic, r.key, r.value) for r in batch]
    return out


def _fetch_all(w, topic: str, version: int) -> list:
    """[(offset, magic, key, value)] from offset 0 with Fetch ``version`` (v4+: v2 batches decoded here)."""
    p = w.fetch(topic, 0, 0, version=version)
    assert p.error_code == 0, (version, p)
    data = bytes(p.records or b"")
    if version <= 3:
        return _read_set(data)
    out, pos = [], 0
    while pos + 12 <= len(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        out += [(r.offset, 2, r.key, r.value) for r in decode_records(data[pos:pos + size])]
        pos += size
    return out


def test_fetch_v0_to_v3_answer_message_sets_converted_from_batches(broker):
    """Batches (plain, gzip, snappy, lz4; keys, nulls, headers) come back as magic 0 (v0-1) and magic 1
    (v2-3) messages with the same offsets, keys and values as v4+ returns them."""
    topic = "legacy-fetch"
    with WireClient(broker.port) as w:
        w.create_topic(topic)
        for codec in range(4):
            batch = build_batch([Record(b"v%d" % codec, key=b"k"), Record(None, headers=[("h", b"1")]),
                                 Record(b"x" * 500, key=None)], attributes=codec)
            assert w.produce(topic, 0, bytes(batch), version=3).error_code == 0
        modern = [(o, k, v) for o, _, k, v in _fetch_all(w, topic, 11)]
        assert len(modern) == 12
        for version in range(4):
            got = _fetch_all(w, topic, version)
            assert {m for _, m, _, _ in got} == {0 if version < 2 else 1}, version
            assert [(o, k, v) for o, _, k, v in got] == modern, version
        # from the middle of an uncompressed batch: nothing before the offset asked for
        p = w.fetch(topic, 0, 1, version=2)
        assert [o for o, *_ in _read_set(bytes(p.records))][0] == 1


def test_fetch_v0_to_v3_refuse_a_topic_without_down_conversion(broker):
    """As Kafka: message.downconversion.enable=false answers UNSUPPORTED_VERSION (35) to old fetches."""
    topic = "legacy-no-conversion"
    with WireClient(broker.port) as w:
        w.create_topic(topic, configs={"message.downconversion.enable": "false"})
        w.produce(topic, 0, bytes(build_batch([b"x"])), version=3)
        for version in range(4):
            p = w.fetch(topic, 0, 0, version=version)
            assert (p.error_code, p.high_watermark, bytes(p.records or b"")) == (35, -1, b""), version
        assert w.fetch(topic, 0, 0, version=4).error_code == 0


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 0), (0, 10, 1)], ids=["fetch-v0", "fetch-v2", "fetch-v3"])
def test_kafka_python_pinned_to_old_brokers_reads_batches(broker, api_version):
    topic = "legacy-kafka-python-" + "-".join(map(str, api_version))
    with WireClient(broker.port) as w:
        w.create_topic(topic)
        w.produce(topic, 0, bytes(build_batch([Record(b"a", key=b"k"), Record(b"b")], attributes=1)), version=3)
        w.produce(topic, 0, bytes(build_batch([Record(b"c")])), version=3)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version, consumer_timeout_ms=5000,
                             enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        for message in consumer:
            got.append((message.offset, message.key, message.value))
            if len(got) == 3:
                break
    finally:
        consumer.close()
    assert got == [(0, b"k", b"a"), (1, None, b"b"), (2, None, b"c")]


@pytest.mark.parametrize("codec", [0, 1, 2, 3], ids=["none", "gzip", "snappy", "lz4"])
def test_produce_v0_to_v2_message_sets_read_back_by_every_fetch_version(broker, codec):
    topic = f"legacy-produce-{codec}"
    with WireClient(broker.port) as w:
        w.create_topic(topic)
        expected = []
        for version in range(3):
            magic = 0 if version < 2 else 1
            values = [b"p%d-%d" % (version, i) for i in range(3)]
            r = w.produce(topic, 0, _legacy_set(magic, codec, values), version=version)
            assert (r.error_code, r.base_offset) == (0, 3 * version), (version, r)
            expected += [(3 * version + i, b"k%d" % i, v) for i, v in enumerate(values)]
        for version in (0, 1, 2, 3, 4, 11):
            assert [(o, k, v) for o, _, k, v in _fetch_all(w, topic, version)] == expected, version


def test_produce_v0_refuses_a_corrupt_message_set(broker):
    topic = "legacy-produce-corrupt"
    with WireClient(broker.port) as w:
        w.create_topic(topic)
        data = bytearray(_legacy_set(1, 0, [b"x"]))
        data[-1] ^= 0xFF  # the CRC no longer matches
        assert w.produce(topic, 0, bytes(data), version=2).error_code == 2  # CORRUPT_MESSAGE
        assert w.list_offset(topic, 0) == 0


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 0)], ids=["produce-v0", "produce-v2"])
def test_kafka_python_pinned_to_old_brokers_produces(broker, api_version):
    topic = "legacy-kafka-python-produce-" + "-".join(map(str, api_version))
    with WireClient(broker.port) as w:
        w.create_topic(topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version, compression_type="gzip")
    try:
        for i in range(3):
            producer.send(topic, key=b"k", value=b"m%d" % i, partition=0)
        producer.flush(timeout=10)
    finally:
        producer.close(timeout=10)
    with WireClient(broker.port) as w:
        assert [(o, k, v) for o, _, k, v in _fetch_all(w, topic, 11)] == [(i, b"k", b"m%d" % i) for i in range(3)]
