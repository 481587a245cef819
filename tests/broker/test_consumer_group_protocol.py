"""The consumer group protocol (KIP-848) against a real broker: librdkafka consumers with
``group.protocol=consumer`` sharing partitions exactly once while members join and leave (no
stop-the-world: a member keeps what it is not asked to give up), and wire-level heartbeats for
epochs, incremental revocation, timeouts, regex subscriptions, offsets with member epochs,
ConsumerGroupDescribe, classic/consumer coexistence and Kafka's error codes.

The cases of the other tiers: tests/unit/test_consumer_group_protocol.py.
"""
import collections
import functools
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, Producer
from confluent_kafka.admin import AdminClient

from pybroker.protocol import REQUESTS
from tests.clientutil import DEADLINE, finish_broker, start_broker, wait_until
from tests.kafka_wire import WireClient

HEARTBEAT_MS, SESSION_MS = 500, 4000
NONE, UNKNOWN_MEMBER_ID, INCONSISTENT_GROUP_PROTOCOL, INVALID_REQUEST = 0, 25, 23, 42
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, UNRELEASED_INSTANCE_ID = 68, 69, 111
FENCED_MEMBER_EPOCH, UNSUPPORTED_ASSIGNOR, STALE_MEMBER_EPOCH, INVALID_REGULAR_EXPRESSION = 110, 112, 113, 128
HB, DESCRIBE = REQUESTS[68], REQUESTS[69]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory, "kip848", {
        "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS, "group.consumer.session.timeout.ms": SESSION_MS,
        "group.initial.rebalance.delay.ms": 0})
    wait_for_coordinator(b.port)
    yield b
    finish_broker(b)


def wait_for_coordinator(port: int) -> None:
    """Ask for a group coordinator (that creates __consumer_offsets, as clients do first) until a probe
    member can join and leave."""
    topic, _ = create_topic(port, 1)
    find = REQUESTS[10]

    def ready():
        w.request(find(key="probe", key_type=0), 3)
        member = uuid.uuid4().hex
        r = heartbeat(w, "probe", member, 0, topics=[topic], owned={}, rebalance_ms=1000, version=0)
        if r.error_code == NONE:
            heartbeat(w, "probe", member, -1, version=0)
        return r.error_code == NONE
    with WireClient(port) as w:
        assert wait_until(ready, timeout=60, interval=0.5), "no group coordinator"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(port: int, partitions: int, name: str | None = None) -> tuple[str, uuid.UUID]:
    name = name or unique("cg")
    with WireClient(port) as w:
        w.create_topic(name, partitions)
        topic = wait_until(lambda: _topic_with_leaders(w, name, partitions))
    assert topic is not None, f"{name} has no leaders"
    return name, topic.topic_id


def _topic_with_leaders(w, name, partitions):
    t = w.metadata([name], version=12).topics[0]
    return t if t.error_code == 0 and len(t.partitions) == partitions and \
        all(p.leader_id >= 0 for p in t.partitions) else None


def heartbeat(w, group, member_id, epoch, topics=None, regex=None, owned=None, rebalance_ms=-1, assignor=None,
              instance_id=None, version=1):
    """One ConsumerGroupHeartbeat; ``owned``: {topic id: partitions} or None (unchanged)."""
    parts = None if owned is None else [HB.TopicPartitions(topic_id=t, partitions=sorted(ps))
                                        for t, ps in owned.items()]
    req = HB(group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id,
             rebalance_timeout_ms=rebalance_ms, subscribed_topic_names=topics, subscribed_topic_regex=regex,
             server_assignor=assignor, topic_partitions=parts)
    return w.request(req, version)


def join(w, group, topics=None, regex=None, rebalance_ms=30000, **kw):
    member_id = uuid.uuid4().hex
    r = heartbeat(w, group, member_id, 0, topics=topics, regex=regex, owned={}, rebalance_ms=rebalance_ms, **kw)
    assert r.error_code == NONE, (r.error_code, r.error_message)
    assert r.member_id == member_id and r.heartbeat_interval_ms == HEARTBEAT_MS
    return member_id, r


