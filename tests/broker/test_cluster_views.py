"""DescribeLogDirs and DescribeProducers on a single node, and unknown partitions answered with errors
(the views of a real cluster: tests/cluster/test_cluster_views.py)."""
import os

from pybroker.protocol import REQUESTS
from tests.cluster.test_cluster_views import (DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS, UNKNOWN_TOPIC_OR_PARTITION,
                                              log_dirs_json, log_producers, ok, produce_idempotent, size_on_disk)
from tests.kafka_wire import WireClient


def test_log_dirs_and_producers_of_a_single_node(broker):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    with WireClient(broker.port) as c:
        c.create_topic("idem", 2)
    produce_idempotent(broker.bootstrap, "idem", 0, 50)
    data_dir = os.path.abspath(broker.data_dir)
    written = size_on_disk(data_dir, "idem", 0)
    assert written > 0
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        [b] = admin.describe_log_dirs()
        [d] = b["log_dirs"]
        assert d["log_dir"] == data_dir and d["error_code"] == 0
        st = os.statvfs(data_dir)
        assert d["total_bytes"] == st.f_blocks * st.f_frsize and 0 < d["usable_bytes"] <= d["total_bytes"]
        parts = {(t["name"], p["partition_index"]): p for t in d["topics"] for p in t["partitions"]}
        assert parts[("idem", 0)]["partition_size"] == written and parts[("idem", 1)]["partition_size"] == 0
        assert all(p["offset_lag"] == 0 and p["is_future_key"] is False for p in parts.values())
        state = admin.describe_producers([TopicPartition("idem", 0), TopicPartition("idem", 1)])
    in_log = log_producers(broker.port, "idem", 0)
    [(pid, (epoch, last_seq, last_ts))] = in_log.items()
    [active] = state[TopicPartition("idem", 0)].active_producers
    assert (active.producer_id, active.producer_epoch, active.last_sequence, active.last_timestamp) == (
        pid, epoch, last_seq, last_ts)
    assert last_seq == 49 and active.coordinator_epoch == -1 and active.current_transaction_start_offset == -1
    assert state[TopicPartition("idem", 1)].active_producers == []
    req = REQUESTS[DESCRIBE_LOG_DIRS]
    with WireClient(broker.port) as c:  # every version carries the same partitions and sizes
        for version in range(5):
            resp = c.request(req(topics=[req.DescribableLogDirTopic(topic="idem", partitions=[0, 1])]), version)
            [r] = resp.results
            assert {(t.name, p.partition_index): p.partition_size for t in r.topics for p in t.partitions} == {
                ("idem", 0): written, ("idem", 1): 0}
            assert (r.total_bytes > 0) == (version >= 4)
    report = log_dirs_json(ok("log-dirs", "--describe", "--bootstrap-server", broker.bootstrap, "--topic-list", "idem"))
    assert report == {meta_id(broker): {"idem-0": (written, 0, False), "idem-1": (0, 0, False)}}


def meta_id(broker) -> int:
    with WireClient(broker.port) as c:
        return c.metadata([]).brokers[0].node_id


def test_unknown_partitions_get_errors_and_the_connection_keeps_working(broker):
    """DescribeLogDirs leaves unknown partitions out (its response has no per-partition error, as in
    Kafka); DescribeProducers answers UNKNOWN_TOPIC_OR_PARTITION for each; large requests too."""
    logs, producers = REQUESTS[DESCRIBE_LOG_DIRS], REQUESTS[DESCRIBE_PRODUCERS]
    with WireClient(broker.port) as c:
        c.create_topic("known", 1)
        asked = [logs.DescribableLogDirTopic(topic="no-such-topic", partitions=[0, -1, 2**31 - 1]),
                 logs.DescribableLogDirTopic(topic="known", partitions=[1, -5]),
                 logs.DescribableLogDirTopic(topic="", partitions=[0])]
        asked += [logs.DescribableLogDirTopic(topic=f"missing-{i}", partitions=list(range(50))) for i in range(200)]
        for version in range(5):
            resp = c.request(logs(topics=asked), version)
            assert resp.error_code == 0 and [r.topics for r in resp.results] == [[]]
        many = list(range(-3, 5000))
        resp = c.request(producers(topics=[producers.TopicRequest(name="no-such-topic", partition_indexes=many),
                                           producers.TopicRequest(name="known", partition_indexes=[1, -1, 0]),
                                           producers.TopicRequest(name="", partition_indexes=[0])]), 0)
        codes = [[(p.partition_index, p.error_code) for p in t.partitions] for t in resp.topics]
        assert codes == [[(i, UNKNOWN_TOPIC_OR_PARTITION) for i in many],
                         [(1, UNKNOWN_TOPIC_OR_PARTITION), (-1, UNKNOWN_TOPIC_OR_PARTITION), (0, 0)],
                         [(0, UNKNOWN_TOPIC_OR_PARTITION)]]
        assert c.metadata(["known"]).topics[0].error_code == 0  # the same connection still serves

