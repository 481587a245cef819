"""The replica manager's ISR and high-watermark rules in-process (pybroker/replica/manager.py, partition.py).

The local node leads a partition whose replica set also names a follower that exists only as the
replica id of the Fetch reads fed through the manager's fetch path, as the controller and a follower
fetcher would drive it; ISR changes go through the local control's ``write_isr``. The replica lag
clock is a test clock. The last test runs two replica managers in one process, the follower's real
fetcher talking to the leader's Dispatcher without a socket, to check truncation by leader epoch.
(End to end against real brokers: tests/cluster/test_replication.py, test_replica_fetcher.py.)
"""
import asyncio
import inspect
import struct
import uuid
from dataclasses import replace
from types import SimpleNamespace

import pytest

from pybroker.api import TABLE
from pybroker.api.dispatcher import Dispatcher
from pybroker.controller.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState
from pybroker.log import LogManager
from pybroker.protocol import decode_response, encode_request
from pybroker.protocol.errors import (NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                      NOT_LEADER_OR_FOLLOWER, OFFSET_NOT_AVAILABLE, REQUEST_TIMED_OUT,
                                      STALE_CONTROLLER_EPOCH)
from pybroker.records import TRANSACTIONAL, Record, build_batch, decode_records
from pybroker.replica import manager as manager_module
from pybroker.replica import partition as partition_module
from pybroker.replica.fetch_sessions import FetchSessionCache
from pybroker.replica.fetcher import ReplicaFetcherManager
from pybroker.replica.manager import FetchRequestPartition, ReplicaManager
from pybroker.security.session import Session
from pybroker.services import Services
from tests.inprocess import broker_config, log_values, start_services, stop_services, wait_for

NODE, FOLLOWER = 0, 1
LAG_MS = 1000
OVERRIDES = {"replica.lag.time.max.ms": LAG_MS}
WAIT_MS = 5000


class Clock:
    """The replica lag clock (monotonic ms) of the replica manager and its partitions, moved by the test."""

    def __init__(self):
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(manager_module, "monotonic_ms", clock)
    monkeypatch.setattr(partition_module, "monotonic_ms", clock)
    return clock


class Invariants:
    """Checked after every step: ISR ⊆ replicas, leader ∈ ISR, HW ≤ LEO, a leader's HW never moves
    back, leader epochs only grow (in the partition and in its log's epoch cache)."""

    def __init__(self):
        self.leader_hw: dict = {}
        self.epoch: dict = {}

    def check(self, p, metadata: MetadataCache | None = None) -> None:
        key = (p.node_id, p.topic, p.index)
        assert set(p.isr) <= set(p.replicas), (p.isr, p.replicas)
        assert p.high_watermark <= p.log_end_offset, (p.high_watermark, p.log_end_offset)
        assert p.leader_epoch >= self.epoch.get(key, -1), (p.leader_epoch, self.epoch[key])
        self.epoch[key] = p.leader_epoch
        if p.is_leader:
            assert p.node_id in p.isr
            assert p.high_watermark >= self.leader_hw.get(key, -1), (p.high_watermark, self.leader_hw[key])
            self.leader_hw[key] = p.high_watermark
            assert all(f.log_end_offset <= p.log_end_offset for f in p.followers.values())
        else:
            self.leader_hw.pop(key, None)
        entries = p.log.epochs.entries
        assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(entries, entries[1:])), entries
        if metadata is not None:  # what the control published
            state = metadata.partition(p.topic, p.index)
            assert set(state.isr) <= set(state.replicas) and state.leader in state.isr, state
            assert state.isr == p.isr


def values_of(data) -> list:
    """The values of the data records in ``data``, batch after batch."""
    view, out, pos = memoryview(data), [], 0
    while pos + 12 <= len(view):
        end = pos + 12 + struct.unpack_from(">i", view, pos + 8)[0]
        out += [r.value for r in decode_records(view[pos:end]) if not r.control]
        pos = end
    return out


def batch(*values: bytes, **producer) -> bytes:
    return build_batch([Record(value=v) for v in values], **producer)


