"""Topic administration on a cluster: any broker writes the request to ZooKeeper, the controller acts.

Each broker mirrors every topic (assignment and config overrides) from ZooKeeper watches, so
topic configs, DescribeConfigs and partition counts answer locally; a config change reaches the
open logs of every broker through its watch. CreateTopics/CreatePartitions/DeleteTopics answer
once this broker's metadata shows the result (bounded by the request timeout), as Kafka does.
"""
import asyncio
import json
import logging

from pybroker.controller.topic_rules import (INTERNAL_TOPICS, InternalTopicError, TopicDeletionDisabledError,
                                             check_assignment, check_new_topic, describe_topic_configs,
                                             new_overrides)
from pybroker.controller.metadata_store import (InvalidPartitionsError, TopicExistsError, TopicRecord,
                                                UnknownTopicError, random_uuid, uuid_to_base64)
from pybroker.controller import zk as zkpaths
from pybroker.controller.placement import assign_replicas
from pybroker.controller.zk_controller import topic_uuid
from pybroker.errors import BrokerError
from pybroker.log.config import LogConfig
from pybroker.protocol.errors import REQUEST_TIMED_OUT

log = logging.getLogger(__name__)

WAIT_S = 30.0


class RequestTimedOutError(BrokerError):
    code = REQUEST_TIMED_OUT


