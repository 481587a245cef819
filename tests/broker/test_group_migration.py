"""Online migration between the group protocols (``group.consumer.migration.policy``, KIP-848): a
classic group with members upgrades when a consumer-protocol member joins, its classic members go on
inside the consumer group with JoinGroup/SyncGroup/Heartbeat, and the group downgrades when the last
consumer-protocol member leaves. Checked on the wire next to Kafka 3.8 (same policy) and with
librdkafka consumers replaced one by one while records flow, by the data consumed."""
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pybroker.client.assignors import (Assignment, Subscription, decode_assignment, encode_assignment,
                                      encode_subscription)
from pybroker.client.assignors import TopicPartition as TP
from pybroker.protocol import REQUESTS
from tests.clientutil import DEADLINE, finish_broker, kafka_python_group_consumer, start_broker, wait_until
from tests.kafka_wire import WireClient
from tests.broker.test_consumer_group_protocol import (HEARTBEAT_MS, SESSION_MS, create_topic, heartbeat, produce,
                                                       start_kafka,
                                                unique, wait_for_coordinator)

NONE, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, GROUP_ID_NOT_FOUND = 0, 22, 27, 69
JOIN, SYNC, CLASSIC_HB, LEAVE, LIST, COMMIT = (REQUESTS[k] for k in (11, 14, 12, 13, 16, 8))
PARTITIONS = 4
CLASSIC_SESSION_MS = 6000  # group.min.session.timeout.ms
PASSING_ERRORS = (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID)


def pybroker_with_policy(tmp_path_factory, policy: str):
    """A pybroker with ``group.consumer.migration.policy=policy``, for a module fixture."""
    b = start_broker(tmp_path_factory, f"migration-{policy}", {
        "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS, "group.consumer.session.timeout.ms": SESSION_MS,
        "group.initial.rebalance.delay.ms": 0, "group.consumer.migration.policy": policy})
    wait_for_coordinator(b.port)
    yield b
    finish_broker(b)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    yield from pybroker_with_policy(tmp_path_factory, "bidirectional")


def kafka_with_policy(tmp_path_factory, policy: str):
    """Kafka 3.8 with ``group.consumer.migration.policy=policy``: its port, for a module fixture."""
    from tests.secure_brokers import KAFKA_HOME, kafka_available
    if not kafka_available():
        pytest.skip(f"Apache Kafka 3.8 is not installed at {KAFKA_HOME}")
    proc, port = start_kafka(str(tmp_path_factory.mktemp(f"kafka-migration-{policy}")),
                             [f"group.consumer.migration.policy={policy}"])
    try:
        yield port
    finally:
        proc.kill()
        proc.wait(60)


@pytest.fixture(scope="module")
def kafka_bidirectional(tmp_path_factory):
    yield from kafka_with_policy(tmp_path_factory, "bidirectional")


# ---- on the wire ----------------------------------------------------------------------------

def classic_join(w, group, topic, member_id=""):
    sub = encode_subscription(Subscription([topic]))
    return w.request(JOIN(group_id=group, session_timeout_ms=CLASSIC_SESSION_MS, rebalance_timeout_ms=10000,
                          member_id=member_id, protocol_type="consumer",
                          protocols=[JOIN.JoinGroupRequestProtocol(name="range", metadata=sub)]), 3)


def classic_sync(w, group, member_id, generation, assignments=()):
    r = w.request(SYNC(group_id=group, generation_id=generation, member_id=member_id, assignments=[
        SYNC.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments]), 3)
    parts = sorted(tp.partition for tp in decode_assignment(r.assignment).partitions) if not r.error_code else None
    return r.error_code, parts


def classic_heartbeat(w, group, member_id, generation):
    return w.request(CLASSIC_HB(group_id=group, generation_id=generation, member_id=member_id), 3).error_code


def listing(w, group):
    return [(g.group_type, g.group_state) for g in w.request(LIST(states_filter=[], types_filter=[]), 5).groups
            if g.group_id == group]