async def lead_with_follower(services, topic: str, configs: dict | None = None, followers=(FOLLOWER,)):
    """Partition 0 of a new topic, led here in a new epoch with ``followers`` in its replicas and ISR:
    the LeaderAndIsr and UpdateMetadata a cluster's controller sends, through the local control's own
    publishing step (a cluster of one never widens a replica set itself)."""
    record = await services.control.create_topic(topic, 1, 1, configs)
    old = services.control.states[(topic, 0)]
    replicas = (NODE, *followers)
    wider = replace(old, leader_epoch=old.leader_epoch + 1, replicas=replicas, isr=replicas)
    services.control._publish([wider], {topic: record.topic_id})
    p = services.replicas.get(topic, 0)
    assert (p.is_leader, p.leader_epoch, p.isr, p.replicas) == (True, 1, replicas, replicas)
    return p


def append(services, topic: str, acks: int, *values: bytes):
    key = (topic, 0)
    return services.replicas.append(acks, {key: batch(*values)})[key]


async def wait_acked(services, topic: str, outcome, timeout_ms: int = WAIT_MS) -> int:
    """The produce handler's acks=all step: wait until the high watermark passes the records."""
    waits = services.replicas.pending_acks({(topic, 0): outcome})
    if not waits:
        return outcome.error
    return (await services.replicas.wait_for_acks(waits, timeout_ms))[(topic, 0)]


async def follower_fetch(services, topic: str, offset: int, replica_id: int = FOLLOWER):
    """A follower's Fetch from ``offset`` (its log end) through the manager's fetch path."""
    [result] = await services.replicas.fetch([FetchRequestPartition(topic, 0, offset, 1 << 20)], 0, 0, 1 << 20,
                                             False, replica_id=replica_id)
    return result


async def visible(services, topic: str) -> list:
    """What a consumer (read_uncommitted) can read: never past the high watermark."""
    [result] = await services.replicas.fetch([FetchRequestPartition(topic, 0, 0, 1 << 20)], 0, 0, 1 << 20, False)
    assert result.error == 0
    return [] if result.records is None else values_of(result.records.read())


def test_the_high_watermark_is_the_smallest_log_end_over_the_isr_and_never_moves_back(tmp_path, clock):
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        inv = Invariants()
        p = await lead_with_follower(services, "t")
        for value in (b"a", b"b", b"c"):  # one batch each: a follower copies whole batches
            assert append(services, "t", 1, value).error == 0
        # the follower has not fetched in this epoch: its log end is unknown, nothing is committed
        assert (p.log_end_offset, p.high_watermark) == (3, 0) and await visible(services, "t") == []
        inv.check(p, services.metadata)
        answered = await follower_fetch(services, "t", 0)
        assert values_of(answered.records.read()) == [b"a", b"b", b"c"]  # up to our log end
        assert (answered.high_watermark, p.high_watermark) == (0, 0)  # it holds nothing yet
        assert (await follower_fetch(services, "t", 2)).high_watermark == 2  # its fetch moves the HW
        assert await visible(services, "t") == [b"a", b"b"]
        inv.check(p, services.metadata)
        assert (await follower_fetch(services, "t", 3)).high_watermark == 3
        assert await visible(services, "t") == [b"a", b"b", b"c"]
        assert (await follower_fetch(services, "t", 1)).high_watermark == 3  # a stale fetch: the HW stays
        inv.check(p, services.metadata)
        assert append(services, "t", 1, b"d").error == 0
        assert p.high_watermark == 3  # the follower reported log end 1 since: min over the ISR holds it back
        assert (await follower_fetch(services, "t", 4)).high_watermark == 4
        inv.check(p, services.metadata)
        # an impostor (a replica id outside the replica set) is refused, and moves nothing
        append(services, "t", 1, b"e")
        assert (await follower_fetch(services, "t", 5, replica_id=7)).error == NOT_LEADER_OR_FOLLOWER
        assert p.high_watermark == 4 and p.isr == (NODE, FOLLOWER)
        await stop_services(services)
    asyncio.run(go())


