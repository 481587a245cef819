"""The classic group APIs at their latest versions, on the wire against a real broker: batched
FindCoordinator (v4+), JoinGroup v7-v9 (protocol type, reason, a static leader that skips the
assignment), SyncGroup v5 protocol checks, LeaveGroup v5 reasons, ListGroups state and type filters,
OffsetCommit v9 GROUP_ID_NOT_FOUND, OffsetFetch v8+ for several groups at once; and one whole group
life cycle at each version of each of these APIs."""
import pytest

from pybroker.api import TABLE
from pybroker.protocol import REQUESTS
from tests.clientutil import wait_until
from tests.kafka_wire import WireClient
from tests.broker.test_groups import SESSION_MS, create_topic, describe, heartbeat, join, unique

FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP = 10, 11, 14, 12, 13
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 8, 9, 15, 16, 42
GROUP_APIS = (FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH,
              DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS)
ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, INVALID_REQUEST = 22, 23, 42
GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED = 69, 79
LATEST = {FIND_COORDINATOR: 6, JOIN_GROUP: 9, SYNC_GROUP: 5, HEARTBEAT: 4, LEAVE_GROUP: 5, OFFSET_COMMIT: 9,
          OFFSET_FETCH: 9, DESCRIBE_GROUPS: 6, LIST_GROUPS: 5, DELETE_GROUPS: 2}


@pytest.fixture(scope="module")
def broker(shared_broker):
    """The session's broker: these tests each use their own topics and groups."""
    return shared_broker


def test_the_latest_versions_are_advertised(broker):
    with WireClient(broker.port) as w:
        advertised = {k.api_key: (k.min_version, k.max_version) for k in w.api_versions().api_keys}
    assert {k: advertised[k][1] for k in GROUP_APIS} == LATEST
    assert {k: TABLE[k].MAX_VERSION for k in GROUP_APIS} == LATEST


# ---- FindCoordinator ---------------------------------------------------------------------------

def sync(w, group, generation, member_id, assignments=(), version=5, instance=None, protocol=("consumer", "range")):
    """SyncGroup; v5+ names the protocol type and name (required from v5)."""
    req = REQUESTS[SYNC_GROUP]
    return w.request(req(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance,
                         protocol_type=protocol[0], protocol_name=protocol[1],
                         assignments=[req.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                      for m, a in assignments]), version)


def find(w, version, keys, key_type=0):
    req = REQUESTS[FIND_COORDINATOR]
    if version >= 4:
        return w.request(req(key_type=key_type, coordinator_keys=list(keys)), version)
    return w.request(req(key=keys[0], key_type=key_type), version)


def test_find_coordinator_every_version(broker):
    with WireClient(broker.port) as w:
        for version in range(0, 4):
            for key_type in ((0,) if version == 0 else (0, 1)):
                r = wait_until(lambda: _settled(find(w, version, [unique("k")], key_type)))
                assert (r.error_code, r.host, r.port) == (0, "127.0.0.1", broker.port), (version, key_type, r)
        for version in range(4, 7):
            keys = [unique("g"), unique("g"), unique("g")]
            for key_type in (0, 1):
                r = wait_until(lambda: _settled(find(w, version, keys, key_type)))
                assert [(c.key, c.error_code, c.host, c.port) for c in r.coordinators] == \
                    [(k, 0, "127.0.0.1", broker.port) for k in keys], (version, key_type)
            # share groups (key type 2) are not coordinated here: each key says so
            r = find(w, version, keys[:2], key_type=2)
            assert [(c.key, c.error_code, c.node_id) for c in r.coordinators] == [(k, INVALID_REQUEST, -1)
                                                                                   for k in keys[:2]]
            assert find(w, version, [], 0).coordinators == []


def _settled(resp):
    """The response once every key has its coordinator (an internal topic may still be electing)."""
    errors = [c.error_code for c in resp.coordinators] if resp.coordinators else [resp.error_code]
    return resp if not any(errors) else None


# ---- JoinGroup / SyncGroup ---------------------------------------------------------------------

def test_join_group_v7_names_the_protocol_type_and_v8_takes_a_reason(broker):
    group = unique("jg")
    with WireClient(broker.port) as w:
        req = REQUESTS[JOIN_GROUP]
        first = w.request(req(group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=10000,
                              member_id="", protocol_type="consumer", reason="first start",
                              protocols=[req.JoinGroupRequestProtocol(name="range", metadata=b"m")]), 8)
        assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
        me = join(w, group, member_id=first.member_id, version=7)
        assert (me.error_code, me.protocol_type, me.protocol_name, me.skip_assignment) == (0, "consumer", "range",
                                                                                            False)
        assert join(w, unique("jg6"), version=6).protocol_type is None  # v6 answers carry no protocol type


