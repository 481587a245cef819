"""The cluster controller (Kafka's ZooKeeper-mode KafkaController), a role any broker may win.

Election: the first broker to create the ephemeral ``/controller`` wins and bumps
``/controller_epoch``; every later write of its term is fenced by that znode's version, so a
deposed controller writes nothing. One event queue, one consumer: ZooKeeper watches (kazoo
threads) only enqueue; the loop task handles one event at a time.

Leader election: the first live ISR member in assignment order; never a replica outside the ISR
while unclean.leader.election.enable is false (then the partition stays offline, and its last ISR
is kept so the first of them to return leads). Each change bumps the leader epoch and is written
conditionally on the state znode's version, then sent as LeaderAndIsr to the replicas and as
UpdateMetadata to every live broker.
"""
import asyncio
import base64
import json
import logging
import uuid
from dataclasses import replace

from pybroker.controller import zk as zkpaths
from pybroker.controller.channel import ControllerChannel
from pybroker.controller.elections import (NO_LEADER, PREFERRED, elect_leader, election_choice, led_by, move_off,
                                           replicas_items, run_elections)
from pybroker.controller.metadata_cache import PartitionState
from pybroker.controller.reassignment import Reassigner
from pybroker.controller.zk import ControllerMovedError, LeaderIsr, encode_state, state_path
from pybroker.protocol.errors import BROKER_NOT_AVAILABLE, NOT_CONTROLLER, STALE_BROKER_EPOCH, UNKNOWN_SERVER_ERROR
from pybroker.protocol.messages import REQUESTS
from pybroker.security.inter_broker import inter_broker_security

log = logging.getLogger(__name__)

# our brokers' newest versions (a ZooKeeper controller picks them itself; brokers do not negotiate these)
LEADER_AND_ISR, LEADER_AND_ISR_VERSION = 4, 7
UPDATE_METADATA, UPDATE_METADATA_VERSION = 6, 8
STOP_REPLICA, STOP_REPLICA_VERSION = 5, 4
RECOVERED = 0  # KIP-704 leader recovery state: elections here never leave a partition recovering
LEADER_DURING_DELETE = -2


def topic_uuid(topic_id: str | None) -> uuid.UUID:
    if not topic_id:
        return uuid.UUID(int=0)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))