def test_acks_all_waits_for_the_isr_and_answers_once_the_follower_fetched(tmp_path, clock):
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        p = await lead_with_follower(services, "t")
        await follower_fetch(services, "t", 0)
        outcome = append(services, "t", -1, b"a")
        acked = asyncio.ensure_future(wait_acked(services, "t", outcome))
        await asyncio.sleep(0)
        assert not acked.done() and p.high_watermark == 0  # held in the purgatory until the HW passes it
        await follower_fetch(services, "t", 1)
        assert await asyncio.wait_for(acked, WAIT_MS / 1000) == 0 and p.high_watermark == 1
        # the follower never catches up: the request's timeout answers
        outcome = append(services, "t", -1, b"b")
        assert await wait_acked(services, "t", outcome, timeout_ms=20) == REQUEST_TIMED_OUT
        assert await visible(services, "t") == [b"a"]
        # losing leadership answers the waiting produce at once
        outcome = append(services, "t", -1, b"c")
        acked = asyncio.ensure_future(wait_acked(services, "t", outcome))
        await asyncio.sleep(0)
        state = replace(services.control.states[("t", 0)], leader=FOLLOWER, leader_epoch=2)
        services.replicas.apply_states(0, [state], {}, lambda topic: services.config.log, {})
        assert await asyncio.wait_for(acked, WAIT_MS / 1000) == NOT_LEADER_OR_FOLLOWER
        await stop_services(services)
    asyncio.run(go())


def test_a_lagging_follower_leaves_the_isr_and_rejoins_once_caught_up(tmp_path, clock):
    """Kafka's rules: out after replica.lag.time.max.ms without reaching the log end; back once it
    reaches the HW; both changes written through the control, which publishes them."""
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        inv = Invariants()
        replicas = services.replicas
        p = await lead_with_follower(services, "t")
        append(services, "t", 1, b"a")
        append(services, "t", 1, b"b")
        await follower_fetch(services, "t", 2)  # caught up now
        for _ in range(3):  # fetching at the log end keeps it in, however long the test runs
            clock.advance(LAG_MS - 100)
            await follower_fetch(services, "t", 2)
            replicas.maybe_shrink_isr()
            assert not p.isr_change_in_flight and p.isr == (NODE, FOLLOWER)
        outcome = append(services, "t", -1, b"c")
        acked = asyncio.ensure_future(wait_acked(services, "t", outcome))
        clock.advance(LAG_MS)
        replicas.maybe_shrink_isr()
        assert p.isr == (NODE, FOLLOWER)  # not yet: lagging for exactly the limit
        clock.advance(1)
        replicas.maybe_shrink_isr()
        await wait_for(lambda: p.isr == (NODE,), "the ISR to shrink")
        inv.check(p, services.metadata)
        # the smaller ISR commits what only the leader holds, and the waiting produce is answered
        assert p.high_watermark == 3 and await asyncio.wait_for(acked, WAIT_MS / 1000) == 0
        assert append(services, "t", 1, b"d").error == 0 and p.high_watermark == 4
        await follower_fetch(services, "t", 3)  # behind the HW: stays out
        await asyncio.sleep(0)
        assert p.isr == (NODE,) and not p.isr_change_in_flight
        await follower_fetch(services, "t", 4)  # reached the HW in this leader's epoch: back in
        await wait_for(lambda: p.isr == (NODE, FOLLOWER), "the ISR to expand")
        inv.check(p, services.metadata)
        assert p.high_watermark == 4
        append(services, "t", 1, b"e")
        assert p.high_watermark == 4  # in the ISR again: the HW waits for it
        await stop_services(services)
    asyncio.run(go())


