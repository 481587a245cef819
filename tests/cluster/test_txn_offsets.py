"""A new group coordinator (3 brokers, kill -9) replays committed and pending transactional offsets
(on one broker: tests/broker/test_txn_offsets.py)."""
from pybroker.protocol import REQUESTS
from tests.broker.test_txn_offsets import DEADLINE, TxnWire, UNSTABLE_OFFSET_COMMIT, retry, unique
from tests.clientutil import wait_until
from tests.cluster import Cluster
from tests.cluster.test_replication import OVERRIDES, create_topic, wait_full_isr
from tests.kafka_wire import WireClient


def coordinator_of(port: int, key: str, key_type: int) -> int:
    with WireClient(port) as w:
        resp = None

        def call():
            nonlocal resp
            resp = w.request(REQUESTS[10](key=key, key_type=key_type), 2)
            return resp.error_code
        assert retry(call, 60) == 0, resp
        return resp.node_id


def test_a_new_group_coordinator_replays_committed_and_pending_offsets(tmp_path, zookeeper):
    """RF=3: the group coordinator is killed (-9) between a committed transaction and an open one;
    its successor serves the committed offsets, holds the open one's as unstable, and applies them
    when the transaction coordinator (another broker) sends the COMMIT marker to it."""
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as cluster:
        ports = {i: b.port for i, b in cluster.brokers.items()}
        topic = create_topic(cluster, unique("in"), 2)
        group = unique("g")
        coordinator = coordinator_of(ports[1], group, 0)
        tid = next(t for t in (unique("tx") for _ in range(200))
                   if coordinator_of(ports[1], t, 1) != coordinator)
        txn = TxnWire(ports[coordinator_of(ports[1], tid, 1)], tid, group_port=ports[coordinator])
        try:
            txn.init()
            tps = [(topic, 0), (topic, 1)]
            assert txn.add_offsets(group) == 0
            assert txn.commit_offsets(group, {tps[0]: 10}) == {tps[0]: 0}
            assert txn.end(commit=True) == 0
            assert txn.stable(group, tps) == {tps[0]: 10, tps[1]: -1}
            assert txn.add_offsets(group) == 0
            assert txn.commit_offsets(group, {tps[0]: 11, tps[1]: 21}) == {tps[0]: 0, tps[1]: 0}
            wait_full_isr(cluster, "__consumer_offsets", OVERRIDES["offsets.topic.num.partitions"])
            cluster.kill(coordinator)
            successor = cluster.wait_for(lambda: (lambda n: n if n != coordinator else None)(
                coordinator_of(ports[txn_port_id(cluster, txn)], group, 0)), 60, "a new group coordinator")
            txn.g.close()
            txn.g = WireClient(ports[successor])
            found = wait_until(lambda: (lambda f: f if f[tps[0]] == (-1, UNSTABLE_OFFSET_COMMIT) else None)(
                _fetch_or_none(txn, group, tps)), DEADLINE)
            assert found == {tps[0]: (-1, UNSTABLE_OFFSET_COMMIT), tps[1]: (-1, UNSTABLE_OFFSET_COMMIT)}, found
            assert txn.fetch(group, tps, False) == {tps[0]: (10, 0), tps[1]: (-1, 0)}
            assert txn.end(commit=True) == 0
            assert txn.stable(group, tps) == {tps[0]: 11, tps[1]: 21}
        finally:
            txn.close()


def txn_port_id(cluster, txn: TxnWire) -> int:
    """The id of the broker ``txn``'s transaction connection talks to."""
    port = txn.w.sock.getpeername()[1]
    return next(i for i, b in cluster.brokers.items() if b.port == port)


def _fetch_or_none(txn: TxnWire, group: str, tps):
    """OffsetFetch(require_stable), or None while the new coordinator is still loading."""
    try:
        return txn.fetch(group, tps, True)
    except AssertionError:
        return None

