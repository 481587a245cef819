"""Kafka's ZooKeeper layout, read and written through kazoo (blocking calls: run them off the loop).

Paths and JSON bodies are those of Apache Kafka in ZooKeeper mode, so a ZooKeeper browser shows
what an operator of Kafka expects:

* ``/brokers/ids/<id>`` (ephemeral) -- endpoints; the broker epoch is the znode's czxid
* ``/brokers/topics/<t>`` -- ``{"version":3,"partitions":{"0":[1,2,3]},"topic_id":...}``
* ``/brokers/topics/<t>/partitions/<p>/state`` -- leader, leader_epoch, isr, controller_epoch;
  changed only conditionally on the znode version
* ``/controller`` (ephemeral), ``/controller_epoch`` -- every controller write is one multi that
  first checks the controller epoch znode's version, so a deposed controller writes nothing
* ``/brokers/topics/<t>`` also carries ``adding_replicas``/``removing_replicas`` of partitions being
  reassigned (their ``partitions`` entry is then the full set: target first, then the original)
* ``/config/brokers/<id>`` and ``/config/brokers/<default>`` -- dynamic broker configs
* ``/config/groups/<group>`` -- a group's config overrides (the GROUP resource, Kafka 4.x's per-group
  configs, which Kafka keeps only in KRaft), in the topic configs' shape: ``{"version":1,"config":{...}}``
* ``/config/topics/<t>``, ``/admin/delete_topics/<t>``, ``/cluster/id``,
  ``/latest_producer_id_block``, ``/isr_change_notification/isr_change_<seq>``
"""
import json
import logging
import time
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from pybroker.controller.zk_paths import (BROKER_IDS, CLUSTER_ID, CONFIG_BROKERS, CONFIG_GROUPS,  # noqa: F401
                                         CONFIG_TOPICS, CONTROLLER, CONTROLLER_EPOCH, DEFAULT_BROKER, DELETE_TOPICS,
                                         ISR_CHANGE_PREFIX, ISR_CHANGES, PRODUCER_ID_BLOCK, TOPICS)

log = logging.getLogger(__name__)

PERSISTENT = (BROKER_IDS, TOPICS, CONFIG_TOPICS, CONFIG_BROKERS, CONFIG_GROUPS, DELETE_TOPICS, ISR_CHANGES,
              "/cluster")


class ControllerMovedError(Exception):
    """A fenced write failed its controller-epoch check: this broker is no longer the controller."""


@dataclass(frozen=True)
class BrokerInfo:
    id: int
    endpoints: dict  # listener name -> (host, port)
    epoch: int       # czxid of the registration znode
    rack: str | None = None


@dataclass(frozen=True)
class LeaderIsr:
    leader: int
    leader_epoch: int
    isr: tuple
    controller_epoch: int
    version: int = -1  # the state znode's version (Kafka's zkVersion / partition epoch)


