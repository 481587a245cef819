"""The consumer group protocol's coordinator (KIP-848) in-process (pybroker/coordinator/consumer_coordinator.py):
ConsumerGroupHeartbeats called on the coordinator built from a broker's services, on an event loop whose
clock the test moves. Member epochs, the server assignor's target, revocation before a partition reaches
its new owner, fencing by epoch, session and revocation timeouts, leaving and static members.
(The group's reconciliation alone: tests/unit/test_consumer_group_assignors.py; against a real broker
and clients: tests/broker/test_consumer_group_protocol.py, tests/interop/test_protocol_kip848_clients.py.)
"""
from pybroker.coordinator.consumer_group import GROUP_STABLE, RECONCILING, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS
from pybroker.coordinator.coordinator import CommitEntry
from pybroker.coordinator.heartbeat_request import HeartbeatRequest
from pybroker.protocol.errors import (FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID,
                                      UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR)
from tests.inprocess import advance, run_with_movable_clock, start_services, stop_services

GROUP = "g"
VERSION = 1  # ConsumerGroupHeartbeat v1: the client chooses its member id
REBALANCE_MS = 10000
SESSION_S = 45  # group.consumer.session.timeout.ms's default


async def start(tmp_path, partitions: int = 4):
    services = await start_services(tmp_path)
    await services.offsets.ensure_topic()  # FindCoordinator's first step: the group is coordinated here
    record = await services.control.create_topic("orders", partitions, 1)
    return services, record.topic_id


class Consumer:
    """A consumer-protocol member as a client drives it: it holds exactly what its last answer gave it
    (it lets go of a revoked partition at once) and reports that in each heartbeat."""

    def __init__(self, coordinator, member_id: str, instance_id=None, assignor=None):
        self.coordinator = coordinator
        self.member_id = member_id
        self.instance_id = instance_id
        self.assignor = assignor
        self.epoch = 0
        self.owned: dict = {}

    def beat(self, epoch=None, owned=None):
        """One heartbeat at the member's epoch (or ``epoch``), reporting what it owns (or ``owned``)."""
        epoch = self.epoch if epoch is None else epoch
        joining = epoch == 0
        req = HeartbeatRequest(GROUP, self.member_id, epoch, self.instance_id,
                               rebalance_timeout_ms=REBALANCE_MS if joining else -1,
                               subscribed_names=["orders"] if joining else None,
                               server_assignor=self.assignor if joining else None,
                               owned={} if joining else dict(self.owned if owned is None else owned))
        result = self.coordinator.consumer.heartbeat(req, VERSION, "client", "/127.0.0.1")
        if result.error == 0:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = {t: frozenset(ps) for t, ps in result.assignment.items() if ps}
        return result

    def leave(self, epoch: int = -1):
        return self.beat(epoch=epoch)

    def partitions(self) -> set:
        return {p for ps in self.owned.values() for p in ps}


class Invariants:
    """No partition is held by two clients; the coordinator's owners agree with its members; member
    epochs never pass the group epoch, and a member's epoch and the group epoch only grow."""

    def __init__(self, coordinator):
        self.coordinator = coordinator
        self.group_epoch = 0
        self.member_epochs: dict = {}

    def check(self, *clients) -> None:
        held = [(t, p) for c in clients for t, ps in c.owned.items() for p in ps]
        assert len(held) == len(set(held)), f"a partition held twice: {sorted(held)}"
        group = self.coordinator.consumer.groups[GROUP]
        assert group.group_epoch >= max(self.group_epoch, group.assignment_epoch)
        self.group_epoch = group.group_epoch
        for member_id, m in group.members.items():
            assert m.member_epoch <= group.group_epoch
            assert m.member_epoch >= self.member_epochs.get(member_id, 0) or m.member_epoch < 0
            self.member_epochs[member_id] = max(m.member_epoch, self.member_epochs.get(member_id, 0))
            for t, ps in m.owns().items():
                assert all(group.owners[(t, p)] == member_id for p in ps)
        for c in clients:  # a client never holds what the coordinator gave someone else
            for t, ps in c.owned.items():
                assert all(group.owners.get((t, p)) in (c.member_id, None) for p in ps), (c.member_id, ps)


