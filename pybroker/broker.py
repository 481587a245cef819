"""A broker process: storage, replicas, controller and the Kafka-protocol listeners, wired together.

Single node (no ``zookeeper.connect``): the local metadata store and an in-process controller that
makes this broker leader of everything. Cluster: the broker registers in ZooKeeper, mirrors the
topics, may win the controller role, and learns its partitions from LeaderAndIsr. Both take the
same path into the replica manager (``apply_leader_and_isr``) and the metadata cache.

Start order: log dirs (recovery) → metadata → coordinator → partitions → listeners → (cluster)
registration and controller. Stop order is the reverse: stop accepting and finish in-flight
requests, leave ZooKeeper, then snapshot producer state, flush, write checkpoints and the
clean-shutdown marker.
"""
import asyncio
import dataclasses
import logging
import signal

from pybroker.api.dispatcher import Dispatcher
from pybroker.controller.metadata_cache import BrokerEndpoint, MetadataCache
from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.coordinator.offsets import OffsetStore
from pybroker.errors import BrokerError
from pybroker.log import LogManager
from pybroker.log.cleaner import CleanerSettings
from pybroker.log.config import LogConfig
from pybroker.metrics import BrokerMetrics
from pybroker.net.server import Server
from pybroker.replica.fetch_sessions import FetchSessionCache
from pybroker.replica.manager import ReplicaManager

log = logging.getLogger(__name__)


FIRST_METADATA_S = 30
REREGISTER_ATTEMPTS = 10  # a second apart; a later CONNECTED starts over


class ZooKeeperUnavailableError(BrokerError):
    code = -1