def assigned(r) -> dict:
    return {t.topic_id: set(t.partitions) for t in r.assignment.topic_partitions if t.partitions}


def describe(w, group):
    return w.request(DESCRIBE(group_ids=[group], include_authorized_operations=False), 0).groups[0]


# ---- wire level ---------------------------------------------------------------------------

def test_api_versions_advertise_the_consumer_group_apis(broker):
    with WireClient(broker.port) as w:
        keys = {k.api_key: (k.min_version, k.max_version) for k in w.api_versions().api_keys}
    assert keys[68] == (0, 1) and keys[69] == (0, 0)


def test_incremental_revocation_then_assignment(broker):
    topic, tid = create_topic(broker.port, 4)
    group = unique("g")
    with WireClient(broker.port) as w:
        a, r = join(w, group, [topic])
        assert r.member_epoch == 1 and assigned(r) == {tid: {0, 1, 2, 3}}
        b, r = join(w, group, [topic])
        assert r.member_epoch == 2 and assigned(r) == {}  # its partitions are still a's
        d = describe(w, group)
        assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch) == (0, "Reconciling", 2, 2)
        target_b = {t.topic_id: set(t.partitions) for t in
                    next(m for m in d.members if m.member_id == b).target_assignment.topic_partitions}
        assert len(target_b[tid]) == 2
        r = heartbeat(w, group, a, 1, owned={tid: {0, 1, 2, 3}})  # a is asked to revoke, keeps epoch 1
        assert r.error_code == NONE and r.member_epoch == 1
        kept = assigned(r)[tid]
        assert len(kept) == 2 and not kept & target_b[tid]
        r = heartbeat(w, group, b, 2, owned={})
        assert r.assignment is None or assigned(r) == {}  # nothing released yet
        r = heartbeat(w, group, a, 1, owned={tid: kept})  # revoked: a moves to epoch 2
        assert (r.error_code, r.member_epoch) == (NONE, 2)
        r = heartbeat(w, group, b, 2, owned={})
        assert assigned(r) == {tid: target_b[tid]}
        r = heartbeat(w, group, b, 2, owned={tid: target_b[tid]})
        assert r.assignment is None  # nothing new: no assignment in the answer
        d = describe(w, group)
        assert d.group_state == "Stable" and {m.member_epoch for m in d.members} == {2}
        assert d.assignor_name == "uniform"
        r = heartbeat(w, group, a, -1)  # a leaves: b gets everything at epoch 3
        assert (r.error_code, r.member_epoch) == (NONE, -1)
        r = heartbeat(w, group, b, 2, owned={tid: target_b[tid]})
        assert (r.member_epoch, assigned(r)) == (3, {tid: {0, 1, 2, 3}})


def test_heartbeat_errors(broker):
    topic, tid = create_topic(broker.port, 2)
    group = unique("g")
    with WireClient(broker.port) as w:
        a, _ = join(w, group, [topic])
        assert heartbeat(w, group, "nobody", 1).error_code == UNKNOWN_MEMBER_ID
        assert heartbeat(w, group, a, 7).error_code == FENCED_MEMBER_EPOCH
        assert heartbeat(w, group, "", 0, topics=[topic], owned={}, rebalance_ms=1000).error_code == INVALID_REQUEST
        assert heartbeat(w, group, "x", 0, topics=[topic], owned={}).error_code == INVALID_REQUEST  # no timeout
        assert heartbeat(w, group, "x", 0, owned={}, rebalance_ms=1000).error_code == INVALID_REQUEST  # no topics
        assert heartbeat(w, "", "x", 0, topics=[topic], owned={}, rebalance_ms=1000).error_code == INVALID_REQUEST
        r = heartbeat(w, group, "x", 0, topics=[topic], owned={}, rebalance_ms=1000, assignor="sticky")
        assert r.error_code == UNSUPPORTED_ASSIGNOR and r.error_message
        r = heartbeat(w, group, "x", 0, regex="(unclosed", owned={}, rebalance_ms=1000)
        assert r.error_code == INVALID_REGULAR_EXPRESSION
        assert heartbeat(w, unique("g"), "x", 3).error_code == UNKNOWN_MEMBER_ID  # a group we do not know
        r = heartbeat(w, group, "", 0, topics=[topic], owned={}, rebalance_ms=1000, version=0)
        assert r.error_code == NONE and r.member_id  # v0: the coordinator names the member
        d = w.request(DESCRIBE(group_ids=[unique("none")], include_authorized_operations=False), 0).groups[0]
        assert d.error_code == GROUP_ID_NOT_FOUND


