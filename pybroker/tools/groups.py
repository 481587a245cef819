"""``pybroker groups``: kafka-consumer-groups.sh's --list / --describe [--members|--state] / --delete.

Group requests go to the group's coordinator (FindCoordinator; any broker when the broker has no
FindCoordinator). --describe joins three answers as Kafka's tool does: the committed offsets
(OffsetFetch), each partition's log end (ListOffsets latest) and the members with their
assignments (ConsumerGroupDescribe for a KIP-848 group, else DescribeGroups with its
consumer-protocol assignment bytes).
"""
import struct
import time
from dataclasses import dataclass

from pybroker.protocol import DecodeError, REQUESTS
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages import DATA
from pybroker.tools.wire import (CONSUMER_GROUP_DESCRIBE, DELETE_GROUPS, DESCRIBE_GROUPS, FIND_COORDINATOR, LIST_GROUPS,
                                 LIST_OFFSETS, OFFSET_FETCH, Client, Connection, KafkaError,
                                 ToolError, check)

GROUP_KEY = 0  # FindCoordinator key_type of a consumer group
CONSUMER_PROTOCOLS = ("consumer", "")  # "" = a group that only holds committed offsets
# the coordinator is starting, moving or loading __consumer_offsets: ask again shortly
COORDINATOR_RETRIABLE = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.NOT_COORDINATOR}
RETRY_PAUSE = 0.2
_I16 = struct.Struct(">h")


def run(args) -> int:
    with Client(args.bootstrap_server, args.command_timeout_ms) as client:
        if args.list:
            return list_groups(client)
        groups = list(dict.fromkeys(args.group or []))
        if args.all_groups:
            groups = _consumer_groups(client)
        elif not groups:
            raise ToolError(f"--{'describe' if args.describe else 'delete'} needs --group or --all-groups")
        if args.delete:
            return delete(client, groups)
        return describe(client, groups, args)


# --- coordinator --------------------------------------------------------------------------------

class _Groups:
    """Requests to a group's coordinator, re-finding it after NOT_COORDINATOR (bounded in time)."""

    def __init__(self, client: Client):
        self.client = client
        self.coordinators: dict[str, tuple[Connection, int]] = {}

    def coordinator(self, group: str) -> tuple[Connection, int]:
        """(connection, node id) of the coordinator of ``group``."""
        if group in self.coordinators:
            return self.coordinators[group]
        conn = self.client.any_conn()
        if FIND_COORDINATOR not in conn.broker_versions:  # a single broker coordinates everything
            found = (conn, -1)
        else:
            found = self._find(conn, group)
        self.coordinators[group] = found
        return found

    def _find(self, conn: Connection, group: str) -> tuple[Connection, int]:
        api = REQUESTS[FIND_COORDINATOR]
        deadline = time.monotonic() + self.client.timeout
        while True:
            version = conn.version(FIND_COORDINATOR)
            if version >= 4:
                resp = conn.request(api(key_type=GROUP_KEY, coordinator_keys=[group]), version)
                if not resp.coordinators:
                    raise ToolError(f"FindCoordinator from {conn.address} named no coordinator for {group!r}")
                c = resp.coordinators[0]
                code, message, node, host, port = c.error_code, c.error_message, c.node_id, c.host, c.port
            else:
                resp = conn.request(api(key=group, key_type=GROUP_KEY), version)
                code, message = resp.error_code, resp.error_message
                node, host, port = resp.node_id, resp.host, resp.port
            if code in COORDINATOR_RETRIABLE and time.monotonic() < deadline:
                time.sleep(RETRY_PAUSE)
                continue
            check(code, message, f"cannot find the coordinator of group {group!r}")
            return self.client.addr_conn(host, port), node

    def call(self, group: str, api_key: int, build, error_of):
        """Send ``build(version)`` to the coordinator of ``group``; retry while ``error_of(resp)``
        is a coordinator error, until the command timeout. Returns the response."""
        deadline = time.monotonic() + self.client.timeout
        while True:
            conn, _ = self.coordinator(group)
            version = conn.version(api_key)
            resp = conn.request(build(version), version)
            code = error_of(resp)
            if code not in COORDINATOR_RETRIABLE or time.monotonic() >= deadline:
                return resp
            if code == ErrorCode.NOT_COORDINATOR:
                self.coordinators.pop(group, None)  # it moved: ask FindCoordinator again
            time.sleep(RETRY_PAUSE)


# --- list ---------------------------------------------------------------------------------------

