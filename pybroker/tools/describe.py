"""Requests the cluster views share: DescribeCluster (brokers, controller, cluster id) and
DescribeLogDirs (one broker's log dirs)."""
from dataclasses import dataclass

from pybroker.protocol import REQUESTS
from pybroker.tools.wire import DESCRIBE_CLUSTER, DESCRIBE_LOG_DIRS, Client, check


@dataclass
class ClusterView:
    cluster_id: str | None
    controller_id: int
    brokers: dict  # id -> (host, port, rack)


def describe_cluster(client: Client) -> ClusterView:
    """The live brokers as DescribeCluster names them (Metadata on a broker without it); the
    client's broker table is refreshed so ``node_conn`` reaches each of them."""
    conn = client.any_conn()
    if DESCRIBE_CLUSTER in conn.broker_versions:
        resp = conn.request(REQUESTS[DESCRIBE_CLUSTER](include_cluster_authorized_operations=False,
                                                        endpoint_type=1))
        check(resp.error_code, resp.error_message, "DescribeCluster")
        brokers = {b.broker_id: (b.host, b.port, b.rack) for b in resp.brokers}
        view = ClusterView(resp.cluster_id, resp.controller_id, brokers)
    else:
        resp = client.metadata([])
        view = ClusterView(resp.cluster_id, resp.controller_id,
                           {b.node_id: (b.host, b.port, b.rack) for b in resp.brokers})
    client.brokers = {i: (h, p) for i, (h, p, _) in view.brokers.items()}
    client.controller_id = view.controller_id
    return view


def describe_log_dirs(client: Client, broker_id: int) -> list:
    """Broker ``broker_id``'s log dirs with every partition they hold (DescribeLogDirsResult list)."""
    conn = client.node_conn(broker_id)
    resp = conn.request(REQUESTS[DESCRIBE_LOG_DIRS](topics=None))
    check(getattr(resp, "error_code", 0) or 0, None, f"DescribeLogDirs from broker {broker_id}")
    return resp.results
