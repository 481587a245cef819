"""What this broker knows of the cluster: live brokers, the controller, every partition's leader/ISR.

Filled by UpdateMetadata from the controller (a single node's controller fills it in-process, through
the same ``update`` call). Metadata and FindCoordinator answer from it; it is never the authority
on leadership, which belongs to the partitions this broker hosts.
"""
import asyncio
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PartitionState:
    """One partition as the controller decided it (LeaderAndIsr / UpdateMetadata partition state)."""
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple
    replicas: tuple
    controller_epoch: int = 0
    zk_version: int = 0  # the state znode's version: the leader's ISR writes are conditional on it
    offline: tuple = ()
    leader_recovery_state: int = 0  # KIP-704: 1 (RECOVERING) after an unclean election, else 0


@dataclass(frozen=True)
class BrokerEndpoint:
    id: int
    endpoints: dict  # listener name -> (host, port)
    rack: str | None = None

    def address(self, listener: str) -> tuple | None:
        return self.endpoints.get(listener)


@dataclass
class TopicMeta:
    name: str
    topic_id: object
    partitions: dict = field(default_factory=dict)  # index -> PartitionState


class MetadataCache:
    def __init__(self):
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.controller_id = -1
        self.topics: dict[str, TopicMeta] = {}
        self.topic_names: dict = {}  # topic id (uuid.UUID) -> name, for the APIs that name topics by id
        self.deletion_listeners: list = []  # called with the names of deleted topics (the group coordinator)
        self._waiters: list[asyncio.Future] = []

    def update(self, controller_id: int, brokers, states, topic_ids: dict, deleted=()) -> None:
        """Apply an UpdateMetadata: ``brokers`` replaces the live set when not None; ``states`` are
        PartitionStates to set; ``deleted`` names topics to forget."""
        self.controller_id = controller_id
        if brokers is not None:
            self.brokers = {b.id: b for b in brokers}
        for name in deleted:
            gone = self.topics.pop(name, None)
            if gone is not None:
                self.topic_names.pop(gone.topic_id, None)
        if deleted:
            for listener in self.deletion_listeners:
                listener(list(deleted))
        for s in states:
            meta = self.topics.get(s.topic)
            if meta is None:
                meta = self.topics[s.topic] = TopicMeta(s.topic, topic_ids.get(s.topic))
                self._index_id(meta)
            elif topic_ids.get(s.topic) is not None and topic_ids[s.topic] != meta.topic_id:
                self.topic_names.pop(meta.topic_id, None)
                meta.topic_id = topic_ids[s.topic]
                self._index_id(meta)
            meta.partitions[s.partition] = s
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def wait_for(self, condition, timeout_s: float) -> None:
        """Until ``condition()`` holds after some update; asyncio.TimeoutError after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not condition():
            fut = loop.create_future()
            self._waiters.append(fut)
            await asyncio.wait_for(fut, max(deadline - loop.time(), 0))

    def _index_id(self, meta: TopicMeta) -> None:
        if meta.topic_id and getattr(meta.topic_id, "int", 0):  # the zero id names no topic
            self.topic_names[meta.topic_id] = meta.name

    def topic_id(self, name: str):
        """The topic's id (uuid.UUID), or None when the topic or its id is unknown."""
        meta = self.topics.get(name)
        return meta.topic_id if meta is not None and getattr(meta.topic_id, "int", 0) else None

    def set_controller(self, controller_id: int) -> None:
        self.controller_id = controller_id

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        meta = self.topics.get(topic)
        return meta.partitions.get(partition) if meta else None

    def leader_endpoint(self, topic: str, partition: int) -> BrokerEndpoint | None:
        s = self.partition(topic, partition)
        return self.brokers.get(s.leader) if s is not None and s.leader >= 0 else None