def settle(*clients, rounds: int = 5) -> None:
    """Heartbeats from every client in turn until the group is Stable."""
    group = clients[0].coordinator.consumer.groups[GROUP]
    for _ in range(rounds):
        for c in clients:
            assert c.beat().error == 0
        if group.state == GROUP_STABLE:
            return
    raise AssertionError(f"group not stable after {rounds} rounds: {group.state}")


def settled_pair(services):
    """Members "a" and "b" of the group, joined and heartbeated until the assignment settles."""
    coordinator = services.coordinator
    a, b = Consumer(coordinator, "a"), Consumer(coordinator, "b")
    a.beat()
    b.beat()
    settle(a, b)
    return coordinator, Invariants(coordinator), a, b


def test_a_partition_reaches_its_new_member_only_after_its_owner_revoked_it(tmp_path):
    async def go():
        services, orders = await start(tmp_path)
        coordinator, inv = services.coordinator, Invariants(services.coordinator)
        a, b = Consumer(coordinator, "a"), Consumer(coordinator, "b")
        first = a.beat()
        assert (first.error, first.member_id, first.member_epoch) == (0, "a", 1)
        assert a.owned == {orders: frozenset({0, 1, 2, 3})}  # the uniform assignor's target, at once
        group = coordinator.consumer.groups[GROUP]
        assert (group.group_epoch, group.assignor, group.state) == (1, "uniform", GROUP_STABLE)
        assert a.beat().assignment is None  # nothing changed: nothing sent
        inv.check(a, b)
        joined = b.beat()  # group epoch 2: two partitions go to b, once a let them go
        assert (joined.member_epoch, b.owned, group.members["b"].state) == (2, {}, UNRELEASED_PARTITIONS)
        assert group.group_epoch == 2 and group.state == RECONCILING
        inv.check(a, b)
        revoke = a.beat()  # a keeps its epoch while it revokes
        assert revoke.member_epoch == 1 and len(a.partitions()) == 2
        assert group.members["a"].state == UNREVOKED_PARTITIONS
        inv.check(a, b)
        assert b.beat().assignment is None and b.owned == {}  # a has not said it let go yet
        assert a.beat().member_epoch == 2 and group.members["a"].state != UNREVOKED_PARTITIONS
        assert b.beat().member_epoch == 2 and b.partitions() == {0, 1, 2, 3} - a.partitions()
        assert group.state == GROUP_STABLE and len(b.partitions()) == 2
        inv.check(a, b)
        await stop_services(services)
    run_with_movable_clock(go())


def test_member_epochs_fence_zombies_and_stale_commits(tmp_path):
    async def go():
        services, orders = await start(tmp_path)
        coordinator, inv, a, b = settled_pair(services)
        assert a.epoch == b.epoch == 2
        mine = dict(a.owned)
        assert a.beat(epoch=3).error == FENCED_MEMBER_EPOCH  # ahead of the coordinator
        assert a.beat(epoch=1, owned={orders: frozenset({0, 1, 2, 3})}).error == FENCED_MEMBER_EPOCH  # owns too much
        missed = a.beat(epoch=1, owned=mine)  # the previous epoch owning no more: it only missed our answer
        assert (missed.error, missed.member_epoch) == (0, 2)
        assert Consumer(coordinator, "ghost").beat(epoch=2).error == UNKNOWN_MEMBER_ID
        assert a.owned == mine and b.epoch == 2  # fenced requests changed nothing
        inv.check(a, b)
        # offset commits carry the member epoch: an old one is refused
        entries = [CommitEntry("orders", 0, 7)]
        assert await coordinator.commit(GROUP, 1, "a", None, entries) == (STALE_MEMBER_EPOCH,
                                                                          {("orders", 0): STALE_MEMBER_EPOCH})
        assert await coordinator.commit(GROUP, 2, "a", None, entries) == (0, {("orders", 0): 0})
        assert await coordinator.commit(GROUP, 2, "ghost", None, entries) == (UNKNOWN_MEMBER_ID,
                                                                              {("orders", 0): UNKNOWN_MEMBER_ID})
        await stop_services(services)
    run_with_movable_clock(go())