def test_offsets_are_committed_with_the_member_epoch(broker):
    topic, tid = create_topic(broker.port, 2)
    group = unique("g")
    req = REQUESTS[8]

    def commit(w, member, epoch, offset):
        r = w.request(req(group_id=group, generation_id_or_member_epoch=epoch, member_id=member, topics=[
            req.OffsetCommitRequestTopic(name=topic, partitions=[
                req.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])]), 9)
        return r.topics[0].partitions[0].error_code

    with WireClient(broker.port) as w:
        a, _ = join(w, group, [topic])
        assert commit(w, a, 1, 5) == NONE
        assert commit(w, a, 0, 6) == STALE_MEMBER_EPOCH
        assert commit(w, a, 2, 6) == STALE_MEMBER_EPOCH
        assert commit(w, "nobody", 1, 6) == UNKNOWN_MEMBER_ID
        fetch = REQUESTS[9]
        r = w.request(fetch(group_id=group, topics=[fetch.OffsetFetchRequestTopic(name=topic,
                                                                                  partition_indexes=[0])]), 5)
        assert r.topics[0].partitions[0].committed_offset == 5

        def fetch_v9(member, epoch):
            g = w.request(fetch(groups=[fetch.OffsetFetchRequestGroup(group_id=group, member_id=member,
                                                                      member_epoch=epoch,
                                                                      topics=None)]), 9).groups[0]
            return g.error_code, [p.committed_offset for t in g.topics for p in t.partitions]
        assert fetch_v9(a, 1) == (NONE, [5])
        assert fetch_v9(None, -1) == (NONE, [5])  # an admin read
        assert fetch_v9(a, 0)[0] == STALE_MEMBER_EPOCH
        assert fetch_v9("nobody", 1)[0] == UNKNOWN_MEMBER_ID
        delete = REQUESTS[42]
        assert w.request(delete(groups_names=[group]), 2).results[0].error_code == NON_EMPTY_GROUP
        heartbeat(w, group, a, -1)
        assert commit(w, "", -1, 9) == NONE  # an Empty group takes simple commits
        assert w.request(delete(groups_names=[group]), 2).results[0].error_code == NONE


def test_session_timeout_frees_the_partitions(broker):
    topic, tid = create_topic(broker.port, 2)
    group = unique("g")
    with WireClient(broker.port) as w:
        a, _ = join(w, group, [topic])
        b, r = join(w, group, [topic])  # a never heartbeats again
        epoch, owned = r.member_epoch, assigned(r)

        def b_has_all():
            nonlocal epoch, owned
            r = heartbeat(w, group, b, epoch, owned=owned)
            assert r.error_code == NONE
            epoch, owned = r.member_epoch, assigned(r) if r.assignment else owned
            return owned == {tid: {0, 1}}
        assert wait_until(b_has_all, timeout=SESSION_MS / 1000 * 4, interval=HEARTBEAT_MS / 1000)
        assert heartbeat(w, group, a, 1).error_code == UNKNOWN_MEMBER_ID


