"""A broker process: storage, replicas, the metadata backend and the Kafka-protocol listeners, wired together.

One shape for one broker or many: the metadata backend (``controller/backend.py``) is built as a
local set (a single node is a cluster of one: the ``local`` metadata store, its own controller) or
a ZooKeeper set (registration, topic mirror, the controller role when won), and the broker talks
to it only through its control (``controller/control.py``). Both take the same path into the
replica manager (``apply_leader_and_isr``) and the metadata cache.

Start order: log dirs (recovery) → listeners bound → coordinators → metadata backend (store,
dynamic configs, quotas, ACLs, credentials) → partitions → listeners open → joining the cluster.
Stop order is the reverse: stop accepting and finish in-flight requests, leave the cluster, then
snapshot producer state, flush, write checkpoints and the clean-shutdown marker.

The schema registry (``schema.registry.listeners``; pybroker/registry) starts last, in the background,
as a client of this broker's inter-broker listener, and stops first.
"""
import asyncio
import dataclasses
import hashlib
import hmac
import logging
import signal

from pybroker.api.dispatcher import AuthenticationGate, Dispatcher
from pybroker.controller.log_configs import apply_leader_and_isr, apply_log_config
from pybroker.controller.metadata_cache import MetadataCache
from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.coordinator.offsets import OffsetStore
from pybroker.log import LogManager
from pybroker.log.cleaner import CleanerSettings
from pybroker.log.config import LogConfig
from pybroker.metrics import BrokerMetrics
from pybroker.net.server import Server
from pybroker.replica.fetch_sessions import FetchSessionCache
from pybroker.replica.fetcher import ReplicaFetcherManager
from pybroker.replica.manager import ReplicaManager
from pybroker.replica.throttle import ReplicationQuota
from pybroker.services import Services

log = logging.getLogger(__name__)


def _service(name: str) -> property:
    """A broker attribute that is one of its typed services: one value, seen by both."""
    return property(lambda self: getattr(self.services, name), lambda self, value: setattr(self.services, name, value))


