"""The local control in-process: a single node is a cluster of one broker, answering topic admin,
elections, reassignments, controlled shutdown and ISR changes by the cluster's rules. Built from a
LogManager, a ReplicaManager and the local metadata backend in a tmp dir; no sockets, no process."""
import asyncio

from pybroker.config import BrokerConfig
from pybroker.controller.backend import build_metadata_backend
from pybroker.controller.control import ControlHost
from pybroker.controller.elections import ELECTION_NOT_NEEDED, PREFERRED, UNCLEAN
from pybroker.controller.local_control import LocalControl
from pybroker.controller.metadata_cache import MetadataCache
from pybroker.errors import BrokerError
from pybroker.log import LogManager
from pybroker.protocol.errors import (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS, NOT_CONTROLLER,
                                      UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.replica.fetcher import ReplicaFetcherManager
from pybroker.replica.manager import ReplicaManager
from pybroker.controller.registration import Registration

NODE = 3
TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR, INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT_CODE = 36, 38, 37, 39


class Node:
    """What a broker builds for its control: the replicas, the metadata cache, the backend."""

    def __init__(self, log_dir):
        self.config = BrokerConfig.load(overrides=[f"log.dirs={log_dir}", f"node.id={NODE}"], env={})
        self.log_manager = LogManager([str(log_dir)], self.config.log).startup()
        self.replicas = ReplicaManager(NODE, self.log_manager, ReplicaFetcherManager(NODE, self.config))
        self.metadata = MetadataCache()
        self.control: LocalControl | None = None

    async def start(self) -> "Node":
        cfg, replicas = self.config, self.replicas

        def apply_leader_and_isr(controller_epoch, states, topic_ids, leaders):
            return replicas.apply_states(controller_epoch, states, topic_ids, lambda topic: cfg.log, leaders)

        host = ControlHost(cfg, replicas, self.metadata, Registration(), cfg.advertised_listeners,
                           apply_leader_and_isr, apply_log_config=lambda topic: None,
                           set_available=lambda available, why: None)
        backend = await build_metadata_backend(host, None, lambda values: None, cfg.log)
        self.control = backend.control
        replicas.isr_writer = self.control.write_isr
        await self.control.start()
        return self

    async def stop(self) -> None:
        await self.control.close()
        self.replicas.shutdown()
        self.log_manager.shutdown()


def run(coro):
    return asyncio.run(coro)


def code_of(coro) -> int:
    try:
        run(coro)
    except BrokerError as exc:
        return exc.code
    return 0


def test_the_local_backend_builds_a_local_control(tmp_path):
    async def go():
        node = await Node(tmp_path).start()
        assert isinstance(node.control, LocalControl) and node.control.is_active_controller
        assert node.metadata.controller_id == NODE and list(node.metadata.brokers) == [NODE]
        await node.stop()
    run(go())


def test_created_topics_are_led_here_and_come_back_after_a_restart(tmp_path):
    async def go():
        node = await Node(tmp_path).start()
        record = await node.control.create_topic("orders", 3, 1, {"retention.ms": "1000"})
        assert record.partitions == 3 and node.control.assignments["orders"] == {0: [NODE], 1: [NODE], 2: [NODE]}
        for p in range(3):
            assert node.replicas.get_leader("orders", p) is not None
            state = node.metadata.partition("orders", p)
            assert (state.leader, state.isr, state.replicas) == (NODE, (NODE,), (NODE,))
        assert ("retention.ms", "1000", True) in node.control.topic_configs("orders")
        await node.control.create_partitions("orders", 4)
        assert node.replicas.get_leader("orders", 3) is not None
        await node.stop()

        node = await Node(tmp_path).start()  # the store replays what was acknowledged
        assert node.control.topics["orders"].partitions == 4
        assert all(node.replicas.get_leader("orders", p) is not None for p in range(4))
        assert node.replicas.get("orders", 0).log.config.retention_ms == 1000
        await node.control.delete_topic("orders")
        assert "orders" not in node.control.topics and "orders" not in node.metadata.topics
        assert node.replicas.get("orders", 0) is None and "orders" not in node.control.assignments
        await node.stop()
    run(go())


def test_topic_admin_is_refused_with_kafkas_codes(tmp_path):
    node = run(Node(tmp_path).start())
    control = node.control
    run(control.create_topic("t", 1, 1))
    assert code_of(control.create_topic("t", 1, 1)) == TOPIC_ALREADY_EXISTS
    assert code_of(control.create_topic("wide", 1, 2)) == INVALID_REPLICATION_FACTOR  # one live broker
    assert code_of(control.create_topic("placed", assignment={0: [NODE, 9]})) == INVALID_REPLICA_ASSIGNMENT_CODE
    assert code_of(control.create_partitions("t", 1)) == INVALID_PARTITIONS
    assert code_of(control.delete_topic("nope")) == UNKNOWN_TOPIC_OR_PARTITION
    assert code_of(control.create_topic("placed", assignment={0: [NODE]})) == 0
    assert control.topics["placed"].partitions == 1
    run(node.stop())


def test_elections_find_the_only_replica_already_leading(tmp_path):
    node = run(Node(tmp_path).start())
    run(node.control.create_topic("t", 2, 1))
    for election in (PREFERRED, UNCLEAN):
        results = run(node.control.elect_leaders(election, [("t", 0), ("t", 1), ("t", 5), ("gone", 0)]))
        assert results == {("t", 0): ELECTION_NOT_NEEDED, ("t", 1): ELECTION_NOT_NEEDED,
                           ("t", 5): UNKNOWN_TOPIC_OR_PARTITION, ("gone", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert run(node.control.elect_leaders(election, None)) == {}  # nothing needs one
    assert node.control.offline_partitions() == 0
    run(node.stop())


def test_reassignments_have_only_one_placement_and_nothing_in_progress(tmp_path):
    node = run(Node(tmp_path).start())
    run(node.control.create_topic("t", 1, 1))
    results = run(node.control.alter_reassignments({("t", 0): [NODE], ("t", 1): [NODE]}))
    assert results == {("t", 0): (0, None), ("t", 1): (UNKNOWN_TOPIC_OR_PARTITION, "no partition 1 of topic 't'")}
    code, message = run(node.control.alter_reassignments({("t", 0): [NODE, 99]}))[("t", 0)]
    assert code == INVALID_REPLICA_ASSIGNMENT and "99" in message
    assert run(node.control.alter_reassignments({("t", 0): [NODE, NODE]}))[("t", 0)][0] == INVALID_REPLICA_ASSIGNMENT
    assert run(node.control.alter_reassignments({("t", 0): None}))[("t", 0)][0] == NO_REASSIGNMENT_IN_PROGRESS
    assert run(node.control.list_reassignments(None)) == {}
    run(node.stop())


def test_controlled_shutdown_and_controller_requests(tmp_path):
    """Its controller takes no request over the wire (no other broker exists); its own controlled
    shutdown runs the cluster's steps, and with no other replica every partition stays led here."""
    node = run(Node(tmp_path).start())
    run(node.control.create_topic("t", 2, 1))
    assert run(node.control.controlled_shutdown(NODE, -1)) == (NOT_CONTROLLER, [])
    assert node.control.refuses_controller_request(None) and node.control.refuses_controller_request(-1)
    assert run(node.control.leave()) is True
    assert all(node.replicas.get_leader("t", p) is not None for p in range(2))
    assert node.metadata.partition("t", 0).leader == NODE
    run(node.stop())


def test_the_isr_of_a_cluster_of_one_is_its_leader(tmp_path):
    async def go():
        node = await Node(tmp_path).start()
        await node.control.create_topic("t", 1, 1)
        p = node.replicas.get("t", 0)
        assert await node.control.write_isr(p, (NODE,)) and p.isr == (NODE,)
        assert not await node.control.write_isr(p, ())  # the leader never leaves its own ISR
        node.replicas.maybe_shrink_isr()  # no follower to lag: nothing changes
        assert p.isr == (NODE,) and node.metadata.partition("t", 0).isr == (NODE,)
        await node.stop()
    run(go())


def test_producer_ids_never_repeat_across_restarts(tmp_path):
    async def go():
        node = await Node(tmp_path).start()
        first = [await node.control.allocate_producer_id() for _ in range(3)]
        await node.stop()
        node = await Node(tmp_path).start()
        later = await node.control.allocate_producer_id()
        await node.stop()
        return first, later
    first, later = run(go())
    assert first == sorted(set(first)) and later > max(first)


def test_internal_topics_cannot_be_deleted(tmp_path):
    node = run(Node(tmp_path).start())
    assert code_of(node.control.delete_topic("__consumer_offsets")) == 42  # INVALID_REQUEST
    run(node.stop())