@dataclass(frozen=True)
class TopicZnode:
    """``/brokers/topics/<t>``: the assignment and the partitions being reassigned."""
    topic_id: str | None
    assignment: dict  # partition -> [replicas]
    adding: dict      # partition -> [replicas being added]
    removing: dict    # partition -> [replicas being removed]
    version: int


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def _dump(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def encode_state(s: LeaderIsr) -> bytes:
    return _dump({"controller_epoch": s.controller_epoch, "leader": s.leader, "version": 1,
                  "leader_epoch": s.leader_epoch, "isr": list(s.isr)})


def decode_state(data: bytes, version: int) -> LeaderIsr:
    o = json.loads(data)
    return LeaderIsr(int(o["leader"]), int(o["leader_epoch"]), tuple(int(b) for b in o["isr"]),
                     int(o["controller_epoch"]), version)


def ensure_chroot(hosts: str, chroot: str, timeout_s: float) -> None:
    """Create ``chroot`` (a path) on the ZooKeeper at ``hosts`` if it is missing."""
    root = KazooClient(hosts=hosts, timeout=timeout_s)
    root.start(timeout=timeout_s)
    try:
        root.ensure_path(chroot)
    finally:
        root.stop()
        root.close()


def parse_endpoint(text: str) -> tuple[str, str, int]:
    name, _, rest = text.partition("://")
    host, _, port = rest.rpartition(":")
    return name, host.strip("[]"), int(port)


class ZkClient:
    """One kazoo session of a broker: registration, topics, partition states, controller election."""

    def __init__(self, connect: str, session_timeout_ms: int):
        self.connect = connect
        hosts, slash, chroot = connect.partition("/")
        self.chroot = "/" + chroot.strip("/") if slash and chroot.strip("/") else ""
        self.hosts = hosts
        self.session_timeout_ms = session_timeout_ms
        self.kazoo = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000)

    def start(self, timeout_s: float) -> None:
        """Connect (raises on timeout) and create the chroot and Kafka's persistent paths."""
        if self.chroot:
            ensure_chroot(self.hosts, self.chroot, timeout_s)
        self.kazoo.start(timeout=timeout_s)
        for path in PERSISTENT:
            self.kazoo.ensure_path(path)

    def stop(self) -> None:
        try:
            self.kazoo.stop()
            self.kazoo.close()
        except Exception:  # closing a dead session must never fail a shutdown
            log.debug("closing the ZooKeeper client failed", exc_info=True)

    @property
    def session_id(self):
        return self.kazoo.client_id[0] if self.kazoo.client_id else None

    # ---- cluster id, brokers ----------------------------------------------------------------

    def get_or_create_cluster_id(self, proposed: str) -> str:
        try:
            self.kazoo.create(CLUSTER_ID, _dump({"version": "1", "id": proposed}), makepath=True)
            return proposed
        except NodeExistsError:
            return json.loads(self.kazoo.get(CLUSTER_ID)[0])["id"]

    def register_broker(self, broker_id: int, listeners, deadline_s: float) -> int:
        """Create the ephemeral registration (waiting out a previous session's node); the broker epoch."""
        body = _dump({"features": {}, "listener_security_protocol_map": {lst.name: "PLAINTEXT" for lst in listeners},
                      "endpoints": [f"{lst.name}://{lst.host}:{lst.port}" for lst in listeners],
                      "jmx_port": -1, "port": listeners[0].port, "host": listeners[0].host, "version": 5,
                      "timestamp": str(int(time.time() * 1000))})
        path = f"{BROKER_IDS}/{broker_id}"
        end = time.monotonic() + deadline_s
        while True:
            try:
                self.kazoo.create(path, body, ephemeral=True)
                break
            except NodeExistsError:
                try:
                    data, stat = self.kazoo.get(path)
                except NoNodeError:
                    continue  # the old session expired just now: create it again
                if stat.ephemeralOwner == self.session_id:
                    break
                if time.monotonic() > end:
                    raise RuntimeError(f"broker id {broker_id} is registered by another live session") from None
                time.sleep(0.2)  # the old session of a restarted broker has not expired yet
        return self.kazoo.exists(path).czxid

    def brokers(self) -> dict[int, BrokerInfo]:
        out = {}
        for child in self.kazoo.get_children(BROKER_IDS):
            try:
                data, stat = self.kazoo.get(f"{BROKER_IDS}/{child}")
            except NoNodeError:
                continue
            o = json.loads(data)
            endpoints = {}
            for e in o.get("endpoints", []):
                name, host, port = parse_endpoint(e)
                endpoints[name] = (host, port)
            out[int(child)] = BrokerInfo(int(child), endpoints, stat.czxid, o.get("rack"))
        return out

    # ---- topics -----------------------------------------------------------------------------

    def topic_names(self) -> list[str]:
        return self.kazoo.get_children(TOPICS)

    def topic(self, name: str):
        """(topic_id string, {partition: [replicas]}, znode version) or None."""
        found = self.topic_znode(name)
        return None if found is None else (found.topic_id, found.assignment, found.version)

    def topic_znode(self, name: str) -> TopicZnode | None:
        try:
            data, stat = self.kazoo.get(f"{TOPICS}/{name}")
        except NoNodeError:
            return None
        try:
            o = json.loads(data)

            def table(key):
                return {int(p): [int(b) for b in r] for p, r in (o.get(key) or {}).items()}
            return TopicZnode(o.get("topic_id"), table("partitions"), table("adding_replicas"),
                              table("removing_replicas"), stat.version)
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignoring the unreadable assignment of topic %s: %r", name, data[:200])
            return None

    def topic_configs(self, name: str) -> dict:
        try:
            return dict(json.loads(self.kazoo.get(f"{CONFIG_TOPICS}/{name}")[0]).get("config", {}))
        except NoNodeError:
            return {}

    @staticmethod
    def assignment_body(topic_id: str, assignment: dict, adding: dict | None = None,
                        removing: dict | None = None) -> bytes:
        def table(d):
            return {str(p): list(r) for p, r in sorted((d or {}).items()) if r}
        return _dump({"partitions": table(assignment), "topic_id": topic_id, "adding_replicas": table(adding),
                      "removing_replicas": table(removing), "version": 3})

    def create_topic(self, name: str, topic_id: str, assignment: dict, configs: dict) -> bool:
        """Configs first, then the assignment the controller watches; False when it exists."""
        tx = self.kazoo.transaction()
        tx.create(f"{CONFIG_TOPICS}/{name}", _dump({"version": 1, "config": configs}))
        tx.create(f"{TOPICS}/{name}", self.assignment_body(topic_id, assignment))
        results = tx.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            return False
        for r in results:
            if isinstance(r, Exception):
                raise r
        return True

    def set_assignment(self, name: str, topic_id: str, assignment: dict, version: int, adding: dict | None = None,
                       removing: dict | None = None) -> bool:
        try:
            self.kazoo.set(f"{TOPICS}/{name}", self.assignment_body(topic_id, assignment, adding, removing),
                           version=version)
            return True
        except BadVersionError:
            return False

    def set_topic_configs(self, name: str, configs: dict) -> None:
        self._set_configs(f"{CONFIG_TOPICS}/{name}", configs)

    def _set_configs(self, path: str, configs: dict) -> None:
        body = _dump({"version": 1, "config": configs})
        if self.kazoo.exists(path):
            self.kazoo.set(path, body)
        else:
            self.kazoo.create(path, body, makepath=True)

    def broker_configs(self, entity: str) -> dict:
        """Dynamic configs of broker ``entity`` (an id, or ``<default>``)."""
        try:
            return dict(json.loads(self.kazoo.get(f"{CONFIG_BROKERS}/{entity}")[0]).get("config", {}))
        except NoNodeError:
            return {}

    def set_broker_configs(self, entity: str, configs: dict) -> None:
        self._set_configs(f"{CONFIG_BROKERS}/{entity}", configs)

    def mark_for_deletion(self, name: str) -> None:
        try:
            self.kazoo.create(f"{DELETE_TOPICS}/{name}", b"")
        except NodeExistsError:
            pass

    def topics_to_delete(self) -> list[str]:
        return self.kazoo.get_children(DELETE_TOPICS)

    def partition_state(self, topic: str, partition: int) -> LeaderIsr | None:
        try:
            data, stat = self.kazoo.get(state_path(topic, partition))
            return decode_state(data, stat.version)
        except NoNodeError:
            return None
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring the unreadable state of %s-%d: %r", topic, partition, data[:200])
            return None

    def update_isr(self, topic: str, partition: int, state: LeaderIsr) -> int | None:
        """A leader's ISR change, conditional on the version it knows; the new version or None."""
        try:
            stat = self.kazoo.set(state_path(topic, partition), encode_state(state), version=state.version)
        except (BadVersionError, NoNodeError):
            return None
        try:
            self.kazoo.create(f"{ISR_CHANGES}/{ISR_CHANGE_PREFIX}",
                              _dump({"version": 1, "partitions": [{"topic": topic, "partition": partition}]}),
                              sequence=True)
        except Exception:  # the controller learns the ISR later anyway; the write itself is done
            log.warning("could not notify the controller of an ISR change of %s-%d", topic, partition)
        return stat.version

    # ---- controller -------------------------------------------------------------------------

    def controller_id(self) -> int | None:
        try:
            return int(json.loads(self.kazoo.get(CONTROLLER)[0])["brokerid"])
        except NoNodeError:
            return None

    def try_become_controller(self, broker_id: int) -> bool:
        try:
            self.kazoo.create(CONTROLLER, _dump({"version": 1, "brokerid": broker_id,
                                                 "timestamp": str(int(time.time() * 1000))}), ephemeral=True)
            return True
        except NodeExistsError:
            return False

    def increment_controller_epoch(self) -> tuple[int, int]:
        """(new epoch, its znode version), by compare-and-set; raises ControllerMovedError on a race."""
        try:
            data, stat = self.kazoo.get(CONTROLLER_EPOCH)
        except NoNodeError:
            try:
                self.kazoo.create(CONTROLLER_EPOCH, b"1")
                return 1, 0
            except NodeExistsError:
                raise ControllerMovedError("another controller created the epoch first") from None
        epoch = int(data) + 1
        try:
            new = self.kazoo.set(CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
        except BadVersionError:
            raise ControllerMovedError("another controller moved the epoch first") from None
        return epoch, new.version

    def fenced(self, epoch_version: int, ops) -> list:
        """Run ``ops`` (callables taking a kazoo transaction) in one multi behind the epoch check."""
        tx = self.kazoo.transaction()
        tx.check(CONTROLLER_EPOCH, epoch_version)
        for op in ops:
            op(tx)
        results = tx.commit()
        if results and isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise ControllerMovedError(f"controller epoch check failed: {results[0]!r}")
        return results[1:]  # exceptions in place of the ops when another op failed (nothing written)

    def isr_change_notifications(self) -> list[str]:
        return sorted(self.kazoo.get_children(ISR_CHANGES))

    def read_isr_change(self, child: str) -> list[tuple[str, int]]:
        try:
            o = json.loads(self.kazoo.get(f"{ISR_CHANGES}/{child}")[0])
        except NoNodeError:
            return []
        return [(p["topic"], int(p["partition"])) for p in o.get("partitions", [])]

    def delete_isr_change(self, child: str) -> None:
        try:
            self.kazoo.delete(f"{ISR_CHANGES}/{child}")
        except NoNodeError:
            pass

    # ---- producer ids -----------------------------------------------------------------------

    def allocate_producer_id_block(self, broker_id: int, size: int) -> tuple[int, int]:
        """[start, end] of a fresh block, unique cluster-wide (compare-and-set on the block znode)."""
        for _ in range(100):
            try:
                data, stat = self.kazoo.get(PRODUCER_ID_BLOCK)
                start = int(json.loads(data)["block_end"]) + 1 if data else 0
                version = stat.version
            except NoNodeError:
                start, version = 0, None
            body = _dump({"version": 1, "broker": broker_id, "block_start": str(start),
                          "block_end": str(start + size - 1)})
            try:
                if version is None:
                    self.kazoo.create(PRODUCER_ID_BLOCK, body)
                else:
                    self.kazoo.set(PRODUCER_ID_BLOCK, body, version=version)
                return start, start + size - 1
            except (BadVersionError, NodeExistsError):
                continue  # another broker took a block first
        raise RuntimeError("could not allocate a producer id block: too much contention")