def test_static_leader_rejoin_skips_the_assignment_from_v9(broker):
    group = unique("skip")
    with WireClient(broker.port) as w:
        a = join(w, group, version=9, instance="leader-a")
        assert a.error_code == 0 and a.leader == a.member_id and not a.skip_assignment
        s = sync(w, group, a.generation_id, a.member_id, [(a.member_id, b"A")], version=5, instance="leader-a")
        assert (s.error_code, s.assignment) == (0, b"A")
        # the leader restarts: v9 gives it the members and tells it to keep the current assignment
        again = join(w, group, version=9, instance="leader-a")
        assert (again.error_code, again.skip_assignment, again.generation_id) == (0, True, a.generation_id)
        assert again.member_id != a.member_id and again.leader == again.member_id
        assert [m.member_id for m in again.members] == [again.member_id]
        s = sync(w, group, again.generation_id, again.member_id, version=5, instance="leader-a")
        assert (s.error_code, s.assignment) == (0, b"A")
        assert describe(broker, group, 5).group_state == "Stable"
        # before v9 a restarted static leader makes the group rebalance
        old = join(w, group, version=8, instance="leader-a")
        assert (old.error_code, old.skip_assignment, old.generation_id) == (0, False, a.generation_id + 1)
        assert old.leader == old.member_id and len(old.members) == 1


def test_sync_group_v5_refuses_another_protocol(broker):
    group = unique("sync5")
    with WireClient(broker.port) as w:
        first = join(w, group, version=9)
        me = join(w, group, member_id=first.member_id, version=9)
        req = REQUESTS[SYNC_GROUP]

        def sync5(protocol_type, protocol_name):
            return w.request(req(group_id=group, generation_id=me.generation_id, member_id=me.member_id,
                                 group_instance_id=None, protocol_type=protocol_type, protocol_name=protocol_name,
                                 assignments=[req.SyncGroupRequestAssignment(member_id=me.member_id,
                                                                             assignment=b"x")]), 5)
        assert sync5("connect", "range").error_code == INCONSISTENT_GROUP_PROTOCOL
        assert sync5("consumer", "roundrobin").error_code == INCONSISTENT_GROUP_PROTOCOL
        ok = sync5("consumer", "range")
        assert (ok.error_code, ok.protocol_type, ok.protocol_name, ok.assignment) == (0, "consumer", "range", b"x")
        assert sync5(None, "range").error_code == INCONSISTENT_GROUP_PROTOCOL  # v5+: both are required
        assert sync5("consumer", None).error_code == INCONSISTENT_GROUP_PROTOCOL


# ---- LeaveGroup / ListGroups -------------------------------------------------------------------

def test_leave_group_v5_with_reasons(broker):
    group = unique("leave5")
    with WireClient(broker.port) as w:
        first = join(w, group, version=9)
        me = join(w, group, member_id=first.member_id, version=9)
        req = REQUESTS[LEAVE_GROUP]
        resp = w.request(req(group_id=group, members=[
            req.MemberIdentity(member_id=me.member_id, group_instance_id=None, reason="shutting down"),
            req.MemberIdentity(member_id="nobody", group_instance_id=None, reason=None)]), 5)
        assert (resp.error_code, [m.error_code for m in resp.members]) == (0, [0, 25])
        assert describe(broker, group, 5).group_state == "Empty"


def list_groups(w, version, states=(), types=()):
    resp = w.request(REQUESTS[LIST_GROUPS](states_filter=list(states), types_filter=list(types)), version)
    assert resp.error_code == 0
    return {g.group_id: g for g in resp.groups}