class ClusterTopics:
    def __init__(self, host, zk):
        self.host = host  # a ControlHost
        self.config = host.config
        self.zk = zk
        self.on_partitions_added = None  # the controller's "partitions" event, while it runs here
        self.topics: dict[str, TopicRecord] = {}
        self.assignments: dict[str, dict] = {}
        self._watched: set = set()
        self.loop = None

    # ---- mirror -----------------------------------------------------------------------------

    async def startup(self) -> None:
        self.loop = asyncio.get_running_loop()
        for name in await asyncio.to_thread(self.zk.topic_names):
            found = await asyncio.to_thread(self.zk.topic, name)
            configs = await asyncio.to_thread(self.zk.topic_configs, name)
            if found is not None:
                self._set_topic(name, found[0], found[1], configs)
        await asyncio.to_thread(self.zk.kazoo.ChildrenWatch, zkpaths.TOPICS, self._on_topics)

    def _on_topics(self, children) -> None:
        """kazoo thread: hand the topic list to the loop (a watch callback must not block on ZooKeeper)."""
        self.loop.call_soon_threadsafe(self._topics_listed, list(children))

    def _topics_listed(self, children) -> None:
        for name in children:
            if name not in self._watched:
                self._watched.add(name)
                self.loop.create_task(asyncio.to_thread(self._watch_topic, name))
        gone = self._watched - set(children)
        self._watched -= gone
        for name in gone:
            self._drop_topic(name)

    def _watch_topic(self, name: str) -> None:
        """Watch a topic's assignment and configs (a worker thread: the first read blocks)."""
        self.zk.kazoo.DataWatch(f"{zkpaths.TOPICS}/{name}", lambda data, stat: self._on_assignment(name, data))
        self.zk.kazoo.DataWatch(f"{zkpaths.CONFIG_TOPICS}/{name}", lambda data, stat: self._on_config(name, data))

    def _on_assignment(self, name, data):
        if data is None:
            self.loop.call_soon_threadsafe(self._drop_topic, name)
            return False  # stop watching a deleted topic
        try:
            o = json.loads(data)
            assignment = {int(p): [int(b) for b in r] for p, r in o["partitions"].items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignoring the unreadable assignment of topic %s", name)
            return None
        self.loop.call_soon_threadsafe(self._set_assignment, name, o.get("topic_id"), assignment)

    def _on_config(self, name, data):
        if data is None:
            return None  # configs may be written after the assignment watch starts
        configs = dict(json.loads(data).get("config", {}))
        self.loop.call_soon_threadsafe(self._set_configs, name, configs)

    def _set_topic(self, name, topic_id, assignment, configs) -> None:
        self.assignments[name] = assignment
        rf = len(next(iter(assignment.values()), ()))
        self.topics[name] = TopicRecord(name, topic_uuid(topic_id), len(assignment), rf, dict(configs))

    def _set_assignment(self, name, topic_id, assignment) -> None:
        record = self.topics.get(name)
        grew = record is not None and record.partitions and len(assignment) > record.partitions
        self._set_topic(name, topic_id, assignment, record.configs if record else {})
        if grew and self.on_partitions_added is not None:
            self.on_partitions_added()

    def _set_configs(self, name, configs) -> None:
        record = self.topics.get(name)
        if record is None:
            self.topics[name] = TopicRecord(name, topic_uuid(None), 0, 0, configs)
            return
        if record.configs != configs:
            record.configs = configs
            self.host.apply_log_config(name)

    def _drop_topic(self, name) -> None:
        self.topics.pop(name, None)
        self.assignments.pop(name, None)

    def log_config(self, record) -> LogConfig:
        return LogConfig.from_properties(record.configs, base=self.config.log)

    # ---- admin ------------------------------------------------------------------------------

    def _live(self) -> list:
        return sorted(self.host.metadata.brokers)

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict | None = None, validate_only: bool = False, assignment: dict | None = None,
                           wait: bool = True):
        live = self._live()
        if assignment:
            partitions, replication_factor = check_assignment(assignment, live)
        partitions, replication_factor, configs = check_new_topic(
            self.config, name, partitions, replication_factor, configs, live_brokers=len(live))
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if validate_only:
            return None
        assignment = assignment or assign_replicas(live, partitions, replication_factor)
        topic_id = random_uuid()
        if not await asyncio.to_thread(self.zk.create_topic, name, uuid_to_base64(topic_id), assignment, configs):
            raise TopicExistsError(f"topic {name!r} already exists")
        self._set_topic(name, uuid_to_base64(topic_id), assignment, configs)
        log.info("created topic %s with %d partitions, replication factor %d", name, partitions, replication_factor)
        if wait:
            await self._wait_for(lambda: self._has_leaders(name, partitions), f"topic {name} to have leaders")
        return self.topics[name]

    async def auto_create_topic(self, name: str):
        """Metadata's auto-creation: clients retry until the leaders are known."""
        return await self.create_topic(name, wait=False)

    def _has_leaders(self, name: str, partitions: int) -> bool:
        meta = self.host.metadata.topics.get(name)
        return meta is not None and all(p in meta.partitions and meta.partitions[p].leader >= 0
                                        for p in range(partitions))

    async def _wait_for(self, condition, what: str) -> None:
        try:
            await self.host.metadata.wait_for(condition, WAIT_S)
        except asyncio.TimeoutError:
            raise RequestTimedOutError(f"timed out waiting for {what}") from None

    async def delete_topic(self, name: str) -> None:
        if not self.config.delete_topic_enable:
            raise TopicDeletionDisabledError("topic deletion is disabled (delete.topic.enable=false)")
        if name in INTERNAL_TOPICS:
            raise InternalTopicError(f"internal topic {name!r} cannot be deleted")
        if name not in self.topics and await asyncio.to_thread(self.zk.topic, name) is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        await asyncio.to_thread(self.zk.mark_for_deletion, name)
        await self._wait_for(lambda: name not in self.host.metadata.topics, f"topic {name} to be deleted")

    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        found = await asyncio.to_thread(self.zk.topic_znode, name)
        if found is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        topic_id, assignment, version = found.topic_id, found.assignment, found.version
        if count <= len(assignment):
            raise InvalidPartitionsError(
                f"topic {name} has {len(assignment)} partitions; the new count {count} must be larger")
        live = self._live()
        rf = len(assignment[0]) - len(found.adding.get(0, ()))  # partition 0 may be mid-reassignment
        if rf > len(live):
            raise InvalidPartitionsError(f"replication factor {rf} is larger than the {len(live)} live brokers")
        if validate_only:
            return
        added = assign_replicas(live, count - len(assignment), rf, first_partition=len(assignment))
        if not await asyncio.to_thread(self.zk.set_assignment, name, topic_id, {**assignment, **added}, version,
                                       found.adding, found.removing):
            raise InvalidPartitionsError(f"topic {name} changed meanwhile; try again")
        await self._wait_for(lambda: self._has_leaders(name, count), f"new partitions of {name} to have leaders")

    async def alter_topic_configs(self, name: str, changes: dict, replace_all: bool = False,
                                  validate_only: bool = False) -> None:
        record = self.topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        new = new_overrides(record.configs, changes, replace_all, self.config.log)
        if validate_only or new == record.configs:
            return
        await asyncio.to_thread(self.zk.set_topic_configs, name, new)
        self._set_configs(name, new)
        log.info("altered configs of topic %s: %s", name, dict(sorted(new.items())))

    def topic_configs(self, name: str) -> list[tuple[str, str, bool]]:
        record = self.topics.get(name)
        if record is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return describe_topic_configs(record, self.config.log)
