"""pybroker's own share consumer (KIP-932; pybroker/client/share_consumer.py), its admin calls and
``pybroker share-groups`` against a broker process: several consumers (blocking and asyncio) sharing a
2-partition topic process every record exactly once when all accept; a released record comes back with
delivery count 2; a rejected one never; records held by a consumer that closes go to another; our
consumer and librdkafka's ShareConsumer (confluent-kafka) in one group; the CLI describing and resetting
a group. The pure logic: tests/unit/test_share_consumer_unit.py.
"""
import asyncio
import collections
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Producer as CKProducer

from pybroker.client import (AdminClient, AsyncShareConsumer, KafkaErrors, NewTopic, ShareConsumer,
                             TopicPartition)
from tests.broker import ROOT
from tests.clientutil import start_broker

DEADLINE = 60.0
SETTINGS = {"group.share.min.record.lock.duration.ms": 1000, "group.share.record.lock.duration.ms": 3000,
            "group.share.min.session.timeout.ms": 6000, "group.share.session.timeout.ms": 6000,
            "group.share.min.heartbeat.interval.ms": 500, "group.share.heartbeat.interval.ms": 500,
            "group.share.delivery.count.limit": 5, "offsets.topic.num.partitions": 2,
            "share.coordinator.state.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
            "transaction.state.log.num.partitions": 2}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory, "share-client", SETTINGS)
    yield b
    b.stop()
    b.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_topic(broker, partitions: int = 2) -> str:
    name = unique("sc")
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions)])
    return name


def fill(broker, topic: str, partitions: int, count: int, start: int = 0) -> list:
    """``count`` numbered records, round-robin over the partitions, in batches of at most 10 records (a
    share fetch acquires whole batches: small ones let consumers sharing a partition all get some)."""
    p = CKProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 10})
    values = []
    for i in range(start, start + count):
        v = f"r{i:06d}".encode()
        p.produce(topic, value=v, partition=i % partitions)
        values.append(v)
    assert p.flush(30) == 0
    return values


def share_group(broker) -> str:
    """A share group that starts at the earliest offset (a group config)."""
    from confluent_kafka.admin import AdminClient as CKAdmin
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    group = unique("sg")
    admin = CKAdmin({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                             incremental_configs=[entry])]).values():
        f.result(30)
    return group


def consumer(broker, group: str, topic: str, **conf) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "fetch.max.wait.ms": 200, **conf})
    c.subscribe([topic])
    return c


def poll_until(consumers, done, timeout: float = DEADLINE, on_record=None, poll_ms: int = 200) -> bool:
    end = time.monotonic() + timeout
    while not done() and time.monotonic() < end:
        for c in consumers:
            for r in c.poll(poll_ms):
                if on_record is not None:
                    on_record(c, r)
    return done()


def test_blocking_consumers_share_a_topic_and_process_each_record_once(broker):
    topic = make_topic(broker, 2)
    values = fill(broker, topic, 2, 600)
    group = share_group(broker)
    consumers = [consumer(broker, group, topic, **{"max.poll.records": 50}) for _ in range(3)]
    seen = collections.Counter()
    by_consumer = collections.Counter()
    counts = collections.Counter()

    def took(c, r):
        seen[r.value] += 1
        by_consumer[id(c)] += 1
        counts[r.delivery_count] += 1
        assert r.topic == topic and r.partition in (0, 1) and r.offset >= 0 and r.timestamp > 0
    try:
        assert poll_until(consumers, lambda: len(seen) == len(values), on_record=took), \
            f"{len(seen)} of {len(values)} records"
        poll_until(consumers, lambda: False, timeout=4, on_record=took)  # accepted: nothing comes back
        assignments = [c.assignment() for c in consumers]
    finally:
        for c in consumers:
            c.close()
    assert set(seen) == set(values) and max(seen.values()) == 1, [v for v, n in seen.items() if n > 1][:5]
    assert counts == {1: len(values)}
    assert len(by_consumer) == 3, f"records reached {len(by_consumer)} of 3 consumers; assignments {assignments}"
    assert set().union(*map(set, assignments)) == {TopicPartition(topic, 0), TopicPartition(topic, 1)}