def test_list_groups_filters_by_state_and_type(broker):
    topic = create_topic(broker, 1)
    stable, empty = unique("stable"), unique("empty")
    with WireClient(broker.port) as w:
        assert commit(w, empty, {(topic, 0): 4}, version=9) == {(topic, 0): 0}
        first = join(w, stable, version=9)
        me = join(w, stable, member_id=first.member_id, version=9)
        assert sync(w, stable, me.generation_id, me.member_id, [(me.member_id, b"")], version=5).error_code == 0
        everything = list_groups(w, 5)
        assert (everything[stable].group_state, everything[stable].group_type) == ("Stable", "classic")
        assert (everything[empty].group_state, everything[empty].protocol_type) == ("Empty", "")
        only_stable = list_groups(w, 4, states=["stable"])  # states match case-insensitively
        assert stable in only_stable and empty not in only_stable
        only_empty = list_groups(w, 5, states=["Empty", "Dead"])
        assert empty in only_empty and stable not in only_empty
        assert {stable, empty} <= set(list_groups(w, 5, types=["CLASSIC"]))
        assert list_groups(w, 5, types=["consumer"]).keys().isdisjoint({stable, empty})
        assert list_groups(w, 5, states=["Stable"], types=["share"]) == {}
        assert list_groups(w, 5, states=["NoSuchState"]) == {}
        assert {stable, empty} <= set(list_groups(w, 3))  # no filters before v4


# ---- OffsetCommit / OffsetFetch ----------------------------------------------------------------

def commit(w, group, offsets: dict, generation=-1, member_id="", version=9):
    req = REQUESTS[OFFSET_COMMIT]
    topics = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append(req.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_leader_epoch=-1, committed_metadata=f"m{off}"))
    resp = w.request(req(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                         group_instance_id=None, retention_time_ms=-1,
                         topics=[req.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()]),
                     version)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def test_offset_commit_v9_says_an_unknown_group_is_not_found(broker):
    topic = create_topic(broker, 1)
    tp = (topic, 0)
    with WireClient(broker.port) as w:
        assert commit(w, unique("ghost"), {tp: 1}, generation=1, member_id="m", version=8) == {tp: ILLEGAL_GENERATION}
        assert commit(w, unique("ghost"), {tp: 1}, generation=1, member_id="m", version=9) == {tp: GROUP_ID_NOT_FOUND}
        assert commit(w, unique("simple"), {tp: 1}, version=9) == {tp: 0}  # simple commits still create the group


def fetch_groups(w, asked: dict, version=8, require_stable=False, member=(None, -1)):
    """``asked``: group -> {topic: [partitions]} or None (all); group -> (error, {(topic, partition): offset})."""
    req = REQUESTS[OFFSET_FETCH]
    groups = [req.OffsetFetchRequestGroup(
        group_id=g, member_id=member[0], member_epoch=member[1],
        topics=None if topics is None else [req.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                                            for t, ps in topics.items()]) for g, topics in asked.items()]
    resp = w.request(req(groups=groups, require_stable=require_stable), version)
    assert [g.group_id for g in resp.groups] == list(asked)
    return {g.group_id: (g.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                                        for t in g.topics for p in t.partitions}) for g in resp.groups}


def test_offset_fetch_several_groups_at_once(broker):
    topic = create_topic(broker, 2)
    g1, g2, ghost = unique("of1"), unique("of2"), unique("ghost")
    with WireClient(broker.port) as w:
        assert commit(w, g1, {(topic, 0): 5, (topic, 1): 7}) == {(topic, 0): 0, (topic, 1): 0}
        assert commit(w, g2, {(topic, 0): 3}) == {(topic, 0): 0}
        for version in (8, 9):
            got = fetch_groups(w, {g1: None, g2: {topic: [0, 1]}, ghost: None}, version, require_stable=True)
            assert got == {
                g1: (0, {(topic, 0): (5, "m5", 0), (topic, 1): (7, "m7", 0)}),
                g2: (0, {(topic, 0): (3, "m3", 0), (topic, 1): (-1, "", 0)}),
                ghost: (0, {}),
            }
        # v9 member fields belong to KIP-848 groups: a classic group ignores them
        assert fetch_groups(w, {g2: {topic: [0]}}, 9, member=("someone", 3)) == {g2: (0, {(topic, 0): (3, "m3", 0)})}
        assert fetch_groups(w, {"": None}, 8)[""][0] == 24  # INVALID_GROUP_ID, for that group only


# ---- every version, one whole life cycle each -------------------------------------------------

def _versions(step: int) -> dict:
    """Each group API at ``step`` clamped to what it supports: steps 0-9 reach every version of each.
    OffsetCommit starts at v1: v0 names no member, so it cannot commit for a group with members."""
    lowest = {k: max(TABLE[k].MIN_VERSION, 1 if k == OFFSET_COMMIT else 0) for k in GROUP_APIS}
    return {k: min(max(step, lowest[k]), TABLE[k].MAX_VERSION) for k in GROUP_APIS}