def test_a_silent_follower_stays_out_of_an_idle_isr(tmp_path, clock):
    """Nothing is written: the silent follower leaves the ISR on time and the other follower's
    fetches at the log end never bring it back on the last log end it reported."""
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        inv = Invariants()
        silent = FOLLOWER + 1
        p = await lead_with_follower(services, "t", followers=(FOLLOWER, silent))
        append(services, "t", 1, b"a")
        for replica_id in (FOLLOWER, silent):
            await follower_fetch(services, "t", 1, replica_id)
        assert p.high_watermark == 1
        for step in range(4):  # FOLLOWER fetches at the log end throughout; the other never again
            clock.advance(LAG_MS // 2 + 1)
            services.replicas.maybe_shrink_isr()
            await wait_for(lambda: not p.isr_change_in_flight, "the ISR write")
            await follower_fetch(services, "t", 1)
            await wait_for(lambda: not p.isr_change_in_flight, "the ISR write")
            assert p.isr == ((NODE, FOLLOWER, silent) if step == 0 else (NODE, FOLLOWER))  # out after the lag
            inv.check(p, services.metadata)
        await follower_fetch(services, "t", 1, silent)  # it speaks again, caught up: back in
        await wait_for(lambda: p.isr == (NODE, FOLLOWER, silent), "the ISR to expand")
        inv.check(p, services.metadata)
        await stop_services(services)
    asyncio.run(go())


def test_min_insync_replicas_refuses_acks_all_before_and_after_the_append(tmp_path, clock):
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        inv = Invariants()
        replicas = services.replicas
        p = await lead_with_follower(services, "t", {"min.insync.replicas": "2"})
        await follower_fetch(services, "t", 0)
        # accepted with two in sync, then the ISR shrinks under it: NOT_ENOUGH_REPLICAS_AFTER_APPEND
        outcome = append(services, "t", -1, b"a")
        assert outcome.error == 0
        acked = asyncio.ensure_future(wait_acked(services, "t", outcome))
        clock.advance(LAG_MS + 1)
        replicas.maybe_shrink_isr()
        assert await asyncio.wait_for(acked, WAIT_MS / 1000) == NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert p.isr == (NODE,)
        inv.check(p, services.metadata)
        # one in sync: acks=all is refused before the append; acks=1 is written but never committed
        assert append(services, "t", -1, b"b").error == NOT_ENOUGH_REPLICAS
        assert append(services, "t", 1, b"c").error == 0
        assert (p.log_end_offset, p.high_watermark) == (2, 0) and await visible(services, "t") == []
        # the follower catches up and rejoins: the HW moves and acks=all is taken again
        await follower_fetch(services, "t", 2)
        await wait_for(lambda: p.isr == (NODE, FOLLOWER), "the ISR to expand")
        assert p.high_watermark == 2 and await visible(services, "t") == [b"a", b"c"]
        outcome = append(services, "t", -1, b"d")
        acked = asyncio.ensure_future(wait_acked(services, "t", outcome))
        await follower_fetch(services, "t", 3)
        assert await asyncio.wait_for(acked, WAIT_MS / 1000) == 0
        inv.check(p, services.metadata)
        await stop_services(services)
    asyncio.run(go())


def test_stale_controller_and_leader_epochs_change_nothing(tmp_path, clock):
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        inv = Invariants()
        p = await lead_with_follower(services, "t")
        inv.check(p)
        def leader_and_isr(controller_epoch: int, state) -> dict:
            return services.replicas.apply_states(controller_epoch, [state], {}, lambda t: services.config.log, {})

        newer = replace(services.control.states[("t", 0)], leader_epoch=5)
        assert leader_and_isr(3, newer) == {("t", 0): 0} and p.leader_epoch == 5
        older = replace(newer, leader=FOLLOWER, leader_epoch=4)  # an older word from a newer controller
        assert leader_and_isr(3, older) == {("t", 0): 0}
        assert (p.is_leader, p.leader_epoch) == (True, 5)
        follow = replace(newer, leader=FOLLOWER, leader_epoch=6)  # from a controller older than the last
        assert leader_and_isr(2, follow) == {("t", 0): STALE_CONTROLLER_EPOCH}
        assert (p.is_leader, p.leader_epoch) == (True, 5)
        inv.check(p)
        assert [e for e, _ in p.log.epochs.entries] == [0, 1, 5]
        await stop_services(services)
    asyncio.run(go())


def test_a_transaction_marker_below_min_insync_replicas_is_refused(tmp_path, clock):
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        p = await lead_with_follower(services, "t", {"min.insync.replicas": "2"})
        data = batch(b"a", attributes=TRANSACTIONAL, producer_id=9, producer_epoch=0, base_sequence=0)
        assert services.replicas.append(1, {("t", 0): data})[("t", 0)].error == 0
        await follower_fetch(services, "t", 1)
        assert (p.high_watermark, p.last_stable_offset) == (1, 0)  # the open transaction holds the LSO
        clock.advance(LAG_MS + 1)
        services.replicas.maybe_shrink_isr()
        await wait_for(lambda: p.isr == (NODE,), "the ISR to shrink")
        marker = SimpleNamespace(producer_id=9, producer_epoch=0, commit=True, coordinator_epoch=0,
                                 partitions=[("t", 0)])
        assert await services.replicas.write_txn_markers([marker], 20) == {(9, "t", 0): NOT_ENOUGH_REPLICAS}
        assert (p.log_end_offset, p.last_stable_offset) == (1, 0)  # no marker written: still open
        await stop_services(services)
    asyncio.run(go())


# ---- truncation by leader epoch: two replica managers, the follower's real fetcher -------------------

class Loopback:
    """A fetcher's connection to a leader in the same process: request frames go to the leader's
    Dispatcher and the response frames come back decoded, as over a socket."""

    def __init__(self, dispatcher: Dispatcher, fetch_version: int):
        self.dispatcher = dispatcher
        self.fetch_version = fetch_version
        self.closed = False
        self.sent: dict[int, int] = {}  # api key -> requests
        self.conn = SimpleNamespace(session=Session("PLAINTEXT", "PLAINTEXT", "127.0.0.1"), peer=("127.0.0.1", 0),
                                    server=SimpleNamespace(listener_name="PLAINTEXT"))

    def version(self, api_key: int, lo: int, hi: int) -> int:
        top = self.fetch_version if api_key == 1 else TABLE[api_key].MAX_VERSION
        return min(hi, top)

    async def request(self, req, version: int):
        self.sent[req.API_KEY] = self.sent.get(req.API_KEY, 0) + 1
        await asyncio.sleep(0)  # a round trip always lets the loop run (an answer at once never spins the fetcher)
        answer = self.dispatcher.handle(memoryview(encode_request(version, 1, "fetcher", req)), self.conn)
        if inspect.isawaitable(answer):
            answer = await answer
        frame = b"".join(bytes(part) if isinstance(part, (bytes, bytearray, memoryview)) else part.read()
                         for part in answer)
        return decode_response(frame, req.API_KEY, version)[1]

    async def close(self) -> None:
        self.closed = True


class Broker:
    """One broker's replica side: a LogManager, a ReplicaManager (with its fetchers) and a Dispatcher."""

    def __init__(self, log_dir, node_id: int):
        self.config = broker_config(log_dir, node_id, {"replica.fetch.wait.max.ms": 10,
                                                       "replica.fetch.backoff.ms": 10})
        self.log_manager = LogManager([str(log_dir)], self.config.log).startup()
        self.replicas = ReplicaManager(node_id, self.log_manager, ReplicaFetcherManager(node_id, self.config))
        self.services = Services(self.config, node_id, MetadataCache(), FetchSessionCache(10),
                                 log_manager=self.log_manager, replicas=self.replicas)
        self.dispatcher = Dispatcher(self.services)

    def apply(self, state: PartitionState, topic_id, peers: dict, fetch_version: int) -> None:
        """LeaderAndIsr and UpdateMetadata from the controller; a follower's fetcher is wired to its leader."""
        endpoints = [BrokerEndpoint(b.services.node_id, {"PLAINTEXT": ("in-process", b.services.node_id)})
                     for b in peers.values()]
        leaders = {node: ("in-process", node) for node in peers}
        errors = self.replicas.apply_states(0, [state], {state.topic: topic_id}, lambda t: self.config.log, leaders)
        assert errors == {(state.topic, state.partition): 0}
        self.services.metadata.update(0, endpoints, [state], {state.topic: topic_id})
        for (leader, _), fetcher in self.replicas.fetchers.fetchers.items():
            if fetcher.conn is None:  # before its task first runs: it never dials a socket
                fetcher.conn = Loopback(peers[leader].dispatcher, fetch_version)

    def partition(self):
        return self.replicas.get("t", 0)

    def values(self) -> list:
        return log_values(self.partition().log)

    async def stop(self) -> None:
        self.replicas.stop_waiting()
        await self.replicas.fetchers.shutdown()
        self.replicas.shutdown()
        self.log_manager.shutdown()


@pytest.mark.parametrize("fetch_version", [17, 11], ids=["diverging-epoch", "offset-for-leader-epoch"])
def test_a_deposed_leader_truncates_its_unreplicated_tail_by_leader_epoch(tmp_path, fetch_version):
    """The old leader wrote two records in epoch 0 that nobody copied; the new leader wrote one in
    epoch 1. Following it, the old leader cuts its log where epoch 0 ended on the new leader (a
    diverging epoch in the Fetch answer from v12, OffsetForLeaderEpoch before) and copies the rest."""
    async def go():
        a, b = Broker(tmp_path / "a", 0), Broker(tmp_path / "b", 1)
        peers, topic_id, inv = {0: a, 1: b}, uuid.uuid4(), Invariants()
        epoch0 = PartitionState("t", 0, 0, 0, (0, 1), (0, 1))
        a.apply(epoch0, topic_id, peers, fetch_version)
        b.apply(epoch0, topic_id, peers, fetch_version)
        for value in (b"a", b"b", b"c"):
            assert a.replicas.append(1, {("t", 0): batch(value)})[("t", 0)].error == 0
        await wait_for(lambda: b.partition().high_watermark == 3, "the follower to copy and commit epoch 0")
        assert a.partition().high_watermark == 3
        # the controller makes b leader in epoch 1; a has not heard yet and takes two more writes alone
        epoch1 = PartitionState("t", 0, 1, 1, (1,), (0, 1))
        b.apply(epoch1, topic_id, peers, fetch_version)
        for value in (b"x", b"y"):
            a.replicas.append(1, {("t", 0): batch(value)})
        assert b.replicas.append(1, {("t", 0): batch(b"d")})[("t", 0)].error == 0
        assert (a.partition().log_end_offset, b.partition().log_end_offset) == (5, 4)
        for node in (a, b):
            inv.check(node.partition())
        a.apply(epoch1, topic_id, peers, fetch_version)  # now a follows b
        await wait_for(lambda: a.values() == [b"a", b"b", b"c", b"d"], "the old leader to truncate and catch up")
        fa, fb = a.partition(), b.partition()
        assert fa.log.epochs.entries == fb.log.epochs.entries == [(0, 0), (1, 3)]
        await wait_for(lambda: fa.high_watermark == 4, "the follower to take the leader's HW")
        for node in (a, b):
            inv.check(node.partition())
        sent = next(iter(a.replicas.fetchers.fetchers.values())).conn.sent
        assert (23 in sent) == (fetch_version < 12)  # OffsetForLeaderEpoch only for a leader without v12
        await a.stop()
        await b.stop()
    asyncio.run(go())


def test_a_new_epoch_answers_offset_not_available_until_its_high_watermark_reaches_the_epoch_start(tmp_path, clock):
    """KIP-207: the end of the log a client is told never goes back across an election."""
    async def go():
        services = await start_services(tmp_path, OVERRIDES)
        p = await lead_with_follower(services, "t")
        for value in (b"a", b"b", b"c"):
            assert append(services, "t", 1, value).error == 0
        latest = lambda: services.replicas.list_offset("t", 0, -1, -1, False)  # noqa: E731
        assert latest()[:3] == (0, -1, 0)  # epoch 1 began at offset 0: its high watermark is not behind it
        newer = replace(services.control.states[("t", 0)], leader_epoch=p.leader_epoch + 1)
        services.control._publish([newer], {})  # a new epoch starting at offset 3, high watermark still 0
        assert p.high_watermark_lags_epoch_start()
        assert latest()[0] == OFFSET_NOT_AVAILABLE
        assert services.replicas.list_offset("t", 0, 10**13, -1, False)[0] == OFFSET_NOT_AVAILABLE  # none found
        assert services.replicas.list_offset("t", 0, -2, -1, False)[:3] == (0, -1, 0)  # earliest still answered
        await follower_fetch(services, "t", 2)
        assert latest()[0] == OFFSET_NOT_AVAILABLE  # high watermark 2 < 3
        await follower_fetch(services, "t", 3)
        assert latest()[:3] == (0, -1, 3) and not p.high_watermark_lags_epoch_start()
        assert services.replicas.list_offset("t", 0, 10**13, -1, False)[:3] == (0, -1, -1)
        await stop_services(services)
    asyncio.run(go())