def test_a_member_that_does_not_revoke_in_time_is_fenced(broker):
    topic, tid = create_topic(broker.port, 2)
    group = unique("g")
    with WireClient(broker.port) as w:
        a, _ = join(w, group, [topic], rebalance_ms=1000)
        b, r = join(w, group, [topic])
        r = heartbeat(w, group, a, 1, owned={tid: {0, 1}})
        assert r.member_epoch == 1 and len(assigned(r)[tid]) == 1  # asked to revoke one

        def b_got_one():
            r = heartbeat(w, group, b, 2, owned={})
            return r.assignment is not None and assigned(r)
        # a keeps heartbeating but never lets go: after its rebalance timeout it is fenced
        end = time.monotonic() + 10
        while time.monotonic() < end:
            r = heartbeat(w, group, a, 1, owned={tid: {0, 1}})
            if r.error_code:
                break
            time.sleep(0.2)
        assert r.error_code == UNKNOWN_MEMBER_ID
        assert wait_until(b_got_one, timeout=5)


def test_static_member_steps_out_and_back_keeping_its_partitions(broker):
    topic, tid = create_topic(broker.port, 4)
    group = unique("g")
    with WireClient(broker.port) as w:
        a, r = join(w, group, [topic], instance_id="instance-a", assignor="range")
        epoch, mine = r.member_epoch, assigned(r)
        r = heartbeat(w, group, uuid.uuid4().hex, 0, topics=[topic], owned={}, rebalance_ms=30000,
                      instance_id="instance-a")
        assert r.error_code == UNRELEASED_INSTANCE_ID  # still in use
        r = heartbeat(w, group, a, -2, instance_id="instance-a")
        assert (r.error_code, r.member_epoch) == (NONE, -2)
        back, r = join(w, group, [topic], instance_id="instance-a", assignor="range")
        assert (r.member_epoch, assigned(r)) == (epoch, mine)  # no rebalance: the same epoch and partitions
        d = describe(w, group)
        assert [(m.member_id, m.instance_id) for m in d.members] == [(back, "instance-a")]
        assert d.assignor_name == "range" and d.group_epoch == epoch
        assert heartbeat(w, group, a, epoch).error_code == UNKNOWN_MEMBER_ID


def test_regex_subscription_follows_new_topics(broker):
    prefix = unique("rx")
    t1, id1 = create_topic(broker.port, 2, f"{prefix}-one")
    group = unique("g")
    with WireClient(broker.port) as w:
        a, r = join(w, group, regex=f"{prefix}-.*")
        assert assigned(r) == {id1: {0, 1}}
        t2, id2 = create_topic(broker.port, 1, f"{prefix}-two")
        create_topic(broker.port, 1, f"other-{prefix}")  # not matched: the regex must match the whole name
        state = {"epoch": r.member_epoch, "owned": assigned(r)}

        def sees_both():
            r = heartbeat(w, group, a, state["epoch"], owned=state["owned"])
            assert r.error_code == NONE
            state["epoch"] = r.member_epoch
            if r.assignment is not None:
                state["owned"] = assigned(r)
            return state["owned"] == {id1: {0, 1}, id2: {0}}
        assert wait_until(sees_both, timeout=10, interval=0.3)
        m = describe(w, group).members[0]
        assert m.subscribed_topic_regex == f"{prefix}-.*"


def test_classic_and_consumer_groups_coexist(broker):
    topic, tid = create_topic(broker.port, 1)
    group = unique("g")
    join_req, leave_req = REQUESTS[11], REQUESTS[13]
    with WireClient(broker.port) as w:
        r = w.request(join_req(group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="",
                               protocol_type="consumer",
                               protocols=[join_req.JoinGroupRequestProtocol(name="range", metadata=b"")]), 3)
        assert r.error_code == NONE
        r2 = heartbeat(w, group, "m", 0, topics=[topic], owned={}, rebalance_ms=1000)
        assert r2.error_code == GROUP_ID_NOT_FOUND  # members without a readable subscription: no upgrade
        assert describe(w, group).error_code == GROUP_ID_NOT_FOUND
        assert w.request(leave_req(group_id=group, member_id=r.member_id), 2).error_code == NONE
        a, _ = join(w, group, [topic])  # the Empty classic group converts
        r = w.request(join_req(group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="",
                               protocol_type="consumer",
                               protocols=[join_req.JoinGroupRequestProtocol(name="range", metadata=b"")]), 3)
        assert r.error_code == INCONSISTENT_GROUP_PROTOCOL  # no subscription to serve it by
        listed = w.request(REQUESTS[16](states_filter=[], types_filter=["consumer"]), 5).groups
        assert [(g.group_id, g.group_type, g.group_state) for g in listed if g.group_id == group] == \
            [(group, "consumer", "Stable")]


