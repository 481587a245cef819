"""The controller's leadership rules, shared by every control (a cluster of one runs them too).

Pure decisions over a ``PartitionView`` (partition states, assignments, live brokers); the view
writes a chosen state (``write_state``) the way its metadata store does: ZooKeeper behind the
controller-epoch fence, or in memory on a single node.
"""
import logging
from typing import Mapping, Protocol

from pybroker.controller.reassignment_plan import check_target
from pybroker.protocol.errors import (ELECTION_NOT_NEEDED, ELIGIBLE_LEADERS_NOT_AVAILABLE, INVALID_REPLICA_ASSIGNMENT,
                                      NO_REASSIGNMENT_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION)

log = logging.getLogger(__name__)

NO_LEADER = -1
PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types


class PartitionView(Protocol):
    """What the rules read of a controller, and the one write they ask of it."""
    states: dict         # (topic, partition) -> a state with .leader, .leader_epoch, .isr
    assignments: dict    # topic -> {partition: [replicas]}
    live: Mapping        # broker id -> registration
    shutting_down: set   # brokers in a controlled shutdown: never elected

    async def write_state(self, key, leader: int, isr: tuple, old) -> bool: ...


def elect_leader(replicas, isr, live, unclean: bool) -> tuple[int, tuple]:
    """(leader, isr) after ``live`` changed: Kafka's offline-partition election."""
    live_isr = tuple(r for r in isr if r in live)
    for r in replicas:
        if r in live_isr:
            return r, live_isr
    if unclean:
        for r in replicas:
            if r in live:
                log.warning("unclean leader election: %d was not in the ISR %s", r, list(isr))
                return r, (r,)
    return NO_LEADER, tuple(isr)  # offline; the last ISR stays, so one of them leads when back


def election_choice(view: PartitionView, election_type: int, key) -> tuple[int, int, tuple]:
    """(error, new leader, new ISR) of a preferred or unclean election of one partition."""
    s, replicas = view.states[key], view.assignments[key[0]][key[1]]
    eligible = set(view.live) - view.shutting_down
    if election_type == PREFERRED:
        preferred = replicas[0]
        if s.leader == preferred:
            return ELECTION_NOT_NEEDED, s.leader, s.isr
        if preferred in eligible and preferred in s.isr:
            return 0, preferred, s.isr
        return ELIGIBLE_LEADERS_NOT_AVAILABLE, s.leader, s.isr
    if s.leader in view.live:
        return ELECTION_NOT_NEEDED, s.leader, s.isr
    leader, isr = elect_leader(replicas, s.isr, eligible, unclean=True)
    if leader == NO_LEADER:
        return ELIGIBLE_LEADERS_NOT_AVAILABLE, s.leader, s.isr
    return 0, leader, isr


async def run_elections(view: PartitionView, election_type: int, keys) -> tuple[dict, list]:
    """ElectLeaders: ({(topic, partition): error}, the partitions whose leader changed). ``keys``
    None: every partition that needs one, and only those are reported, as Kafka does."""
    if keys is None:
        keys = [k for k in view.states if election_choice(view, election_type, k)[0] != ELECTION_NOT_NEEDED]
    results, changed = {}, []
    for key in keys:
        if key not in view.states or key[0] not in view.assignments:
            results[key] = UNKNOWN_TOPIC_OR_PARTITION
            continue
        error, leader, isr = election_choice(view, election_type, key)
        if error == 0:
            if await view.write_state(key, leader, isr, view.states[key]):
                changed.append(key)
            else:
                error = ELIGIBLE_LEADERS_NOT_AVAILABLE
        results[key] = error
    if changed:
        log.info("%s election moved the leaders of %d partition(s)",
                 "preferred" if election_type == PREFERRED else "unclean", len(changed))
    return results, changed


def replicas_items(view: PartitionView):
    for topic, assignment in view.assignments.items():
        for p, replicas in assignment.items():
            yield (topic, p), replicas


async def move_off(view: PartitionView, broker_id: int) -> list:
    """Controlled shutdown, Kafka's steps: each partition ``broker_id`` leads gets the next live ISR
    member as leader, and it leaves every ISR; a partition with no one else in sync stays with it.
    Returns the partitions whose state changed."""
    if broker_id not in view.shutting_down:
        log.info("controlled shutdown of broker %d", broker_id)
    view.shutting_down.add(broker_id)
    eligible = set(view.live) - view.shutting_down
    changed = []
    for key, replicas in list(replicas_items(view)):
        s = view.states.get(key)
        if s is None or broker_id not in s.isr or len(replicas) < 2:
            continue
        isr = tuple(r for r in s.isr if r != broker_id)
        if s.leader == broker_id:
            others = [r for r in replicas if r in isr and r in eligible]
            if not others:
                continue  # no one else in sync: it keeps leading, and says so
            leader = others[0]
        elif s.leader == NO_LEADER or not isr:
            continue
        else:
            leader = s.leader
        if await view.write_state(key, leader, isr, s):
            changed.append(key)
    return changed


def led_by(view: PartitionView, broker_id: int) -> list:
    return sorted(k for k, s in view.states.items() if s.leader == broker_id)


def reassignment_refusal(view: PartitionView, key, target, ongoing, deleting=()) -> tuple | None:
    """AlterPartitionReassignments' refusals of one partition, (error, message); None: go ahead."""
    if key[0] in deleting or key not in view.states or key[1] not in view.assignments.get(key[0], {}):
        return UNKNOWN_TOPIC_OR_PARTITION, f"no partition {key[1]} of topic {key[0]!r}"
    if target is None:
        if ongoing is None:
            return NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {key[0]}-{key[1]} is in progress"
        return None
    problem = check_target(target, view.live)
    return (INVALID_REPLICA_ASSIGNMENT, problem) if problem else None