def migration_transcript(port: int) -> list:
    """One classic member, a consumer-protocol member joining (upgrade), the classic member rejoining
    inside the consumer group, committing, the consumer member leaving (downgrade): each answer,
    normalized (member ids dropped, partitions counted where the assignor chooses them)."""
    topic, tid = create_topic(port, PARTITIONS)
    group, out = unique("migrate"), []
    wait_for_coordinator(port)
    with WireClient(port) as w:
        r = classic_join(w, group, topic)
        a, generation = r.member_id, r.generation_id
        out.append(("classic join", r.error_code, r.leader == a))
        everything = encode_assignment(Assignment([TP(topic, p) for p in range(PARTITIONS)]))
        out.append(("classic sync", *classic_sync(w, group, a, generation, [(a, everything)])))
        out.append(("listed", listing(w, group)))
        b = uuid.uuid4().hex
        r = heartbeat(w, group, b, 0, topics=[topic], owned={}, rebalance_ms=10000, version=0)
        b_epoch = r.member_epoch
        out.append(("consumer member joins", r.error_code, b_epoch - generation, _size(r)))
        out.append(("listed after the upgrade", [t for t, _ in listing(w, group)]))
        out.append(("classic heartbeat", classic_heartbeat(w, group, a, generation)))
        r = classic_join(w, group, topic, a)
        out.append(("classic rejoin", r.error_code, r.generation_id == b_epoch, r.leader, r.protocol_name,
                    [m.member_id for m in r.members]))
        generation = r.generation_id
        error, mine = classic_sync(w, group, a, generation)
        mine = mine or []
        out.append(("classic sync in the consumer group", error, len(mine)))
        r = heartbeat(w, group, b, b_epoch, owned={}, version=0)
        theirs = sorted(p for t in r.assignment.topic_partitions for p in t.partitions) if r.assignment else []
        out.append(("consumer member gets the rest", r.error_code, sorted(mine + theirs) == list(range(PARTITIONS))))
        out.append(("classic heartbeat, settled", classic_heartbeat(w, group, a, generation)))
        out.append(("stale classic heartbeat", classic_heartbeat(w, group, a, generation - 1)))
        out.append(("classic commits", commit(w, group, topic, a, generation), commit(w, group, topic, a,
                                                                                      generation - 1)))
        r = heartbeat(w, group, b, -1, version=0)
        out.append(("consumer member leaves", r.error_code, listing(w, group)))
        out.append(("classic heartbeat after the downgrade", classic_heartbeat(w, group, a, generation)))
        r = classic_join(w, group, topic, a)
        out.append(("classic rejoin after the downgrade", r.error_code, r.generation_id - generation, r.leader == a))
        generation = r.generation_id
        out.append(("classic sync after the downgrade", *classic_sync(w, group, a, generation, [(a, everything)])))
        out.append(("listed at the end", listing(w, group)))
    return out


def _size(r):
    """Partitions in a ConsumerGroupHeartbeat answer's assignment (None: no assignment sent)."""
    return None if r.assignment is None else sum(len(t.partitions) for t in r.assignment.topic_partitions)