class Broker:
    def __init__(self, config):
        self.config = config
        self.node_id = config.node_id
        self.log_manager = None
        self.replicas = None
        self.servers = []
        self.coordinator = None
        self.transactions = None  # the transaction coordinator (pybroker/transaction)
        self.zk = None
        self.zk_controller = None
        self.dynamic_configs = None  # live broker configs (replication throttles, log defaults)
        self.static_log_config = config.log  # the log defaults before dynamic configs
        self.quotas = None  # client quotas (pybroker/quota): the manager and its durable store
        self.quota_store = None
        self.authorizer = None  # ACL authorization (pybroker/security/authorizer.py); None: off
        self.acl_store = None
        self.sasl = None  # SASL authentication (pybroker/security/sasl); None: no SASL listener
        self.scram_credentials = None  # SCRAM credential store (pybroker/security/credentials.py)
        self.broker_epoch = -1
        self._signalled = asyncio.Event()  # set once a signal's controlled shutdown is over
        self._on_signal_task = None
        self.metadata = MetadataCache()
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)  # KIP-227
        self.advertised_listener = None
        self._registered = False
        self._reregistering = None  # the task registering a new ZooKeeper session
        self.metrics = BrokerMetrics() if config.metrics_listener else None  # pybroker/metrics; None: off
        self.metrics_server = None
        self.ready = False  # serving clients: what /health says
        self.readiness = "starting"  # why not, for /health

    @property
    def server(self):
        return self.servers[0] if self.servers else None

    async def start(self) -> "Broker":
        cfg = self.config
        if self.metrics is not None:  # first: /health says "not ready" through recovery and registration
            await self._start_metrics()
        self.readiness = "recovering logs"
        self.log_manager = LogManager(list(cfg.log_dirs), cfg.log,
                                      retention_check_interval_ms=cfg.log_retention_check_interval_ms,
                                      writeback_bytes=cfg.log_writeback_bytes,
                                      cleaner=CleanerSettings.from_broker(cfg)).startup()
        self.replicas = ReplicaManager(cfg.node_id, self.log_manager, cfg.replica_lag_time_max_ms)
        if self.log_manager.cleaner is not None:  # the cleaner never passes a partition's high watermark
            self.log_manager.cleaner.high_watermark = self.replicas.high_watermark_of
        await self._start_listeners()
        for server in self.servers if self.metrics is not None else ():
            server.on_response_written = self.metrics.response_written  # request timing
        self.readiness = "loading metadata"
        # committed offsets load as offsets partitions become led here: no request sees a half-loaded store
        self.offsets = OffsetStore(cfg, self)
        self.coordinator = GroupCoordinator(cfg, self.offsets)
        self.offsets.coordinator = self.coordinator
        self.replicas.listeners.append(self.offsets)
        self.coordinator.startup()
        from pybroker.transaction.coordinator import TransactionCoordinator
        self.transactions = TransactionCoordinator(cfg, self)  # transactional ids load with __transaction_state
        self.replicas.listeners.append(self.transactions)
        self.transactions.startup()
        if cfg.zookeeper_connect:
            await self._start_cluster()
        else:
            self._start_single_node()
        await self._start_authorizer()
        from pybroker.security.sasl import runtime as sasl_runtime
        await sasl_runtime.start(self)  # SCRAM credentials; SASL listeners gated before they open
        self.replicas.start()
        for server in self.servers:
            server.open()
        if cfg.zookeeper_connect:
            self.readiness = "registering in ZooKeeper and waiting for the controller"
            await self._register()
        self.ready, self.readiness = True, "ready"
        return self

    async def _start_metrics(self) -> None:
        from pybroker.metrics.http import MetricsServer
        host, port = self.config.metrics_listener
        self.metrics_server = await MetricsServer(self, host, port).start()

    async def _start_listeners(self) -> None:
        from pybroker.net.limits import ConnectionLimits
        from pybroker.net.server import tls_handshake_timeout_ms
        from pybroker.security.tls import listener_tls
        cfg = self.config
        self.servers = []
        limits = ConnectionLimits.from_config(cfg)  # shared: max.connections counts every listener
        for listener in cfg.listeners:
            protocol = cfg.security_protocol(listener.name)
            server = Server(Dispatcher(self), listener.host, listener.port,
                            max_request_bytes=cfg.socket_request_max_bytes,
                            max_idle_ms=cfg.connections_max_idle_ms, listener_name=listener.name,
                            security_protocol=protocol, tls=listener_tls(cfg.raw, listener.name, protocol),
                            limits=limits, limits_exempt=listener.name == cfg.inter_broker_listener.name,
                            tls_handshake_timeout_ms=tls_handshake_timeout_ms(cfg.connections_max_idle_ms))
            await server.start(accepting=False)  # bound now, so the ports are known; served once ready
            self.servers.append(server)
        bound = {s.listener_name: s.port for s in self.servers}
        self.advertised = tuple(dataclasses.replace(a, port=bound.get(a.name, a.port)) if a.port == 0 else a
                                for a in cfg.advertised_listeners)
        self.advertised_listener = self.advertised[0]

    def _start_single_node(self) -> None:
        from pybroker.controller.controller import Controller
        from pybroker.controller.metadata_store import LocalMetadataStore
        from pybroker.replica.producer_ids import ProducerIdManager
        cfg = self.config
        self.store = LocalMetadataStore(cfg.log_dirs[0], cfg.node_id, cfg.cluster_id)
        self.cluster_id = self.store.cluster_id
        self.producer_ids = ProducerIdManager(cfg.log_dirs[0])
        self.metadata.update(self.node_id, [self.own_endpoint()], [], {})
        self.controller = Controller(self, self.store)
        self._start_dynamic_single_node()
        self._remove_stale_logs(self.store.topics, lambda topic, p: True)
        self.controller.startup()
        self._apply_log_config_to_open_logs()  # the logs recovered at start took the static defaults

    def _start_dynamic_single_node(self) -> None:
        from pybroker.controller.broker_configs import LocalDynamicBrokerConfigs
        from pybroker.quota.store import LocalQuotaStore
        self._new_quota_manager()
        self.quota_store = LocalQuotaStore(self.config.log_dirs[0], self.quotas)
        self.quota_store.load()
        self.dynamic_configs = LocalDynamicBrokerConfigs(self, self.config.log_dirs[0])
        self.dynamic_configs.load()

    def _new_quota_manager(self) -> None:
        from pybroker.quota.manager import ClientQuotaManager
        self.quotas = ClientQuotaManager(self.config.quota_window_num, self.config.quota_window_size_seconds)

    async def _start_authorizer(self) -> None:
        """ACLs load before the listeners serve: no request is ever answered without them."""
        from pybroker.security.authorizer import new_authorizer
        authorizer = new_authorizer(self.config)
        if authorizer is None:
            return
        from pybroker.security.acl_store import LocalAclStore, ZkAclStore
        self.acl_store = ZkAclStore(self.zk, authorizer) if self.zk is not None \
            else LocalAclStore(self.config.log_dirs[0], authorizer)
        await self.acl_store.startup()
        self.authorizer = authorizer

    async def _start_cluster(self) -> None:
        from pybroker.controller.broker_configs import DynamicBrokerConfigs
        from pybroker.controller.cluster_topics import ClusterTopics
        from pybroker.replica.throttle import ReplicationQuota
        from pybroker.controller.metadata_store import new_cluster_id
        from pybroker.controller.zk import ZkClient
        from pybroker.replica.fetcher import ReplicaFetcherManager
        from pybroker.replica.producer_ids import ZkProducerIds
        cfg = self.config
        self.zk = ZkClient(cfg.zookeeper_connect, cfg.zookeeper_session_timeout_ms)
        try:
            await asyncio.to_thread(self.zk.start, cfg.zookeeper_session_timeout_ms / 1000)
        except Exception as exc:
            self.zk.stop()
            raise ZooKeeperUnavailableError(f"cannot reach ZooKeeper at {cfg.zookeeper_connect}: {exc}") from None
        self.cluster_id = await asyncio.to_thread(self.zk.get_or_create_cluster_id, cfg.cluster_id or new_cluster_id())
        if cfg.cluster_id and cfg.cluster_id != self.cluster_id:
            raise ZooKeeperUnavailableError(f"ZooKeeper holds cluster {self.cluster_id}, but cluster.id={cfg.cluster_id}")
        self.producer_ids = ZkProducerIds(self.zk, self.node_id)
        self.controller = ClusterTopics(self, self.zk)
        await self.controller.startup()
        self.replicas.fetchers = ReplicaFetcherManager(self.node_id, cfg)
        self.replicas.isr_writer = self._write_isr
        self.replicas.leader_quota = ReplicationQuota(samples=cfg.replication_quota_window_num,
                                                      sample_s=cfg.replication_quota_window_size_seconds)
        self.dynamic_configs = DynamicBrokerConfigs(self, self.zk)
        await self.dynamic_configs.startup()
        from pybroker.quota.store import ZkQuotaStore
        self._new_quota_manager()
        self.quota_store = ZkQuotaStore(self.zk, self.quotas)
        await self.quota_store.startup()
        assignments = self.controller.assignments
        self._remove_stale_logs(self.controller.topics,
                                lambda t, p: self.node_id in assignments.get(t, {}).get(p, ()))

    async def _register(self) -> None:
        from pybroker.controller.zk_controller import ZkController
        self.loop = asyncio.get_running_loop()
        await self._register_in_zk()
        self.zk.kazoo.add_listener(self._on_zk_state)
        self.zk_controller = ZkController(self, self.zk)
        await self.zk_controller.startup()
        try:  # ready once the controller has told us the cluster (Metadata would be empty before)
            await self.metadata.wait_for(lambda: self.node_id in self.metadata.brokers, FIRST_METADATA_S)
        except asyncio.TimeoutError:
            log.warning("no metadata from the controller after %d s; serving anyway", FIRST_METADATA_S)

    @property
    def registered(self) -> bool:
        """Our ZooKeeper registration is recorded (broker_epoch is the current one)."""
        return self._registered

    async def _register_in_zk(self) -> None:
        self.broker_epoch = await asyncio.to_thread(self.zk.register_broker, self.node_id, list(self.advertised),
                                                    self.config.zookeeper_session_timeout_ms / 1000 + 5)
        self._registered = True
        log.info("broker %d registered in ZooKeeper (epoch %d)", self.node_id, self.broker_epoch)

    def _on_zk_state(self, state) -> None:
        """kazoo thread: a lost session means other brokers may lead our partitions now.

        Both events go through the loop, which runs them in order: a new session's CONNECTED
        must see the registration the LOST before it dropped."""
        if state == "LOST":
            self.loop.call_soon_threadsafe(self._session_lost)
        elif state == "CONNECTED":
            self.loop.call_soon_threadsafe(self._zk_connected)

    def _zk_connected(self) -> None:
        if not self._registered and self._reregistering is None:
            self._reregistering = self.loop.create_task(self._reregister())

    def _session_lost(self) -> None:
        log.warning("ZooKeeper session lost: not acting as leader until the controller says so")
        self._registered = False
        if self.ready:
            self.ready, self.readiness = False, "ZooKeeper session lost"
        self.replicas.resign_all()
        if self.zk_controller is not None:
            self.zk_controller.enqueue("resign")

    async def _reregister(self) -> None:
        """Register the new session, retrying until it works or the session is lost again."""
        try:
            for attempt in range(REREGISTER_ATTEMPTS):
                if not self.zk.kazoo.connected:
                    return  # the next CONNECTED starts over
                try:
                    await self._register_in_zk()
                    break
                except Exception:
                    log.exception("re-registering in ZooKeeper failed (attempt %d)", attempt + 1)
                    await asyncio.sleep(1)
            else:
                return
            self.zk_controller.enqueue("elect")
            if self.readiness == "ZooKeeper session lost":
                self.ready, self.readiness = True, "ready"
        finally:
            self._reregistering = None

    def _remove_stale_logs(self, topics, hosted) -> None:
        for topic, partition in list(self.log_manager.logs):  # data of topics deleted while we were away
            record = topics.get(topic)
            if record is None or partition >= record.partitions or not hosted(topic, partition):
                log.warning("removing the log of %s-%d: no such partition here", topic, partition)
                self.log_manager.delete_log(topic, partition)

    # ---- what the controller tells this broker ------------------------------------------------

    def own_endpoint(self) -> BrokerEndpoint:
        return BrokerEndpoint(self.node_id, {a.name: (a.host, a.port) for a in self.advertised})

    def own_endpoints(self) -> dict:
        a = self.config.inter_broker_listener
        host, port = self.own_endpoint().endpoints.get(a.name, (a.host, a.port))
        return {self.node_id: (host, port)}

    def log_config_for(self, topic: str) -> LogConfig:
        record = self.controller.topics.get(topic)
        if record is None or not record.configs:
            return self.config.log
        return LogConfig.from_properties(record.configs, base=self.config.log)

    def apply_leader_and_isr(self, controller_epoch: int, states, topic_ids: dict, leaders: dict) -> dict:
        errors = self.replicas.apply_states(controller_epoch, states, topic_ids, self.log_config_for, leaders)
        if self.config.log is not self.static_log_config:  # logs recovered at start took the static defaults
            for topic in {s.topic for s in states}:
                self.apply_log_config(topic)
        return errors

    def apply_dynamic_configs(self, values: dict) -> None:
        self.replicas.leader_quota.rate = values["leader.replication.throttled.rate"]
        if self.replicas.fetchers is not None:
            self.replicas.fetchers.follower_quota.rate = values["follower.replication.throttled.rate"]
            self.replicas.fetchers.resize(values["num.replica.fetchers"])
        if self.log_manager.cleaner is not None:
            self.log_manager.cleaner.reconfigure(dataclasses.replace(
                self.log_manager.cleaner.settings, threads=values["log.cleaner.threads"],
                dedupe_buffer_size=values["log.cleaner.dedupe.buffer.size"],
                backoff_ms=values["log.cleaner.backoff.ms"],
                io_max_bytes_per_second=values["log.cleaner.io.max.bytes.per.second"]))
        self._apply_log_defaults(values.get("log", {}))

    def _apply_log_defaults(self, overrides: dict) -> None:
        """Dynamic log.* defaults: config.log is the live defaults object every reader (controllers,
        log_config_for) takes as the base of topic configs, so it is swapped in place."""
        try:
            new = LogConfig.from_properties(overrides, base=self.static_log_config) if overrides \
                else self.static_log_config
        except ValueError:
            log.exception("ignoring invalid dynamic log defaults %s", overrides)
            return
        if new == self.config.log:
            return
        object.__setattr__(self.config, "log", new)  # BrokerConfig is frozen; this is its one live field
        if self.log_manager is not None:
            self.log_manager.config = new
        self._apply_log_config_to_open_logs()

    def _apply_log_config_to_open_logs(self) -> None:
        if self.replicas is not None and getattr(self, "controller", None) is not None:
            for topic in {t for t, _ in list(self.replicas.partitions)}:
                self.apply_log_config(topic)

    def apply_log_config(self, topic: str) -> None:
        cfg = self.log_config_for(topic)
        for (t, _), p in list(self.replicas.partitions.items()):
            if t == topic:
                p.log.update_config(cfg)

    async def _write_isr(self, p, new_isr) -> bool:
        """A leader's ISR change: a conditional write of the partition state in ZooKeeper."""
        from pybroker.controller.zk import LeaderIsr
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
        if self.metrics is not None:
            if len(new_isr) < len(p.isr):
                self.metrics.isr_shrinks += 1
            else:
                self.metrics.isr_expands += 1
        p.isr, p.zk_version = tuple(new_isr), version
        return True

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.servers[0].port

    def _answer_parked(self) -> None:
        """Parked requests (long-polling fetches, JoinGroup/SyncGroup) answer now, so draining is quick."""
        if self.replicas is not None:
            self.replicas.stop_waiting()
        if self.coordinator is not None:
            self.coordinator.shutdown()

    async def stop(self, timeout: float = 30.0) -> None:
        self.ready, self.readiness = False, "stopping"
        self._answer_parked()
        for server in self.servers:
            await server.stop(timeout)
        if self.transactions is not None:
            await self.transactions.shutdown()
        if self.zk_controller is not None:
            await self.zk_controller.shutdown()
        if self.replicas is not None and self.replicas.fetchers is not None:
            await self.replicas.fetchers.shutdown()
        if self.zk is not None:
            await asyncio.to_thread(self.zk.stop)  # our registration goes now: the controller moves leaders
        if self.log_manager is not None:
            self.replicas.shutdown()
            self.log_manager.shutdown()
            self.log_manager = None
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        log.info("broker stopped cleanly")

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop the broker cleanly: on a cluster, a controlled shutdown first
        (controlled.shutdown.enable) while still serving, then ``stop``."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig) -> None:
        log.info("received %s: shutting down", signal.Signals(sig).name)
        if self._on_signal_task is None:
            self._on_signal_task = asyncio.get_running_loop().create_task(self._before_stop())

    async def _before_stop(self) -> None:
        try:
            if self.zk is not None and self._registered and self.config.controlled_shutdown_enable:
                from pybroker.controller.controlled_shutdown import controlled_shutdown
                await controlled_shutdown(self)
        finally:
            self._signalled.set()

    async def run_until_signalled(self, timeout: float = 30.0) -> None:
        """Serve until SIGTERM/SIGINT (or the listener stops), then shut down cleanly."""
        waits = [asyncio.ensure_future(self._signalled.wait()), asyncio.ensure_future(self.server.wait_stopped())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        await self.stop(timeout)
