"""The control of a single node: a cluster of one broker over the ``local`` metadata store.

This broker is the cluster's controller and its only replica. Topic changes are written to the
store first and then applied through the same LeaderAndIsr and UpdateMetadata steps a cluster's
controller sends, so a restart replays exactly what was acknowledged. Elections, reassignments
and controlled shutdown run the cluster's rules (``elections``) with one live broker; partition
states are kept in memory (leader epoch 0 at every start, as nothing else remembers them).
"""
import logging
from dataclasses import replace

from pybroker.controller.control import ControlHost
from pybroker.controller.elections import move_off, reassignment_refusal, run_elections
from pybroker.controller.metadata_cache import BrokerEndpoint, PartitionState
from pybroker.controller.metadata_store import (InvalidPartitionsError, LocalMetadataStore, TopicExistsError,
                                                UnknownTopicError)
from pybroker.coordinator.group_configs import new_overrides as new_group_overrides
from pybroker.controller.topic_rules import (INTERNAL_TOPICS, InternalTopicError, TopicDeletionDisabledError,
                                             check_assignment, check_new_topic, describe_topic_configs,
                                             new_overrides)
from pybroker.log.config import LogConfig
from pybroker.protocol.errors import NOT_CONTROLLER

log = logging.getLogger(__name__)

CONTROLLER_EPOCH = 0  # nothing but this broker ever controls it


