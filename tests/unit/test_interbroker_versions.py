"""A partition's leader recovery state in-process (KIP-704)
(the controller-to-broker APIs on a cluster: tests/cluster/test_interbroker_versions.py)."""
import time

from pybroker.controller.metadata_cache import PartitionState
from pybroker.log import LogConfig, LogManager
from pybroker.records import build_batch
from pybroker.replica.partition import Partition
from tests.cluster.test_interbroker_versions import RECOVERED, RECOVERING


def test_partition_leads_as_recovered_and_a_follower_keeps_the_recovery_state(tmp_path):
    manager = LogManager([str(tmp_path)], LogConfig(retention_ms=-1)).startup()
    try:
        p = Partition("recovering", 0, None, manager.get_or_create_log("recovering", 0), node_id=1)
        p.make_leader(PartitionState("recovering", 0, 1, 3, (1,), (1, 2), leader_recovery_state=RECOVERING))
        assert p.leader_recovery_state == RECOVERED  # Kafka's leader marks itself recovered at once
        p.append_as_leader(build_batch([b"a", b"b"]), required_acks=1)
        p.update_follower(2, p.log_end_offset, int(time.monotonic() * 1000))
        assert p.should_join_isr(2)
        p.make_follower(PartitionState("recovering", 0, 2, 4, (2,), (1, 2), leader_recovery_state=RECOVERING))
        assert p.leader_recovery_state == RECOVERING  # a follower keeps what the controller said
        p.close()
    finally:
        manager.shutdown()



def test_a_follower_copies_batches_larger_than_its_max_message_bytes(tmp_path):
    """As Kafka's followers: the leader took the batch (perhaps before max.message.bytes was lowered), so a
    follower appends it whatever the limit says now; a leader refuses it."""
    import pytest

    from pybroker.errors import RecordTooLargeError
    manager = LogManager([str(tmp_path)], LogConfig(retention_ms=-1, max_message_bytes=200)).startup()
    try:
        big = build_batch([b"x" * 1000])
        follower = Partition("small", 0, None, manager.get_or_create_log("small", 0), node_id=2)
        follower.make_follower(PartitionState("small", 0, 1, 3, (1,), (1, 2)))
        assert follower.append_as_follower(big) == 1
        leader = Partition("small", 1, None, manager.get_or_create_log("small", 1), node_id=1)
        leader.make_leader(PartitionState("small", 1, 1, 3, (1,), (1, 2)))
        with pytest.raises(RecordTooLargeError):
            leader.append_as_leader(big, required_acks=1)
        follower.close()
        leader.close()
    finally:
        manager.shutdown()
