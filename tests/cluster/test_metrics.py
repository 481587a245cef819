"""Replication gauges on a cluster's /metrics (on one broker: tests/broker/test_metrics.py)."""
from tests.broker.test_metrics import http, scrape, value
from tests.cluster import Cluster, free_ports, require_zookeeper
from tests.kafka_wire import WireClient


def test_cluster_replication_gauges(tmp_path):
    require_zookeeper()
    ports = dict(zip((1, 2, 3), free_ports(3)))
    with Cluster(tmp_path, 3, broker_overrides={i: {"metrics.listener": f"http://127.0.0.1:{p}"}
                                                for i, p in ports.items()}) as cluster:
        for port in ports.values():
            assert http(port, "/health")[:2] == (200, "ready\n")
        with WireClient(cluster._port(cluster.broker(1))) as c:
            req_topic = "replicated"
            from pybroker.protocol import REQUESTS
            req = REQUESTS[19]
            resp = c.request(req(topics=[req.CreatableTopic(name=req_topic, num_partitions=3, replication_factor=3,
                                                            assignments=[], configs=[])],
                                 timeout_ms=30000, validate_only=False), 4)
            assert resp.topics[0].error_code == 0

        def gauges(port):
            s = scrape(port)
            return {k: value(s, f"kafka_{k}") for k in (
                "server_replicamanager_partitioncount", "server_replicamanager_leadercount",
                "server_replicamanager_underreplicatedpartitions", "controller_kafkacontroller_activecontrollercount",
                "controller_kafkacontroller_offlinepartitionscount", "server_replicamanager_isrshrinkspersec_total",
                "server_replicamanager_isrexpandspersec_total")}

        def settled():
            g = {b: gauges(p) for b, p in ports.items()}
            ok = (all(x["server_replicamanager_partitioncount"] == 3 for x in g.values())
                  and sum(x["server_replicamanager_leadercount"] for x in g.values()) == 3
                  and all(x["server_replicamanager_underreplicatedpartitions"] == 0 for x in g.values()))
            return g if ok else None
        g = cluster.wait_for(settled, 60, "3 partitions, 3 leaders, none under-replicated")
        assert sum(x["controller_kafkacontroller_activecontrollercount"] for x in g.values()) == 1
        assert all(x["controller_kafkacontroller_offlinepartitionscount"] == 0 for x in g.values())

        victim = next(b for b in ports if b != cluster.controller_id())
        cluster.kill(victim)
        live = [b for b in ports if b != victim]

        def shrunk():
            g = {b: gauges(ports[b]) for b in live}
            return g if (sum(x["server_replicamanager_underreplicatedpartitions"] for x in g.values()) == 3
                         and sum(x["server_replicamanager_isrshrinkspersec_total"] for x in g.values()) >= 1) else None
        cluster.wait_for(shrunk, 60, "ISRs shrunk after a follower died")

        cluster.restart(victim)

        def healed():
            g = {b: gauges(p) for b, p in ports.items()}
            return g if (all(x["server_replicamanager_underreplicatedpartitions"] == 0 for x in g.values())
                         and sum(x["server_replicamanager_isrexpandspersec_total"] for x in g.values()) >= 1) else None
        cluster.wait_for(healed, 90, "ISRs expanded after the follower came back")

