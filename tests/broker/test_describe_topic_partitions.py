"""DescribeTopicPartitions (API 75) against a real broker: every topic or the named ones, in name
order, paged by response_partition_limit with a cursor; Kafka's errors for an unknown topic (3) and
a cursor outside the request (42); and Kafka 3.8's kafka-topics.sh, which asks it first."""
import os
import subprocess

import pytest

from pybroker.protocol import REQUESTS
from tests.kafka_wire import WireClient

API = REQUESTS[75]
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST = 3, 42
KAFKA_BIN = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "pybroker-kafka", "kafka_2.13-3.8.0", "bin")


def describe(w, names=None, limit=2000, cursor=None):
    resp = w.request(API(topics=[API.TopicRequest(name=n) for n in names or ()], response_partition_limit=limit,
                         cursor=None if cursor is None else API.Cursor(topic_name=cursor[0],
                                                                       partition_index=cursor[1])), 0)
    pages = [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in resp.topics]
    nxt = resp.next_cursor
    return pages, None if nxt is None else (nxt.topic_name, nxt.partition_index), resp


def test_all_named_unknown_and_paged(broker):
    with WireClient(broker.port) as w:
        w.create_topic("dtp-b", partitions=3)
        w.create_topic("dtp-a", partitions=2)
        pages, nxt, resp = describe(w, ["dtp-b", "dtp-a", "dtp-missing"])
        assert pages == [("dtp-a", 0, [0, 1]), ("dtp-b", 0, [0, 1, 2]), ("dtp-missing", UNKNOWN_TOPIC_OR_PARTITION, [])]
        assert nxt is None
        a = resp.topics[0]
        assert a.topic_id.int != 0 and not a.is_internal
        assert [(p.leader_id, p.replica_nodes, p.isr_nodes) for p in a.partitions] == \
            [(broker_id(w), [broker_id(w)], [broker_id(w)])] * 2
        everything, _, _ = describe(w)
        assert [name for name, _, _ in everything] == sorted(name for name, _, _ in everything)
        assert {"dtp-a", "dtp-b"} <= {name for name, _, _ in everything}
        # pages of 2 partitions, each starting where the last one's cursor said
        seen, cursor = [], None
        for _ in range(5):
            pages, cursor, _ = describe(w, ["dtp-a", "dtp-b"], limit=2, cursor=cursor)
            seen += [(name, p) for name, _, parts in pages for p in parts]
            if cursor is None:
                break
        assert seen == [("dtp-a", 0), ("dtp-a", 1), ("dtp-b", 0), ("dtp-b", 1), ("dtp-b", 2)]
        pages, _, _ = describe(w, ["dtp-a"], cursor=("dtp-b", 0))
        assert pages == [("dtp-a", INVALID_REQUEST, [])]
        assert w.metadata().brokers  # the connection still works


def broker_id(w) -> int:
    return w.metadata().brokers[0].node_id


@pytest.mark.skipif(not os.path.isdir(KAFKA_BIN), reason="Apache Kafka's tools are not built here")
def test_kafka_topics_describe_uses_it(broker):
    with WireClient(broker.port) as w:
        w.create_topic("dtp-kafka", partitions=2)
    r = subprocess.run([os.path.join(KAFKA_BIN, "kafka-topics.sh"), "--bootstrap-server", broker.bootstrap,
                        "--describe", "--topic", "dtp-kafka"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "DescribeTopicPartitions API is not supported" not in r.stderr
    assert "Topic: dtp-kafka\tTopicId:" in r.stdout and "PartitionCount: 2" in r.stdout
    assert r.stdout.count("\tPartition: ") == 2, r.stdout
