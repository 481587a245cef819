"""Share groups (KIP-932) with a real broker and librdkafka's ShareConsumer (confluent-kafka): more
consumers than partitions, exactly-once processing when all accept, release and redelivery with the
delivery count, reject and the delivery-count limit, a consumer stopped while holding records (its locks
time out), read_committed share consumption, and a broker killed with records acknowledged and in
flight. The state machine's rules in-process: tests/unit/test_share_partition.py."""
import collections
import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import AcknowledgeType, Producer

from tests.broker.test_metrics import scrape
from tests.clientutil import start_broker
from tests.cluster import free_ports
from tests.shareutil import Holder, fill, make_topic, poll_until, set_group_config, share_consumer, unique

SETTINGS = {"group.share.min.record.lock.duration.ms": 1000, "group.share.record.lock.duration.ms": 3000,
            "group.share.min.session.timeout.ms": 6000, "group.share.session.timeout.ms": 6000,
            "group.share.min.heartbeat.interval.ms": 500, "group.share.heartbeat.interval.ms": 500,
            "group.share.delivery.count.limit": 3, "offsets.topic.num.partitions": 2,
            "share.coordinator.state.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
            "transaction.state.log.num.partitions": 2}
EARLIEST = {"share.auto.offset.reset": "earliest"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    port = free_ports(1)[0]
    b = start_broker(tmp_path_factory, "share", {**SETTINGS, "metrics.listener": f"http://127.0.0.1:{port}"})
    b.metrics_port = port
    yield b
    b.stop()
    b.close()


def group_from_earliest(broker, **configs) -> str:
    group = unique("sg")
    set_group_config(broker.port, group, {**EARLIEST, **configs})
    return group


def test_more_consumers_than_partitions_each_record_once(broker):
    topic = make_topic(broker.port, 2)
    values = fill(broker.bootstrap, topic, 2, 600, **{"batch.num.messages": 10})
    group = group_from_earliest(broker)
    # small fetches (whole batches of 10 are acquired, about 20 records a poll) so no consumer takes all
    consumers = [share_consumer(broker.bootstrap, group, topic, **{"max.poll.records": 20}) for _ in range(4)]
    seen = collections.Counter()
    by_consumer = collections.Counter()

    def took(c, m):
        seen[m.value()] += 1
        by_consumer[id(c)] += 1
    try:
        assert poll_until(consumers, lambda: len(seen) == len(values), on_message=took), \
            f"{len(seen)} of {len(values)} records"
        # everything accepted (implicitly, on the next poll): no record comes back
        poll_until(consumers, lambda: False, timeout=2, on_message=took)
    finally:
        for c in consumers:
            c.close()
    assert set(seen) == set(values) and max(seen.values()) == 1, [v for v, n in seen.items() if n > 1][:5]
    assert len(by_consumer) == 4, f"records reached only {len(by_consumer)} of 4 consumers"


def test_released_records_come_back_with_their_delivery_count(broker):
    topic = make_topic(broker.port, 1)
    values = fill(broker.bootstrap, topic, 1, 20)
    group = group_from_earliest(broker)
    c = share_consumer(broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    counts = collections.defaultdict(list)
    try:
        def first_round(consumer, m):
            counts[m.value()].append(m.delivery_count())
            consumer.acknowledge(m, AcknowledgeType.RELEASE if int(m.value()[1:]) % 2 else AcknowledgeType.ACCEPT)
        assert poll_until([c], lambda: len(counts) == len(values), on_message=first_round)
        c.commit_sync(30)

        def second_round(consumer, m):
            counts[m.value()].append(m.delivery_count())
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        odd = {v for v in values if int(v[1:]) % 2}
        assert poll_until([c], lambda: all(len(counts[v]) == 2 for v in odd), on_message=second_round)
        c.commit_sync(30)
        poll_until([c], lambda: False, timeout=2, on_message=second_round)
    finally:
        c.close()
    for v in values:
        assert counts[v] == ([1, 2] if v in odd else [1]), (v, counts[v])


def test_rejected_and_poison_records_are_archived(broker):
    """REJECT archives at once; a record released again and again is archived at the delivery-count
    limit (3 here) and never delivered a fourth time."""
    topic = make_topic(broker.port, 1)
    fill(broker.bootstrap, topic, 1, 6)
    group = group_from_earliest(broker)
    c = share_consumer(broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    deliveries = collections.defaultdict(list)

    def act(consumer, m):
        n = int(m.value()[1:])
        deliveries[n].append(m.delivery_count())
        consumer.acknowledge(m, AcknowledgeType.REJECT if n == 0 else AcknowledgeType.RELEASE if n == 1
                             else AcknowledgeType.ACCEPT)
    try:
        assert poll_until([c], lambda: len(deliveries[1]) >= 3 and len(deliveries) == 6, on_message=act,
                          timeout=60)
        c.commit_sync(30)
        poll_until([c], lambda: False, timeout=3, on_message=act)
        samples = scrape(broker.metrics_port)  # while the group fetches here (its share-partition is held)
    finally:
        c.close()
    assert deliveries[0] == [1]
    assert deliveries[1] == [1, 2, 3]
    assert all(deliveries[n] == [1] for n in range(2, 6))
    # /metrics: 8 deliveries, 2 releases (the third delivery of 1 archived it), 2 archivals, 4 accepted
    labels = frozenset({"group": group, "topic": topic, "partition": "0"}.items())
    assert {name: samples.get((name, labels)) for name in (
        "pybroker_share_partition_acquisitions_total", "pybroker_share_partition_releases_total",
        "pybroker_share_partition_archivals_total", "pybroker_share_partition_acknowledged_total",
        "pybroker_share_partition_in_flight_records", "pybroker_share_partition_lag")} == {
        "pybroker_share_partition_acquisitions_total": 8, "pybroker_share_partition_releases_total": 2,
        "pybroker_share_partition_archivals_total": 2, "pybroker_share_partition_acknowledged_total": 4,
        "pybroker_share_partition_in_flight_records": 0, "pybroker_share_partition_lag": 0}


CHILD = """
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
held = []
end = time.monotonic() + 60
while not held and time.monotonic() < end:
    held = [m for m in c.poll(0.5) if m.error() is None]
print(" ".join(str(m.offset()) for m in held), flush=True)
time.sleep(120)  # holds its records (never acknowledges) until it is stopped
"""


@pytest.mark.parametrize("fault", ["SIGSTOP", "SIGKILL"])
def test_a_stopped_or_killed_consumer_s_records_go_to_another(broker, fault):
    """SIGSTOP: the consumer's connection stays open, only the acquisition lock timeout frees its records;
    kill -9: its connection closes, which ends its share session and releases them at once."""
    topic = make_topic(broker.port, 1)
    values = fill(broker.bootstrap, topic, 1, 10)
    group = group_from_earliest(broker)
    child = subprocess.Popen([sys.executable, "-c", CHILD, broker.bootstrap, group, topic], stdout=subprocess.PIPE,
                             text=True)
    try:
        held = [int(o) for o in child.stdout.readline().split()]
        assert held, "the first consumer got nothing"
        os.kill(child.pid, getattr(signal, fault))
        other = share_consumer(broker.bootstrap, group, topic)
        got = {}
        try:
            assert poll_until([other], lambda: set(held) <= set(got),
                              on_message=lambda c, m: got.setdefault(m.offset(), m.delivery_count()))
        finally:
            other.close()
        assert all(got[o] == 2 for o in held), {o: got[o] for o in held}
        assert len(got) == len(values)
    finally:
        child.kill()
        child.wait(10)


def test_read_committed_share_group_skips_aborted_transactions(broker):
    topic = make_topic(broker.port, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("tx"), "linger.ms": 5})
    p.init_transactions(30)
    expected = []
    for t in range(6):
        p.begin_transaction()
        for i in range(5):
            v = f"t{t}-{i}".encode()
            p.produce(topic, value=v, partition=0)
            if t % 2 == 0:
                expected.append(v)
        p.commit_transaction(30) if t % 2 == 0 else p.abort_transaction(30)
    group = group_from_earliest(broker, **{"share.isolation.level": "read_committed"})
    c = share_consumer(broker.bootstrap, group, topic)
    got = []
    try:
        poll_until([c], lambda: len(got) >= len(expected), on_message=lambda _, m: got.append(m.value()))
        poll_until([c], lambda: False, timeout=2, on_message=lambda _, m: got.append(m.value()))
    finally:
        c.close()
    assert got == expected


def test_unrelated_groups_each_see_every_record(broker):
    topic = make_topic(broker.port, 2)
    values = fill(broker.bootstrap, topic, 2, 50)
    groups = [group_from_earliest(broker) for _ in range(2)]
    consumers = [share_consumer(broker.bootstrap, g, topic) for g in groups]
    seen = [set(), set()]
    try:
        poll_until(consumers, lambda: all(len(s) == len(values) for s in seen),
                   on_message=lambda c, m: seen[consumers.index(c)].add(m.value()))
    finally:
        for c in consumers:
            c.close()
    assert seen == [set(values), set(values)]


def test_broker_killed_with_records_acknowledged_and_in_flight(broker_factory, tmp_path):
    """kill -9 of the broker while a member holds records it has not acknowledged: after the restart no
    accepted record comes again, every other one does, and the ones that were in flight come with their
    delivery count kept (2)."""
    data = str(tmp_path / "kill-data")
    b = broker_factory(overrides=SETTINGS, data_dir=data)
    topic = make_topic(b.port, 2)
    values = fill(b.bootstrap, topic, 2, 200, **{"batch.num.messages": 10})
    group = group_from_earliest(b)
    holder = Holder(b.bootstrap, group, topic, max_records=20)
    try:
        assert holder.accepted and holder.held
        b.kill()
    finally:
        holder.kill()
    b2 = broker_factory(overrides=SETTINGS, data_dir=data, port=b.port)
    c = share_consumer(b2.bootstrap, group, topic)
    got = {}
    try:
        poll_until([c], lambda: len(got) >= len(values) - len(holder.accepted),
                   on_message=lambda _, m: got.setdefault((m.partition(), m.offset()), []).append(m.delivery_count()))
        poll_until([c], lambda: False, timeout=2,
                   on_message=lambda _, m: got.setdefault((m.partition(), m.offset()), []).append(m.delivery_count()))
    finally:
        c.close()
    assert not holder.accepted & set(got), sorted(holder.accepted & set(got))[:5]
    assert len(got) + len(holder.accepted) == len(values)
    assert all(len(n) == 1 for n in got.values())
    assert {k: n[0] for k, n in got.items() if k in holder.held} == {k: 2 for k in holder.held}


def test_classic_kip848_and_share_groups_side_by_side(broker):
    """One topic read at once by a classic group, a KIP-848 consumer group and a share group: each group
    gets every record (the share group each once), and none disturbs the others."""
    from confluent_kafka import Consumer
    topic = make_topic(broker.port, 3)
    values = fill(broker.bootstrap, topic, 3, 300, **{"batch.num.messages": 10})
    base = {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest", "log_level": 3}
    classic = Consumer({**base, "group.id": unique("classic")})
    modern = Consumer({**base, "group.id": unique("kip848"), "group.protocol": "consumer"})
    for c in (classic, modern):
        c.subscribe([topic])
    share_group = group_from_earliest(broker)
    shared = [share_consumer(broker.bootstrap, share_group, topic, **{"max.poll.records": 20}) for _ in range(2)]
    got = {"classic": collections.Counter(), "kip848": collections.Counter(), "share": collections.Counter()}
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and not all(len(g) == len(values) for g in got.values()):
            for name, c in (("classic", classic), ("kip848", modern)):
                for m in c.consume(100, 0.1):
                    if m.error() is None:
                        got[name][m.value()] += 1
            for c in shared:
                for m in c.poll(0.1):
                    if m.error() is None:
                        got["share"][m.value()] += 1
    finally:
        for c in (classic, modern, *shared):
            c.close()
    for name, counts in got.items():
        assert set(counts) == set(values) and max(counts.values()) == 1, name


def test_a_fetch_acknowledging_one_partition_delivers_another_s_records_at_once(broker):
    """The ShareFetch that acknowledges partition 0 acquires partition 1's new records: its answer names
    partition 0 without records (empty, not null, or librdkafka drops the whole answer and partition 1's
    records come back only when their locks run out, with delivery count 2)."""
    topic = make_topic(broker.port, 2)
    group = group_from_earliest(broker)
    c = share_consumer(broker.bootstrap, group, topic)
    counts = collections.defaultdict(list)
    try:
        fill(broker.bootstrap, topic, 1, 10)  # partition 0 only
        assert poll_until([c], lambda: len(counts) == 10,
                          on_message=lambda _, m: counts[(m.partition(), m.offset())].append(m.delivery_count()))
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for i in range(10):
            p.produce(topic, value=f"p1-{i}".encode(), partition=1)
        assert p.flush(30) == 0
        assert poll_until([c], lambda: len(counts) == 20, timeout=2.5,  # less than the 3 s lock duration
                          on_message=lambda _, m: counts[(m.partition(), m.offset())].append(m.delivery_count()))
    finally:
        c.close()
    assert all(n == [1] for n in counts.values()), {k: n for k, n in counts.items() if n != [1]}