def _consumer_groups(client: Client) -> list[str]:
    """Ids of the consumer groups on every broker (each lists only the groups it coordinates)."""
    api = REQUESTS[LIST_GROUPS]
    client.metadata([])
    nodes = sorted(client.brokers) or [None]
    found = set()
    for node in nodes:
        conn = client.any_conn() if node is None else client.node_conn(node)
        deadline = time.monotonic() + client.timeout
        while True:
            resp = conn.request(api())
            if resp.error_code not in COORDINATOR_RETRIABLE or time.monotonic() >= deadline:
                break
            time.sleep(RETRY_PAUSE)
        check(resp.error_code, None, f"ListGroups from {conn.address}")
        found.update(g.group_id for g in resp.groups if g.protocol_type in CONSUMER_PROTOCOLS)
    return sorted(found)


def list_groups(client: Client) -> int:
    for group in _consumer_groups(client):
        print(group)
    return 0


# --- describe -----------------------------------------------------------------------------------

def decode_assignment(data) -> dict[str, list[int]]:
    """A consumer-protocol assignment (INT16 version + ConsumerProtocolAssignment) as
    {topic: [partitions]}; empty bytes (a member mid-rebalance) mean no partitions."""
    if not data:
        return {}
    if len(data) < 2:
        raise ToolError(f"a member's assignment is {len(data)} byte(s): too short to carry a version")
    version = _I16.unpack_from(data, 0)[0]
    cls = DATA["ConsumerProtocolAssignment"]
    if version < 0:
        raise ToolError(f"a member's assignment has a negative version {version}")
    try:
        # newer versions only append fields, so read them as the newest version known here
        obj, _ = cls.decode(memoryview(data)[2:], 0, min(version, cls.MAX_VERSION))
    except DecodeError as exc:
        raise ToolError(f"a member's assignment cannot be decoded: {exc}") from None
    out: dict[str, list[int]] = {}
    for tp in obj.assigned_partitions:
        out.setdefault(tp.topic, []).extend(tp.partitions)
    return out


@dataclass
class _Member:
    member_id: str
    client_id: str
    client_host: str
    assigned: dict  # topic -> [partitions]


@dataclass
class _Group:
    state: str
    assignor: str  # the classic protocol, or the consumer group's server assignor
    members: list


def _describe_group(g: _Groups, group: str) -> _Group:
    conn, _ = g.coordinator(group)
    if CONSUMER_GROUP_DESCRIBE in conn.broker_versions:  # a KIP-848 group first, as Kafka's tool
        found = _describe_consumer_group(g, group)
        if found is not None:
            return found
    api = REQUESTS[DESCRIBE_GROUPS]
    resp = g.call(group, DESCRIBE_GROUPS, lambda v: api(groups=[group]),
                  lambda r: r.groups[0].error_code if r.groups else 0)
    desc = next((d for d in resp.groups if d.group_id == group), None)
    if desc is None:
        raise ToolError(f"DescribeGroups did not describe group {group!r}")
    if desc.error_code == ErrorCode.GROUP_ID_NOT_FOUND or (not desc.error_code and desc.group_state == "Dead"):
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {group!r} does not exist")
    check(desc.error_code, None, f"cannot describe group {group!r}")
    if desc.protocol_type not in CONSUMER_PROTOCOLS:
        raise ToolError(f"group {group!r} is not a consumer group (protocol type {desc.protocol_type!r})")
    return _Group(desc.group_state, desc.protocol_data or "", [
        _Member(m.member_id, m.client_id, m.client_host, decode_assignment(m.member_assignment)) for m in desc.members])


def _describe_consumer_group(g: _Groups, group: str) -> _Group | None:
    """The group as ConsumerGroupDescribe has it; None when it is not a consumer group (a classic one)."""
    api = REQUESTS[CONSUMER_GROUP_DESCRIBE]
    resp = g.call(group, CONSUMER_GROUP_DESCRIBE, lambda v: api(group_ids=[group], include_authorized_operations=False),
                  lambda r: r.groups[0].error_code if r.groups else 0)
    desc = next((d for d in resp.groups if d.group_id == group), None)
    if desc is None or desc.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    check(desc.error_code, None, f"cannot describe group {group!r}")
    return _Group(desc.group_state, desc.assignor_name or "", [
        _Member(m.member_id, m.client_id, m.client_host,
                {t.topic_name: list(t.partitions) for t in m.assignment.topic_partitions if t.partitions})
        for m in desc.members])