def test_asyncio_consumers_share_a_topic_and_process_each_record_once(broker):
    topic = make_topic(broker, 2)
    values = fill(broker, topic, 2, 400)
    group = share_group(broker)
    seen = collections.Counter()
    by_consumer = collections.Counter()

    async def member(i: int, stop: asyncio.Event):
        conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "fetch.max.wait.ms": 200,
                "max.poll.records": 40}
        async with AsyncShareConsumer(conf) as c:
            c.subscribe([topic])
            while not stop.is_set():
                for r in await c.poll(200):
                    seen[r.value] += 1
                    by_consumer[i] += 1
                results = await c.commit_sync(10000)
                assert all(e is None for e in results.values()), results

    async def main():
        stop = asyncio.Event()
        tasks = [asyncio.create_task(member(i, stop)) for i in range(2)]
        end = time.monotonic() + DEADLINE
        while len(seen) < len(values) and time.monotonic() < end and not any(t.done() for t in tasks):
            await asyncio.sleep(0.1)
        await asyncio.sleep(3)  # more than the lock duration: an unaccepted record would come back
        stop.set()
        await asyncio.gather(*tasks)
    asyncio.run(main())
    assert set(seen) == set(values) and max(seen.values()) == 1
    assert len(by_consumer) == 2, f"records reached only {dict(by_consumer)}"


def test_released_records_come_back_with_delivery_count_two(broker):
    topic = make_topic(broker, 1)
    values = fill(broker, topic, 1, 20)
    group = share_group(broker)
    c = consumer(broker, group, topic, **{"share.acknowledgement.mode": "explicit"})
    deliveries = collections.defaultdict(list)
    callback_results = []
    c.set_acknowledgement_commit_callback(lambda offsets, error: callback_results.append((offsets, error)))
    try:
        def first(cons, r):
            deliveries[r.value].append(r.delivery_count)
            cons.acknowledge(r, "release" if int(r.value[1:]) % 2 else "accept")
        assert poll_until([c], lambda: len(deliveries) == len(values), on_record=first)
        results = c.commit_sync(10000)
        assert results == {TopicPartition(topic, 0): None}
        odd = {v for v in values if int(v[1:]) % 2}

        def second(cons, r):
            deliveries[r.value].append(r.delivery_count)
            cons.acknowledge(r, "accept")
        assert poll_until([c], lambda: all(len(deliveries[v]) == 2 for v in odd), on_record=second)
        c.commit_sync(10000)
        poll_until([c], lambda: False, timeout=2, on_record=second)
    finally:
        c.close()
    for v in values:
        assert deliveries[v] == ([1, 2] if v in odd else [1]), (v, deliveries[v])
    assert callback_results and all(e is None for _, e in callback_results)
    assert set().union(*(o[TopicPartition(topic, 0)] for o, _ in callback_results)) >= set(range(20))


def test_rejected_records_never_come_back(broker):
    topic = make_topic(broker, 1)
    values = fill(broker, topic, 1, 30)
    group = share_group(broker)
    c = consumer(broker, group, topic, **{"share.acknowledgement.mode": "explicit"})
    seen = collections.Counter()
    try:
        def judge(cons, r):
            seen[r.value] += 1
            cons.acknowledge(r, "reject" if int(r.value[1:]) % 3 == 0 else "accept")
        assert poll_until([c], lambda: len(seen) == len(values), on_record=judge)
        c.commit_sync(10000)
        poll_until([c], lambda: False, timeout=4, on_record=judge)  # past the lock duration
    finally:
        c.close()
    assert set(seen) == set(values) and max(seen.values()) == 1
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        info = admin.list_share_group_offsets(group)[TopicPartition(topic, 0)]
    assert info.start_offset == 30


def test_records_held_by_a_closing_consumer_go_to_another(broker):
    topic = make_topic(broker, 1)
    values = fill(broker, topic, 1, 50)
    group = share_group(broker)
    first = consumer(broker, group, topic, **{"share.acknowledgement.mode": "explicit"})
    held = []
    try:
        assert poll_until([first], lambda: bool(held), on_record=lambda c, r: held.append(r))
    finally:
        first.close()  # nothing acknowledged: released at once, not after the lock duration
    second = consumer(broker, group, topic)
    again = {}
    try:
        assert poll_until([second], lambda: len(again) == len(values),
                          on_record=lambda c, r: again.setdefault(r.value, r.delivery_count), timeout=20)
    finally:
        second.close()
    assert set(again) == set(values)
    assert {r.value for r in held} <= set(again)
    assert all(again[r.value] == 2 for r in held), [(r.value, again[r.value]) for r in held][:5]