@pytest.mark.parametrize("step", range(0, 10))
def test_a_group_life_cycle_at_every_version(broker, step):
    v = _versions(step)
    topic, group = create_topic(broker, 2), unique(f"life{step}")
    with WireClient(broker.port) as w:
        c = wait_until(lambda: _settled(find(w, v[FIND_COORDINATOR], [group])))
        assert (c.coordinators[0].port if c.coordinators else c.port) == broker.port
        me = join(w, group, version=v[JOIN_GROUP])
        if me.error_code == MEMBER_ID_REQUIRED:
            assert v[JOIN_GROUP] >= 4
            me = join(w, group, member_id=me.member_id, version=v[JOIN_GROUP])
        assert (me.error_code, me.generation_id, me.leader) == (0, 1, me.member_id)
        s = sync(w, group, 1, me.member_id, [(me.member_id, b"plan")], version=v[SYNC_GROUP])
        assert (s.error_code, s.assignment) == (0, b"plan")
        assert heartbeat(w, group, 1, me.member_id, version=v[HEARTBEAT]) == 0
        assert commit(w, group, {(topic, 0): 11, (topic, 1): 12}, 1, me.member_id, v[OFFSET_COMMIT]) == \
            {(topic, 0): 0, (topic, 1): 0}
        assert _fetch_one(w, group, topic, v[OFFSET_FETCH]) == {(topic, 0): 11, (topic, 1): 12}
        d = describe(broker, group, v[DESCRIBE_GROUPS])
        assert (d.error_code, d.group_state, d.protocol_data, [m.member_assignment for m in d.members]) == \
            (0, "Stable", "range", [b"plan"])
        listed = list_groups(w, v[LIST_GROUPS])
        assert listed[group].protocol_type == "consumer"
        _leave(w, group, me.member_id, v[LEAVE_GROUP])
        assert describe(broker, group, v[DESCRIBE_GROUPS]).group_state == "Empty"
        res = w.request(REQUESTS[DELETE_GROUPS](groups_names=[group]), v[DELETE_GROUPS]).results
        assert [(r.group_id, r.error_code) for r in res] == [(group, 0)]
        assert _fetch_one(w, group, topic, v[OFFSET_FETCH]) == {(topic, 0): -1, (topic, 1): -1}