class LocalControl:
    def __init__(self, host: ControlHost, store: LocalMetadataStore, producer_ids):
        self.host = host
        self.config = host.config
        self.node_id = host.config.node_id
        self.store = store
        self.producer_ids = producer_ids
        self.live = {self.node_id: self.own_endpoint()}  # a cluster of one
        self.shutting_down: set = set()
        self.states: dict = {}  # (topic, partition) -> PartitionState, as published
        self._assignments: dict = {  # topic -> {partition: [this broker]}
            r.name: {i: [self.node_id] for i in range(r.partitions)} for r in store.topics.values()}

    def own_endpoint(self) -> BrokerEndpoint:
        return BrokerEndpoint(self.node_id, {a.name: (a.host, a.port) for a in self.host.advertised})

    def _leaders(self) -> dict:
        listener = self.config.inter_broker_listener
        return {self.node_id: self.own_endpoint().endpoints.get(listener.name, (listener.host, listener.port))}

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Open a partition (as leader) for every partition the store knows."""
        self.host.metadata.update(self.node_id, [self.own_endpoint()], [], {})
        for record in list(self.store.topics.values()):
            self._open_partitions(record, 0, record.partitions)
            if record.configs:  # logs loaded from disk start with the broker defaults
                self._apply_log_config(record)

    async def join(self) -> None:
        """Nothing to join: the cluster is this broker."""

    async def leave(self) -> bool:
        if not self.config.controlled_shutdown_enable:
            return False
        await move_off(self, self.node_id)  # a cluster's steps; with no other replica nothing moves
        return True

    async def close(self) -> None:
        pass

    # ---- the topic view -------------------------------------------------------------------

    @property
    def topics(self):
        return self.store.topics

    @property
    def assignments(self) -> dict:
        return self._assignments

    def _open_partitions(self, record, first: int, end: int) -> None:
        """This node leads every partition: the same LeaderAndIsr and UpdateMetadata steps as a cluster."""
        me = (self.node_id,)
        states = [PartitionState(record.name, i, self.node_id, 0, me, me) for i in range(first, end)]
        self._assignments.setdefault(record.name, {}).update({i: [self.node_id] for i in range(first, end)})
        self._publish(states, {record.name: record.topic_id})

    def _publish(self, states, topic_ids: dict) -> list:
        """LeaderAndIsr to this broker, then UpdateMetadata; the states refused are published offline."""
        errors = self.host.apply_leader_and_isr(CONTROLLER_EPOCH, states, topic_ids, self._leaders())
        # a refused partition (e.g. INCONSISTENT_TOPIC_ID) is offline, not led by this node
        states = [replace(s, leader=-1, offline=(self.node_id,)) if errors.get((s.topic, s.partition)) else s
                  for s in states]
        self.states.update({(s.topic, s.partition): s for s in states})
        self.host.metadata.update(self.node_id, [self.own_endpoint()], states, topic_ids)
        return states

    async def write_state(self, key, leader: int, isr: tuple, old) -> bool:
        """A new leader epoch for one partition (an election's choice), applied as a cluster applies it."""
        new = replace(old, leader=leader, leader_epoch=old.leader_epoch + 1, isr=tuple(isr), offline=())
        record = self.store.topics.get(key[0])
        if record is None:
            return False
        return self._publish([new], {key[0]: record.topic_id})[0].leader == leader

    # ---- topics ---------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict | None = None, validate_only: bool = False, assignment: dict | None = None):
        if assignment:  # explicit replicas: the same checks as a cluster's, with one live broker
            partitions, replication_factor = check_assignment(assignment, set(self.live))
        partitions, replication_factor, configs = check_new_topic(
            self.config, name, partitions, replication_factor, configs, live_brokers=len(self.live))
        if name in self.store.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if validate_only:
            return None
        record = self.store.create_topic(name, partitions, replication_factor, configs)
        self._open_partitions(record, 0, partitions)
        log.info("created topic %s with %d partitions", name, partitions)
        return record

    async def auto_create_topic(self, name: str):
        return await self.create_topic(name)

    async def delete_topic(self, name: str) -> None:
        if not self.config.delete_topic_enable:
            raise TopicDeletionDisabledError("topic deletion is disabled (delete.topic.enable=false)")
        if name in INTERNAL_TOPICS:
            raise InternalTopicError(f"internal topic {name!r} cannot be deleted")
        record = self.store.topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        self.store.delete_topic(name)
        self._assignments.pop(name, None)
        for index in range(record.partitions):
            self.states.pop((name, index), None)
            self.host.replicas.stop_replica(name, index, delete=True)
        self.host.metadata.update(self.node_id, None, [], {}, deleted=[name])
        log.info("deleted topic %s", name)

    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        record = self.store.topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        if count <= record.partitions:
            raise InvalidPartitionsError(
                f"topic {name} has {record.partitions} partitions; the new count {count} must be larger")
        if validate_only:
            return
        old = record.partitions
        self.store.set_partitions(name, count)
        self._open_partitions(self.store.topics[name], old, count)

    async def alter_topic_configs(self, name: str, changes: dict, replace_all: bool = False,
                                  validate_only: bool = False) -> None:
        """Validated like CreateTopics, stored durably, then applied to the topic's open logs."""
        record = self.store.topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        new = new_overrides(record.configs, changes, replace_all, self.config.log)
        if validate_only or new == record.configs:
            return
        self.store.set_configs(name, {**{k: None for k in record.configs if k not in new}, **new})
        self._apply_log_config(self.store.topics[name])
        log.info("altered configs of topic %s: %s", name, dict(sorted(new.items())))

    def _apply_log_config(self, record) -> None:
        """Give the topic's open logs their new LogConfig."""
        cfg = LogConfig.from_properties(record.configs, base=self.config.log)
        for index in range(record.partitions):
            lg = getattr(self.host.replicas.get(record.name, index), "log", None)
            if lg is not None:
                lg.update_config(cfg)

    def topic_configs(self, name: str) -> list[tuple[str, str, bool]]:
        record = self.store.topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return describe_topic_configs(record, self.config.log)

    # ---- group configs ----------------------------------------------------------------------

    def group_configs(self, group_id: str) -> dict[str, str]:
        return dict(self.store.group_configs.get(group_id, {}))

    async def alter_group_configs(self, group_id: str, changes: dict, validate_only: bool = False,
                                  replace_all: bool = False) -> None:
        """Checked against this broker's group.* bounds, then written to the metadata store."""
        current = self.group_configs(group_id)
        new = new_group_overrides(current, changes, replace_all, self.config)
        if validate_only or new == current:
            return
        self.store.set_group_configs(group_id, new)
        log.info("altered configs of group %s: %s", group_id, dict(sorted(new.items())))

    # ---- cluster actions --------------------------------------------------------------------

    @property
    def is_active_controller(self) -> bool:
        return True

    def offline_partitions(self) -> int:
        return sum(1 for s in self.states.values() if s.leader not in self.live)

    async def elect_leaders(self, election_type: int, keys) -> dict:
        results, _ = await run_elections(self, election_type, keys)
        return results

    async def alter_reassignments(self, changes: dict) -> dict:
        """The only placement is this broker: a valid target is where the partition already is."""
        results = {}
        for key, target in changes.items():
            target = None if target is None else tuple(target)
            refused = reassignment_refusal(self, key, target, ongoing=None)
            results[key] = refused or (0, None)  # target == current: already placed so
        return results

    async def list_reassignments(self, keys) -> dict:
        return {}  # nothing ever moves

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, list]:
        """No other broker exists to ask: its controller takes no requests over the wire."""
        return NOT_CONTROLLER, []

    def refuses_controller_request(self, broker_epoch: int | None) -> bool:
        return True  # the only controller is in this process: a request over the wire is no one's

    async def write_isr(self, partition, new_isr: tuple) -> bool:
        """The leader is the only replica, so the ISR can only be itself; kept in memory and published."""
        key = (partition.topic, partition.index)
        old = self.states.get(key)
        if not partition.is_leader or old is None or self.node_id not in new_isr:
            return False
        partition.isr = tuple(new_isr)
        self.states[key] = new = replace(old, isr=tuple(new_isr))
        self.host.metadata.update(self.node_id, None, [new], {})
        return True

    async def allocate_producer_id(self) -> int:
        return await self.producer_ids.allocate()
