"""The classic group coordinator's state machine in-process (pybroker/coordinator/coordinator.py, group.py):
JoinGroup, SyncGroup, Heartbeat and LeaveGroup called on the GroupCoordinator built from a broker's
services, on an event loop whose clock the test moves (session and rebalance timeouts take no wall time).
(Against a real broker and clients: tests/broker/test_groups.py, test_group_versions.py.)
"""
import asyncio
from collections import namedtuple

from pybroker.coordinator.coordinator import CommitEntry
from pybroker.coordinator.group import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from pybroker.protocol.errors import (FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
                                      INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS,
                                      UNKNOWN_MEMBER_ID)
from tests.inprocess import advance, run_with_movable_clock, start_services, stop_services

GROUP = "g"
SESSION_MS, REBALANCE_MS = 6000, 10000
Protocol = namedtuple("Protocol", "name metadata")
Assignment = namedtuple("Assignment", "member_id assignment")
RANGE = [Protocol("range", b"range-subscription")]


async def start(tmp_path, overrides=None):
    services = await start_services(tmp_path, overrides)
    await services.offsets.ensure_topic()  # FindCoordinator's first step: the group is coordinated here
    await services.control.create_topic("orders", 2, 1)
    return services


class Member:
    """A classic group member as a client drives it (JoinGroup v4+: it learns its member id first)."""

    def __init__(self, coordinator, instance_id=None, protocols=RANGE, session_ms=SESSION_MS):
        self.coordinator = coordinator
        self.instance_id = instance_id
        self.protocols = protocols
        self.session_ms = session_ms
        self.member_id = ""
        self.generation = -1
        self.assignment = None
        self.id_required = False  # it was answered MEMBER_ID_REQUIRED (dynamic members only)

    def send_join(self, skip_assignment: bool = False):
        """JoinGroup: an answer, or a Future of it while the rebalance waits for the other members."""
        return self.coordinator.join(GROUP, self.member_id, self.instance_id, "client", "/127.0.0.1",
                                     self.session_ms, REBALANCE_MS, "consumer", self.protocols, True, skip_assignment)

    def start_join(self):
        """A first JoinGroup, sent again with the member id when MEMBER_ID_REQUIRED hands one out."""
        result = self.send_join()
        if not isinstance(result, asyncio.Future) and result.error == MEMBER_ID_REQUIRED:
            self.id_required, self.member_id = True, result.member_id
            result = self.send_join()
        return result

    async def took(self, pending):
        result = await answer(pending)
        if result.error == 0:
            self.member_id, self.generation = result.member_id, result.generation
        return result

    def send_sync(self, assignments=()):
        return self.coordinator.sync(GROUP, self.generation, self.member_id, self.instance_id, "consumer", "range",
                                     [Assignment(m.member_id, a) for m, a in assignments])

    def heartbeat(self) -> int:
        return self.coordinator.heartbeat(GROUP, self.member_id, self.instance_id, self.generation)

    def leave(self) -> int:
        error, [member_error] = self.coordinator.leave(GROUP, [(self.member_id, self.instance_id)])
        return error or member_error


async def answer(result):
    """A parked JoinGroup/SyncGroup's answer (bounded: a rebalance that never completes fails the test)."""
    if isinstance(result, asyncio.Future):
        return await asyncio.wait_for(result, 5)
    return result


class GroupInvariants:
    """Generations only grow; a group with members has one of them as leader, one without is Empty
    (or about to be); each static id maps to the member that holds it."""

    def __init__(self):
        self.generation = 0

    def check(self, group) -> None:
        assert group.generation >= self.generation
        self.generation = group.generation
        if group.members:
            assert group.leader in group.members
        else:
            assert group.state in (EMPTY, PREPARING_REBALANCE)
        for instance_id, member_id in group.static.items():
            assert group.members[member_id].group_instance_id == instance_id


async def stable_group(coordinator, *members):
    """The members join as clients do (each newcomer starts a rebalance, the others rejoin), then the
    leader (the first) assigns each its member id and all sync: generation len(members), Stable."""
    for i, newcomer in enumerate(members):
        pending = [newcomer.start_join()] + [m.send_join() for m in members[:i]]
        for m, p in zip((newcomer, *members[:i]), pending):
            assert (await m.took(p)).error == 0
    syncs = [m.send_sync([(x, x.member_id.encode()) for x in members] if i == 0 else ())
             for i, m in enumerate(members)]
    for m, s in zip(members, syncs):
        result = await answer(s)
        assert (result.error, result.assignment) == (0, m.member_id.encode())  # its own, as the leader gave
        m.assignment = result.assignment
    group = coordinator.describe(GROUP)
    assert (group.state, group.generation, group.leader) == (STABLE, len(members), members[0].member_id)
    return group


