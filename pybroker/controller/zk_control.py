"""The control of a broker in a ZooKeeper cluster.

Topic admin goes through ZooKeeper from any broker (``ClusterTopics``, which also mirrors every
topic here); the controller role (``ZkController``) runs on the broker that wins it; this broker's
registration (``/brokers/ids/<id>``, whose czxid is the broker epoch) is kept across ZooKeeper
sessions; a leader's ISR changes are conditional writes of the partition state.
"""
import asyncio
import logging

from pybroker.controller.cluster_group_configs import ClusterGroupConfigs
from pybroker.controller.cluster_topics import ClusterTopics
from pybroker.controller.control import ControlHost
from pybroker.controller.controlled_shutdown import ask_controller, controlled_shutdown
from pybroker.controller.zk import LeaderIsr
from pybroker.controller.zk_controller import ZkController
from pybroker.protocol.errors import NOT_CONTROLLER

log = logging.getLogger(__name__)

FIRST_METADATA_S = 30
REREGISTER_ATTEMPTS = 10  # a second apart; a later CONNECTED starts over
SESSION_LOST = "ZooKeeper session lost"


class ZkControl:
    def __init__(self, host: ControlHost, zk, producer_ids):
        self.host = host
        self.config = host.config
        self.node_id = host.config.node_id
        self.zk = zk
        self.producer_ids = producer_ids
        self.registration = host.registration
        self.mirror = ClusterTopics(host, zk)
        self.group_config_mirror = ClusterGroupConfigs(zk, host.config)  # /config/groups/<group>
        self.controller: ZkController | None = None  # the controller role, once registered
        self.loop = None
        self._reregistering = None  # the task registering a new ZooKeeper session

    # ---- lifecycle ------------------------------------------------------------------------

    async def load(self) -> None:
        """The topic view and the group configs, mirrored from ZooKeeper (before stale logs are removed)."""
        await self.mirror.startup()
        await self.group_config_mirror.startup()

    async def start(self) -> None:
        """Partitions open as the controller's LeaderAndIsr arrives (after ``join``)."""

    async def join(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self._register()
        self.zk.kazoo.add_listener(self._on_zk_state)
        self.controller = ZkController(self.host, self.zk)
        self.mirror.on_partitions_added = lambda: self.controller.enqueue("partitions")
        await self.controller.startup()
        metadata = self.host.metadata
        try:  # ready once the controller has told us the cluster (Metadata would be empty before)
            await metadata.wait_for(lambda: self.node_id in metadata.brokers, FIRST_METADATA_S)
        except asyncio.TimeoutError:
            log.warning("no metadata from the controller after %d s; serving anyway", FIRST_METADATA_S)

    async def leave(self) -> bool:
        if not (self.registration.recorded and self.config.controlled_shutdown_enable):
            return False
        return await controlled_shutdown(self.config, lambda: ask_controller(
            self.config, self.host.metadata, self.registration.epoch, self.controller))

    async def close(self) -> None:
        if self.controller is not None:
            await self.controller.shutdown()
        await asyncio.to_thread(self.zk.stop)  # our registration goes now: the controller moves leaders

    # ---- registration ---------------------------------------------------------------------

    async def _register(self) -> None:
        self.registration.epoch = await asyncio.to_thread(
            self.zk.register_broker, self.node_id, list(self.host.advertised),
            self.config.zookeeper_session_timeout_ms / 1000 + 5)
        self.registration.recorded = True
        log.info("broker %d registered in ZooKeeper (epoch %d)", self.node_id, self.registration.epoch)

    def _on_zk_state(self, state) -> None:
        """kazoo thread: a lost session means other brokers may lead our partitions now.

        Both events go through the loop, which runs them in order: a new session's CONNECTED
        must see the registration the LOST before it dropped."""
        if state == "LOST":
            self.loop.call_soon_threadsafe(self._session_lost)
        elif state == "CONNECTED":
            self.loop.call_soon_threadsafe(self._zk_connected)

    def _zk_connected(self) -> None:
        if not self.registration.recorded and self._reregistering is None:
            self._reregistering = self.loop.create_task(self._reregister())

    def _session_lost(self) -> None:
        log.warning("ZooKeeper session lost: not acting as leader until the controller says so")
        self.registration.recorded = False
        self.host.set_available(False, SESSION_LOST)
        self.host.replicas.resign_all()
        if self.controller is not None:
            self.controller.enqueue("resign")

    async def _reregister(self) -> None:
        """Register the new session, retrying until it works or the session is lost again."""
        try:
            for attempt in range(REREGISTER_ATTEMPTS):
                if not self.zk.kazoo.connected:
                    return  # the next CONNECTED starts over
                try:
                    await self._register()
                    break
                except Exception:
                    log.exception("re-registering in ZooKeeper failed (attempt %d)", attempt + 1)
                    await asyncio.sleep(1)
            else:
                return
            self.controller.enqueue("elect")
            self.host.set_available(True, SESSION_LOST)
        finally:
            self._reregistering = None

    def refuses_controller_request(self, broker_epoch: int | None) -> bool:
        reg = self.registration
        if broker_epoch is None or broker_epoch == reg.epoch:
            return False
        # while our registration is being recorded the controller may already have seen it and
        # write to the new epoch (as Kafka, a newer epoch is ours then); otherwise another incarnation's
        return reg.recorded or broker_epoch < reg.epoch

    # ---- the topic view and topic admin ----------------------------------------------------

    @property
    def topics(self):
        return self.mirror.topics

    @property
    def assignments(self):
        return self.mirror.assignments

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict | None = None, validate_only: bool = False, assignment: dict | None = None):
        return await self.mirror.create_topic(name, partitions, replication_factor, configs,
                                              validate_only=validate_only, assignment=assignment)

    async def auto_create_topic(self, name: str):
        return await self.mirror.auto_create_topic(name)

    async def delete_topic(self, name: str) -> None:
        await self.mirror.delete_topic(name)

    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        await self.mirror.create_partitions(name, count, validate_only)

    async def alter_topic_configs(self, name: str, changes: dict, replace_all: bool = False,
                                  validate_only: bool = False) -> None:
        await self.mirror.alter_topic_configs(name, changes, replace_all, validate_only)

    def topic_configs(self, name: str) -> list[tuple[str, str, bool]]:
        return self.mirror.topic_configs(name)

    # ---- group configs ----------------------------------------------------------------------

    def group_configs(self, group_id: str) -> dict[str, str]:
        return self.group_config_mirror.group_configs(group_id)

    async def alter_group_configs(self, group_id: str, changes: dict, validate_only: bool = False,
                                  replace_all: bool = False) -> None:
        await self.group_config_mirror.alter(group_id, changes, validate_only, replace_all)

    # ---- cluster actions --------------------------------------------------------------------

    @property
    def is_active_controller(self) -> bool:
        return self.controller is not None and self.controller.active

    def offline_partitions(self) -> int:
        if not self.is_active_controller:
            return 0  # as Kafka: only the active controller reports these
        c = self.controller
        return sum(1 for s in c.states.values() if s.leader not in c.live)

    async def elect_leaders(self, election_type: int, keys) -> dict | int:
        if not self.is_active_controller:
            return NOT_CONTROLLER
        return await self.controller.elect_leaders(election_type, keys)

    async def alter_reassignments(self, changes: dict) -> dict | int:
        if not self.is_active_controller:
            return NOT_CONTROLLER
        return await self.controller.alter_reassignments(changes)

    async def list_reassignments(self, keys) -> dict | int:
        if not self.is_active_controller:
            return NOT_CONTROLLER
        return self.controller.reassigner.list(keys)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, list]:
        if not self.is_active_controller:
            return NOT_CONTROLLER, []
        return await self.controller.controlled_shutdown(broker_id, broker_epoch)

    async def write_isr(self, p, new_isr: tuple) -> bool:
        """A leader's ISR change: a conditional write of the partition state in ZooKeeper."""
        epoch = p.leader_epoch
        state = LeaderIsr(self.node_id, epoch, tuple(new_isr), p.controller_epoch, p.zk_version)
        version = await asyncio.to_thread(self.zk.update_isr, p.topic, p.index, state)
        if version is None:
            fresh = await asyncio.to_thread(self.zk.partition_state, p.topic, p.index)
            if fresh is not None and fresh.leader == self.node_id and fresh.leader_epoch == p.leader_epoch:
                p.zk_version, p.isr = fresh.version, fresh.isr  # a newer version of our own term: adopt it
            return False
        if p.leader_epoch != epoch or not p.is_leader:
            return False
        log.info("%s-%d: ISR %s -> %s", p.topic, p.index, list(p.isr), list(new_isr))
        metrics = self.host.metrics
        if metrics is not None:
            if len(new_isr) < len(p.isr):
                metrics.isr_shrinks += 1
            else:
                metrics.isr_expands += 1
        p.isr, p.zk_version = tuple(new_isr), version
        return True

    async def allocate_producer_id(self) -> int:
        return await self.producer_ids.allocate()
