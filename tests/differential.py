"""Differential testing against Apache Kafka 3.8: the same request sequences sent to a Kafka broker set
and to a pybroker broker set, their decoded answers normalised and compared field by field.

A case is data: a list of steps, each ``(api key, version, request fields)`` plus the broker it goes to.
Field values may be resolvers (``TopicId("t")``, ``LeaderEpoch("t", 0)``, ``Prev(2, "producer_id")``,
``Batch(...)``) that each side fills in from its own state, so that a sequence reads the same on both
sides while ids, epochs and ports are each broker's own. Setup steps (``Do``) act without being compared.

Normalising keeps what a client acts on and hides what legitimately differs between two brokers:
uuids, member ids, producer ids and fetch session ids become numbered placeholders (first seen, first
numbered, so that "the same id again" still compares), ports and cluster ids become tokens, throttle
times go, and wall-clock times (anything within ten minutes of now) become ``<now>``. Records are compared
batch by batch (offsets, epochs, producer, sequence, keys and values; not CRCs or append times).

The cases themselves live in ``tests/differential_cases.py``; the tests in the broker and cluster tiers.
"""
from __future__ import annotations

import os
import re
import struct
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode
from pybroker.records import HEADER, Record, build_batch, decode_records
from tests.kafka_wire import WireClient

KAFKA_HOME = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "pybroker-kafka", "kafka_2.13-3.8.0")
KAFKA_START_S = 120
WAIT_S = 20.0
LOADING = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
ZERO_UUID = uuid.UUID(int=0)
NOW_WINDOW_MS = 600_000
# record timestamps the cases write: two hours ago (whole seconds), outside the <now> window, so that they are
# compared, and well inside the default retention (an older one would let a broker delete the records early)
T0 = (int(time.time()) - 7200) * 1000

# settings both sides take by Kafka's names (small internal topics, no rebalance delay)
COMMON_SETTINGS = {
    "offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0, "num.partitions": 1, "auto.create.topics.enable": "true",
}


def kafka_available() -> bool:
    return os.path.isfile(os.path.join(KAFKA_HOME, "bin", "kafka-server-start.sh"))


# ---- resolvers: request values each side fills in from its own state ------------------------------

class Resolver:
    def resolve(self, env: "Env"):
        raise NotImplementedError


@dataclass
class TopicId(Resolver):
    topic: str

    def resolve(self, env):  # the zero uuid for a topic the side does not know (a name-only request)
        t = env.metadata([self.topic]).topics[0]
        return t.topic_id if t.error_code == 0 else ZERO_UUID


@dataclass
class LeaderEpoch(Resolver):
    topic: str
    partition: int
    delta: int = 0  # +1: a future epoch (UNKNOWN_LEADER_EPOCH), -1: a stale one (FENCED_LEADER_EPOCH)

    def resolve(self, env):
        return env.partition(self.topic, self.partition).leader_epoch + self.delta


@dataclass
class Prev(Resolver):
    """A field of an earlier step's response in the same case (``step`` is its index; ``path``
    dotted, with list indexes: ``"topics.0.partitions.0.offset"``)."""
    step: int
    path: str

    def resolve(self, env):
        value = env.responses[self.step]
        for part in self.path.split("."):
            value = value[int(part)] if part.isdigit() else getattr(value, part)
        return value


@dataclass
class Batch(Resolver):
    """One v2 record batch of ``values`` (bytes, None, or (key, value)); producer fields may be resolvers."""
    values: list
    producer_id: Any = -1
    producer_epoch: Any = -1
    base_sequence: int = -1
    transactional: bool = False
    timestamp: int = T0

    def resolve(self, env):
        records = [Record(key=v[0], value=v[1]) if isinstance(v, tuple) else Record(value=v) for v in self.values]
        return bytes(build_batch(records, base_timestamp=self.timestamp, attributes=16 if self.transactional else 0,
                                 producer_id=env.value(self.producer_id),
                                 producer_epoch=env.value(self.producer_epoch), base_sequence=self.base_sequence))


@dataclass
class Fn(Resolver):
    """Any other value computed from the side's state: ``Fn(lambda env: ...)``."""
    fn: Callable

    def resolve(self, env):
        return self.fn(env)


# ---- where a step goes ----------------------------------------------------------------------------