def test_join_sync_and_heartbeat_make_a_stable_generation(tmp_path):
    async def go():
        services = await start(tmp_path)
        coordinator, inv = services.coordinator, GroupInvariants()
        a = Member(coordinator)
        first = a.send_join()
        assert first.error == MEMBER_ID_REQUIRED and first.member_id  # v4+: the id first, no member yet
        group = coordinator.describe(GROUP)
        assert not group.members and first.member_id in group.pending
        a.member_id = first.member_id
        joined = await a.took(a.send_join())
        assert (joined.error, joined.generation, joined.leader, joined.protocol) == (0, 1, a.member_id, "range")
        assert joined.members == [(a.member_id, None, b"range-subscription")]  # the leader learns the members
        assert group.state == COMPLETING_REBALANCE
        inv.check(group)
        assert await coordinator.commit(GROUP, 1, a.member_id, None, [CommitEntry("orders", 0, 5)]) == \
            (REBALANCE_IN_PROGRESS, {("orders", 0): REBALANCE_IN_PROGRESS})  # no assignment yet
        synced = await answer(a.send_sync([(a, b"all of it")]))
        assert (synced.error, synced.assignment, group.state) == (0, b"all of it", STABLE)
        assert a.heartbeat() == 0
        assert await coordinator.commit(GROUP, 1, a.member_id, None, [CommitEntry("orders", 0, 5)]) == \
            (0, {("orders", 0): 0})
        # what a member of another generation, an unknown member or another protocol gets
        assert coordinator.heartbeat(GROUP, a.member_id, None, 0) == ILLEGAL_GENERATION
        assert (await answer(coordinator.sync(GROUP, 0, a.member_id, None, "consumer", "range", []))).error == \
            ILLEGAL_GENERATION
        assert coordinator.heartbeat(GROUP, "nobody", None, 1) == UNKNOWN_MEMBER_ID
        stranger = Member(coordinator)
        stranger.member_id = "nobody"
        assert stranger.send_join().error == UNKNOWN_MEMBER_ID
        assert Member(coordinator, protocols=[Protocol("roundrobin", b"")]).send_join().error == \
            INCONSISTENT_GROUP_PROTOCOL
        assert Member(coordinator, session_ms=1000).send_join().error == INVALID_SESSION_TIMEOUT
        assert group.state == STABLE and list(group.members) == [a.member_id]
        inv.check(group)
        await stop_services(services)
    run_with_movable_clock(go())


def test_a_new_member_starts_a_rebalance_and_the_next_generation_has_everyone(tmp_path):
    async def go():
        services = await start(tmp_path)
        coordinator, inv = services.coordinator, GroupInvariants()
        a, b = Member(coordinator), Member(coordinator)
        group = await stable_group(coordinator, a)
        inv.check(group)
        b.member_id = b.send_join().member_id
        b_joined = b.send_join()
        assert isinstance(b_joined, asyncio.Future) and not b_joined.done()  # parked until a rejoins
        assert group.state == PREPARING_REBALANCE and a.heartbeat() == REBALANCE_IN_PROGRESS
        a_joined = await a.took(a.send_join())
        b_joined = await b.took(b_joined)
        assert a_joined.generation == b_joined.generation == 2 and group.state == COMPLETING_REBALANCE
        assert a_joined.leader == b_joined.leader == a.member_id  # the leader stays
        assert {m for m, _, _ in a_joined.members} == {a.member_id, b.member_id} and b_joined.members == []
        inv.check(group)
        b_sync = b.send_sync()
        assert isinstance(b_sync, asyncio.Future) and not b_sync.done()  # waits for the leader's assignment
        a_sync = a.send_sync([(a, b"p0"), (b, b"p1")])
        assert ((await answer(a_sync)).assignment, (await answer(b_sync)).assignment) == (b"p0", b"p1")
        assert group.state == STABLE and a.heartbeat() == b.heartbeat() == 0
        old = coordinator.sync(GROUP, 1, a.member_id, None, "consumer", "range", [])
        assert (await answer(old)).error == ILLEGAL_GENERATION
        inv.check(group)
        await stop_services(services)
    run_with_movable_clock(go())


def test_a_dynamic_member_that_misses_the_rebalance_is_dropped(tmp_path):
    async def go():
        services = await start(tmp_path)
        coordinator, inv = services.coordinator, GroupInvariants()
        a, b, c = Member(coordinator), Member(coordinator), Member(coordinator)
        group = await stable_group(coordinator, a, b)
        c.member_id = c.send_join().member_id
        c_joined = c.send_join()  # a rebalance starts
        a_joined = a.send_join()
        for _ in range(2):  # b keeps its session alive with heartbeats, but never rejoins
            await advance(4)
            assert b.heartbeat() == REBALANCE_IN_PROGRESS
            assert not a_joined.done() and not c_joined.done()  # parked members are kept alive meanwhile
        await advance(REBALANCE_MS / 1000 - 8 + 0.1)  # the rebalance timeout ends the join phase
        assert (await a.took(a_joined)).generation == (await c.took(c_joined)).generation == 3
        assert set(group.members) == {a.member_id, c.member_id}
        assert b.heartbeat() == UNKNOWN_MEMBER_ID
        inv.check(group)
        await stop_services(services)
    run_with_movable_clock(go())