def commit(w, group, topic, member_id, generation) -> int:
    r = w.request(COMMIT(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, topics=[
        COMMIT.OffsetCommitRequestTopic(name=topic, partitions=[
            COMMIT.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]), 8)
    return r.topics[0].partitions[0].error_code


def test_upgrade_and_downgrade_on_the_wire(broker):
    t = dict((step[0], step[1:]) for step in migration_transcript(broker.port))
    assert t["classic join"] == (NONE, True)
    assert t["listed"] == ([("classic", "Stable")],)
    assert t["consumer member joins"] == (NONE, 1, 0)  # a new epoch; its partitions are still the classic member's
    assert t["listed after the upgrade"] == (["consumer"],)
    assert t["classic heartbeat"] == (REBALANCE_IN_PROGRESS,)
    assert t["classic rejoin"] == (NONE, True, "", "range", [])  # no leader: the server assigns
    assert t["classic sync in the consumer group"] == (NONE, PARTITIONS // 2)
    assert t["consumer member gets the rest"] == (NONE, True)
    assert t["classic heartbeat, settled"] == (NONE,)
    assert t["stale classic heartbeat"] == (ILLEGAL_GENERATION,)
    assert t["classic commits"] == (NONE, ILLEGAL_GENERATION)
    assert t["consumer member leaves"] == (NONE, [("classic", "PreparingRebalance")])
    assert t["classic heartbeat after the downgrade"] == (REBALANCE_IN_PROGRESS,)
    assert t["classic rejoin after the downgrade"] == (NONE, 1, True)
    assert t["listed at the end"] == ([("classic", "Stable")],)


def test_upgrade_and_downgrade_answer_as_kafka(broker, kafka_bidirectional):
    assert migration_transcript(broker.port) == migration_transcript(kafka_bidirectional)


def conversion_transcript(port: int) -> list:
    """Without online migration: a classic group with a member, a consumer-protocol member knocking,
    the classic member leaving, the consumer member joining (the Empty group converts), a classic
    member joining the consumer group: each step's error code and the listing."""
    topic, _ = create_topic(port, 1)
    group, out = unique("convert"), []
    wait_for_coordinator(port)
    with WireClient(port) as w:
        classic = classic_join(w, group, topic)
        # no listing here: Kafka lists groups from its last committed write, and a classic group is
        # first written when its rebalance completes, so Kafka may or may not show it yet
        out.append(("classic join", classic.error_code))
        r = heartbeat(w, group, uuid.uuid4().hex, 0, topics=[topic], owned={}, rebalance_ms=30000, version=0)
        out.append(("consumer member into a busy classic group", r.error_code))
        out.append(("classic leave", w.request(LEAVE(group_id=group, member_id=classic.member_id), 2).error_code,
                    listing(w, group)))
        r = heartbeat(w, group, uuid.uuid4().hex, 0, topics=[topic], owned={}, rebalance_ms=30000, version=0)
        out.append(("consumer member into the empty classic group", r.error_code, r.member_epoch, listing(w, group)))
        r = classic_join(w, group, topic)
        out.append(("classic member into the consumer group", r.error_code, r.generation_id, r.leader,
                    listing(w, group)))
    return out


@pytest.fixture(scope="module")
def broker_without_migration(tmp_path_factory):
    yield from pybroker_with_policy(tmp_path_factory, "disabled")


@pytest.fixture(scope="module")
def kafka_without_migration(tmp_path_factory):
    yield from kafka_with_policy(tmp_path_factory, "disabled")


def test_without_migration_a_busy_classic_group_stays_classic(broker_without_migration):
    t = dict((step[0], step[1:]) for step in conversion_transcript(broker_without_migration.port))
    assert t["consumer member into a busy classic group"] == (GROUP_ID_NOT_FOUND,)
    assert t["classic leave"] == (NONE, [("classic", "Empty")])
    assert t["consumer member into the empty classic group"] == (NONE, 1, [("consumer", "Stable")])
    assert t["classic member into the consumer group"] == (NONE, 2, "", [("consumer", "Reconciling")])


def test_without_migration_answers_as_kafka(broker_without_migration, kafka_without_migration):
    assert conversion_transcript(broker_without_migration.port) == conversion_transcript(kafka_without_migration)


# ---- librdkafka: a rolling upgrade and a rolling downgrade ------------------------------------

def rdkafka_consumer(b, group, protocol, name, strategy):
    conf = {"bootstrap.servers": b.bootstrap, "group.id": group, "group.protocol": protocol,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": name,
            "topic.metadata.refresh.interval.ms": 1000}
    if protocol == "classic":
        conf.update({"partition.assignment.strategy": strategy, "session.timeout.ms": CLASSIC_SESSION_MS,
                     "heartbeat.interval.ms": HEARTBEAT_MS})
    return Consumer(conf)


class Fleet:
    """Consumers of one group; every record each consumed, committed after processing."""

    def __init__(self, b, group, topic, strategy):
        self.b, self.group, self.topic, self.strategy = b, group, topic, strategy
        self.members: dict[str, Consumer] = {}
        self.seen: list[tuple[int, int]] = []  # (partition, offset)
        self.errors: list = []  # error codes of reports and commits refused on the way

    def start(self, name, protocol):
        c = rdkafka_consumer(self.b, self.group, protocol, name, self.strategy)
        c.subscribe([self.topic])
        self.members[name] = c

    def stop(self, name):
        c = self.members.pop(name)
        self.poll_all(rounds=1, only=[c])
        c.close()  # commits nothing more; leaves the group

    def poll_all(self, rounds=1, only=None):
        for _ in range(rounds):
            for c in (only or list(self.members.values())):
                msgs, consumed = c.consume(200, 0.02), False
                for m in msgs:
                    if m.error() is not None:
                        # a join cut short by the group changing type is reported, then retried by the client
                        assert not m.error().fatal() and m.error().code() in PASSING_ERRORS, m.error()
                        self.errors.append(m.error().code())
                        continue
                    self.seen.append((m.partition(), m.offset()))
                    consumed = True
                if consumed:
                    self.commit(c)

    def commit(self, c):
        """A commit refused because the group moved on is what an application sees during a
        rebalance: the records come again to whoever owns the partition next."""
        try:
            c.commit(asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0]
            assert not error.fatal() and error.code() in PASSING_ERRORS, error
            self.errors.append(error.code())

    def consumed_up_to(self, ends: dict) -> bool:
        got = {}
        for p, o in self.seen:
            got.setdefault(p, set()).add(o)
        return all(set(range(end)) <= got.get(p, set()) for p, end in ends.items())

    def everyone_assigned(self) -> bool:
        owned = [tp.partition for c in self.members.values() for tp in c.assignment()]
        return sorted(owned) == list(range(PARTITIONS))

    def close(self):
        for name in list(self.members):
            self.members.pop(name).close()


def group_type(port, group):
    with WireClient(port) as w:
        found = listing(w, group)
    return found[0][0] if found else None


def settle(fleet, produced: dict, expected_type: str):
    """Poll until every partition is owned by someone, everything produced was consumed and the group
    is of ``expected_type``."""
    ok = wait_until(lambda: (fleet.poll_all(3) or True) and fleet.everyone_assigned()
                    and fleet.consumed_up_to(produced) and group_type(fleet.b.port, fleet.group) == expected_type,
                    timeout=DEADLINE, interval=0.05)
    assert ok, (fleet.members.keys(), {n: c.assignment() for n, c in fleet.members.items()},
                group_type(fleet.b.port, fleet.group))


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_librdkafka_rolling_upgrade_then_downgrade(broker, strategy):
    """Classic consumers (incremental or eager) replaced one by one by consumer-protocol ones and back:
    the group changes type with the last member of a kind, every partition always finds an owner, and
    every record is consumed and committed."""
    topic, _ = create_topic(broker.port, PARTITIONS)
    group = unique("rolling")
    fleet = Fleet(broker, group, topic, strategy)
    produced = {p: 0 for p in range(PARTITIONS)}

    def more(n=200):
        acked = produce(broker, topic, sum(produced.values()), n, PARTITIONS)
        for p, offset in acked.values():
            produced[p] = max(produced[p], offset + 1)

    try:
        for i in range(3):
            fleet.start(f"classic-{i}", "classic")
        more()
        settle(fleet, produced, "classic")
        for i in range(3):  # upgrade one consumer at a time while records keep coming
            fleet.stop(f"classic-{i}")
            fleet.start(f"consumer-{i}", "consumer")
            more()
            settle(fleet, produced, "consumer")
        for i in range(3):  # and back
            fleet.stop(f"consumer-{i}")
            fleet.start(f"classic-again-{i}", "classic")
            more()
            settle(fleet, produced, "consumer" if i < 2 else "classic")
    finally:
        fleet.close()
    committed = _committed(broker, group, topic)
    assert committed == produced, (committed, produced)
    print("errors librdkafka reported on the way:", fleet.errors)


def _committed(b, group, topic) -> dict:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def test_a_classic_member_that_never_rejoins_is_fenced_and_its_partitions_move(broker):
    topic, tid = create_topic(broker.port, 2)
    group = unique("no-rejoin")
    with WireClient(broker.port) as w:
        r = classic_join(w, group, topic)
        a, generation = r.member_id, r.generation_id
        everything = encode_assignment(Assignment([TP(topic, 0), TP(topic, 1)]))
        assert classic_sync(w, group, a, generation, [(a, everything)])[0] == NONE
        b = uuid.uuid4().hex
        r = heartbeat(w, group, b, 0, topics=[topic], owned={}, rebalance_ms=10000, version=0)
        state = {"epoch": r.member_epoch, "owned": {}}
        # the classic member goes silent: after its session timeout the consumer member gets both partitions

        def both():
            hb = heartbeat(w, group, b, state["epoch"], owned=state["owned"], version=0)
            assert hb.error_code == NONE, hb.error_code
            state["epoch"] = hb.member_epoch
            if hb.assignment is not None:
                state["owned"] = {t.topic_id: set(t.partitions) for t in hb.assignment.topic_partitions}
            return sum(len(ps) for ps in state["owned"].values()) == 2
        assert wait_until(both, timeout=CLASSIC_SESSION_MS / 1000 + DEADLINE, interval=0.2)
        assert classic_heartbeat(w, group, a, generation) == 25  # UNKNOWN_MEMBER_ID: it was fenced


# ---- other classic clients inside a consumer group ----------------------------------------------

class ClassicClients:
    """A kafka-python and a pybroker classic consumer, polled alike: (partition, offset) consumed."""

    def __init__(self, b, group, topic):
        from pybroker.client import Consumer as OurConsumer
        common = {"session_timeout_ms": CLASSIC_SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS}
        self.kp = kafka_python_group_consumer(topic, bootstrap_servers=b.bootstrap, group_id=group,
                                              auto_offset_reset="earliest", enable_auto_commit=False, **common)
        self.ours = OurConsumer({"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                                 "enable.auto.commit": False, "session.timeout.ms": CLASSIC_SESSION_MS,
                                 "heartbeat.interval.ms": HEARTBEAT_MS, "fetch.max.wait.ms": 100})
        self.ours.subscribe([topic])
        self.seen = {"kafka-python": [], "pybroker": []}

    def poll(self):
        for records in self.kp.poll(timeout_ms=20).values():
            self.seen["kafka-python"] += [(r.partition, r.offset) for r in records]
        if self.seen["kafka-python"]:
            self.kp.commit()
        got = self.ours.poll(20)
        self.seen["pybroker"] += [(r.partition, r.offset) for r in got]
        if got:
            self.ours.commit()

    def owned(self) -> dict:
        return {"kafka-python": sorted(tp.partition for tp in self.kp.assignment()),
                "pybroker": sorted(tp.partition for tp in self.ours.assignment())}

    def close(self):
        self.kp.close()
        self.ours.close()


def test_kafka_python_and_pybroker_classic_consumers_share_a_consumer_group(broker):
    """Two classic clients join a group a consumer-protocol member created; the server assignor
    gives each its share and between them and the librdkafka member every record is consumed."""
    topic, _ = create_topic(broker.port, PARTITIONS)
    group = unique("mixed")
    fleet = Fleet(broker, group, topic, "range")
    fleet.start("librdkafka-consumer", "consumer")
    produced = {p: 0 for p in range(PARTITIONS)}
    for p, offset in produce(broker, topic, 0, 400, PARTITIONS).values():
        produced[p] = max(produced[p], offset + 1)
    classic = ClassicClients(broker, group, topic)
    try:
        def spread():
            fleet.poll_all()
            classic.poll()
            owned = {**classic.owned(), "librdkafka": sorted(tp.partition for c in fleet.members.values()
                                                              for tp in c.assignment())}
            everything = sorted(p for ps in owned.values() for p in ps) == list(range(PARTITIONS))
            return everything and all(owned.values()) and owned
        owned = wait_until(spread, timeout=DEADLINE, interval=0.05)
        assert owned, (classic.owned(), group_type(broker.port, group))
        assert group_type(broker.port, group) == "consumer"

        def all_seen():
            fleet.poll_all()
            classic.poll()
            seen = set(fleet.seen).union(*classic.seen.values())
            return all((p, o) in seen for p, end in produced.items() for o in range(end))
        assert wait_until(all_seen, timeout=DEADLINE)
    finally:
        classic.close()
        fleet.close()
