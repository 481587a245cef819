"""ListOffsets v0 over the wire, as Kafka 3.8 serves it to old clients: ``old_style_offsets`` lists up to
``max_num_offsets`` segment boundaries, newest first (the log end, then each segment's base offset back
to the log start); earliest is the log start alone. kafka-python pinned to a 0.10.0 broker asks its
beginning and end offsets at v0. (The rules in-process: tests/unit/test_list_offsets_v0.py.)"""
import glob
import os
import time

import pytest

from pybroker.protocol import REQUESTS
from pybroker.records import build_batch
from tests.clientutil import wait_until
from tests.kafka_wire import WireClient

TOPIC = "offsets-v0"
RECORDS = 6
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: this module uses its own topic."""
    return shared_broker


@pytest.fixture(scope="module")
def topic(broker):
    """Six records, one batch each, in segments small enough that every batch rolls a new one."""
    with WireClient(broker.port) as w:
        w.create_topic(TOPIC, 1, {"segment.bytes": 1024})
        assert wait_until(lambda: w.metadata([TOPIC]).topics[0].partitions[0].leader_id >= 0) is not None
        for i in range(RECORDS):
            batch = build_batch([b"%d" % i + b"x" * 700], base_timestamp=int(time.time() * 1000))
            assert w.produce(TOPIC, 0, bytes(batch)).error_code == 0
    return TOPIC


def segment_bases(broker) -> list[int]:
    names = glob.glob(os.path.join(broker.data_dir, f"{TOPIC}-0", "*.log"))
    return sorted(int(os.path.basename(n).split(".")[0]) for n in names)


def v0(broker, timestamp: int, max_num_offsets: int, topic: str = TOPIC):
    req = REQUESTS[2]
    with WireClient(broker.port) as w:
        r = w.request(req(replica_id=-1, topics=[req.ListOffsetsTopic(name=topic, partitions=[
            req.ListOffsetsPartition(partition_index=0, timestamp=timestamp, max_num_offsets=max_num_offsets)])]), 0)
    p = r.topics[0].partitions[0]
    return p.error_code, p.old_style_offsets


def test_v0_lists_segment_boundaries_newest_first(broker, topic):
    bases = segment_bases(broker)
    assert bases == list(range(RECORDS)), bases  # one batch per segment
    newest_first = [RECORDS] + bases[::-1]  # the active segment holds a batch: the log end comes first
    assert v0(broker, -1, 100) == (0, newest_first)
    assert v0(broker, -1, 1) == (0, [RECORDS])
    assert v0(broker, -1, 3) == (0, newest_first[:3])
    assert v0(broker, -2, 100) == (0, [0])
    assert v0(broker, int(time.time() * 1000) + 86_400_000, 100) == (0, newest_first)
    assert v0(broker, 0, 100) == (0, [])  # every segment file is newer than 1970
    assert v0(broker, -1, 100, topic="offsets-v0-missing")[0] == UNKNOWN_TOPIC_OR_PARTITION


def test_kafka_python_as_a_0_10_0_client_reads_offsets_at_v0(broker, topic):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.protocol.broker_version_data import BrokerVersionData
    from kafka.protocol.consumer import ListOffsetsRequest
    assert BrokerVersionData((0, 10, 0)).api_version(ListOffsetsRequest) == 0  # what it will send
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 0), request_timeout_ms=10000)
    try:
        tp = TopicPartition(TOPIC, 0)
        assert consumer.end_offsets([tp]) == {tp: RECORDS}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
    finally:
        consumer.close()
