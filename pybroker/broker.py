"""A broker process: storage, replicas, controller and the Kafka-protocol listener, wired together.

Start order: log dirs (recovery) → metadata store → partitions → listener. Stop order is the
reverse: stop accepting and finish in-flight requests, then snapshot producer state, flush,
write checkpoints and the clean-shutdown marker.
"""
import dataclasses
import logging

from pybroker.api.dispatcher import Dispatcher
from pybroker.controller.controller import Controller
from pybroker.controller.metadata_store import LocalMetadataStore
from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.coordinator.offsets import OffsetStore
from pybroker.log import LogManager
from pybroker.net.server import Server
from pybroker.replica.manager import ReplicaManager
from pybroker.replica.producer_ids import ProducerIdManager

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config):
        self.config = config
        self.node_id = config.node_id
        self.log_manager = None
        self.replicas = None
        self.server = None
        self.coordinator = None

    async def start(self) -> "Broker":
        cfg = self.config
        self.log_manager = LogManager(list(cfg.log_dirs), cfg.log,
                                      retention_check_interval_ms=cfg.log_retention_check_interval_ms).startup()
        self.store = LocalMetadataStore(cfg.log_dirs[0], cfg.node_id, cfg.cluster_id)
        self.cluster_id = self.store.cluster_id
        self.producer_ids = ProducerIdManager(cfg.log_dirs[0])
        self.replicas = ReplicaManager(cfg.node_id, self.log_manager, cfg.min_insync_replicas)
        self.controller = Controller(cfg, self.store, self.replicas)
        self.controller.startup()
        for topic, partition in list(self.log_manager.logs):  # data of topics deleted before a crash
            if self.replicas.get(topic, partition) is None:
                log.warning("removing the log of %s-%d: its topic no longer exists", topic, partition)
                self.log_manager.delete_log(topic, partition)
        # committed offsets are replayed before the listener opens: no request sees a half-loaded store
        self.offsets = OffsetStore(cfg, self.controller, self.replicas)
        self.offsets.startup()
        self.coordinator = GroupCoordinator(cfg, self.offsets, self.controller.topics)
        self.coordinator.startup()
        listener = cfg.listeners[0]
        self.server = Server(Dispatcher(self), listener.host, listener.port,
                             max_request_bytes=cfg.socket_request_max_bytes,
                             max_idle_ms=cfg.connections_max_idle_ms)
        await self.server.start()
        advertised = cfg.advertised_listeners[0] if cfg.advertised_listeners else listener
        if advertised.port == 0:  # an ephemeral listener advertises the port it got
            advertised = dataclasses.replace(advertised, port=self.server.port)
        self.advertised_listener = advertised
        return self

    @property
    def port(self) -> int:
        return self.server.port

    def _answer_parked(self) -> None:
        """Parked requests (long-polling fetches, JoinGroup/SyncGroup) answer now, so draining is quick."""
        if self.replicas is not None:
            self.replicas.stop_waiting()
        if self.coordinator is not None:
            self.coordinator.shutdown()

    async def stop(self, timeout: float = 30.0) -> None:
        self._answer_parked()
        if self.server is not None:
            await self.server.stop(timeout)
        if self.log_manager is not None:
            self.replicas.shutdown()
            self.log_manager.shutdown()
            self.log_manager = None
        log.info("broker stopped cleanly")

    async def run_until_signalled(self, timeout: float = 30.0) -> None:
        """Serve until SIGTERM/SIGINT, then shut down cleanly."""
        # parked requests answer first, or the server's drain would wait out their timeouts
        self.server.install_signal_handlers(timeout, before_stop=self._answer_parked)
        await self.server.wait_stopped()
        await self.stop(timeout)