# ---- librdkafka ----------------------------------------------------------------------------

class Ownership:
    """Partition ownership from incremental rebalance callbacks: never two owners at once."""

    def __init__(self):
        self.owner: dict[int, str] = {}
        self.violations = []
        self.revoked = collections.defaultdict(list)  # consumer -> [set of partitions revoked at once]

    def callbacks(self, name):
        def on_assign(c, partitions):
            for tp in partitions:
                if self.owner.get(tp.partition) not in (None, name):
                    self.violations.append((tp.partition, self.owner[tp.partition], name))
                self.owner[tp.partition] = name

        def on_revoke(c, partitions):
            self.revoked[name].append({tp.partition for tp in partitions})
            for tp in partitions:
                if self.owner.get(tp.partition) == name:
                    del self.owner[tp.partition]
        return {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_revoke}

    def of(self, name) -> set:
        return {p for p, n in self.owner.items() if n == name}


def produce(b, topic, start, count, partitions) -> dict:
    acked = {}
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})

    def done(err, msg):
        assert err is None, err
        acked[msg.value()] = (msg.partition(), msg.offset())
    for i in range(start, start + count):
        p.produce(topic, value=f"v{i}".encode(), partition=i % partitions, on_delivery=done)
    assert p.flush(DEADLINE) == 0 and len(acked) == count
    return acked


def test_librdkafka_consumers_share_partitions_exactly_once(broker):
    partitions = 6
    topic, _ = create_topic(broker.port, partitions)
    group = unique("g")
    acked = produce(broker, topic, 0, 300, partitions)
    own = Ownership()
    state: dict = {}
    got = collections.defaultdict(list)

    def start(name):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "topic.metadata.refresh.interval.ms": 2000})
        state[name] = {"consumer": c, "consumed": 0}
        c.subscribe([topic], **own.callbacks(name))

    def poll_round():
        for name, s in list(state.items()):
            msgs = s["consumer"].consume(100, 0.05)
            for m in msgs:
                assert m.error() is None, m.error()
                got[name].append((m.partition(), m.offset(), m.value()))
            if msgs:
                s["consumed"] += len(msgs)
                s["consumer"].commit(asynchronous=False)  # processed, then committed: exactly once

    def poll_until(predicate, timeout=DEADLINE):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            poll_round()
            if predicate():
                return True
        return False

    def total():
        return sum(len(v) for v in got.values())

    try:
        start("c0")
        assert poll_until(lambda: len(own.of("c0")) == partitions and got["c0"]), "c0 never got the partitions"
        start("c1")
        start("c2")
        acked.update(produce(broker, topic, 300, 300, partitions))
        assert poll_until(lambda: all(len(own.of(n)) == 2 for n in state) and total() >= len(acked)), \
            (dict((n, own.of(n)) for n in state), total())
        assert not own.violations, own.violations
        # incremental: c0 gave up only what the newcomers needed, never its whole assignment at once
        assert all(len(r) < partitions for r in own.revoked["c0"]), own.revoked["c0"]
        with WireClient(broker.port) as w:
            d = describe(w, group)
        assert d.group_state == "Stable" and len(d.members) == 3
        assert len({m.member_epoch for m in d.members}) == 1 and d.members[0].member_epoch == d.assignment_epoch
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # librdkafka asks ConsumerGroupDescribe
        desc = admin.describe_consumer_groups([group])[group].result(DEADLINE)
        assert desc.type == ConsumerGroupType.CONSUMER and desc.state == ConsumerGroupState.STABLE
        assert desc.partition_assignor == "uniform"
        held = sorted(tp.partition for m in desc.members for tp in m.assignment.topic_partitions)
        assert held == list(range(partitions))
        assert all(m.target_assignment.topic_partitions == m.assignment.topic_partitions for m in desc.members)
        state.pop("c2")["consumer"].close()  # a member leaves: its partitions move on
        acked.update(produce(broker, topic, 600, 150, partitions))
        assert poll_until(lambda: total() >= len(acked) and len(own.of("c0") | own.of("c1")) == partitions), \
            (total(), len(acked))
        assert not own.violations, own.violations
    finally:
        for s in state.values():
            s["consumer"].close()
    seen = [v for name in got for (_, _, v) in got[name]]
    assert len(seen) == len(set(seen)), "a record was consumed twice"
    assert set(seen) == set(acked), "a record was never consumed"
    for name in got:
        for part, off, value in got[name]:
            assert acked[value] == (part, off)


