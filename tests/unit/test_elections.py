"""The controller's leadership rules (pybroker/controller/elections.py) over an in-memory partition
view of three brokers: the same rules the ZooKeeper controller and a single node run."""
import asyncio
from dataclasses import dataclass, replace

from pybroker.controller.elections import (ELECTION_NOT_NEEDED, ELIGIBLE_LEADERS_NOT_AVAILABLE, NO_LEADER,
                                           PREFERRED, UNCLEAN, elect_leader, move_off, reassignment_refusal,
                                           run_elections)
from pybroker.protocol.errors import INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS


@dataclass(frozen=True)
class State:
    leader: int
    leader_epoch: int
    isr: tuple


class View:
    """Partition states kept in memory; every write bumps the leader epoch, as a controller's does."""

    def __init__(self, live, assignments, states):
        self.live = {b: None for b in live}
        self.assignments = assignments
        self.states = states
        self.shutting_down = set()
        self.writes = []

    async def write_state(self, key, leader, isr, old) -> bool:
        self.states[key] = replace(old, leader=leader, leader_epoch=old.leader_epoch + 1, isr=tuple(isr))
        self.writes.append(key)
        return True


def three_brokers(**states) -> View:
    assignments = {"t": {0: [1, 2, 3], 1: [2, 3, 1]}}
    base = {("t", 0): State(1, 0, (1, 2, 3)), ("t", 1): State(2, 0, (2, 3, 1))}
    return View({1, 2, 3}, assignments, {**base, **{("t", int(k[1:])): v for k, v in states.items()}})


def test_offline_election_prefers_the_isr_and_unclean_only_when_allowed():
    assert elect_leader([1, 2, 3], (2, 3), {2, 3}, unclean=False) == (2, (2, 3))
    assert elect_leader([1, 2, 3], (1,), {2, 3}, unclean=False) == (NO_LEADER, (1,))  # the last ISR stays
    assert elect_leader([1, 2, 3], (1,), {2, 3}, unclean=True) == (2, (2,))


def test_preferred_election_moves_the_leader_back_only_when_in_sync():
    view = three_brokers(p0=State(2, 4, (1, 2, 3)))
    results, changed = asyncio.run(run_elections(view, PREFERRED, None))
    assert results == {("t", 0): 0} and changed == [("t", 0)]
    assert view.states[("t", 0)] == State(1, 5, (1, 2, 3))
    view = three_brokers(p0=State(2, 4, (2, 3)))  # the preferred replica is out of sync
    results, _ = asyncio.run(run_elections(view, PREFERRED, [("t", 0), ("t", 1), ("t", 9)]))
    assert results == {("t", 0): ELIGIBLE_LEADERS_NOT_AVAILABLE, ("t", 1): ELECTION_NOT_NEEDED, ("t", 9): 3}
    assert view.writes == []


def test_unclean_election_only_for_a_partition_without_a_live_leader():
    view = three_brokers(p0=State(NO_LEADER, 2, (1,)))
    del view.live[1]
    results, _ = asyncio.run(run_elections(view, UNCLEAN, [("t", 0), ("t", 1)]))
    assert results == {("t", 0): 0, ("t", 1): ELECTION_NOT_NEEDED}
    assert view.states[("t", 0)] == State(2, 3, (2,))


def test_controlled_shutdown_moves_leadership_to_the_next_in_sync_replica():
    view = three_brokers()
    changed = asyncio.run(move_off(view, 1))
    assert changed == [("t", 0), ("t", 1)] and 1 in view.shutting_down
    assert view.states[("t", 0)] == State(2, 1, (2, 3)) and view.states[("t", 1)] == State(2, 1, (2, 3))
    view = View({1}, {"solo": {0: [1]}}, {("solo", 0): State(1, 0, (1,))})  # a cluster of one
    assert asyncio.run(move_off(view, 1)) == [] and view.states[("solo", 0)].leader == 1


def test_reassignment_refusals():
    view = three_brokers()
    assert reassignment_refusal(view, ("t", 0), (3, 2), None) is None
    assert reassignment_refusal(view, ("t", 7), (3, 2), None)[0] == 3
    assert reassignment_refusal(view, ("t", 0), None, None)[0] == NO_REASSIGNMENT_IN_PROGRESS
    assert reassignment_refusal(view, ("t", 0), (3, 4), None) == (
        INVALID_REPLICA_ASSIGNMENT, "replica assignment has brokers that are not alive: [4]")
    assert reassignment_refusal(view, ("t", 0), (), None)[0] == INVALID_REPLICA_ASSIGNMENT
    assert reassignment_refusal(view, ("t", 0), (2, 3), None, deleting={"t"})[0] == 3
