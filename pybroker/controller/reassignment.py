"""Partition reassignment at the controller (KIP-455), in Kafka's order of steps.

For a partition moving from its original replicas (ORS) to a target set (TRS):

1. the assignment becomes RS = TRS + ORS (target first) with the adding (TRS - ORS) and removing
   (ORS - TRS) replicas recorded in the topic's znode, so a new controller resumes the move;
2. a new leader epoch goes to every replica of RS: the adding ones open the log and follow;
3. once every target replica is in the ISR (the leaders' ISR-change notifications say so), the
   leader moves to a target replica if it is not one, the ISR and assignment shrink to TRS, and
   the removed replicas stop and delete their logs; then every broker hears the new state.

Cancelling reverts to ORS the same way: the adding replicas are stopped and deleted.
"""
import logging

from pybroker.controller.elections import reassignment_refusal
from pybroker.controller.reassignment_plan import Reassignment, from_znode
from pybroker.controller.zk import LeaderIsr, encode_state, state_path
from pybroker.protocol.errors import UNKNOWN_SERVER_ERROR

log = logging.getLogger(__name__)

NO_LEADER = -1


class Reassigner:
    """The controller's reassignment steps; runs on the controller's event loop only."""

    def __init__(self, controller):
        self.ctl = controller
        self.ongoing: dict = {}  # (topic, partition) -> Reassignment

    def load(self, name: str, znode) -> None:
        for p, replicas in znode.assignment.items():
            r = from_znode(replicas, znode.adding.get(p, ()), znode.removing.get(p, ()))
            if r is not None:
                self.ongoing[(name, p)] = r
            else:
                self.ongoing.pop((name, p), None)

    def forget_topic(self, name: str) -> None:
        for key in [k for k in self.ongoing if k[0] == name]:
            del self.ongoing[key]

    def adding_removing(self, key) -> tuple[tuple, tuple]:
        r = self.ongoing.get(key)
        return (r.adding, r.removing) if r else ((), ())

    # ---- requests ---------------------------------------------------------------------------

    async def alter(self, changes: dict) -> dict:
        """AlterPartitionReassignments: {(topic, partition): target list or None (cancel)} ->
        {(topic, partition): (error, message)}; moves start here and finish as replicas catch up."""
        results = {}
        for key, target in changes.items():
            try:
                results[key] = await self._alter_one(key, None if target is None else tuple(target))
            except Exception as exc:  # noqa: BLE001 -- one partition's failure must not stop the rest
                if type(exc).__name__ == "ControllerMovedError":
                    raise
                log.exception("reassignment of %s-%d failed", *key)
                results[key] = (UNKNOWN_SERVER_ERROR, str(exc))
        return results

    async def _alter_one(self, key, target):
        ctl = self.ctl
        ongoing = self.ongoing.get(key)
        refused = reassignment_refusal(ctl, key, target, ongoing, ctl.deleting)
        if refused:
            return refused
        if target is None:
            log.info("cancelling the reassignment of %s-%d: back to %s", *key, list(ongoing.original))
            await self._finish(key, ongoing.original, dropped=ongoing.adding)
            return 0, None
        current = tuple(ctl.assignments[key[0]][key[1]])
        original = ongoing.original if ongoing else current
        if ongoing is None and target == current:
            return 0, None  # already placed so
        new = Reassignment(target, original)
        dropped = tuple(r for r in current if r not in new.replicas)  # adding replicas of a replaced move
        log.info("reassigning %s-%d: %s -> %s (adding %s, removing %s)", *key, list(original), list(target),
                 list(new.adding), list(new.removing))
        await self._write_assignment(key, new.replicas, new)
        self.ongoing[key] = new
        eligible = set(ctl.live) - ctl.shutting_down

        def choose(s):  # a replaced move's adding replicas leave; one of them may even lead
            isr = tuple(r for r in s.isr if r not in dropped)
            if s.leader not in dropped:
                return s.leader, isr
            return next((r for r in new.replicas if r in isr and r in eligible), NO_LEADER), isr or s.isr
        await self._bump(key, choose)
        ctl.send_leader_and_isr([key], ctl.live)
        self._delete_replicas(key, dropped)
        ctl.send_update_metadata([key])
        await self.maybe_complete([key])
        return 0, None

    def list(self, keys=None) -> dict:
        """ListPartitionReassignments: {(topic, partition): Reassignment} (all when ``keys`` is None)."""
        if keys is None:
            return dict(self.ongoing)
        return {k: self.ongoing[k] for k in keys if k in self.ongoing}

    # ---- progress ---------------------------------------------------------------------------

    async def maybe_complete(self, keys=None) -> None:
        """Finish every reassignment (of ``keys``) whose target replicas are all in the ISR."""
        for key in list(self.ongoing if keys is None else keys):
            r, s = self.ongoing.get(key), self.ctl.states.get(key)
            if r is not None and s is not None and set(r.target) <= set(s.isr):
                log.info("reassignment of %s-%d: %s caught up", *key, list(r.target))
                await self._finish(key, r.target, dropped=r.removing)

    async def _finish(self, key, final: tuple, dropped: tuple) -> None:
        """Leader onto ``final`` if needed, ISR and assignment shrink to it, ``dropped`` deleted."""
        ctl = self.ctl
        eligible = set(ctl.live) - ctl.shutting_down

        def choose(s):
            isr = tuple(r for r in s.isr if r in final)
            if s.leader in final and s.leader in eligible:
                return s.leader, isr
            leader = next((r for r in final if r in isr and r in eligible), NO_LEADER)
            return leader, isr or s.isr
        self.ongoing.pop(key, None)
        ctl.assignments[key[0]][key[1]] = list(final)
        await self._bump(key, choose)
        await self._write_assignment(key, final, None)
        ctl.send_leader_and_isr([key], ctl.live)
        self._delete_replicas(key, dropped)
        ctl.send_update_metadata([key])
        log.info("reassignment of %s-%d done: replicas %s, leader %d", *key, list(final), ctl.states[key].leader)

    # ---- ZooKeeper and brokers --------------------------------------------------------------

    async def _write_assignment(self, key, replicas: tuple, moving: Reassignment | None) -> None:
        """The topic znode with this partition's replicas and the adding/removing sets of every move."""
        ctl = self.ctl
        topic = key[0]
        for _ in range(10):
            znode = await ctl.zk_call(ctl.zk.topic_znode, topic)
            if znode is None:
                raise RuntimeError(f"topic {topic} vanished")
            assignment = dict(znode.assignment)
            assignment[key[1]] = list(replicas)
            adding, removing = {}, {}
            for (t, p), r in self.ongoing.items():
                if t == topic and p != key[1]:
                    adding[p], removing[p] = r.adding, r.removing
            if moving is not None:
                adding[key[1]], removing[key[1]] = moving.adding, moving.removing
            body = ctl.zk.assignment_body(znode.topic_id, assignment, adding, removing)
            path = f"/brokers/topics/{topic}"
            results = await ctl.zk_call(ctl.zk.fenced, ctl.epoch_version,
                                        [lambda tx: tx.set_data(path, body, znode.version)])
            if not isinstance(results[0], Exception):
                ctl.assignments[topic][key[1]] = list(replicas)
                return
        raise RuntimeError(f"the assignment of topic {topic} kept changing")

    async def _bump(self, key, choose) -> None:
        """A new leader epoch with (leader, isr) = choose(current state), retried on a newer version."""
        ctl = self.ctl
        for _ in range(10):
            s = ctl.states[key]
            leader, isr = choose(s)
            new = LeaderIsr(leader, s.leader_epoch + 1, tuple(isr), ctl.epoch, s.version)
            results = await ctl.zk_call(ctl.zk.fenced, ctl.epoch_version,
                                        [lambda tx: tx.set_data(state_path(*key), encode_state(new), new.version)])
            if not isinstance(results[0], Exception):
                ctl.states[key] = LeaderIsr(new.leader, new.leader_epoch, new.isr, new.controller_epoch,
                                            results[0].version)
                return
            fresh = await ctl.zk_call(ctl.zk.partition_state, *key)  # a leader changed the ISR meanwhile
            if fresh is None:
                raise RuntimeError(f"{key[0]}-{key[1]} has no state")
            ctl.states[key] = fresh
        raise RuntimeError(f"the state of {key[0]}-{key[1]} kept changing")

    def _delete_replicas(self, key, brokers) -> None:
        """Removed replicas stop and delete their logs (a dead one keeps its files until it is back)."""
        for b in brokers:
            if b in self.ctl.live:
                self.ctl.send_stop_replica(b, [key], delete=True)
