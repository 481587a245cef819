"""A fresh follower copies a compacted leader's log (compaction on one broker: tests/broker/test_compaction.py)."""
import os
import struct

from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.records import decode_records
from tests.broker.test_compaction import COMPACT, FAST_CLEANER, produce_keyed, push_out_of_active_segment, wait_cleaned


def records_of_replica(data_dir: str, topic: str, partition: int = 0) -> dict:
    """offset -> (key, value) of every record in one replica's segment files."""
    out = {}
    d = os.path.join(data_dir, f"{topic}-{partition}")
    for name in sorted(n for n in os.listdir(d) if n.endswith(".log")):
        data = open(os.path.join(d, name), "rb").read()
        pos = 0
        while pos + 61 <= len(data):
            size = struct.unpack_from(">i", data, pos + 8)[0] + 12
            if struct.unpack_from(">i", data, pos + 57)[0]:
                out.update((r.offset, (r.key, r.value)) for r in decode_records(data[pos:pos + size]))
            pos += size
    return out


def test_a_fresh_follower_copies_a_compacted_leader_log(tmp_path, zookeeper):
    from tests.cluster import Cluster
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=FAST_CLEANER) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("repl-c", 1, 3, config=COMPACT)])["repl-c"].result(30)
        acked = produce_keyed(cluster.bootstrap, "repl-c", [(b"k%d" % (i % 20), b"v%d" % i, []) for i in range(1200)])
        end = acked[-1][0] + 1
        push_out_of_active_segment(cluster.bootstrap, "repl-c")
        leader = cluster.wait_for(lambda: cluster.leader("repl-c", 0), 30, "a leader")
        wait_cleaned(cluster.broker(leader), "repl-c", end)
        follower = next(b for b in (1, 2, 3) if b != leader)
        cluster.kill(follower)  # a replica that lost its disk: it copies the leader's compacted log from offset 0
        import shutil
        shutil.rmtree(os.path.join(cluster.broker(follower).data_dir, "repl-c-0"))
        cluster.restart(follower)
        cluster.wait_for(lambda: len(cluster.partition_state("repl-c", 0)["isr"]) == 3, 60,
                         "the follower back in the ISR")
        copied = cluster.wait_for(lambda: (r := records_of_replica(cluster.broker(follower).data_dir, "repl-c"))
                                  and max(r) >= end - 1 and r, 60, "the follower to catch up")
        leader_records = records_of_replica(cluster.broker(leader).data_dir, "repl-c")
        for offset, rec in copied.items():  # the copy keeps the leader's offsets, gaps included
            assert leader_records.get(offset, rec) == rec
        latest = {k: (o, v) for o, k, v, _, _ in acked}
        follower_latest = {}
        for offset, (key, value) in sorted(copied.items()):
            follower_latest[key] = (offset, value)
        for key, rec in latest.items():
            assert follower_latest[key] == rec, key
        assert len(copied) < 200, f"the copy holds {len(copied)} records: it was not the compacted log"