def first(env) -> int:
    return min(env.target.nodes)


def leader(topic: str, partition: int = 0):
    return lambda env: env.partition(topic, partition).leader_id


def outsider(topic: str, partition: int = 0):
    """A broker that holds no replica of the partition (cluster only)."""
    def pick(env):
        replicas = set(env.partition(topic, partition).replica_nodes)
        return min(n for n in env.target.nodes if n not in replicas)
    return pick


def follower(topic: str, partition: int = 0):
    """A replica that is not the leader (cluster only)."""
    def pick(env):
        p = env.partition(topic, partition)
        return min(n for n in p.replica_nodes if n != p.leader_id)
    return pick


def coordinator(key: str, key_type: int = 0):
    return lambda env: env.coordinator(key, key_type)


def controller(env) -> int:
    return env.metadata([]).controller_id


# ---- steps and cases ------------------------------------------------------------------------------

@dataclass
class Step:
    api: int
    fields: dict
    version: int | None = None  # None: the highest both sides serve
    to: Callable = first
    compare: bool = True
    keep: tuple = ()  # compare only these top-level fields (for answers that list the whole broker's state)


@dataclass
class Do:
    """A setup action (not compared): ``fn(env)``; e.g. ``Do(create("t", 2))``."""
    fn: Callable
    compare: bool = False


@dataclass
class Case:
    name: str
    steps: list
    # fields whose wording is each broker's own (Kafka's message there is not a fixed string):
    # compared by presence (None or not) only
    loose: tuple = ()


def create(topic: str, partitions: int = 1, replication: int = 1, configs: dict | None = None):
    """A setup action: create ``topic`` and wait until every broker knows each partition's leader.

    On several brokers the replicas are placed explicitly (partition i on brokers i+1, i+2, ...), so that
    both sides put each partition on the same brokers and a step can go to the same one."""
    def act(env):
        req = REQUESTS[19]
        nodes = sorted(env.target.nodes)
        assignments = [] if len(nodes) == 1 else [
            req.CreatableReplicaAssignment(partition_index=i, broker_ids=[nodes[(i + k) % len(nodes)]
                                                                          for k in range(replication)])
            for i in range(partitions)]
        t = req.CreatableTopic(name=topic, num_partitions=-1 if assignments else partitions,
                               replication_factor=-1 if assignments else replication,
                               assignments=assignments, configs=[req.CreatableTopicConfig(name=k, value=str(v))
                                                        for k, v in (configs or {}).items()])
        resp = env.client(env.controller_or_first()).request(req(topics=[t], timeout_ms=30000), 5)
        assert resp.topics[0].error_code == 0, resp.topics[0]
        env.wait_topic(topic, partitions)
    return act


def produce(topic: str, partition: int, values: list):
    """A setup action: append ``values`` to a partition (acks=all, at its leader)."""
    def act(env):
        req = REQUESTS[0]
        batch = Batch(values).resolve(env)
        r = env.client(env.partition(topic, partition).leader_id).request(req(
            acks=-1, timeout_ms=10000, topic_data=[req.TopicProduceData(name=topic, partition_data=[
                req.PartitionProduceData(index=partition, records=batch)])]), 9)
        assert r.responses[0].partition_responses[0].error_code == 0, r
    return act


def producer_ids_ready(env) -> None:
    """A setup action: poll InitProducerId (no transactional id) until the broker hands out producer ids."""
    req = REQUESTS[22]
    ask = req(transactional_id=None, transaction_timeout_ms=60000)
    wait(lambda: env.client(first(env)).request(ask, 4).error_code == 0, "producer ids")


def move_leader(topic: str, partition: int, replicas: list[int]):
    """A setup action (cluster): reorder a partition's replicas by a reassignment, then a preferred election
    makes the first of them leader; waits until the leader epoch has moved on."""
    def act(env):
        before = env.partition(topic, partition).leader_epoch
        alter, elect = REQUESTS[45], REQUESTS[43]
        r = env.client(env.controller_or_first()).request(alter(timeout_ms=10000, topics=[alter.ReassignableTopic(
            name=topic, partitions=[alter.ReassignablePartition(partition_index=partition, replicas=replicas)])]), 0)
        assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0, r
        wait(lambda: list(env.partition(topic, partition).replica_nodes) == replicas, f"{topic} reassigned")
        ask = elect(election_type=0, timeout_ms=10000, topic_partitions=[
            elect.TopicPartitions(topic=topic, partitions=[partition])])

        def moved():
            env.client(env.controller_or_first()).request(ask, 2)
            p = env.partition(topic, partition)
            return p.leader_id == replicas[0] and p.leader_epoch > before
        wait(moved, f"{topic}-{partition} led by {replicas[0]}")
        env.wait_topic(topic, len(env.topic(topic).partitions))
    return act


