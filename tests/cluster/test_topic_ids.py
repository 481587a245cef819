"""Topic ids on a cluster: every broker agrees, and legacy topics get one
(topic ids on one broker: tests/broker/test_topic_ids.py)."""
import os

from pybroker.protocol import REQUESTS
from tests.broker.test_topic_ids import ZERO, b64, metadata
from tests.kafka_wire import WireClient


def test_cluster_ids_agree_everywhere_and_legacy_topics_get_one(shared_cluster):
    import json
    cluster = shared_cluster
    with WireClient(cluster.broker(1).port) as w:
        req = REQUESTS[19]
        made = w.request(req(topics=[req.CreatableTopic(name="ids-rf3", num_partitions=2, replication_factor=3)],
                             timeout_ms=30000), 7).topics[0]
    assert made.error_code == 0 and made.topic_id != ZERO and made.replication_factor == 3
    for b in (1, 2, 3):  # every broker answers the id the topic was created with
        with WireClient(cluster.broker(b).port) as w:
            cluster.wait_for(lambda: metadata(w, ["ids-rf3"]).topics[0].topic_id == made.topic_id, 30,
                             f"broker {b} to know the id")
        for p in (0, 1):
            path = os.path.join(cluster.broker(b).data_dir, f"ids-rf3-{p}", "partition.metadata")
            cluster.wait_for(lambda: os.path.exists(path), 30, f"{path}")
            with open(path) as f:
                assert f.read() == f"version: 0\ntopic_id: {b64(made.topic_id)}"
    stored = json.loads(cluster.zk().get("/brokers/topics/ids-rf3")[0])
    assert stored["topic_id"] == b64(made.topic_id)
    # a topic znode written without an id (older tools) gets one from the controller
    cluster.zk().create("/brokers/topics/ids-legacy", json.dumps({"version": 1, "partitions": {"0": [1, 2]}})
                        .encode())
    cluster.wait_for(lambda: json.loads(cluster.zk().get("/brokers/topics/ids-legacy")[0]).get("topic_id"), 30,
                     "the controller to give the legacy topic an id")
    legacy = json.loads(cluster.zk().get("/brokers/topics/ids-legacy")[0])["topic_id"]
    with WireClient(cluster.broker(3).port) as w:
        cluster.wait_for(lambda: b64(metadata(w, ["ids-legacy"]).topics[0].topic_id) == legacy, 30,
                         "broker 3 to answer the legacy topic's id")