def test_implicit_close_accepts_the_last_poll(broker):
    topic = make_topic(broker, 1)
    values = fill(broker, topic, 1, 10)
    group = share_group(broker)
    c = consumer(broker, group, topic)
    got = []
    try:
        assert poll_until([c], lambda: len(got) == len(values), on_record=lambda _, r: got.append(r))
    finally:
        c.close()
    c2 = consumer(broker, group, topic)
    try:
        assert not poll_until([c2], lambda: False, timeout=3, on_record=lambda _, r: got.append(r))
    finally:
        c2.close()
    assert len(got) == len(values)


def test_our_consumer_and_librdkafkas_in_one_group(broker):
    from confluent_kafka import ShareConsumer as CKShareConsumer
    topic = make_topic(broker, 2)
    values = fill(broker, topic, 2, 600)
    group = share_group(broker)
    ours = consumer(broker, group, topic, **{"max.poll.records": 50})
    theirs = CKShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 3})
    theirs.subscribe([topic])
    seen = collections.Counter()
    by_client = collections.Counter()
    end = time.monotonic() + DEADLINE
    try:
        while len(seen) < len(values) and time.monotonic() < end:
            for r in ours.poll(200):
                seen[r.value] += 1
                by_client["pybroker"] += 1
            for m in theirs.poll(0.2):
                if m.error() is None:
                    seen[m.value()] += 1
                    by_client["librdkafka"] += 1
        settle = time.monotonic() + 4
        while time.monotonic() < settle:
            for r in ours.poll(200):
                seen[r.value] += 1
            for m in theirs.poll(0.2):
                if m.error() is None:
                    seen[m.value()] += 1
        with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
            members = admin.describe_share_groups([group])[group].members
    finally:
        ours.close()
        theirs.close()
    assert set(seen) == set(values) and max(seen.values()) == 1, [v for v, n in seen.items() if n > 1][:5]
    assert len(members) == 2
    assert by_client["pybroker"] > 0 and by_client["librdkafka"] > 0, dict(by_client)


# ---- admin and CLI -------------------------------------------------------------------------------------