def init_transactional(txn: str):
    """A setup action: InitProducerId for ``txn``, retried while the coordinator is still loading; the answer."""
    req = REQUESTS[22]
    ask = req(transactional_id=txn, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)

    def act(env):
        answer = []

        def ready():
            r = env.client(env.coordinator(txn, 1)).request(ask, 4)
            answer[:] = [r]
            return r.error_code == 0
        wait(ready, f"a producer id for {txn}")
        return answer[0]
    return act


def wait_coordinator(key: str, key_type: int = 0):
    """A setup action: poll FindCoordinator until the group or transaction coordinator is ready."""
    return lambda env: env.coordinator(key, key_type)


# ---- the brokers a side runs ----------------------------------------------------------------------

class Target:
    """A running set of brokers: ``nodes`` maps node id to port on 127.0.0.1."""

    def __init__(self, name: str, nodes: dict[int, int]):
        self.name = name
        self.nodes = nodes
        self._versions = None

    def versions(self) -> dict[int, tuple[int, int]]:
        if self._versions is None:
            with WireClient(self.nodes[min(self.nodes)]) as c:
                self._versions = {k.api_key: (k.min_version, k.max_version) for k in c.api_versions().api_keys}
        return self._versions


class Env:
    """One side's state while it runs one case: connections, earlier responses, id placeholders."""

    def __init__(self, target: Target):
        self.target = target
        self.responses: list = []
        self._clients: dict[int, WireClient] = {}

    def close(self) -> None:
        for c in self._clients.values():
            c.close()

    def client(self, node: int) -> WireClient:
        if node not in self._clients:
            self._clients[node] = WireClient(self.target.nodes[node], client_id="differential")
        return self._clients[node]

    def value(self, v):
        return v.resolve(self) if isinstance(v, Resolver) else v

    # ---- the side's metadata (asked fresh each time: it changes under a case)

    def metadata(self, topics, node: int | None = None):
        req = REQUESTS[3]
        names = None if topics is None else [req.MetadataRequestTopic(name=t) for t in topics]
        return self.client(first(self) if node is None else node).request(
            req(topics=names, allow_auto_topic_creation=False), 12)

    def controller_or_first(self) -> int:
        cid = self.metadata([]).controller_id
        return cid if cid in self.target.nodes else first(self)

    def topic(self, name: str):
        t = self.metadata([name]).topics[0]
        assert t.error_code == 0, f"{self.target.name}: topic {name}: {ErrorCode(t.error_code).name}"
        return t

    def partition(self, topic: str, partition: int):
        for p in self.topic(topic).partitions:
            if p.partition_index == partition:
                return p
        raise AssertionError(f"{self.target.name}: no partition {topic}-{partition}")

    def wait_topic(self, topic: str, partitions: int) -> None:
        """Every broker knows a leader for each partition of ``topic``, and each leader serves it."""
        def known(node):
            t = self.metadata([topic], node).topics[0]
            return t.error_code == 0 and len(t.partitions) == partitions and all(
                p.leader_id >= 0 and p.error_code == 0 for p in t.partitions)
        wait(lambda: all(known(n) for n in self.target.nodes), f"{topic} known to every broker of {self.target.name}")
        for p in self.topic(topic).partitions:  # the leader has opened the partition: ListOffsets answers
            req = REQUESTS[2]
            ask = req(replica_id=-1, topics=[req.ListOffsetsTopic(name=topic, partitions=[
                req.ListOffsetsPartition(partition_index=p.partition_index, timestamp=-1)])])
            wait(lambda: self.client(p.leader_id).request(ask, 5).topics[0].partitions[0].error_code == 0,
                 f"{topic}-{p.partition_index} served by its leader")

    def coordinator(self, key: str, key_type: int = 0) -> int:
        req = REQUESTS[10]

        def find():
            r = self.client(first(self)).request(req(key_type=key_type, coordinator_keys=[key]), 4).coordinators[0]
            return r.node_id if r.error_code == 0 and self.loaded(r.node_id, key, key_type) else None
        return wait(find, f"coordinator of {key}")

    def loaded(self, node: int, key: str, key_type: int) -> bool:
        """The coordinator on ``node`` has loaded ``key``'s state: describing it answers."""
        if key_type == 0:
            error = self.client(node).request(REQUESTS[15](groups=[key]), 5).groups[0].error_code
        else:
            error = self.client(node).request(REQUESTS[65](transactional_ids=[key]), 0).transaction_states[0].error_code
        return error not in LOADING


