"""What an API handler gets: the broker's typed services, the request's header and its connection.

Built once per request, so it stays small: three slots, and each service read through the shared
``Services`` (pybroker/services.py). Hot handlers (Produce, Fetch) take ``ctx.services`` once.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.config import BrokerConfig
    from pybroker.controller.backend import MetadataBackend
    from pybroker.controller.control import Control
    from pybroker.controller.metadata_cache import MetadataCache
    from pybroker.controller.registration import Registration
    from pybroker.coordinator.coordinator import GroupCoordinator
    from pybroker.coordinator.offsets import OffsetStore
    from pybroker.log import LogManager
    from pybroker.metrics import BrokerMetrics
    from pybroker.quota.manager import ClientQuotaManager
    from pybroker.replica.fetch_sessions import FetchSessionCache
    from pybroker.replica.manager import ReplicaManager
    from pybroker.security.authorizer import AclAuthorizer
    from pybroker.security.sasl.authenticator import SaslAuthenticator
    from pybroker.security.session import Session
    from pybroker.services import Services
    from pybroker.transaction.coordinator import TransactionCoordinator


class RequestContext:
    __slots__ = ("services", "header", "connection")

    def __init__(self, services: Services, header, connection):
        self.services = services
        self.header = header          # the decoded RequestHeader
        self.connection = connection  # the pybroker.net connection (peer, id, server)

    @property
    def version(self) -> int:
        return self.header.request_api_version

    @property
    def session(self) -> Session:
        """The connection's session (listener, principal, client host)."""
        return self.connection.session

    # ---- the services handlers use --------------------------------------------------------

    @property
    def config(self) -> BrokerConfig:
        return self.services.config

    @property
    def node_id(self) -> int:
        return self.services.node_id

    @property
    def cluster_id(self) -> str | None:
        return self.services.cluster_id

    @property
    def metadata(self) -> MetadataCache:
        return self.services.metadata

    @property
    def replicas(self) -> ReplicaManager:
        return self.services.replicas

    @property
    def log_manager(self) -> LogManager:
        return self.services.log_manager

    @property
    def fetch_sessions(self) -> FetchSessionCache:
        return self.services.fetch_sessions

    @property
    def offsets(self) -> OffsetStore:
        return self.services.offsets

    @property
    def coordinator(self) -> GroupCoordinator:
        return self.services.coordinator

    @property
    def transactions(self) -> TransactionCoordinator:
        return self.services.transactions

    @property
    def control(self) -> Control:
        return self.services.control

    @property
    def backend(self) -> MetadataBackend:
        """The metadata backend's stores: ACLs, SCRAM credentials, quotas, dynamic configs."""
        return self.services.backend

    @property
    def authorizer(self) -> AclAuthorizer | None:
        return self.services.authorizer

    @property
    def sasl(self) -> SaslAuthenticator | None:
        return self.services.sasl

    @property
    def quotas(self) -> ClientQuotaManager | None:
        return self.services.quotas

    @property
    def metrics(self) -> BrokerMetrics | None:
        return self.services.metrics

    @property
    def registration(self) -> Registration:
        return self.services.registration