def cli(broker, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybroker", "share-groups", "--bootstrap-server", broker.bootstrap,
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def rows(out: str) -> list:
    return [line.split() for line in out.splitlines() if line.strip()]


def test_admin_lists_describes_and_deletes_share_groups(broker):
    topic = make_topic(broker, 2)
    fill(broker, topic, 2, 20)
    group = share_group(broker)
    c = consumer(broker, group, topic)
    try:
        assert poll_until([c], lambda: bool(c.assignment()) and c.member_id is not None, timeout=20)
        with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
            listed = {g.group_id: g for g in admin.list_groups(types=["share"])}
            assert listed[group].group_type == "share" and listed[group].state == "Stable"
            assert all(g.group_type == "share" for g in listed.values())
            desc = admin.describe_share_groups([group])[group]
            assert desc.state == "Stable" and desc.assignor
            (m,) = desc.members
            assert m.member_id == c.member_id and m.subscribed_topics == [topic]
            assert sorted(m.assignment) == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
            with pytest.raises(KafkaErrors) as err:
                admin.delete_share_groups([group])
            assert err.value.errors[group].name == "NON_EMPTY_GROUP"
    finally:
        c.close()
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        offsets = admin.list_share_group_offsets(group)
        assert {tp: o.start_offset for tp, o in offsets.items()} == {TopicPartition(topic, 0): 10,
                                                                      TopicPartition(topic, 1): 10}
        assert admin.alter_share_group_offsets(group, {TopicPartition(topic, 0): 4}) == {TopicPartition(topic, 0): True}
        assert admin.list_share_group_offsets(group)[TopicPartition(topic, 0)].start_offset == 4
        assert admin.delete_share_group_offsets(group, [topic]) == {topic: True}
        assert admin.delete_share_groups([group]) == {group: True}
        assert group not in {g.group_id for g in admin.list_groups(types=["share"])}
        with pytest.raises(KafkaErrors) as err:
            admin.describe_share_groups([group])
        assert err.value.errors[group].name == "GROUP_ID_NOT_FOUND"


def test_cli_describes_and_resets_a_share_group(broker):
    topic = make_topic(broker, 2)
    values = fill(broker, topic, 2, 40)
    group = share_group(broker)
    c = consumer(broker, group, topic)
    got = []
    try:
        assert poll_until([c], lambda: len(got) == len(values), on_record=lambda _, r: got.append(r))
        c.commit_sync(10000)
        r = cli(broker, "--list")
        assert r.returncode == 0 and group in r.stdout.split(), r
        r = cli(broker, "--list", "--state", "Stable")
        assert r.returncode == 0 and [group, "Stable"] in rows(r.stdout), r
        r = cli(broker, "--describe", "--group", group)
        assert r.returncode == 0, r
        assert rows(r.stdout) == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                                  [group, topic, "0", "20", "0"], [group, topic, "1", "20", "0"]], r.stdout
        r = cli(broker, "--describe", "--group", group, "--members")
        assert r.returncode == 0, r
        header, member = rows(r.stdout)
        assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert member[0] == group and member[1] == c.member_id and member[-2:] == ["2", f"{topic}:0,1"], member
        r = cli(broker, "--describe", "--group", group, "--state")
        assert r.returncode == 0, r
        header, state = rows(r.stdout)
        assert header == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"]
        assert state[0] == group and state[-2:] == ["Stable", "1"], state
        r = cli(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert r.returncode == 1 and "is not empty" in r.stderr, r  # members still there
    finally:
        c.close()
    r = cli(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--dry-run")
    assert r.returncode == 0, r
    assert rows(r.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "0", "0"],
                              [group, topic, "1", "0"]], r.stdout
    r = cli(broker, "--describe", "--group", group, "--offsets")
    assert [group, topic, "0", "20", "0"] in rows(r.stdout), r.stdout  # a dry run changes nothing
    r = cli(broker, "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "15", "--execute")
    assert r.returncode == 0 and [group, topic, "0", "15"] in rows(r.stdout), r
    r = cli(broker, "--describe", "--group", group, "--verbose")
    assert rows(r.stdout)[0] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"], r.stdout
    assert [group, topic, "0", "0", "15", "5"] in rows(r.stdout), r.stdout
    again = []
    c = consumer(broker, group, topic)
    try:
        assert poll_until([c], lambda: len(again) == 5, on_record=lambda _, r: again.append(r), timeout=20)
        poll_until([c], lambda: False, timeout=1, on_record=lambda _, r: again.append(r))
    finally:
        c.close()
    assert sorted((r.partition, r.offset) for r in again) == [(0, o) for o in range(15, 20)]
    r = cli(broker, "--delete-offsets", "--group", group, "--topic", topic)
    assert r.returncode == 0 and rows(r.stdout) == [["TOPIC", "STATUS"], [topic, "Successful"]], r
    r = cli(broker, "--delete", "--group", group)
    assert r.returncode == 0 and f"('{group}') was successful" in r.stdout, r
    r = cli(broker, "--describe", "--group", group)
    assert r.returncode == 1 and "does not exist" in r.stdout, r


def test_record_limit_acquires_no_more_than_max_poll_records(broker):
    """share.acquire.mode=record_limit (ShareFetch v2): a member polling 3 records holds 3, so another member
    gets the rest of that batch at once; in batch_optimized mode the first member holds the whole batch."""
    topic = make_topic(broker, 1)
    fill(broker, topic, 1, 40)  # batches of 10 records

    def first_offsets(mode: str) -> tuple:
        group = share_group(broker)
        held = consumer(broker, group, topic, **{"share.acknowledgement.mode": "explicit", "max.poll.records": 3,
                                                 "share.acquire.mode": mode})
        other = consumer(broker, group, topic, **{"share.acknowledgement.mode": "explicit"})
        try:
            got = []
            poll_until([held], lambda: bool(got), on_record=lambda c, r: got.append(r.offset))
            later = []
            poll_until([other], lambda: bool(later), on_record=lambda c, r: later.append(r.offset))
            return got, min(later)
        finally:
            held.close()
            other.close()

    assert first_offsets("record_limit") == ([0, 1, 2], 3)
    got, next_free = first_offsets("batch_optimized")
    assert got == [0, 1, 2] and next_free == 10  # the first member's fetch acquired offsets 0-9
    with pytest.raises(ValueError, match="share.acquire.mode"):
        ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "share.acquire.mode": "strict"})