def _committed(g: _Groups, group: str, assigned: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    """The group's committed offsets: {(topic, partition): offset}; none committed = absent."""
    api = REQUESTS[OFFSET_FETCH]

    def build(version):
        if version >= 2:  # null topics = every partition the group committed
            return api(group_id=group, topics=None)
        # v1 names every partition: only the assigned ones can be asked for
        return api(group_id=group, topics=[api.OffsetFetchRequestTopic(
            name=t, partition_indexes=sorted(ps)) for t, ps in sorted(assigned.items())])

    def error_of(resp):
        top = getattr(resp, "error_code", 0)
        if top:
            return top
        return next((p.error_code for t in resp.topics for p in t.partitions if p.error_code), 0)

    resp = g.call(group, OFFSET_FETCH, build, error_of)
    check(resp.error_code, None, f"cannot fetch the offsets of group {group!r}")
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue  # a deleted topic: nothing to show
            check(p.error_code, None, f"cannot fetch group {group!r} offset of {t.name}-{p.partition_index}")
            if p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def _log_ends(client: Client, partitions) -> dict[tuple[str, int], int]:
    """The latest offset (high watermark) of each partition; unavailable ones are left out."""
    topics = sorted({t for t, _ in partitions})
    if not topics:
        return {}
    meta = client.metadata(topics)
    leaders = {(t.name, p.partition_index): p.leader_id
               for t in meta.topics if not t.error_code for p in t.partitions}
    by_leader: dict[int, dict[str, list[int]]] = {}
    for tp in partitions:
        leader = leaders.get(tp, -1)
        if leader >= 0:
            by_leader.setdefault(leader, {}).setdefault(tp[0], []).append(tp[1])
    api = REQUESTS[LIST_OFFSETS]
    out = {}
    for leader, parts in by_leader.items():
        req = api(replica_id=-1, isolation_level=0, topics=[
            api.ListOffsetsTopic(name=t, partitions=[
                api.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=-1)
                for p in sorted(ps)]) for t, ps in parts.items()])
        resp = client.node_conn(leader).request(req)
        for t in resp.topics:
            for r in t.partitions:
                if not r.error_code and r.offset >= 0:
                    out[(t.name, r.partition_index)] = r.offset
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Left-aligned columns, each as wide as its widest cell, one space apart (the last unpadded)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [" ".join(str(c).ljust(w) for c, w in zip(r[:-1], widths)) + " " + str(r[-1])
            for r in [header, *rows]]


def _dash(value) -> str:
    return "-" if value is None else str(value)


def _print_state_notes(group: str, desc: _Group) -> None:
    if desc.state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        print(f"\nWarning: Consumer group '{group}' is rebalancing.")
    elif not desc.members:
        print(f"\nConsumer group '{group}' has no active members.")


def describe(client: Client, groups: list[str], args) -> int:
    g = _Groups(client)
    for group in groups:
        desc = _describe_group(g, group)
        if args.state:
            conn, node = g.coordinator(group)
            coordinator = f"{conn.address} ({node})" if node >= 0 else conn.address
            print()
            for line in _table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                               [[group, coordinator, desc.assignor, desc.state, len(desc.members)]]):
                print(line)
            continue
        assignments = [(m, m.assigned) for m in desc.members]
        if args.members:
            _print_state_notes(group, desc)
            header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            if args.verbose:
                header.append("ASSIGNMENT")
            rows = []
            for m, assigned in sorted(assignments, key=lambda x: x[0].member_id):
                row = [group, m.member_id, m.client_host, m.client_id, sum(map(len, assigned.values()))]
                if args.verbose:
                    row.append(",".join(f"{t}({','.join(map(str, sorted(ps)))})"
                                        for t, ps in sorted(assigned.items())) or "-")
                rows.append(row)
            if rows:
                print()
                for line in _table(header, rows):
                    print(line)
            continue
        owner = {(t, p): m for m, assigned in assignments for t, ps in assigned.items() for p in ps}
        by_topic: dict[str, list[int]] = {}
        for t, p in owner:
            by_topic.setdefault(t, []).append(p)
        committed = _committed(g, group, by_topic)
        partitions = sorted(set(owner) | set(committed))
        ends = _log_ends(client, partitions)
        _print_state_notes(group, desc)
        rows = []
        for tp in partitions:
            current, end, m = committed.get(tp), ends.get(tp), owner.get(tp)
            lag = end - current if current is not None and end is not None else None
            rows.append([group, tp[0], tp[1], _dash(current), _dash(end), _dash(lag),
                         m.member_id if m else "-", m.client_host if m else "-", m.client_id if m else "-"])
        if rows:
            print()
            for line in _table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"], rows):
                print(line)
    return 0


# --- delete -------------------------------------------------------------------------------------

def delete(client: Client, groups: list[str]) -> int:
    g = _Groups(client)
    api = REQUESTS[DELETE_GROUPS]
    failed = []
    deleted = []
    for group in groups:
        resp = g.call(group, DELETE_GROUPS, lambda v, group=group: api(groups_names=[group]),
                      lambda r: r.results[0].error_code if r.results else 0)
        result = next((r for r in resp.results if r.group_id == group), None)
        if result is None:
            failed.append(f"group {group!r}: DeleteGroups returned no result")
        elif result.error_code:
            failed.append(str(KafkaError(result.error_code, None, f"cannot delete group {group!r}")))
        else:
            deleted.append(group)
    if deleted:
        print("Deletion of requested consumer groups (" + ", ".join(f"'{x}'" for x in deleted)
              + ") was successful.")
    if failed:
        raise ToolError("; ".join(failed))
    return 0
