"""The typed services of one broker: what API handlers and core classes are built from.

The broker process (pybroker/broker.py) builds one ``Services`` and fills it as its parts start;
handlers see it through their request context (pybroker/api/context.py), never the ``Broker``. A
test builds the parts it needs in-process (a LogManager and a ReplicaManager in a tmp dir, a local
metadata store) and leaves the rest None.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pybroker.controller.registration import Registration

if TYPE_CHECKING:
    from pybroker.config import BrokerConfig
    from pybroker.controller.backend import MetadataBackend
    from pybroker.controller.control import Control
    from pybroker.controller.metadata_cache import MetadataCache
    from pybroker.coordinator.coordinator import GroupCoordinator
    from pybroker.coordinator.offsets import OffsetStore
    from pybroker.log import LogManager
    from pybroker.metrics import BrokerMetrics
    from pybroker.quota.manager import ClientQuotaManager
    from pybroker.replica.fetch_sessions import FetchSessionCache
    from pybroker.replica.manager import ReplicaManager
    from pybroker.security.authorizer import AclAuthorizer
    from pybroker.security.sasl.authenticator import SaslAuthenticator
    from pybroker.share.service import ShareService
    from pybroker.transaction.coordinator import TransactionCoordinator


@dataclasses.dataclass(eq=False)
class Services:
    config: BrokerConfig
    node_id: int
    metadata: MetadataCache
    fetch_sessions: FetchSessionCache
    metrics: BrokerMetrics | None = None  # None: metrics off
    log_manager: LogManager | None = None
    replicas: ReplicaManager | None = None
    offsets: OffsetStore | None = None
    coordinator: GroupCoordinator | None = None
    transactions: TransactionCoordinator | None = None
    share: ShareService | None = None  # share groups (KIP-932): pybroker/share
    control: Control | None = None  # metadata changes and cluster actions (local or ZooKeeper)
    backend: MetadataBackend | None = None  # the metadata backend: ACL, quota and credential stores, dynamic configs
    authorizer: AclAuthorizer | None = None  # None: authorization off
    sasl: SaslAuthenticator | None = None  # None: no SASL listener
    quotas: ClientQuotaManager | None = None  # client quotas
    cluster_id: str | None = None
    advertised: tuple = ()  # this broker's advertised endpoints (pybroker.config listeners), ports bound
    registration: Registration = dataclasses.field(default_factory=Registration)
