"""The control interface: how the broker and every API handler ask for metadata changes and
cluster actions, whatever keeps the metadata.

Two implementations, built with the rest of the metadata backend by
``pybroker.controller.backend.build_metadata_backend``: ``LocalControl`` (a single node is a
cluster of one broker: its own controller, over the ``local`` metadata store) and ``ZkControl``
(a broker of a ZooKeeper cluster: topic admin through ZooKeeper, the controller role when it
wins it). Both run the same rules (``pybroker.controller.elections``), so ElectLeaders,
reassignments, controlled shutdown and ISR changes answer alike; only where state is kept differs.

Errors are raised as ``BrokerError`` subclasses carrying Kafka's code (topic admin), or returned
as codes where Kafka answers per partition (elections, reassignments). ``NOT_CONTROLLER`` (41)
instead of a result: this broker is not the controller now.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

if TYPE_CHECKING:
    from pybroker.config import BrokerConfig
    from pybroker.controller.metadata_cache import MetadataCache
    from pybroker.controller.metadata_store import TopicRecord
    from pybroker.controller.reassignment_plan import Reassignment
    from pybroker.controller.registration import Registration
    from pybroker.metrics import BrokerMetrics
    from pybroker.replica.manager import ReplicaManager
    from pybroker.replica.partition import Partition


@dataclass(frozen=True)
class ControlHost:
    """What a control needs of the broker it runs in (never the broker itself)."""
    config: BrokerConfig
    replicas: ReplicaManager
    metadata: MetadataCache
    registration: Registration  # this broker's registration in the cluster (epoch, recorded)
    advertised: tuple           # this broker's advertised listeners, ports bound
    # LeaderAndIsr applied to this broker: (controller_epoch, states, topic_ids, leaders) -> {key: error}
    apply_leader_and_isr: Callable[[int, list, dict, dict], dict]
    apply_log_config: Callable[[str], None]  # a topic's configs changed: its open logs take them
    # (available, why not): the cluster connection went away or came back (/health)
    set_available: Callable[[bool, str], None]
    metrics: BrokerMetrics | None = None


class Control(Protocol):
    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Before the listeners serve: the partitions this broker already knows open."""

    async def join(self) -> None:
        """The listeners serve: join the cluster (registration, controller election, first metadata)."""

    async def leave(self) -> bool:
        """Before stopping (a signal): a controlled shutdown; True when nothing is led here any more."""

    async def close(self) -> None:
        """Stop controlling and let go of the cluster (last; this broker's leaderships move now)."""

    # ---- the topic view -------------------------------------------------------------------

    @property
    def topics(self) -> Mapping[str, TopicRecord]:
        """Every topic of the cluster, as this broker knows it (records are snapshots)."""

    @property
    def assignments(self) -> Mapping[str, Mapping[int, list]]:
        """topic -> {partition: replica broker ids}."""

    # ---- topics, partitions, configs ------------------------------------------------------

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict | None = None, validate_only: bool = False,
                           assignment: dict | None = None) -> TopicRecord | None: ...

    async def auto_create_topic(self, name: str) -> TopicRecord | None:
        """Metadata's and the coordinators' auto-creation (clients retry until the leaders are known)."""

    async def delete_topic(self, name: str) -> None: ...

    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None: ...

    async def alter_topic_configs(self, name: str, changes: dict, replace_all: bool = False,
                                  validate_only: bool = False) -> None:
        """``changes``: Kafka name -> value (set) or None (back to the default)."""

    def topic_configs(self, name: str) -> list[tuple[str, str, bool]]:
        """(Kafka name, value, overridden) for every topic-level config of ``name`` (a read of the view)."""

    # ---- group configs (the GROUP resource: pybroker/coordinator/group_configs.py) ---------

    def group_configs(self, group_id: str) -> dict[str, str]:
        """The group's config overrides (Kafka name -> value as set); {} for any group without them."""

    async def alter_group_configs(self, group_id: str, changes: dict, validate_only: bool = False,
                                  replace_all: bool = False) -> None:
        """``changes``: Kafka name -> value (set) or None (back to the broker's default); checked as Kafka
        checks them (InvalidConfigError), then kept durably and seen by every broker."""

    # ---- cluster actions --------------------------------------------------------------------

    @property
    def is_active_controller(self) -> bool: ...

    def offline_partitions(self) -> int:
        """Partitions without a live leader (0 where this broker is not the active controller)."""

    async def elect_leaders(self, election_type: int, keys) -> dict | int:
        """ElectLeaders: {(topic, partition): error} (``keys`` None: every partition that needs one)."""

    async def alter_reassignments(self, changes: dict) -> dict | int:
        """{(topic, partition): target replicas or None (cancel)} -> {(topic, partition): (error, message)}."""

    async def list_reassignments(self, keys) -> dict[tuple, Reassignment] | int:
        """The moves in progress (``keys`` None: all)."""

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, list]:
        """ControlledShutdown from a broker: (error, partitions it still leads)."""

    def refuses_controller_request(self, broker_epoch: int | None) -> bool:
        """A LeaderAndIsr/UpdateMetadata/StopReplica sent to this broker's ``broker_epoch`` (None:
        the version carries none) comes from no controller of ours (STALE_BROKER_EPOCH)."""

    async def write_isr(self, partition: Partition, new_isr: tuple) -> bool:
        """A leader's ISR change (the replica manager's ISR writer); True once it holds."""

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before in this cluster (ids are reserved in blocks)."""