def test_a_silent_member_is_removed_after_the_session_timeout_and_its_partitions_move(tmp_path):
    async def go():
        services, orders = await start(tmp_path)
        coordinator, inv, a, b = settled_pair(services)
        group = coordinator.consumer.groups[GROUP]
        epoch = group.group_epoch
        await advance(SESSION_S - 15)
        assert a.beat().error == 0
        await advance(15 - 0.1)
        assert set(group.members) == {"a", "b"}  # b silent, not yet for a whole session
        await advance(0.2)
        assert set(group.members) == {"a"} and group.group_epoch == epoch + 1
        assert b.beat().error == UNKNOWN_MEMBER_ID
        b.owned = {}  # what a fenced client does: give everything up
        assert a.beat().member_epoch == epoch + 1 and a.owned == {orders: frozenset({0, 1, 2, 3})}
        inv.check(a, b)
        await stop_services(services)
    run_with_movable_clock(go())


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced(tmp_path):
    async def go():
        services, orders = await start(tmp_path)
        coordinator = services.coordinator
        a, b = Consumer(coordinator, "a"), Consumer(coordinator, "b")
        a.beat()
        b.beat()
        everything = dict(a.owned)
        a.beat()
        group = coordinator.consumer.groups[GROUP]
        assert group.members["a"].state == UNREVOKED_PARTITIONS
        for _ in range(3):  # a keeps its session alive but holds on to what it must give up
            await advance(REBALANCE_MS / 1000 / 3 - 0.1)
            assert a.beat(owned=everything).error == 0
            assert b.beat().error == 0 and b.owned == {}
        await advance(0.4)
        assert "a" not in group.members
        assert a.beat(owned=everything).error == UNKNOWN_MEMBER_ID
        assert b.beat().error == 0 and b.owned == {orders: frozenset({0, 1, 2, 3})}
        await stop_services(services)
    run_with_movable_clock(go())


def test_leaving_frees_partitions_and_a_static_member_gets_its_own_back(tmp_path):
    async def go():
        services, orders = await start(tmp_path)
        coordinator, inv = services.coordinator, Invariants(services.coordinator)
        a, s = Consumer(coordinator, "a"), Consumer(coordinator, "s-1", instance_id="i")
        a.beat()
        s.beat()
        settle(a, s)
        group = coordinator.consumer.groups[GROUP]
        epoch, held, member_epoch = group.group_epoch, dict(s.owned), s.epoch
        # a static member steps out (epoch -2): its partitions wait for it, the group epoch stays
        assert s.leave(-2).member_epoch == -2
        assert group.group_epoch == epoch and a.beat().assignment is None
        s2 = Consumer(coordinator, "s-2", instance_id="i")  # it comes back under a new member id
        back = s2.beat()
        assert (back.error, back.member_epoch, s2.owned) == (0, member_epoch, held)  # its epoch and partitions
        assert "s-1" not in group.members and group.group_epoch == epoch
        assert s2.beat().error == 0 and s2.owned == held
        clash = Consumer(coordinator, "s-3", instance_id="i").beat()  # the instance id is still in use
        assert clash.error == UNRELEASED_INSTANCE_ID
        inv.check(a, s2)
        # a dynamic member leaves (epoch -1): a new group epoch, its partitions go to the others
        assert a.leave().member_epoch == -1
        a.owned = {}
        assert group.group_epoch == epoch + 1 and "a" not in group.members
        settle(s2)
        assert s2.owned == {orders: frozenset({0, 1, 2, 3})}
        inv.check(a, s2)
        await stop_services(services)
    run_with_movable_clock(go())


def test_the_assignor_most_members_ask_for_computes_the_target(tmp_path):
    async def go():
        services, orders = await start(tmp_path, partitions=6)
        coordinator = services.coordinator
        assert Consumer(coordinator, "x", assignor="sticky").beat().error == UNSUPPORTED_ASSIGNOR
        members = [Consumer(coordinator, m, assignor="range") for m in ("a", "b", "c")]
        for m in members:
            assert m.beat().error == 0
        settle(*members)
        group = coordinator.consumer.groups[GROUP]
        assert group.assignor == "range"
        assert [sorted(m.partitions()) for m in members] == [[0, 1], [2, 3], [4, 5]]  # ranges in member order
        Invariants(coordinator).check(*members)
        await stop_services(services)
    run_with_movable_clock(go())
