"""The metadata backend of a broker, built as one set: local (a single node, files in its first
log dir) or ZooKeeper (a cluster). ``zookeeper.connect`` is read here and nowhere else.

The set: the metadata store and the control over it, dynamic broker configs, client quotas (the
manager and its durable store), the ACL store (when an authorizer is configured), the SCRAM
credential store and the producer-id allocator. Each piece is loaded when ``build_metadata_backend``
returns, so no request is ever answered without it.
"""
import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pybroker.controller.control import Control, ControlHost
from pybroker.errors import BrokerError
from pybroker.protocol.errors import UNKNOWN_SERVER_ERROR
from pybroker.quota.manager import ClientQuotaManager


class ZooKeeperUnavailableError(BrokerError):
    code = UNKNOWN_SERVER_ERROR  # a startup failure: no client ever sees it


@dataclass
class MetadataBackend:
    cluster_id: str
    store: Any              # LocalMetadataStore, or the ZkClient
    control: Control
    dynamic_configs: Any    # LocalDynamicBrokerConfigs or DynamicBrokerConfigs
    quotas: ClientQuotaManager
    quota_store: Any        # LocalQuotaStore or ZkQuotaStore
    acl_store: Any          # LocalAclStore or ZkAclStore; None without an authorizer
    credentials: Any        # LocalCredentialStore or ZkCredentialStore (SCRAM)
    producer_ids: Any       # ProducerIdManager or ZkProducerIds


async def build_metadata_backend(host: ControlHost, authorizer, apply_dynamic_configs: Callable[[dict], None],
                                 static_log) -> MetadataBackend:
    """``apply_dynamic_configs`` takes the effective dynamic broker configs (at load and on every
    change); ``static_log``: the log defaults of the static config."""
    cfg = host.config
    quotas = ClientQuotaManager(cfg.quota_window_num, cfg.quota_window_size_seconds)
    if cfg.zookeeper_connect:
        return await _zookeeper(host, authorizer, apply_dynamic_configs, static_log, quotas)
    return await _local(host, authorizer, apply_dynamic_configs, static_log, quotas)


async def _local(host, authorizer, apply_dynamic_configs, static_log, quotas) -> MetadataBackend:
    from pybroker.controller.broker_configs import LocalDynamicBrokerConfigs
    from pybroker.controller.local_control import LocalControl
    from pybroker.controller.metadata_store import LocalMetadataStore
    from pybroker.quota.store import LocalQuotaStore
    from pybroker.replica.producer_ids import ProducerIdManager
    from pybroker.security.acl_store import LocalAclStore
    from pybroker.security.credentials import LocalCredentialStore
    cfg = host.config
    log_dir = cfg.log_dirs[0]
    store = LocalMetadataStore(log_dir, cfg.node_id, cfg.cluster_id)
    producer_ids = ProducerIdManager(log_dir)
    control = LocalControl(host, store, producer_ids)
    quota_store = LocalQuotaStore(log_dir, quotas)
    quota_store.load()
    dynamic = LocalDynamicBrokerConfigs(cfg, apply_dynamic_configs, static_log, log_dir)
    dynamic.load()
    await dynamic.startup()
    backend = MetadataBackend(store.cluster_id, store, control, dynamic, quotas, quota_store,
                              LocalAclStore(log_dir, authorizer) if authorizer is not None else None,
                              LocalCredentialStore(log_dir), producer_ids)
    await _load_security(backend)
    return backend


async def _zookeeper(host, authorizer, apply_dynamic_configs, static_log, quotas) -> MetadataBackend:
    from pybroker.controller.broker_configs import DynamicBrokerConfigs
    from pybroker.ids import new_cluster_id
    from pybroker.controller.zk import ZkClient
    from pybroker.controller.zk_control import ZkControl
    from pybroker.quota.store import ZkQuotaStore
    from pybroker.replica.producer_ids import ZkProducerIds
    from pybroker.security.acl_store import ZkAclStore
    from pybroker.security.credentials import ZkCredentialStore
    cfg = host.config
    zk = ZkClient(cfg.zookeeper_connect, cfg.zookeeper_session_timeout_ms)
    try:
        await asyncio.to_thread(zk.start, cfg.zookeeper_session_timeout_ms / 1000)
    except Exception as exc:
        zk.stop()
        raise ZooKeeperUnavailableError(f"cannot reach ZooKeeper at {cfg.zookeeper_connect}: {exc}") from None
    cluster_id = await asyncio.to_thread(zk.get_or_create_cluster_id, cfg.cluster_id or new_cluster_id())
    if cfg.cluster_id and cfg.cluster_id != cluster_id:
        raise ZooKeeperUnavailableError(f"ZooKeeper holds cluster {cluster_id}, but cluster.id={cfg.cluster_id}")
    producer_ids = ZkProducerIds(zk, cfg.node_id)
    control = ZkControl(host, zk, producer_ids)
    await control.load()
    dynamic = DynamicBrokerConfigs(cfg, apply_dynamic_configs, static_log, zk)
    await dynamic.startup()
    quota_store = ZkQuotaStore(zk, quotas)
    await quota_store.startup()
    backend = MetadataBackend(cluster_id, zk, control, dynamic, quotas, quota_store,
                              ZkAclStore(zk, authorizer) if authorizer is not None else None,
                              ZkCredentialStore(zk), producer_ids)
    await _load_security(backend)
    return backend


async def _load_security(backend: MetadataBackend) -> None:
    """ACLs and SCRAM credentials load before the listeners serve."""
    if backend.acl_store is not None:
        await backend.acl_store.startup()
    await backend.credentials.startup()