def _fetch_one(w, group, topic, version) -> dict:
    if version >= 8:
        error, found = fetch_groups(w, {group: {topic: [0, 1]}}, version)[group]
        assert error == 0
        return {tp: off for tp, (off, _, e) in found.items() if not e}
    req = REQUESTS[OFFSET_FETCH]
    resp = w.request(req(group_id=group, topics=[req.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])]),
                     version)
    assert resp.error_code == 0
    return {(t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions}


def _leave(w, group, member_id, version) -> None:
    req = REQUESTS[LEAVE_GROUP]
    if version >= 3:
        resp = w.request(req(group_id=group, members=[req.MemberIdentity(member_id=member_id, group_instance_id=None,
                                                                         reason="done")]), version)
        assert [m.error_code for m in resp.members] == [0]
    else:
        resp = w.request(req(group_id=group, member_id=member_id), version)
    assert resp.error_code == 0


# ---- Apache Kafka 3.8 as the oracle ------------------------------------------------------------

def scenario(port: int, v: dict) -> dict:
    """The same group steps against any broker; outcomes as plain values (no generated ids) to compare.
    ``v``: the version of each API to use."""
    with WireClient(port) as w:
        w.create_topic("oracle-topic", 2)
        out = {}
        fc = wait_until(lambda: _settled(find(w, v[FIND_COORDINATOR], ["oracle-a", "oracle-b"])))
        out["find"] = [(c.key, c.error_code, c.port == port) for c in fc.coordinators] or fc.error_code
        loading = {14, 15, 16}  # the coordinator is still loading its __consumer_offsets partitions
        names = ["oracle-a", "oracle-b", "oracle-ghost", "oracle-s", "oracle-none"]
        assert wait_until(lambda: not any(e in loading for e, _ in fetch_groups(w, dict.fromkeys(names)).values()))
        if v[FIND_COORDINATOR] >= 4:
            shares = find(w, v[FIND_COORDINATOR], ["oracle-share"], key_type=2).coordinators
            out["find share"] = [(c.key, c.error_code, c.node_id) for c in shares]
        first = join(w, "oracle-a", version=v[JOIN_GROUP])
        me = join(w, "oracle-a", member_id=first.member_id, version=v[JOIN_GROUP])
        out["join"] = (first.error_code, me.error_code, me.generation_id, me.protocol_type, me.protocol_name,
                       me.skip_assignment, me.leader == me.member_id, len(me.members))
        req = REQUESTS[SYNC_GROUP]
        out["sync wrong name"] = w.request(req(
            group_id="oracle-a", generation_id=1, member_id=me.member_id, protocol_type="consumer",
            protocol_name="other", assignments=[]), v[SYNC_GROUP]).error_code
        out["sync without a name"] = w.request(req(
            group_id="oracle-a", generation_id=1, member_id=me.member_id, protocol_type="consumer",
            protocol_name=None, assignments=[]), v[SYNC_GROUP]).error_code
        s = sync(w, "oracle-a", 1, me.member_id, [(me.member_id, b"A")], version=v[SYNC_GROUP])
        out["sync"] = (s.error_code, s.protocol_type, s.protocol_name, s.assignment)
        out["heartbeat"] = heartbeat(w, "oracle-a", 1, me.member_id, version=v[HEARTBEAT])
        tp = ("oracle-topic", 0)
        out["commit member"] = commit(w, "oracle-a", {tp: 5}, 1, me.member_id, v[OFFSET_COMMIT])
        out["commit unknown group v8"] = commit(w, "oracle-ghost", {tp: 1}, 1, "m", 8)
        out["commit unknown group"] = commit(w, "oracle-ghost", {tp: 1}, 1, "m", v[OFFSET_COMMIT])
        out["commit simple"] = commit(w, "oracle-b", {tp: 7, ("oracle-topic", 1): 8}, -1, "", v[OFFSET_COMMIT])
        out["commit unknown topic"] = commit(w, "oracle-b", {("oracle-nothing", 0): 1}, -1, "", v[OFFSET_COMMIT])
        out["fetch"] = fetch_groups(w, {"oracle-a": {"oracle-topic": [0, 1]}, "oracle-b": None, "oracle-ghost": None},
                                    v[OFFSET_FETCH], require_stable=True)
        a = join(w, "oracle-s", version=v[JOIN_GROUP], instance="static-1")
        sync(w, "oracle-s", a.generation_id, a.member_id, [(a.member_id, b"S")], version=v[SYNC_GROUP],
             instance="static-1")
        again = join(w, "oracle-s", version=v[JOIN_GROUP], instance="static-1")
        out["static rejoin"] = (again.error_code, again.skip_assignment, again.generation_id - a.generation_id,
                                again.leader == again.member_id, len(again.members))

        def listed(**filters):
            return sorted(g for g in list_groups(w, v[LIST_GROUPS], **filters) if g.startswith("oracle"))
        out["list"] = [(g.group_id, g.protocol_type, g.group_state, g.group_type)
                       for g in sorted(list_groups(w, v[LIST_GROUPS]).values(), key=lambda g: g.group_id)
                       if g.group_id.startswith("oracle")]
        out["list stable"] = listed(states=["stable"])
        out["list empty classic"] = listed(states=["EMPTY"], types=["Classic"])
        out["list consumer"] = listed(types=["consumer"])
        d = describe_at(w, ["oracle-a", "oracle-none"], v[DESCRIBE_GROUPS])
        out["describe"] = [(g.group_id, g.error_code, g.group_state, g.protocol_type, g.protocol_data,
                            [m.member_assignment for m in g.members]) for g in d]
        lreq = REQUESTS[LEAVE_GROUP]
        leave = w.request(lreq(group_id="oracle-a", members=[
            lreq.MemberIdentity(member_id=me.member_id, group_instance_id=None, reason="bye"),
            lreq.MemberIdentity(member_id="", group_instance_id="nobody", reason=None)]), v[LEAVE_GROUP])
        out["leave"] = (leave.error_code, [m.error_code for m in leave.members])
        res = w.request(REQUESTS[DELETE_GROUPS](groups_names=["oracle-a", "oracle-none", "oracle-s"]),
                        v[DELETE_GROUPS]).results
        out["delete"] = sorted((r.group_id, r.error_code) for r in res)  # Kafka answers in its own order
    return out


def describe_at(w, groups, version):
    return w.request(REQUESTS[DESCRIBE_GROUPS](groups=groups, include_authorized_operations=False), version).groups


def test_group_apis_answer_as_kafka_does(tmp_path):
    from tests.txn_brokers import KafkaBroker, PyBroker, kafka_available
    if not kafka_available():
        pytest.skip("Apache Kafka 3.8 is not installed")
    kafka = KafkaBroker(str(tmp_path / "kafka")).start()
    try:
        with WireClient(kafka.port) as w:
            speaks = {k.api_key: k.max_version for k in w.api_versions().api_keys}
        versions = {k: min(speaks.get(k, -1), TABLE[k].MAX_VERSION) for k in GROUP_APIS}  # what both speak
        theirs = scenario(kafka.port, versions)
    finally:
        kafka.close()
    ours_broker = PyBroker(str(tmp_path / "pybroker")).start()
    try:
        ours = scenario(ours_broker.port, versions)
    finally:
        ours_broker.close()
    assert ours.keys() == theirs.keys()
    # Kafka 3.8's default (pre-KIP-848) coordinator still answers ILLEGAL_GENERATION here; the v9 spec
    # and Kafka's KIP-848 coordinator answer GROUP_ID_NOT_FOUND, as this broker does
    if versions[OFFSET_COMMIT] >= 9:
        assert (ours.pop("commit unknown group"), theirs.pop("commit unknown group")) == \
            ({("oracle-topic", 0): GROUP_ID_NOT_FOUND}, {("oracle-topic", 0): ILLEGAL_GENERATION})
    for step in theirs:
        assert ours[step] == theirs[step], step


# ---- Kafka's Java consumer and kafka-consumer-groups.sh, at the versions they negotiate ---------

def kafka_tool(name: str, *args, timeout: float = 120) -> str:
    import os
    import subprocess
    from tests.txn_brokers import KAFKA_HOME
    r = subprocess.run([os.path.join(KAFKA_HOME, "bin", name), *args], capture_output=True, timeout=timeout,
                       env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256M"})
    assert r.returncode == 0, (name, args, r.stdout[-2000:], r.stderr[-2000:])
    return r.stdout.decode()


def produce_spread(broker, topic: str, count: int, partitions: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        p.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def rows_with(out: str, word: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if word in line.split()]


def test_kafka_java_consumer_and_consumer_groups_tool(broker_factory):
    """The Java consumer (JoinGroup 9, SyncGroup 5, Heartbeat 4, OffsetCommit/OffsetFetch 9, LeaveGroup 5)
    and kafka-consumer-groups.sh (batched FindCoordinator, OffsetFetch for all groups at once,
    ListGroups state and type filters, DescribeGroups 5, DeleteGroups 2). A broker of its own: --all-groups
    parses every group's member bytes as the consumer protocol, and other tests here make groups that are not."""
    from tests.txn_brokers import kafka_available
    if not kafka_available():
        pytest.skip("Apache Kafka 3.8 is not installed")
    broker = broker_factory({"group.initial.rebalance.delay.ms": 0})
    topic, group = create_topic(broker, 3), unique("java")
    produce_spread(broker, topic, 30, 3)
    out = kafka_tool("kafka-console-consumer.sh", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                     "--group", group, "--from-beginning", "--max-messages", "30", "--timeout-ms", "60000")
    assert sorted(out.split()) == sorted("v%d" % i for i in range(30))
    bootstrap = ("--bootstrap-server", broker.bootstrap)
    described = rows_with(kafka_tool("kafka-consumer-groups.sh", *bootstrap, "--describe", "--group", group), group)
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...: everything consumed was committed
    assert sorted((r[1], int(r[2]), r[3], r[4], r[5]) for r in described) == \
        [(topic, i, "10", "10", "0") for i in range(3)]
    everyone = kafka_tool("kafka-consumer-groups.sh", *bootstrap, "--describe", "--all-groups")
    assert len(rows_with(everyone, group)) == 3
    assert rows_with(kafka_tool("kafka-consumer-groups.sh", *bootstrap, "--list", "--state", "empty"), group) == \
        [[group, "Empty"]]
    assert rows_with(kafka_tool("kafka-consumer-groups.sh", *bootstrap, "--list", "--state", "stable"), group) == []
    assert rows_with(kafka_tool("kafka-consumer-groups.sh", *bootstrap, "--list", "--type", "classic"), group) == \
        [[group, "Classic"]]
    assert rows_with(kafka_tool("kafka-consumer-groups.sh", *bootstrap, "--list", "--type", "consumer"), group) == []
    out = kafka_tool("kafka-consumer-groups.sh", *bootstrap, "--delete", "--group", group)
    assert "successful" in out, out
    assert group not in kafka_tool("kafka-consumer-groups.sh", *bootstrap, "--list").split()