def wait(predicate, what: str, timeout: float = WAIT_S):
    """Poll ``predicate()`` until truthy (an exception counts as not yet); its value."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value = predicate()
            if value or value == 0 and not isinstance(value, bool):
                return value
        except (AssertionError, OSError, ConnectionError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {last!r}")
        time.sleep(0.1)


# ---- building requests from data ------------------------------------------------------------------

def _nested(cls, root, type_name: str):
    name = type_name[2:] if type_name.startswith("[]") else type_name
    return getattr(cls, name, None) or getattr(root, name, None)


def build(cls, fields: dict, env: Env, root=None):
    """A generated request (or struct) object from a dict; lists of dicts become lists of structs."""
    root = root or cls
    types = {f[0]: f[1] for f in cls.FIELDS}
    kwargs = {}
    for key, value in fields.items():
        if key not in types:
            raise KeyError(f"{cls.__name__} has no field {key!r}")
        value = env.value(value)
        sub = _nested(cls, root, types[key])
        if sub is not None and isinstance(sub, type) and value is not None:
            if types[key].startswith("[]"):
                value = [build(sub, env.value(item), env, root) if isinstance(env.value(item), dict)
                         else env.value(item) for item in value]
            elif isinstance(value, dict):
                value = build(sub, value, env, root)
        elif isinstance(value, list):
            value = [env.value(v) for v in value]
        kwargs[key] = value
    return cls(**kwargs)


# ---- normalising responses ------------------------------------------------------------------------

DROP = {"throttle_time_ms", "_unknown_tagged", "total_bytes", "usable_bytes"}  # disk space: each machine's own
PLACEHOLDER_FIELDS = {"member_id": "member", "leader": "member", "producer_id": "pid", "session_id": "session",
                      "member_epoch_unused": "epoch"}
TOKEN_FIELDS = {"port": "<port>", "cluster_id": "<cluster>", "log_dir": "<log dir>"}
ID_KEYS = ("name", "topic", "topic_name", "partition_index", "partition", "partition_id", "index", "node_id",
           "broker_id",
             "api_key", "group_id", "member_id", "resource_name", "key", "transactional_id", "entity", "user")


class Normaliser:
    """Turns one side's responses of one case into plain data; ids become numbered placeholders."""

    def __init__(self):
        self.seen: dict[tuple[str, Any], str] = {}

    def token(self, kind: str, value) -> str:
        key = (kind, value)
        if key not in self.seen:
            self.seen[key] = f"<{kind}{sum(1 for k in self.seen if k[0] == kind) + 1}>"
        return self.seen[key]

    def message(self, obj, version: int) -> dict:
        out = {}
        for name, type_name, versions, _nullable, _tag in obj.FIELDS:
            if not versions[0] <= version <= versions[1] or name in DROP:
                continue
            out[name] = self.field(name, type_name, getattr(obj, name), version)
        return out

    def field(self, name: str, type_name: str, value, version: int):
        if type_name == "records":
            return self.records(value)
        if isinstance(value, list):
            items = [self.field(name, type_name[2:], v, version) for v in value]
            return keyed(items)
        if hasattr(value, "FIELDS"):
            return self.message(value, version)
        if isinstance(value, uuid.UUID):
            return "<zero-uuid>" if value == ZERO_UUID else self.token("uuid", value)
        if name in TOKEN_FIELDS and value is not None:
            return TOKEN_FIELDS[name]
        if name in PLACEHOLDER_FIELDS and value not in (None, "", -1, 0):
            return self.token(PLACEHOLDER_FIELDS[name], value)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value - time.time() * 1000) < NOW_WINDOW_MS:
            return "<now>"
        if isinstance(value, (bytes, memoryview)):
            return bytes(value).hex()
        return value

    def records(self, data) -> list | None:
        """Each batch of a records field: header fields that clients act on, and its records."""
        if data is None:
            return None
        view, out, pos = memoryview(data).cast("B"), [], 0
        while pos + HEADER.size <= len(view):
            length = struct.unpack_from(">i", view, pos + 8)[0]
            end = pos + 12 + length
            if end > len(view):
                out.append("<partial batch>")
                break
            (base, _, epoch, magic, _, attrs, last_delta, _, _, pid, pepoch, seq, count) = \
                HEADER.unpack_from(view, pos)
            recs = [(r.offset, _hex(r.key), _hex(r.value)) for r in decode_records(view[pos:end])]
            out.append({"base_offset": base, "leader_epoch": epoch, "magic": magic, "attributes": attrs & ~0x08,
                        "last_offset_delta": last_delta, "producer_id": self.field("producer_id", "int64", pid, 0),
                        "producer_epoch": pepoch, "base_sequence": seq, "count": count, "records": recs})
            pos = end
        return out


