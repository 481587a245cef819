"""Followers end with transaction indexes identical to their leader's
(WriteTxnMarkers on one broker: tests/broker/test_txn_log.py)."""
import os
import random

from pybroker.log.txn_index import AbortedTxn, ENTRY
from tests.broker.test_txn_log import NO_VERIFY, TOPIC, Model, fetch, new_pid, txn_batch, write_markers
from tests.kafka_wire import WireClient


def _txn_index_bytes(data_dir: str, topic: str) -> dict:
    out = {}
    directory = os.path.join(data_dir, f"{topic}-0")
    for name in sorted(os.listdir(directory)):
        if name.endswith(".txnindex"):
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
    return out


def test_followers_end_with_identical_txn_indexes(tmp_path, zookeeper):
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.cluster import Cluster
    with Cluster(tmp_path, 3, zk=zookeeper, overrides={**NO_VERIFY, "log.segment.bytes": 1200}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(60)
        state = cluster.wait_for(lambda: (s := cluster.partition_state(TOPIC, 0)) and len(s["isr"]) == 3 and s,
                                 60, "a full ISR")
        leader = cluster.broker(state["leader"])
        rng = random.Random(4)
        model = Model()
        with WireClient(leader.port) as c:
            pids = [new_pid(c) for _ in range(4)]
            seqs = dict.fromkeys(pids, 0)
            offset = 0
            for _ in range(60):
                pid = rng.choice(pids)
                if rng.random() < 0.6:
                    r = c.produce(TOPIC, 0, txn_batch(pid, 0, seqs[pid], 2), transactional_id=f"t{pid}")
                    assert r.error_code == 0, r
                    seqs[pid] += 2
                    model.data(pid, r.base_offset, True)
                    offset = r.base_offset + 2
                else:
                    commit = rng.random() < 0.5
                    assert write_markers(c, [(pid, 0, commit, 0, [(TOPIC, 0)])]) == {(pid, TOPIC, 0): 0}
                    model.marker(pid, commit, offset)
                    offset += 1
            for pid in pids:  # end every transaction so the LSO reaches the end
                write_markers(c, [(pid, 0, False, 0, [(TOPIC, 0)])])
                model.marker(pid, False, offset)
                offset += 1
            r = fetch(c, TOPIC, 0, 0, 1)
            assert r.last_stable_offset == r.high_watermark == offset
        assert model.aborted
        expected = {}
        for t in model.aborted:
            expected.setdefault(t, None)
        views = cluster.wait_for(
            lambda: (v := {b: _txn_index_bytes(cluster.broker(b).data_dir, TOPIC) for b in (1, 2, 3)})
            and len({tuple(sorted(x.items())) for x in v.values()}) == 1 and v,
            60, "identical txn indexes")
        entries = []
        for data in views[state["leader"]].values():
            entries += [AbortedTxn(*ENTRY.unpack_from(data, pos)[1:]) for pos in range(0, len(data), ENTRY.size)]
        assert entries == model.aborted
        # a follower taking over serves the same read_committed answer
        cluster.kill(state["leader"])
        new = cluster.wait_for(lambda: (s := cluster.partition_state(TOPIC, 0)) and s["leader"] not in
                               (-1, state["leader"]) and s["leader"], 60, "a new leader")
        with WireClient(cluster.broker(new).port) as c:
            # its high watermark reaches the end once the dead leader left the ISR (replica.lag.time.max.ms)
            r = cluster.wait_for(lambda: (x := fetch(c, TOPIC, 0, 0, 1)) and x.error_code == 0
                                 and x.high_watermark == offset and x, 60, "the new leader's high watermark at the end")
            assert r.last_stable_offset == offset
            assert sorted((t.producer_id, t.first_offset) for t in r.aborted_transactions) == \
                sorted((t.producer_id, t.first_offset) for t in model.collected(0, offset))