class Broker:
    config = _service("config")
    node_id = _service("node_id")
    metadata = _service("metadata")
    fetch_sessions = _service("fetch_sessions")
    metrics = _service("metrics")
    log_manager = _service("log_manager")
    replicas = _service("replicas")
    offsets = _service("offsets")
    coordinator = _service("coordinator")
    transactions = _service("transactions")
    control = _service("control")
    authorizer = _service("authorizer")
    sasl = _service("sasl")
    quotas = _service("quotas")
    cluster_id = _service("cluster_id")
    advertised = _service("advertised")

    def __init__(self, config):
        # what handlers and core classes see; filled as the parts start
        self.services = Services(config, config.node_id, MetadataCache(),
                                 FetchSessionCache(config.max_incremental_fetch_session_cache_slots))
        self.config = config
        self.node_id = config.node_id
        self.log_manager = None
        self.replicas = None
        self.servers = []
        self.coordinator = None
        self.transactions = None  # the transaction coordinator (pybroker/transaction)
        self.static_log_config = config.log  # the log defaults before dynamic configs
        self.backend = None  # the metadata backend (controller/backend.py): store, control, ACLs, quotas, ...
        self.authorizer = None  # ACL authorization (pybroker/security/authorizer.py); None: off
        self.sasl = None  # SASL authentication (pybroker/security/sasl); None: no SASL listener
        self._signalled = asyncio.Event()  # set once a signal's controlled shutdown is over
        self._on_signal_task = None
        self.metadata = MetadataCache()
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)  # KIP-227
        self.advertised_listener = None
        self.metrics = BrokerMetrics() if config.metrics_listener else None  # pybroker/metrics; None: off
        self.metrics_server = None
        self.ready = False  # serving clients: what /health says
        self.readiness = "starting"  # why not, for /health
        self.registry = None  # the running schema registry (pybroker/registry); None: off or not started yet
        self._registry_task = None
        self.iceberg = None  # pybroker/iceberg's supervisor of the translation worker

    def _start_share_groups(self) -> None:
        """Share groups: their coordinator, their durable state and the share-partitions led here."""
        from pybroker.share.service import ShareService
        from pybroker.transaction.peers import PeerConnections
        share = self.services.share = ShareService(self.config, self.services,
                                                   PeerConnections(self.config, self.services.metadata, "share"))
        self.replicas.listeners.append(share)
        share.startup()

    def _share_group_type(self, group_id: str) -> str | None:
        """"share" when a share group of that id is coordinated here (pybroker/share), else None."""
        share = getattr(self.services, "share", None)
        return "share" if share is not None and share.groups.describe(group_id) is not None else None

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
        self.replicas = ReplicaManager(
            cfg.node_id, self.log_manager, ReplicaFetcherManager(cfg.node_id, cfg), cfg.replica_lag_time_max_ms,
            leader_quota=ReplicationQuota(samples=cfg.replication_quota_window_num,
                                          sample_s=cfg.replication_quota_window_size_seconds))
        if self.log_manager.cleaner is not None:  # the cleaner never passes a partition's high watermark
            self.log_manager.cleaner.high_watermark = self.replicas.high_watermark_of
        await self._start_listeners()
        for server in self.servers if self.metrics is not None else ():
            server.on_response_written = self.metrics.response_written  # request timing
        self.readiness = "loading metadata"
        # committed offsets load as offsets partitions become led here: no request sees a half-loaded store
        self.offsets = OffsetStore(cfg, self.services)
        self.coordinator = GroupCoordinator(cfg, self.offsets)
        self.coordinator.other_group_type = self._share_group_type  # JoinGroup/ConsumerGroupHeartbeat refuse those ids
        self.offsets.coordinator = self.coordinator
        self.replicas.listeners.append(self.offsets)
        self.coordinator.startup()
        from pybroker.transaction.coordinator import TransactionCoordinator
        self.transactions = TransactionCoordinator(cfg, self.services)  # ids load with __transaction_state
        self.replicas.listeners.append(self.transactions)
        self.transactions.startup()
        self._start_share_groups()
        await self._start_metadata()
        from pybroker.security.sasl import runtime as sasl_runtime
        self.sasl = sasl_runtime.new_authenticator(cfg, self.backend.credentials)  # before the SASL listeners open
        self.replicas.start()
        for server in self.servers:
            server.open()
        self.readiness = "joining the cluster and waiting for the controller"
        await self.control.join()
        self.ready, self.readiness = True, "ready"
        if cfg.raw.get("schema.registry.listeners"):  # in the background: the Kafka listeners never wait for it
            self._registry_task = asyncio.get_running_loop().create_task(self._start_registry(),
                                                                         name="schema registry start")
        try:
            self._start_iceberg()
        except Exception:  # tables are an extra: never a reason for the broker not to serve
            log.exception("Iceberg tables are off")
        return self

    def _start_iceberg(self) -> None:
        """Topics as Iceberg tables (pybroker/iceberg): a worker process starts once this broker leads a
        partition of a topic with iceberg.mode set."""
        from pybroker.iceberg import settings as iceberg_settings
        from pybroker.iceberg.supervisor import IcebergSupervisor
        cfg = self.config
        try:
            settings = iceberg_settings.from_broker_config(cfg.raw, cfg.log_dirs[0])
        except ValueError as e:
            log.error("Iceberg tables are off: %s", e)
            return
        replicas = self.replicas

        def led() -> dict:
            out = {}
            for key, partition in replicas.partitions.items():
                config = partition.log.config
                if partition.is_leader and config.iceberg_mode != "disabled":
                    out[key] = {"mode": config.iceberg_mode, "partition_spec": config.iceberg_partition_spec,
                                "target_lag_ms": config.iceberg_target_lag_ms,
                                "invalid_record_action": config.iceberg_invalid_record_action}
            return out

        def end_offset(topic: str, partition: int) -> int | None:
            p = replicas.partitions.get((topic, partition))
            return p.last_stable_offset if p is not None and p.is_leader else None

        def registry_url() -> str:  # this broker's own registry (its port may be chosen when it starts)
            urls = self.registry.urls if self.registry is not None else ()
            return urls[0] if urls else _registry_url(cfg.raw)

        supervisor = self.iceberg = IcebergSupervisor(settings, self._iceberg_connection, self.node_id, led,
                                                      end_offset, registry_url)
        supervisor.start()
        cleaner = self.log_manager.cleaner
        if cleaner is not None:
            cleaner.high_watermark = lambda topic, partition: _cleanable_below(replicas, supervisor, topic, partition)

    def _iceberg_connection(self) -> tuple[str, dict]:
        """(bootstrap, client config) of the translation worker, asked when it starts; ValueError says why
        it cannot connect (the broker serves on regardless)."""
        listener, client_config, _ = self._inter_broker_client(f"iceberg-{self.node_id}")
        if client_config.get("security.protocol", "PLAINTEXT").endswith("SSL"):
            # the worker is another process: it cannot share this broker's TLS context; a plain listener will do
            plain = next((a for a in self.advertised if self.config.security_protocol(a.name) == "PLAINTEXT"), None)
            if plain is None:
                raise ValueError("the translation worker needs a PLAINTEXT or SASL_PLAINTEXT inter-broker listener, "
                                 "or any PLAINTEXT listener")
            listener, client_config = plain, {"client.id": client_config["client.id"]}
        return f"{listener.host}:{listener.port}", client_config

    async def _stop_iceberg(self) -> None:
        supervisor, self.iceberg = self.iceberg, None
        if supervisor is not None:
            await supervisor.stop()

    def _inter_broker_client(self, client_id: str):
        """(bootstrap, client config, security) of a client of this broker's inter-broker listener."""
        from pybroker.security.inter_broker import inter_broker_security
        cfg = self.config
        name = cfg.inter_broker_listener.name
        listener = next((a for a in self.advertised if a.name == name), self.advertised_listener)
        client_config = {"client.id": client_id}
        security = inter_broker_security(cfg)  # a SASL listener needs this broker's own credentials
        if security is not None:
            client_config["security.protocol"] = security.protocol
            if security.sasl:
                client_config.update({"sasl.mechanism": security.mechanism, "sasl.username": security.username,
                                      "sasl.password": security.password})
        return listener, client_config, security

    async def _start_registry(self) -> None:
        """The schema registry, a client of this broker's inter-broker listener with its security."""
        from pybroker.registry import start_registry
        cfg = self.config
        try:
            listener, client_config, security = self._inter_broker_client(f"schema-registry-{self.node_id}")
            self.registry = await start_registry(
                cfg.raw, f"{listener.host}:{listener.port}", client_config, cfg.zookeeper_connect,
                _registry_authenticate(self.sasl) if self.sasl is not None else None,
                security=security, advertised_host=listener.host)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the schema registry could not start; the broker goes on without it")
            return
        if self.registry is not None:
            for url in self.registry.urls:
                log.info("schema registry on %s", url)

    async def _stop_registry(self) -> None:
        task, self._registry_task = self._registry_task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        registry, self.registry = self.registry, None
        if registry is not None:
            try:
                await registry.stop()
            except Exception:
                log.exception("stopping the schema registry")

    async def _start_metrics(self) -> None:
        from pybroker.metrics.http import MetricsServer
        host, port = self.config.metrics_listener
        from pybroker.metrics.render import render
        self.metrics_server = await MetricsServer(self.metrics, host, port,
                                                  render=lambda: render(self.services, self.ready, self.servers,
                                                                       self._extra_metrics()),
                                                  health=lambda: (self.ready, self.readiness)).start()

    def _extra_metrics(self) -> list:
        extra = self.iceberg.metric_families() if self.iceberg is not None else []
        if self.services.share is not None:
            from pybroker.share.metrics import metric_families
            extra += metric_families(self.services.share.partitions)
        return extra

    async def _start_listeners(self) -> None:
        from pybroker.net.limits import ConnectionLimits
        from pybroker.net.server import tls_handshake_timeout_ms
        from pybroker.security.sasl import runtime as sasl_runtime
        from pybroker.security.tls import listener_tls
        cfg = self.config
        self.servers = []
        limits = ConnectionLimits.from_config(cfg)  # shared: max.connections counts every listener
        for listener in cfg.listeners:
            protocol = cfg.security_protocol(listener.name)
            handler = Dispatcher(self.services)
            sasl = sasl_runtime.speaks_sasl(protocol)
            if sasl:  # until a session has authenticated, only its SASL exchange passes
                handler = AuthenticationGate(handler, self.services)
            server = Server(handler, listener.host, listener.port,
                            max_request_bytes=cfg.socket_request_max_bytes,
                            max_idle_ms=cfg.connections_max_idle_ms, listener_name=listener.name,
                            security_protocol=protocol, tls=listener_tls(cfg.raw, listener.name, protocol),
                            limits=limits, limits_exempt=listener.name == cfg.inter_broker_listener.name,
                            tls_handshake_timeout_ms=tls_handshake_timeout_ms(cfg.connections_max_idle_ms),
                            max_pre_auth_bytes=sasl_runtime.pre_auth_limit(cfg) if sasl else None)
            await server.start(accepting=False)  # bound now, so the ports are known; served once ready
            self.servers.append(server)
        bound = {s.listener_name: s.port for s in self.servers}
        self.advertised = tuple(dataclasses.replace(a, port=bound.get(a.name, a.port)) if a.port == 0 else a
                                for a in cfg.advertised_listeners)
        self.advertised_listener = self.advertised[0]

    async def _start_metadata(self) -> None:
        """The metadata backend, loaded (ACLs before the listeners serve: no request is answered
        without them), then the partitions this broker knows open."""
        from pybroker.controller.backend import build_metadata_backend
        from pybroker.controller.control import ControlHost
        from pybroker.security.authorizer import new_authorizer
        authorizer = new_authorizer(self.config)
        host = ControlHost(self.config, self.replicas, self.metadata, self.services.registration, self.advertised,
                           self.apply_leader_and_isr, self.apply_log_config, self._set_available, self.metrics)
        self.backend = await build_metadata_backend(host, authorizer, self.apply_dynamic_configs,
                                                    self.static_log_config)
        self.services.backend = self.backend
        self.cluster_id = self.backend.cluster_id
        self.quotas = self.backend.quotas
        self.control = self.backend.control
        self.replicas.isr_writer = self.control.write_isr
        self._remove_stale_logs()
        await self.control.start()
        self._apply_log_config_to_open_logs()  # the logs recovered at start took the static defaults
        self.authorizer = authorizer

    def _set_available(self, available: bool, reason: str) -> None:
        """The cluster connection went (not ready, saying why) or came back (ready again)."""
        if not available and self.ready:
            self.ready, self.readiness = False, reason
        elif available and self.readiness == reason:
            self.ready, self.readiness = True, "ready"

    def _remove_stale_logs(self) -> None:
        topics, assignments = self.control.topics, self.control.assignments
        for topic, partition in list(self.log_manager.logs):  # data of topics deleted while we were away
            record = topics.get(topic)
            if record is None or partition >= record.partitions \
                    or self.node_id not in assignments.get(topic, {}).get(partition, ()):
                log.warning("removing the log of %s-%d: no such partition here", topic, partition)
                self.log_manager.delete_log(topic, partition)

    # ---- what the controller tells this broker ------------------------------------------------

    def apply_leader_and_isr(self, controller_epoch: int, states, topic_ids: dict, leaders: dict) -> dict:
        return apply_leader_and_isr(self.services, controller_epoch, states, topic_ids, leaders)

    def apply_dynamic_configs(self, values: dict) -> None:
        self.replicas.leader_quota.rate = values["leader.replication.throttled.rate"]
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
        if self.replicas is not None and self.control is not None:
            for topic in {t for t, _ in list(self.replicas.partitions)}:
                self.apply_log_config(topic)

    def apply_log_config(self, topic: str) -> None:
        if self.control is not None:  # before it, no partition is open
            apply_log_config(self.replicas, self.config, self.control.topics, topic)

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
        await self._stop_iceberg()  # first: clients of the listeners about to close
        await self._stop_registry()
        self._answer_parked()
        for server in self.servers:
            await server.stop(timeout)
        if self.transactions is not None:
            await self.transactions.shutdown()
        if self.services.share is not None:
            await self.services.share.shutdown()
        if self.replicas is not None:
            await self.replicas.fetchers.shutdown()
        if self.control is not None:
            await self.control.close()  # a cluster: our registration goes now, the controller moves leaders
        if self.log_manager is not None:
            self.replicas.shutdown()
            self.log_manager.shutdown()
            self.log_manager = None
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        log.info("broker stopped cleanly")

    async def abandon(self) -> None:
        """An in-process ``kill``: stop serving and let go of the files, writing nothing."""
        await self._stop_iceberg()
        await self._stop_registry()  # its HTTP port and ZooKeeper session go with the process
        for server in self.servers:
            await server.stop(0.0)
        manager = self.log_manager
        if manager is None:
            return
        if manager.flusher is not None:
            manager.flusher.stop()
        for lg in list(manager.logs.values()):
            lg.close()  # no flush, no checkpoints, no clean-shutdown marker: the next start recovers
        for lock in manager._locks:  # the log-dir flocks, or the next start would find the dirs locked
            lock.close()
        manager._locks.clear()
        self.log_manager = None

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop the broker cleanly: a controlled shutdown first
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
            if self.control is not None:
                await self.control.leave()  # controlled.shutdown.enable: leaderships move off first
        finally:
            self._signalled.set()

    async def run_until_signalled(self, timeout: float = 30.0) -> None:
        """Serve until SIGTERM/SIGINT (or the listener stops), then shut down cleanly."""
        waits = [asyncio.ensure_future(self._signalled.wait()), asyncio.ensure_future(self.server.wait_stopped())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        await self.stop(timeout)


def _registry_authenticate(sasl):
    """HTTP basic authentication for the schema registry against the broker's SASL users: a PLAIN user
    of any SASL listener, or a SCRAM credential of the credential store (checked as a SCRAM login
    would: the stored key derived from the password). Successful SCRAM checks are remembered (by a hash
    of the password), so a client's requests do not each pay the key derivation."""
    from pybroker.security.sasl.scram import MECHANISMS, credential_from_salted, salted_password
    plain = {}
    for listener in sasl.settings.listeners.values():
        plain.update(listener.plain_users)
    verified: dict = {}  # (user, mechanism, credential, sha256 of the password) -> True

    def authenticate(user: str, password: str) -> bool:
        expected = plain.get(user)
        if expected is not None and hmac.compare_digest(expected.encode(), password.encode()):
            return True
        digest = hashlib.sha256(password.encode()).digest()
        for mechanism in MECHANISMS.values():
            credential = sasl.credentials.get(user, mechanism.name)
            if credential is None:
                continue
            key = (user, mechanism.name, credential, digest)
            if key in verified:
                return True
            salted = salted_password(mechanism, password, credential.salt, credential.iterations)
            derived = credential_from_salted(mechanism, credential.salt, salted, credential.iterations)
            if hmac.compare_digest(derived.stored_key, credential.stored_key):
                if len(verified) > 1024:
                    verified.clear()
                verified[key] = True
                return True
        return False
    return authenticate


def _cleanable_below(replicas, supervisor, topic: str, partition: int) -> int | None:
    """Compaction stops at the high watermark and, on the leader of an iceberg topic, at what its table has
    taken: records the table has not read yet are not compacted away (followers clean as usual)."""
    p = replicas.partitions.get((topic, partition))
    if p is None:
        return None
    hw = p.high_watermark
    if not p.is_leader or p.log.config.iceberg_mode == "disabled":
        return hw
    return min(hw, supervisor.table_offset(topic, partition) or 0)


def _registry_url(raw) -> str:
    """This broker's own schema registry, the default registry of the Iceberg value_schema_* modes."""
    first = raw.get("schema.registry.listeners", "").split(",")[0].strip()
    if not first:
        return ""
    return first.replace("://0.0.0.0:", "://127.0.0.1:").replace("://:", "://127.0.0.1:")