class ZkController:
    def __init__(self, host, zk):
        self.host = host  # a ControlHost
        self.zk = zk
        self.config = host.config
        self.node_id = host.config.node_id
        self.loop = None
        self.events: asyncio.Queue = asyncio.Queue()
        self.active = False
        self.epoch = 0
        self.epoch_version = -1
        self.live: dict = {}         # broker id -> BrokerInfo
        self.assignments: dict = {}  # topic -> {partition: [replicas]}
        self.topic_ids: dict = {}    # topic -> base64 id
        self.states: dict = {}       # (topic, partition) -> LeaderIsr
        self.deleting: set = set()
        self.shutting_down: set = set()  # brokers in a controlled shutdown: never elected
        self.reassigner = Reassigner(self)
        self.channel = None
        self._task = None
        self._rebalance_task = None

    # ---- plumbing ---------------------------------------------------------------------------

    def enqueue(self, event: str, *args) -> None:
        """Thread-safe: called from kazoo's watch threads."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, (event, args))

    async def zk_call(self, fn, *args):
        return await asyncio.to_thread(fn, *args)

    async def startup(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._task = self.loop.create_task(self._run())
        await asyncio.to_thread(self._watch)  # the first read of each watch blocks

    def _watch(self) -> None:
        kz = self.zk.kazoo
        kz.DataWatch(zkpaths.CONTROLLER, self._on_controller)
        kz.ChildrenWatch(zkpaths.BROKER_IDS, lambda children: self.enqueue("brokers"))
        kz.ChildrenWatch(zkpaths.TOPICS, lambda children: self.enqueue("topics"))
        kz.ChildrenWatch(zkpaths.DELETE_TOPICS, lambda children: self.enqueue("delete"))
        kz.ChildrenWatch(zkpaths.ISR_CHANGES, lambda children: self.enqueue("isr"))

    def _on_controller(self, data, stat) -> None:
        """kazoo thread: the controller changed; Metadata names it at once, then we may run."""
        try:
            current = int(json.loads(data)["brokerid"]) if data else -1
        except (ValueError, KeyError, TypeError):
            current = -1
        self.loop.call_soon_threadsafe(self.host.metadata.set_controller, current)
        self.enqueue("elect")

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self._resign()

    async def _run(self) -> None:
        handlers = {"elect": self._elect, "brokers": self._brokers_changed, "topics": self._topics_changed,
                    "delete": self._delete_topics, "isr": self._isr_changed, "resign": self._resign,
                    "partitions": self._topics_changed, "shutdown": self._controlled_shutdown,
                    "elect_leaders": self._elect_leaders, "rebalance": self._rebalance_leaders,
                    "reassign": self._reassign}
        while True:
            event, args = await self.events.get()
            if event != "elect" and event != "resign" and not self.active:
                if event in ("shutdown", "elect_leaders", "reassign"):
                    args[-1].set_result((NOT_CONTROLLER, []) if event == "shutdown" else NOT_CONTROLLER)
                continue
            try:
                await handlers[event](*args)
            except ControllerMovedError as exc:
                log.warning("no longer the controller: %s", exc)
                await self._resign()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller event %s failed", event)

    # ---- election ---------------------------------------------------------------------------

    async def _elect(self) -> None:
        current = await self.zk_call(self.zk.controller_id)
        if current == self.node_id and self.active:
            return
        if current is not None:
            if self.active:
                await self._resign()
            return
        if not await self.zk_call(self.zk.try_become_controller, self.node_id):
            return
        try:
            self.epoch, self.epoch_version = await self.zk_call(self.zk.increment_controller_epoch)
        except ControllerMovedError:
            return
        log.info("broker %d is the controller (epoch %d)", self.node_id, self.epoch)
        self.active = True
        self.channel = ControllerChannel(self.node_id, self.config.controller_socket_timeout_ms / 1000,
                                         inter_broker_security(self.config))
        await self._load_cluster()
        if self.config.auto_leader_rebalance_enable:
            self._rebalance_task = self.loop.create_task(self._rebalance_every_interval())

    async def _resign(self) -> None:
        if self.active:
            log.info("broker %d resigns as controller", self.node_id)
        self.active = False
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        if self.channel is not None:
            await self.channel.close()
            self.channel = None

    async def _load_cluster(self) -> None:
        """A new controller reads everything, elects where needed and tells every broker."""
        self.live = await self.zk_call(self.zk.brokers)
        self.channel.set_brokers(self._addresses())
        self.assignments, self.topic_ids, self.states = {}, {}, {}
        self.reassigner = Reassigner(self)
        for name in await self.zk_call(self.zk.topic_names):
            await self._read_topic(name)
        self.deleting = set()
        await self._initialize_new_partitions()
        changed = await self._elect_offline(set(self.live))
        self.send_leader_and_isr(list(self.states), self.live)
        self.send_update_metadata(list(self.states))
        log.info("controller loaded %d topics, %d partitions, brokers %s (%d leaders changed)",
                 len(self.assignments), len(self.states), sorted(self.live), len(changed))
        await self._delete_topics()
        await self._isr_changed()
        if self.reassigner.ongoing:
            log.info("resuming %d partition reassignment(s)", len(self.reassigner.ongoing))
            await self.reassigner.maybe_complete()

    async def _read_topic(self, name: str) -> None:
        found = await self._with_topic_id(name, await self.zk_call(self.zk.topic_znode, name))
        if found is None:
            return
        assignment = found.assignment
        self.assignments[name], self.topic_ids[name] = assignment, found.topic_id
        self.reassigner.load(name, found)
        for p in assignment:
            state = await self.zk_call(self.zk.partition_state, name, p)
            if state is not None:
                self.states[(name, p)] = state

    # ---- events -----------------------------------------------------------------------------

    async def _brokers_changed(self) -> None:
        now = await self.zk_call(self.zk.brokers)
        old = self.live
        dead = {b for b in old if b not in now or now[b].epoch != old[b].epoch}
        new = {b for b in now if b not in old or now[b].epoch != old[b].epoch}
        if not dead and not new:
            return
        log.info("brokers changed: live %s, gone %s, new %s", sorted(now), sorted(dead - set(now)), sorted(new))
        self.live = now
        self.shutting_down -= dead
        self.channel.set_brokers(self._addresses())
        live = set(now)
        changed = set()
        if dead:  # a bounced broker (new epoch) counts as gone first: it rejoins the ISR by catching up
            changed |= await self._remove_from_isr(dead)
        changed |= await self._elect_offline(live)
        self.send_update_metadata(list(self.states))
        if new:  # a (re)started broker learns every partition it hosts, as follower or leader
            mine = [k for k, r in self._replicas_items() if set(r) & new]
            self.send_leader_and_isr(mine, {b: now[b] for b in new})
        if changed:
            self.send_leader_and_isr(sorted(changed), self.live)
        await self.reassigner.maybe_complete()

    def _replicas_items(self):
        return replicas_items(self)

    async def _remove_from_isr(self, gone: set) -> set:
        """Gone brokers leave every ISR (a gone leader: a new one from the live ISR)."""
        changed = set()
        for key, replicas in list(self._replicas_items()):
            s = self.states.get(key)
            if s is None or not (set(s.isr) & gone or s.leader in gone):
                continue
            live = set(self.live) - gone - self.shutting_down
            if s.leader in gone or s.leader == NO_LEADER:
                leader, isr = elect_leader(replicas, s.isr, live, await self._unclean_allowed(key[0], s.isr, live))
            else:
                leader, isr = s.leader, tuple(r for r in s.isr if r not in gone)
            if await self.write_state(key, leader, isr, s):
                changed.add(key)
        return changed

    async def _elect_offline(self, live: set) -> set:
        changed = set()
        for key, replicas in list(self._replicas_items()):
            s = self.states.get(key)
            if s is None or s.leader in live:
                continue
            eligible = live - self.shutting_down
            leader, isr = elect_leader(replicas, s.isr, eligible, await self._unclean_allowed(key[0], s.isr, eligible))
            if leader == NO_LEADER and s.leader == NO_LEADER:
                continue
            if await self.write_state(key, leader, isr, s):
                changed.add(key)
        return changed

    async def _unclean_allowed(self, topic: str, isr, live) -> bool:
        """unclean.leader.election.enable: the topic's override, else the broker's; read from ZooKeeper
        only when no in-sync replica is live (the one case it decides)."""
        if set(isr) & set(live):
            return False
        value = (await self.zk_call(self.zk.topic_configs, topic)).get("unclean.leader.election.enable")
        if value is None:
            return self.config.unclean_leader_election_enable
        return str(value).strip().lower() == "true"

    async def write_state(self, key, leader: int, isr: tuple, old: LeaderIsr) -> bool:
        """A new leader epoch, written behind the controller-epoch check; retried on a newer version."""
        for _ in range(5):
            new = LeaderIsr(leader, old.leader_epoch + 1, tuple(isr), self.epoch, old.version)
            results = await self.zk_call(self.zk.fenced, self.epoch_version,
                                     [lambda tx, k=key, n=new: tx.set_data(state_path(*k), encode_state(n), n.version)])
            if not isinstance(results[0], Exception):
                self.states[key] = replace(new, version=results[0].version)
                if leader == NO_LEADER:
                    log.warning("%s-%d is offline: no live in-sync replica (ISR %s)", *key, list(isr))
                return True
            fresh = await self.zk_call(self.zk.partition_state, *key)  # a leader changed the ISR meanwhile
            if fresh is None:
                return False
            self.states[key] = old = fresh
            replicas = self.assignments[key[0]][key[1]]
            if leader not in fresh.isr and leader != NO_LEADER:
                leader, isr = elect_leader(replicas, fresh.isr, set(self.live),
                                           await self._unclean_allowed(key[0], fresh.isr, set(self.live)))
            else:
                isr = tuple(r for r in fresh.isr if r in self.live) or fresh.isr
        return False

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, list]:
        """ControlledShutdown: (error, partitions the broker still leads), through the event queue."""
        done = self.loop.create_future()
        self.events.put_nowait(("shutdown", (broker_id, broker_epoch, done)))
        return await done

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int, done) -> None:
        try:
            done.set_result(await self._move_off(broker_id, broker_epoch))
        finally:
            if not done.done():
                done.set_result((UNKNOWN_SERVER_ERROR, []))

    async def _move_off(self, broker_id: int, broker_epoch: int) -> tuple[int, list]:
        """Kafka's steps: each partition it leads gets the next live ISR member as leader, it leaves
        every ISR, and it stops its replicas (StopReplica without deletion) so it cannot rejoin."""
        info = self.live.get(broker_id)
        if info is None:
            return BROKER_NOT_AVAILABLE, []
        if info.epoch != broker_epoch:
            return STALE_BROKER_EPOCH, []
        changed = await move_off(self, broker_id)
        if changed:
            self.send_stop_replica(broker_id, changed, delete=False)
            self.send_leader_and_isr(changed, {b: i for b, i in self.live.items() if b != broker_id})
            self.send_update_metadata(changed)
        return 0, led_by(self, broker_id)

    async def elect_leaders(self, election_type: int, keys) -> dict | int:
        """ElectLeaders: {(topic, partition): error} (``keys`` None: every partition that needs one),
        or NOT_CONTROLLER."""
        done = self.loop.create_future()
        self.events.put_nowait(("elect_leaders", (election_type, keys, done)))
        return await done

    async def _elect_leaders(self, election_type: int, keys, done) -> None:
        try:
            done.set_result(await self._run_elections(election_type, keys))
        finally:
            if not done.done():
                done.set_result({k: UNKNOWN_SERVER_ERROR for k in keys or ()})

    def _election_choice(self, election_type: int, key) -> tuple[int, int, tuple]:
        return election_choice(self, election_type, key)

    async def _run_elections(self, election_type: int, keys) -> dict:
        results, changed = await run_elections(self, election_type, keys)
        if changed:
            self.send_leader_and_isr(changed, self.live)
            self.send_update_metadata(changed)
        return results

    async def alter_reassignments(self, changes: dict):
        """AlterPartitionReassignments: {(topic, partition): (error, message)}, or NOT_CONTROLLER."""
        done = self.loop.create_future()
        self.events.put_nowait(("reassign", (changes, done)))
        return await done

    async def _reassign(self, changes: dict, done) -> None:
        try:
            done.set_result(await self.reassigner.alter(changes))
        finally:
            if not done.done():
                done.set_result({k: (UNKNOWN_SERVER_ERROR, "the controller failed") for k in changes})

    async def _rebalance_every_interval(self) -> None:
        while True:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_seconds)
            self.events.put_nowait(("rebalance", ()))

    async def _rebalance_leaders(self) -> None:
        """auto.leader.rebalance.enable: a broker whose share of partitions led by someone else,
        among those it prefers, is above leader.imbalance.per.broker.percentage gets them back."""
        preferred_of: dict = {}
        for key, replicas in self._replicas_items():
            if key in self.states and replicas:
                preferred_of.setdefault(replicas[0], []).append(key)
        keys = []
        for broker_id, mine in preferred_of.items():
            elsewhere = [k for k in mine if self.states[k].leader != broker_id]
            if mine and len(elsewhere) * 100 / len(mine) > self.config.leader_imbalance_per_broker_percentage:
                keys += [k for k in elsewhere if self._election_choice(PREFERRED, k)[0] == 0]
        if keys:
            await self._run_elections(PREFERRED, keys)

    async def _topics_changed(self) -> None:
        names = set(await self.zk_call(self.zk.topic_names))
        for gone in set(self.assignments) - names:
            self._forget_topic(gone)
        for name in names:
            found = await self._with_topic_id(name, await self.zk_call(self.zk.topic_znode, name))
            if found is None:
                continue
            if found.assignment != self.assignments.get(name):
                self.assignments[name], self.topic_ids[name] = found.assignment, found.topic_id
                self.reassigner.load(name, found)
        await self._initialize_new_partitions()

    async def _with_topic_id(self, name: str, found):
        """A topic znode written without a topic id (older tools) gets one, as Kafka's controller gives it."""
        if found is None or found.topic_id:
            return found
        from pybroker.controller.metadata_store import random_uuid, uuid_to_base64
        topic_id = uuid_to_base64(random_uuid())
        if await self.zk_call(self.zk.set_assignment, name, topic_id, found.assignment, found.version,
                              found.adding, found.removing):
            log.info("assigned topic id %s to topic %s", topic_id, name)
        return await self.zk_call(self.zk.topic_znode, name)  # ours, or what another writer put there

    async def _initialize_new_partitions(self) -> None:
        """New topics and partitions: leader = first live replica, ISR = the live replicas."""
        created = []
        for key, replicas in list(self._replicas_items()):
            if key in self.states or key[0] in self.deleting:
                continue
            existing = await self.zk_call(self.zk.partition_state, *key)
            if existing is not None:
                self.states[key] = existing
                created.append(key)
                continue
            live = [r for r in replicas if r in self.live]
            state = LeaderIsr(live[0] if live else NO_LEADER, 0, tuple(live or replicas), self.epoch, 0)
            await self.zk_call(self.zk.kazoo.ensure_path, f"{zkpaths.TOPICS}/{key[0]}/partitions/{key[1]}")
            results = await self.zk_call(self.zk.fenced, self.epoch_version,
                                     [lambda tx, k=key, s=state: tx.create(state_path(*k), encode_state(s))])
            if isinstance(results[0], Exception):
                self.states[key] = await self.zk_call(self.zk.partition_state, *key)
            else:
                self.states[key] = state
            created.append(key)
        if created:
            self.send_leader_and_isr(created, self.live, is_new=True)
            self.send_update_metadata(created)

    async def _delete_topics(self) -> None:
        for name in await self.zk_call(self.zk.topics_to_delete):
            keys = [k for k in self.states if k[0] == name]
            self.deleting.add(name)
            by_broker = {}
            for key in keys:
                for r in self.assignments.get(name, {}).get(key[1], ()):
                    by_broker.setdefault(r, []).append(key)
            for bid, ks in by_broker.items():
                if bid in self.live:
                    self.send_stop_replica(bid, ks, delete=True)
            await self.zk_call(self._delete_topic_znodes, name)
            self._forget_topic(name)
            self.send_update_metadata([], deleted=[name])
            self.deleting.discard(name)
            log.info("deleted topic %s", name)

    def _delete_topic_znodes(self, name: str) -> None:
        kz = self.zk.kazoo
        paths = []

        def walk(path):
            for child in kz.get_children(path):
                walk(f"{path}/{child}")
            paths.append(path)
        if kz.exists(f"{zkpaths.TOPICS}/{name}"):
            walk(f"{zkpaths.TOPICS}/{name}")
        for extra in (f"{zkpaths.CONFIG_TOPICS}/{name}", f"{zkpaths.DELETE_TOPICS}/{name}"):
            if kz.exists(extra):
                paths.append(extra)
        results = self.zk.fenced(self.epoch_version, [lambda tx, p=p: tx.delete(p) for p in paths])
        if any(isinstance(r, Exception) for r in results):
            raise RuntimeError(f"could not delete the znodes of topic {name}: {results}")

    def _forget_topic(self, name: str) -> None:
        self.reassigner.forget_topic(name)
        self.assignments.pop(name, None)
        self.topic_ids.pop(name, None)
        for key in [k for k in self.states if k[0] == name]:
            del self.states[key]

    async def _isr_changed(self) -> None:
        children = await self.zk_call(self.zk.isr_change_notifications)
        keys = set()
        for child in children:
            keys.update(await self.zk_call(self.zk.read_isr_change, child))
        for key in keys:
            if key[0] in self.assignments:
                fresh = await self.zk_call(self.zk.partition_state, *key)
                if fresh is not None:
                    self.states[key] = fresh
        for child in children:
            await self.zk_call(self.zk.delete_isr_change, child)
        if keys:
            self.send_update_metadata([k for k in keys if k in self.states])
            await self.reassigner.maybe_complete([k for k in keys if k in self.reassigner.ongoing])

    # ---- requests to brokers ----------------------------------------------------------------

    def _addresses(self) -> dict:
        out = {}
        name = self.config.inter_broker_listener.name
        for bid, info in self.live.items():
            ep = info.endpoints.get(name) or next(iter(info.endpoints.values()), None)
            if ep is not None:
                out[bid] = ep
        return out

    def partition_state(self, key) -> PartitionState:
        s = self.states[key]
        replicas = tuple(self.assignments[key[0]][key[1]])
        return PartitionState(key[0], key[1], s.leader, s.leader_epoch, s.isr, replicas, s.controller_epoch,
                              s.version, tuple(r for r in replicas if r not in self.live))

    def send_leader_and_isr(self, keys, brokers, is_new: bool = False) -> None:
        req_cls = REQUESTS[LEADER_AND_ISR]
        addresses = self._addresses()
        per_broker: dict = {}
        for key in keys:
            if key not in self.states:
                continue
            for r in self.assignments[key[0]][key[1]]:
                if r in brokers:
                    per_broker.setdefault(r, []).append(key)
        for bid, ks in per_broker.items():
            topics: dict = {}
            leaders = set()
            for key in ks:
                s = self.partition_state(key)
                leaders.add(s.leader)
                topics.setdefault(key[0], []).append(req_cls.LeaderAndIsrPartitionState(
                    topic_name=key[0], partition_index=key[1], controller_epoch=self.epoch, leader=s.leader,
                    leader_epoch=s.leader_epoch, isr=list(s.isr), partition_epoch=s.zk_version,
                    replicas=list(s.replicas), adding_replicas=list(self.reassigner.adding_removing(key)[0]),
                    removing_replicas=list(self.reassigner.adding_removing(key)[1]), is_new=is_new,
                    leader_recovery_state=RECOVERED))
            req = req_cls(controller_id=self.node_id, is_k_raft_controller=False, controller_epoch=self.epoch,
                          broker_epoch=self.live[bid].epoch, type=0,
                          topic_states=[req_cls.LeaderAndIsrTopicState(topic_name=t, topic_id=topic_uuid(
                              self.topic_ids.get(t)), partition_states=ps) for t, ps in topics.items()],
                          live_leaders=[req_cls.LeaderAndIsrLiveLeader(broker_id=b, host_name=addresses[b][0],
                                                                       port=addresses[b][1])
                                        for b in sorted(leaders) if b in addresses])
            self.channel.send(bid, req, LEADER_AND_ISR_VERSION)

    def send_update_metadata(self, keys, deleted=()) -> None:
        req_cls = REQUESTS[UPDATE_METADATA]
        topics: dict = {}
        for key in keys:
            if key not in self.states:
                continue
            s = self.partition_state(key)
            topics.setdefault(key[0], []).append(req_cls.UpdateMetadataPartitionState(
                topic_name=key[0], partition_index=key[1], controller_epoch=self.epoch, leader=s.leader,
                leader_epoch=s.leader_epoch, isr=list(s.isr), zk_version=s.zk_version, replicas=list(s.replicas),
                offline_replicas=list(s.offline)))
        for name in deleted:
            topics[name] = [req_cls.UpdateMetadataPartitionState(
                topic_name=name, partition_index=0, controller_epoch=self.epoch, leader=LEADER_DURING_DELETE,
                leader_epoch=0, isr=[], zk_version=0, replicas=[], offline_replicas=[])]
        brokers = [req_cls.UpdateMetadataBroker(
            id=bid, endpoints=[req_cls.UpdateMetadataEndpoint(port=port, host=host, listener=name, security_protocol=0)
                               for name, (host, port) in info.endpoints.items()], rack=info.rack)
            for bid, info in sorted(self.live.items())]
        for bid, info in self.live.items():
            req = req_cls(controller_id=self.node_id, is_k_raft_controller=False, controller_epoch=self.epoch,
                          broker_epoch=info.epoch, topic_states=[req_cls.UpdateMetadataTopicState(
                              topic_name=t, topic_id=topic_uuid(self.topic_ids.get(t)), partition_states=ps)
                              for t, ps in topics.items()], live_brokers=brokers)
            self.channel.send(bid, req, UPDATE_METADATA_VERSION)

    def send_stop_replica(self, bid: int, keys, delete: bool) -> None:
        req_cls = REQUESTS[STOP_REPLICA]
        topics: dict = {}
        for t, p in keys:
            topics.setdefault(t, []).append(req_cls.StopReplicaPartitionState(
                partition_index=p, leader_epoch=-2 if delete else self.states[(t, p)].leader_epoch,
                delete_partition=delete))
        req = req_cls(controller_id=self.node_id, is_k_raft_controller=False, controller_epoch=self.epoch,
                      broker_epoch=self.live[bid].epoch,
                      topic_states=[req_cls.StopReplicaTopicState(topic_name=t, partition_states=ps)
                                    for t, ps in topics.items()])
        self.channel.send(bid, req, STOP_REPLICA_VERSION)