# ---- the same script against Apache Kafka 3.8 (the oracle) --------------------------------------

def start_kafka(tmp, extra=()):
    """A KRaft Kafka 3.8 with the consumer group protocol enabled (and ``extra`` property lines);
    (process, port). The caller kills it."""
    import os
    import subprocess
    from tests.cluster import Cluster, answers_requests, free_ports
    from tests.secure_brokers import KAFKA_HOME
    port, controller = free_ports(2)
    lines = ["process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{controller}",
             f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
             f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
             "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
             f"log.dirs={os.path.join(tmp, 'kafka-data')}", "offsets.topic.replication.factor=1",
             "group.initial.rebalance.delay.ms=0", "group.coordinator.rebalance.protocols=classic,consumer",
             f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}",
             f"group.consumer.min.heartbeat.interval.ms={HEARTBEAT_MS}",
             f"group.consumer.session.timeout.ms={SESSION_MS}", f"group.consumer.min.session.timeout.ms={SESSION_MS}",
             *extra]
    props = os.path.join(tmp, "kafka.properties")
    with open(props, "w") as f:
        f.write("\n".join(lines) + "\n")
    env = {**os.environ, "LOG_DIR": os.path.join(tmp, "kafka-logs"), "KAFKA_HEAP_OPTS": "-Xmx512M -Xms512M"}
    bin_dir = os.path.join(KAFKA_HOME, "bin")
    subprocess.run([os.path.join(bin_dir, "kafka-storage.sh"), "format", "-t", "kip848-oracle-test01", "-c", props],
                   check=True, capture_output=True, env=env, timeout=120)
    proc = subprocess.Popen([os.path.join(bin_dir, "kafka-server-start.sh"), props], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        Cluster.wait_for(lambda: proc.poll() is None and answers_requests(port) is None, 120, "Kafka to listen",
                         interval=0.5)
    except BaseException:
        proc.kill()
        proc.wait(60)
        raise
    return proc, port


def transcript(port: int) -> list:
    """A scripted group life at ConsumerGroupHeartbeat v0 (what Kafka 3.8 serves), normalized: errors,
    epochs and assignment sizes (which partitions move is the assignor's choice, how many is not)."""
    topic, tid = create_topic(port, 4)
    group, out = unique("oracle"), []

    def hb(member, epoch, **kw):
        r = heartbeat(w, group, member, epoch, version=0, **kw)
        size = (None if r.error_code or r.assignment is None
                else sum(len(t.partitions) for t in r.assignment.topic_partitions))
        out.append((r.error_code, r.member_epoch if not r.error_code else None, size))
        return r

    wait_for_coordinator(port)
    with WireClient(port) as w:
        a, b = uuid.uuid4().hex, uuid.uuid4().hex
        hb(a, 0, topics=[topic], owned={}, rebalance_ms=30000)
        hb(b, 0, topics=[topic], owned={}, rebalance_ms=30000)
        kept = assigned(hb(a, 1, owned={tid: {0, 1, 2, 3}}))
        hb(b, 2, owned={})
        hb(a, 1, owned=kept)
        mine = assigned(hb(b, 2, owned={}))
        hb(a, 7, owned=kept)
        hb("nobody", 1)
        hb(a, 2, owned=kept)
        hb(a, -1)
        hb(b, 2, owned=mine)
        hb(uuid.uuid4().hex, 0, topics=[topic], owned={})  # no rebalance timeout
        hb(uuid.uuid4().hex, 0, owned={}, rebalance_ms=1000)  # no subscription
        hb(uuid.uuid4().hex, 0, topics=[topic], owned={}, rebalance_ms=1000, assignor="nope")
        hb(uuid.uuid4().hex, 0, topics=[topic], owned={tid: {0}}, rebalance_ms=1000)  # owns before joining
        d = describe(w, group)
        out.append((d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, len(d.members)))
        out.append(describe(w, unique("none")).error_code)
    return out


@pytest.fixture(scope="module")
def kafka_port(tmp_path_factory):
    from tests.secure_brokers import KAFKA_HOME, kafka_available
    if not kafka_available():
        pytest.skip(f"Apache Kafka 3.8 is not installed at {KAFKA_HOME}")
    proc, port = start_kafka(str(tmp_path_factory.mktemp("kafka-oracle")))
    try:
        yield port
    finally:
        proc.kill()
        proc.wait(60)


def test_heartbeat_answers_match_kafka(broker, kafka_port):
    assert transcript(broker.port) == transcript(kafka_port)


def test_librdkafka_regex_subscription_picks_up_new_topics(broker):
    prefix = unique("rxk")
    first, _ = create_topic(broker.port, 2, f"{prefix}-a")
    held = set()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g"), "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    c.subscribe([f"^{prefix}-.*"], on_assign=lambda _, ps: held.update((p.topic, p.partition) for p in ps),
                on_revoke=lambda _, ps: held.difference_update((p.topic, p.partition) for p in ps))
    try:
        def polled_until(want):
            end = time.monotonic() + DEADLINE
            while time.monotonic() < end:
                c.poll(0.1)
                if held == want:
                    return True
            return False
        assert polled_until({(first, 0), (first, 1)}), held
        second, _ = create_topic(broker.port, 1, f"{prefix}-b")
        assert polled_until({(first, 0), (first, 1), (second, 0)}), held
    finally:
        c.close()


# ---- regexes in RE2, Kafka's join and commit rules -----------------------------------------------

UNSUPPORTED_VERSION = 35

def test_a_backtracking_regex_is_answered_at_once_and_the_broker_serves_on(broker):
    """``(a+)+`` never matches a long run of a's ending in b, and a backtracking engine takes hours to
    find that out; RE2 answers in linear time, within the client's timeout, and serves the others."""
    create_topic(broker.port, 1, "a" * 48 + "b")
    group = unique("g")
    with WireClient(broker.port, timeout=20) as w, WireClient(broker.port, timeout=20) as other:
        a, r = join(w, group, regex="(a+)+")
        assert assigned(r) == {}  # matched nothing
        assert other.api_versions().error_code == NONE
        d = describe(other, group)
        assert (d.error_code, [m.subscribed_topic_regex for m in d.members]) == (NONE, ["(a+)+"])
        heartbeat(w, group, a, -1)


def test_what_re2_refuses_is_an_invalid_regular_expression(broker):
    group = unique("g")
    with WireClient(broker.port) as w:
        for regex in ("(?=orders).*", r"(a)\1", "(unclosed", "x" * 5000):
            r = heartbeat(w, group, uuid.uuid4().hex, 0, regex=regex, owned={}, rebalance_ms=1000)
            assert r.error_code == INVALID_REGULAR_EXPRESSION, regex
            assert r.error_message.startswith(f"SubscribedTopicRegex `{regex}` is not a valid regular expression: ")
        assert describe(w, group).error_code == GROUP_ID_NOT_FOUND  # no refused join left a group behind


def join_rules(port: int) -> list:
    """Kafka's rules for joins, epoch-0 rejoins and commits of a member, as (error, detail) answers
    (ConsumerGroupHeartbeat v0: what Kafka 3.8 serves)."""
    topic, tid = create_topic(port, 2)
    group, out = unique("rules"), []
    commit = REQUESTS[8]
    heartbeat_v0 = functools.partial(heartbeat, version=0)

    def commit_error(member, epoch, version):
        r = w.request(commit(group_id=group, generation_id_or_member_epoch=epoch, member_id=member, topics=[
            commit.OffsetCommitRequestTopic(name=topic, partitions=[
                commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]), version)
        return r.topics[0].partitions[0].error_code

    wait_for_coordinator(port)
    with WireClient(port) as w:
        # an entry that names no partition is still an entry: a join must send none
        out.append(heartbeat_v0(w, group, uuid.uuid4().hex, 0, topics=[topic], owned={tid: set()},
                                rebalance_ms=30000).error_code)
        a = uuid.uuid4().hex
        r = heartbeat_v0(w, group, a, 0, topics=[topic], owned={}, rebalance_ms=30000)
        out.append((r.error_code, r.member_epoch))
        owned = assigned(r)
        r = heartbeat_v0(w, group, a, 0, topics=[topic], owned={}, rebalance_ms=30000)  # its answer was lost
        out.append((r.error_code, r.member_epoch))
        r = heartbeat_v0(w, group, a, 1, topics=[topic, unique("absent")], owned=owned)  # new subscription: epoch 2
        out.append((r.error_code, r.member_epoch))
        r = heartbeat_v0(w, group, a, 0, topics=[topic], owned={}, rebalance_ms=30000)  # a known member at epoch 0
        out.append(r.error_code)
        out.append([commit_error(a, 2, 8), commit_error(a, 2, 9), commit_error("nobody", 2, 8)])
        for rebalance_ms in (0, -5):  # anything but -1 is a rebalance timeout
            out.append(heartbeat_v0(w, group, uuid.uuid4().hex, 0, topics=[topic], owned={},
                                    rebalance_ms=rebalance_ms).error_code)
        r = heartbeat_v0(w, unique("v0"), "", 0, topics=[topic], owned={}, rebalance_ms=30000)
        out.append((r.error_code, len(r.member_id)))  # the coordinator's id: a UUID in base64, 22 characters
    return out


def test_join_and_commit_rules_follow_kafka(broker):
    assert join_rules(broker.port) == [
        INVALID_REQUEST, (NONE, 1), (NONE, 1), (NONE, 2), FENCED_MEMBER_EPOCH,
        [UNSUPPORTED_VERSION, NONE, UNKNOWN_MEMBER_ID], NONE, NONE, (NONE, 22)]


def test_join_and_commit_rules_match_kafka(broker, kafka_port):
    assert join_rules(broker.port) == join_rules(kafka_port)


def test_a_rebalance_timeout_of_zero_fences_a_member_that_must_revoke(broker):
    topic, tid = create_topic(broker.port, 2)
    group = unique("g")
    with WireClient(broker.port) as w:
        a, r = join(w, group, [topic], rebalance_ms=0)
        assert assigned(r) == {tid: {0, 1}}
        join(w, group, [topic])
        r = heartbeat(w, group, a, 1, owned={tid: {0, 1}})  # asked to give one up, with no time to do it
        assert r.error_code in (NONE, UNKNOWN_MEMBER_ID)
        assert wait_until(lambda: heartbeat(w, group, a, 1, owned={tid: {0, 1}}).error_code == UNKNOWN_MEMBER_ID)