def _hex(b):
    return None if b is None else bytes(b).hex()


def keyed(items: list):
    """A list of structs as a dict by their identity field (``{"name=t": {...}}``), so that two answers
    listing the same things in another order, or one more thing, compare item by item."""
    if not items or not all(isinstance(i, dict) for i in items):
        return items
    for key in ID_KEYS:
        ids = [i.get(key) for i in items]
        if all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in ids) and len(set(ids)) == len(ids):
            return {f"{key}={v}": i for v, i in zip(ids, items)}
    return items


def flatten(data, prefix: str = "") -> dict[str, Any]:
    """``{"a.0.b": value}`` for every leaf of nested dicts and lists (an empty list is a leaf)."""
    if isinstance(data, dict) and data:
        out = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else k))
        return out
    if isinstance(data, list) and data:
        out = {}
        for i, v in enumerate(data):
            out.update(flatten(v, f"{prefix}.{i}"))
        return out
    return {prefix: data}


# ---- running a case on both sides and comparing -----------------------------------------------------

@dataclass
class Difference:
    case: str
    step: int
    api: str
    path: str
    kafka: Any
    pybroker: Any


@dataclass
class Outcome:
    case: str
    differences: list[Difference] = field(default_factory=list)
    transcripts: dict = field(default_factory=dict)  # side name -> normalised answers


def common_version(api: int, sides: list[Target]) -> int:
    highs = []
    for side in sides:
        v = side.versions().get(api)
        if v is None:
            raise AssertionError(f"{side.name} does not serve API {api}")
        highs.append(v[1])
    return min(min(highs), REQUESTS[api].MAX_VERSION)


def run_side(case: Case, target: Target, versions: list[int | None]) -> list:
    """The case's steps on one side; the normalised answer of each compared step (an error string
    for a broker that closed the connection instead of answering)."""
    env, norm, answers = Env(target), Normaliser(), []
    try:
        for step, version in zip(case.steps, versions):
            if isinstance(step, Do):
                env.responses.append(step.fn(env))
                continue
            request = build(REQUESTS[step.api], step.fields, env)
            node = step.to(env)
            try:
                response = env.client(node).request(request, version)
            except (ConnectionError, OSError) as exc:  # includes the wire client's ConnectionClosed
                env._clients.pop(node).close()
                response = None
                if step.compare:
                    answers.append({"closed": type(exc).__name__})
            else:
                if step.compare:
                    answer = norm.message(response, version)
                    answers.append({k: answer[k] for k in step.keep if k in answer} if step.keep else answer)
            env.responses.append(response)
    finally:
        env.close()
    return answers


def apply_loose(data, loose: tuple):
    if isinstance(data, dict):
        return {k: (None if v is None else "<text>") if k in loose else apply_loose(v, loose) for k, v in data.items()}
    if isinstance(data, list):
        return [apply_loose(v, loose) for v in data]
    return data


