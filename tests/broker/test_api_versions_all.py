"""Every version of every API the broker advertises answers a wire request: the request is encoded
at that version (request header v1 or v2 as the version is flexible), the broker answers it with a
response that decodes at that version (response header v0 or v1), carrying the request's
correlation id, and the connection stays usable afterwards.

The requests are small and harmless: empty lists, unknown groups or transactional ids, stale
controller and broker epochs (so a controller request never applies). Whole flows per version are
in the API's own tests (groups: tests/broker/test_group_versions.py); this file guards the table itself:
nothing is advertised that a client cannot actually use.
"""
import pytest

from pybroker.api import TABLE
from pybroker.protocol import API_NAMES, REQUESTS
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
}


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