def test_the_session_timeout_removes_a_silent_member_and_the_group_rebalances(tmp_path):
    async def go():
        services = await start(tmp_path)
        coordinator, inv = services.coordinator, GroupInvariants()
        a, b = Member(coordinator), Member(coordinator)
        group = await stable_group(coordinator, a, b)
        await advance(4)
        assert a.heartbeat() == 0
        await advance(SESSION_MS / 1000 - 4 - 0.1)
        assert set(group.members) == {a.member_id, b.member_id}  # b: silent, but not for a whole session yet
        await advance(0.2)
        assert set(group.members) == {a.member_id} and group.state == PREPARING_REBALANCE
        assert a.heartbeat() == REBALANCE_IN_PROGRESS and b.heartbeat() == UNKNOWN_MEMBER_ID
        assert (await a.took(a.send_join())).generation == 3  # everyone left has rejoined: no wait
        inv.check(group)
        await answer(a.send_sync([(a, b"all")]))
        await advance(SESSION_MS / 1000 + 0.1)  # the last member goes silent too: the group empties
        assert (group.members, group.state, group.generation) == ({}, EMPTY, 4)
        inv.check(group)
        await stop_services(services)
    run_with_movable_clock(go())


def test_leaving_members_start_a_rebalance_and_the_last_one_empties_the_group(tmp_path):
    async def go():
        services = await start(tmp_path)
        coordinator, inv = services.coordinator, GroupInvariants()
        a, b = Member(coordinator), Member(coordinator)
        group = await stable_group(coordinator, a, b)
        pending = Member(coordinator)
        pending.member_id = pending.send_join().member_id  # handed an id, never joined with it
        assert pending.leave() == 0 and pending.member_id not in group.pending
        assert b.leave() == 0 and b.leave() == UNKNOWN_MEMBER_ID
        assert group.state == PREPARING_REBALANCE
        assert (await a.took(a.send_join())).generation == 3
        await answer(a.send_sync([(a, b"all")]))
        assert a.leave() == 0
        assert (group.members, group.state, group.generation) == ({}, EMPTY, 4)
        inv.check(group)
        await stop_services(services)
    run_with_movable_clock(go())


def test_static_members_come_back_without_a_rebalance_and_fence_their_old_id(tmp_path):
    async def go():
        services = await start(tmp_path)
        coordinator, inv = services.coordinator, GroupInvariants()
        leader, follower = Member(coordinator, "i-1"), Member(coordinator, "i-2")
        group = await stable_group(coordinator, leader, follower)
        assert not leader.id_required and not follower.id_required  # static members join at once
        generation, old_id = group.generation, follower.member_id
        # the follower restarts: same instance id, no member id; it takes over with its old assignment
        follower.member_id = ""
        back = await follower.took(follower.send_join())
        assert (back.error, back.generation, group.state) == (0, generation, STABLE) and follower.member_id != old_id
        assert group.static == {"i-1": leader.member_id, "i-2": follower.member_id}
        assert coordinator.heartbeat(GROUP, old_id, "i-2", generation) == FENCED_INSTANCE_ID  # the zombie
        assert (await answer(follower.send_sync())).assignment == old_id.encode()
        # the leader restarts too: with skip_assignment (v9+) it learns the members and keeps the assignment
        leader.member_id = ""
        back = await leader.took(leader.send_join(skip_assignment=True))
        assert back.skip_assignment and back.leader == leader.member_id and len(back.members) == 2
        assert (group.state, group.generation) == (STABLE, generation)
        inv.check(group)
        # a static member that misses a rebalance stays a member (only its session timeout removes it)
        newcomer = Member(coordinator)
        newcomer.member_id = newcomer.send_join().member_id
        joins = [newcomer.send_join(), leader.send_join()]
        for _ in range(2):
            await advance(4)
            follower.heartbeat()
        await advance(REBALANCE_MS / 1000 - 8 + 0.1)
        assert [(await answer(j)).generation for j in joins] == [generation + 1] * 2
        assert follower.member_id in group.members and len(group.members) == 3
        wrong = coordinator.leave(GROUP, [("someone-else", "i-2")])
        assert wrong == (0, [FENCED_INSTANCE_ID])
        inv.check(group)
        await stop_services(services)
    run_with_movable_clock(go())


def test_the_initial_rebalance_delay_waits_for_more_members_to_arrive(tmp_path):
    async def go():
        services = await start(tmp_path, {"group.initial.rebalance.delay.ms": 3000})
        coordinator = services.coordinator
        a, b = Member(coordinator), Member(coordinator)
        a.member_id = a.send_join().member_id
        a_joined = a.send_join()
        await advance(2)
        b.member_id = b.send_join().member_id
        b_joined = b.send_join()  # arrives within the delay: the delay is extended once more
        await advance(1.1)
        assert not a_joined.done() and not b_joined.done()
        await advance(3)
        a_result, b_result = await a.took(a_joined), await b.took(b_joined)
        assert a_result.generation == b_result.generation == 1 and len(a_result.members) == 2
        await stop_services(services)
    run_with_movable_clock(go())