def run_case(case: Case, kafka: Target, pybroker: Target) -> Outcome:
    versions = [None if isinstance(s, Do) else (s.version if s.version is not None
                                                 else common_version(s.api, [kafka, pybroker]))
                for s in case.steps]
    compared = [(i, s) for i, s in enumerate(case.steps) if s.compare]
    out = Outcome(case.name)
    answers = {}
    for side in (kafka, pybroker):
        answers[side.name] = [apply_loose(a, case.loose) for a in run_side(case, side, versions)]
    out.transcripts = answers
    for (index, step), k, p in zip(compared, answers[kafka.name], answers[pybroker.name]):
        fk, fp = flatten(k), flatten(p)
        api = REQUESTS[step.api].__name__.removesuffix("Request") + f" v{versions[index]}"
        for path in sorted(set(fk) | set(fp)):
            if fk.get(path, "<absent>") != fp.get(path, "<absent>"):
                out.differences.append(Difference(case.name, index, api, path, _show(path, fk.get(path, "<absent>")),
                                                  _show(path, fp.get(path, "<absent>"))))
    return out


def _show(path: str, value):
    if path.endswith("error_code") and isinstance(value, int):
        try:
            return f"{value} {ErrorCode(value).name}"
        except ValueError:
            return value
    return value


def excused(differences: list[Difference], table_: dict, case: str, tier: str) -> list[Difference]:
    """The differences no rule of ``table_`` ({case, "tier:case" or "tier:*": [(step, path regex, why)]})
    covers."""
    rules = table_.get(case, []) + table_.get(f"{tier}:{case}", []) + table_.get(f"{tier}:*", [])
    return [d for d in differences
            if not any(step in (None, d.step) and re.fullmatch(p, d.path) for step, p, _why in rules)]


def judge(outcome: Outcome, tier: str) -> tuple[list[Difference], list[Difference]]:
    """(new differences, pending ones) of a case: the expected ones dropped, the pending ones set apart.
    With DIFFERENTIAL_REPORT set, every difference is also appended to that file (one line each)."""
    report = os.environ.get("DIFFERENTIAL_REPORT")
    if report and outcome.differences:
        with open(report, "a") as f:
            for d in outcome.differences:
                f.write(f"{tier}\t{d.case}\t{d.step}\t{d.api}\t{d.path}\t{d.kafka!r}\t{d.pybroker!r}\n")
    left = excused(outcome.differences, EXPECTED_DIFFERENCES, outcome.case, tier)
    new = excused(left, PENDING_DIFFERENCES, outcome.case, tier)
    return new, [d for d in left if d not in new]


def check(outcome: Outcome, tier: str) -> None:
    """Fail on a new difference; an expected failure (xfail) when only pending ones are left."""
    import pytest
    new, pending = judge(outcome, tier)
    assert not new, f"{outcome.case}: pybroker answers otherwise than Kafka 3.8\n" + table(new)
    if pending:
        pytest.xfail(f"{outcome.case}: differences pending a fix elsewhere\n" + table(pending))


