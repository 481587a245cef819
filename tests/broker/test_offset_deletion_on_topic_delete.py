"""A transaction commits no offsets of a topic deleted meanwhile, on one broker
(a deleted topic's offsets on a cluster: tests/cluster/test_offset_deletion_on_topic_delete.py)."""
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clientutil import finish_broker, start_broker, wait_until
from tests.cluster.test_offset_deletion_on_topic_delete import (FIND_COORDINATOR, GONE, GROUP, KEPT, NONE, TIMEOUT_S,
                                                                committed)
from tests.kafka_wire import WireClient


@pytest.fixture
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory, "offsets-of-deleted-topics")
    yield b
    finish_broker(b)


def wait_group_coordinator(port: int) -> None:
    with WireClient(port) as w:
        assert wait_until(lambda: w.request(FIND_COORDINATOR(key=GROUP, key_type=0), 3).error_code == NONE,
                          TIMEOUT_S), "no group coordinator"


def test_a_transaction_commits_no_offsets_of_a_topic_deleted_meanwhile(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for name in (GONE, KEPT):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(TIMEOUT_S)
    wait_group_coordinator(broker.port)
    metadata = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": GROUP})
    try:
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(GONE, 0, 9), TopicPartition(KEPT, 0, 4)],
                                             metadata.consumer_group_metadata(), TIMEOUT_S)
        admin.delete_topics([GONE])[GONE].result(TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
    finally:
        metadata.close()
    assert wait_until(lambda: committed(broker.port) == {(KEPT, 0): 4}, TIMEOUT_S), committed(broker.port)
    assert committed(broker.port, [GONE]) == {(GONE, 0): -1}

