"""A SCRAM user created on one broker of a cluster logs in on another
(SASL on one broker: tests/broker/test_sasl.py)."""
import os
import shutil
import subprocess

from pybroker.protocol import REQUESTS
from tests.broker.test_sasl import KAFKA_HOME, SASL, wait_until
from tests.kafka_wire import WireClient
from tests.sasl_wire import alter, can_login, describe, upsertion


def test_cluster_user_created_on_one_broker_logs_in_on_another(tmp_path, zookeeper):
    import json
    from tests.cluster import Cluster, free_ports
    ports = free_ports(4)
    per_broker = {i: {"listeners": f"PLAINTEXT://127.0.0.1:{ports[2 * i - 2]},"
                                   f"SASL_PLAINTEXT://127.0.0.1:{ports[2 * i - 1]}"} for i in (1, 2)}
    sasl_port = {i: ports[2 * i - 1] for i in (1, 2)}
    overrides = {k: v for k, v in SASL.items() if k != "listeners"}
    with Cluster(tmp_path, 2, zk=zookeeper, overrides={**overrides, "inter.broker.listener.name": "PLAINTEXT"},
                 broker_overrides=per_broker) as cluster:
        with WireClient(cluster.broker(1).port) as admin:  # the PLAINTEXT listener: no login needed
            hs = admin.request(REQUESTS[17](mechanism="PLAIN"), 1)
            assert (hs.error_code, hs.mechanisms) == (34, [])  # no SASL on this listener
            assert alter(admin, [upsertion("hank", "SCRAM-SHA-256", "hank-pw")]) == {"hank": (0, None)}
            R = REQUESTS[49]
            quota = admin.request(R(entries=[R.EntryData(entity=[R.EntityData(entity_type="user", entity_name="hank")],
                                                         ops=[R.OpData(key="producer_byte_rate", value=1048576.0,
                                                                       remove=False)])], validate_only=False), 1)
            assert quota.entries[0].error_code == 0
            assert alter(admin, [upsertion("hank", "SCRAM-SHA-512", "hank-512")]) == {"hank": (0, None)}
        wait_until(lambda: can_login(sasl_port[2], "SCRAM-SHA-256", "hank", "hank-pw") == 0, what="broker 2 login")
        wait_until(lambda: can_login(sasl_port[2], "SCRAM-SHA-512", "hank", "hank-512") == 0, what="broker 2 login")
        znode = json.loads(cluster.zk().get("/config/users/hank")[0])
        assert znode["version"] == 1 and znode["config"]["producer_byte_rate"] == "1048576"
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            fields = dict(item.split("=", 1) for item in znode["config"][mech].split(","))
            assert sorted(fields) == ["iterations", "salt", "server_key", "stored_key"]
        with WireClient(cluster.broker(2).port) as other:
            infos = {r.user: r for r in describe(other).results}["hank"].credential_infos
            assert sorted(c.mechanism for c in infos) == [1, 2]
            R = REQUESTS[48]
            quotas = other.request(R(components=[R.ComponentData(entity_type="user", match_type=0, match="hank")],
                                     strict=False), 1)
            assert [v.value for e in quotas.entries for v in e.values] == [1048576.0]
        with WireClient(cluster.broker(1).port) as admin:
            assert alter(admin, deletions=[("hank", "SCRAM-SHA-256")]) == {"hank": (0, None)}
        wait_until(lambda: can_login(sasl_port[2], "SCRAM-SHA-256", "hank", "hank-pw") == 58, what="refusal")
        assert json.loads(cluster.zk().get("/config/users/hank")[0])["config"]["producer_byte_rate"] == "1048576"
        tool = os.path.join(KAFKA_HOME, "bin", "kafka-configs.sh")
        if os.path.exists(tool) and shutil.which("java"):  # Kafka's own tool writing ZooKeeper directly (bootstrap)
            subprocess.run([tool, "--zookeeper", cluster.zk_connect + cluster.chroot, "--alter", "--add-config",
                            "SCRAM-SHA-256=[password=zed-pw]", "--entity-type", "users", "--entity-name", "zed"],
                           check=True, timeout=120, capture_output=True)
            wait_until(lambda: can_login(sasl_port[2], "SCRAM-SHA-256", "zed", "zed-pw") == 0, what="zed's login")