def table(differences: list[Difference]) -> str:
    """A plain-text table of differences: case, step, API, field, Kafka's value, pybroker's."""
    rows = [("case", "step", "api", "field", "kafka", "pybroker")]
    rows += [(d.case, str(d.step), d.api, d.path, _clip(d.kafka), _clip(d.pybroker)) for d in differences]
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    return "\n".join(" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


def _clip(value, n: int = 70) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= n else text[:n - 3] + "..."


# ---- where pybroker answers differently on purpose -------------------------------------------------

ICEBERG_CONFIGS = r".*configs\.name=iceberg\..*"
ICEBERG_WHY = "pybroker's own topic configs (topics as Iceberg tables, docs/iceberg.md): listed beside Kafka's"

# Where pybroker answers otherwise on purpose: Kafka's answer must not be copied (or is each broker's own).
# {case, "tier:case" or "tier:*": [(step index or None for any, field path regex, why)]}
EXPECTED_DIFFERENCES: dict[str, list[tuple]] = {
    "cluster:*": [
        (None, r"controller_id", "which broker wins the controller election is each cluster's own"),
        (None, ICEBERG_CONFIGS, ICEBERG_WHY),
    ],
    "single:*": [
        (None, ICEBERG_CONFIGS, ICEBERG_WHY),
    ],
    "api_versions": [
        (0, r"api_keys\.api_key=(1|2|10|15|18|68)\.max_version",
         "pybroker also serves the versions Kafka 3.9/4.0 added; a 3.8 client takes the highest both know"),
        (0, r"api_keys\.api_key=75\..*", "DescribeTopicPartitions is served in both modes (Kafka: KRaft only)"),
        (0, r"api_keys\.api_key=(76|77|78|79|83|84|85|86|87|90|91|92)\..*",
         "share groups (KIP-932) as Kafka 4.2 serves them: Kafka 3.8 has them only as unreleased early versions"),
        (0, r"(finalized|supported)_features.*",
         "pybroker has no KRaft metadata log (metadata.version) and finalizes group.version for KIP-848"),
    ],
    "single:api_versions": [
        (0, r"api_keys\.api_key=(4|5|6|7)\..*",
         "pybroker brokers speak ZooKeeper-mode Kafka's inter-broker APIs, as ZooKeeper-mode Kafka advertises them"),
        (0, r"api_keys\.api_key=(55|57|64|74)\..*",
         "KRaft-only APIs (quorum, features, unregistration, client metrics): pybroker has no KRaft quorum"),
        (0, r"finalized_features_epoch", "KRaft's features epoch counts metadata log records"),
    ],
    "cluster:api_versions": [
        (0, r"api_keys\.api_key=(56|58|67)\..*",
         "ZooKeeper-mode inter-broker APIs pybroker does without (its ISR and producer-id blocks go through "
         "ZooKeeper; features are fixed)"),
    ],
    "metadata_auto_create": [
        (0, r"topics\.name=d-auto\.(error_code|partitions.*|topic_id)",
         "pybroker creates the topic before it answers and names its leader at once; Kafka answers "
         "LEADER_NOT_AVAILABLE / UNKNOWN_TOPIC_OR_PARTITION first and the client asks again"),
        (2, r"topics\.name=d-auto\.partitions\..*\.(leader_id|replica_nodes\..*|isr_nodes\..*)",
         "an auto-created topic's placement is each cluster's own choice"),
    ],
    "cluster:fenced_leader_epoch": [
        (None, r".*leader_epoch", "how many epochs a reassignment that only reorders replicas spends is each "
                                  "controller's own (Kafka 1, pybroker 2); both fence the stale epoch alike"),
    ],
    "cluster:find_coordinator": [
        (1, r"coordinators\.key=.*\.node_id", "the coordinator is the leader the cluster chose for __consumer_offsets"),
    ],
    "cluster:create_topics_invalid": [
        (9, r"topics\.name=d-ct-asg\..*",
         "ZooKeeper-mode Kafka creates a topic on an unregistered broker and times out waiting for its leader; "
         "pybroker refuses it with INVALID_REPLICA_ASSIGNMENT, as KRaft Kafka does"),
        (None, r"topics\.name=.*\.error_message", "ZooKeeper-mode Kafka words these refusals otherwise; pybroker "
                                                  "words them as KRaft Kafka (Kafka 4's only mode) in both tiers"),
        (11, r"topics\..*", "ZooKeeper-mode Kafka answers a topic named twice once per mention; pybroker answers "
                           "it once, as KRaft Kafka"),
    ],
    "describe_log_dirs": [],
    "elect_leaders_unknown": [
        (None, r".*error_message", "Kafka words an unknown partition differently in each mode (no fixed text); "
                                   "pybroker uses the ZooKeeper-mode wording"),
        (2, r"(error_code|replica_election_results\..*\.error_code)",
         "ZooKeeper-mode Kafka fails an unknown election type with UNKNOWN_SERVER_ERROR (an internal error); "
         "pybroker answers INVALID_REQUEST, as KRaft Kafka does"),
    ],
    "single:create_topics": [
        (2, r"topics\.name=d-ct-v\.topic_id", "KRaft Kafka invents an id for a topic it only validated; "
                                               "ZooKeeper-mode Kafka and pybroker answer the zero id"),
    ],
    "cluster:delete_topics": [
        (None, r"responses\..*\.error_message", "ZooKeeper-mode Kafka sends no message for an unknown topic or id; "
                                                "pybroker sends KRaft Kafka's"),
        (2, r"responses\.name=d-dt\.topic_id", "ZooKeeper-mode Kafka leaves out the id of a topic deleted by name; "
                                                 "pybroker names it, as KRaft Kafka does"),
        (3, r"responses\.0\.topic_id", "the same id: its placeholder number shifts with the step before"),
        (4, r"responses\.name=d-dt-id\.topic_id", "the same id: its placeholder number shifts with step 2"),
    ],
    "cluster:partition_reassignments": [
        (None, r"error_message", "ZooKeeper-mode Kafka answers \"\" where KRaft Kafka and pybroker answer null"),
        (3, r"responses\..*\.error_message", "ZooKeeper-mode Kafka words NO_REASSIGNMENT_IN_PROGRESS; KRaft Kafka "
                                             "sends no message, as pybroker"),
    ],
    "single:create_partitions": [
        (5, r"results\.name=d-nosuch\.error_message", "KRaft Kafka sends no message for an unknown topic; "
                                                      "ZooKeeper-mode Kafka does, as pybroker"),
    ],
    "cluster:scram_credentials": [
        (1, r"results\.user=d-scram\.error_message", "ZooKeeper-mode Kafka answers \"\" where KRaft Kafka and "
                                                      "pybroker answer null"),
    ],
}

# Differences found and not fixed yet because their code lives in modules this test does not own; a case
# whose only differences are listed here is an expected failure (xfail) that names them.
PENDING_DIFFERENCES: dict[str, list[tuple]] = {
}


# ---- Kafka 3.8 processes --------------------------------------------------------------------------

class KafkaProcess:
    """One Kafka 3.8 JVM from ``properties`` lines; killed by its own pid."""

    def __init__(self, base_dir: str, name: str, lines: list[str], port: int):
        self.port = port
        os.makedirs(base_dir, exist_ok=True)
        self.props = os.path.join(base_dir, f"{name}.properties")
        self.log_path = os.path.join(base_dir, f"{name}.out")
        with open(self.props, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.env = {**os.environ, "LOG_DIR": os.path.join(base_dir, f"{name}-logs"),
                    "KAFKA_HEAP_OPTS": "-Xmx512m -Xms256m"}
        self.proc = None

    def format(self, cluster_id: str) -> None:
        subprocess.run([os.path.join(KAFKA_HOME, "bin", "kafka-storage.sh"), "format", "-t", cluster_id,
                        "-c", self.props], check=True, capture_output=True, env=self.env, timeout=KAFKA_START_S)

    def start(self) -> "KafkaProcess":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([os.path.join(KAFKA_HOME, "bin", "kafka-server-start.sh"), self.props],
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait(lambda: self._answers(), f"Kafka on port {self.port}", KAFKA_START_S)
        except BaseException:
            self.kill()
            raise
        return self

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"Kafka exited with {self.proc.returncode}; see {self.log_path}")
        with WireClient(self.port, timeout=2) as c:
            return bool(c.api_versions().api_keys)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(60)


def kafka_settings(settings: dict) -> list[str]:
    return [f"{k}={v}" for k, v in settings.items()]


def start_kafka_kraft(base_dir: str, settings: dict, node_id: int = 1) -> KafkaProcess:
    """A single KRaft Kafka 3.8 (broker and controller in one JVM)."""
    from tests.cluster import free_ports
    port, controller = free_ports(2)
    lines = ["process.roles=broker,controller", f"node.id={node_id}",
             f"controller.quorum.voters={node_id}@127.0.0.1:{controller}",
             f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
             f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
             "inter.broker.listener.name=PLAINTEXT",
             "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
             f"log.dirs={os.path.join(base_dir, 'kafka-data')}", *kafka_settings(settings)]
    k = KafkaProcess(base_dir, "kafka", lines, port)
    k.format("differential-test-0001")
    return k.start()


def start_kafka_zk(base_dir: str, zk_connect: str, node_ids: list[int], settings: dict) -> list[KafkaProcess]:
    """ZooKeeper-mode Kafka 3.8 brokers on ``zk_connect`` (a chroot of its own), started one after another."""
    from tests.cluster import free_ports
    started = []
    try:
        for node_id, port in zip(node_ids, free_ports(len(node_ids))):
            lines = [f"broker.id={node_id}", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                     f"log.dirs={os.path.join(base_dir, f'kafka-{node_id}-data')}",
                     f"zookeeper.connect={zk_connect}", *kafka_settings(settings)]
            started.append(KafkaProcess(base_dir, f"kafka-{node_id}", lines, port).start())
    except BaseException:
        for k in started:
            k.kill()
        raise
    return started
