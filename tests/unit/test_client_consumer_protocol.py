"""pybroker's consumer with ``group.protocol=consumer`` (KIP-848) in-process: what a heartbeat carries, regex
patterns, member ids, refused settings (against pybroker and Kafka: tests/broker/test_client_consumer_protocol.py)."""
import uuid

import pytest

from pybroker.client import Consumer, TopicPartition
from pybroker.client.cluster import Cluster as ClientCluster
from pybroker.client.config import parse
from pybroker.client.consumer import CONSUMER_KEYS
from pybroker.client.errors import ConfigError
from pybroker.client.group_consumer_protocol import ConsumerProtocolMembership, JOINING, STABLE, new_member_id
from pybroker.protocol import decode_request, encode_request


def round_trip(req, version):
    """The request as the coordinator decodes it from the bytes our client sends."""
    return decode_request(encode_request(version, 7, "t", req))[1]


def _membership(**conf):
    config = parse({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "group.protocol": "consumer", **conf},
                   "consumer", CONSUMER_KEYS)
    return ConsumerProtocolMembership(config, ClientCluster(config), None, None, lambda: None)


def test_heartbeats_carry_only_what_changed():
    m = _membership(**{"group.instance.id": "i1", "client.rack": "r1", "group.remote.assignor": "uniform"})
    m.topics, m.state = {"b", "a"}, JOINING
    join = m._build(0)
    assert (join.member_epoch, join.rebalance_timeout_ms, join.subscribed_topic_names) == (0, 300000, ["a", "b"])
    assert (join.instance_id, join.rack_id, join.server_assignor, join.topic_partitions) == ("i1", "r1", "uniform", [])
    assert round_trip(join, 0).subscribed_topic_names == ["a", "b"]
    m.state, m.member_epoch = STABLE, 3
    steady = m._build(0)
    assert steady.member_epoch == 3 and steady.instance_id == "i1"
    assert (steady.rebalance_timeout_ms, steady.subscribed_topic_names, steady.server_assignor,
            steady.topic_partitions) == (-1, None, None, None)
    tid = uuid.uuid4()
    m._owned = {(tid, 1): TopicPartition("a", 1), (tid, 0): TopicPartition("a", 0)}
    m._assignment_version += 1  # a reconciled assignment is acknowledged once
    ack = m._build(0)
    assert [(t.topic_id, t.partitions) for t in ack.topic_partitions] == [(tid, [0, 1])]
    assert m._build(0).topic_partitions is None
    m._sent.reset()  # after a failed heartbeat everything goes again
    full = m._build(1)
    assert full.subscribed_topic_names == ["a", "b"] and full.topic_partitions is not None
    assert full.rebalance_timeout_ms == 300000
    back = round_trip(full, 1)
    assert back.topic_partitions[0].topic_id == tid and back.topic_partitions[0].partitions == [0, 1]


def test_pattern_goes_as_a_regex_from_v1():
    import re
    m = _membership()
    m.pattern, m.state = re.compile("orders-.*"), JOINING
    assert m._build(1).subscribed_topic_regex == "orders-.*"
    assert m._build(0).subscribed_topic_regex is None  # v0: the names matched here instead


def test_member_ids_are_kafka_uuids():
    ids = {new_member_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 22 and "=" not in i for i in ids)


@pytest.mark.parametrize("key,value", [("session.timeout.ms", 10000), ("heartbeat.interval.ms", 1000),
                                       ("partition.assignment.strategy", "range")])
def test_settings_the_coordinator_owns_are_refused(key, value):
    with pytest.raises(ConfigError, match=key):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "group.protocol": "consumer", key: value})


def test_remote_assignor_needs_the_consumer_protocol():
    with pytest.raises(ConfigError, match="group.remote.assignor"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "group.remote.assignor": "uniform"})
    with pytest.raises(ConfigError, match="group.protocol"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "group.protocol": "eager"})

