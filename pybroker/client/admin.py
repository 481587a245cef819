"""Admin client: topics, partitions, configs, consumer and share groups, offsets and records.

``AsyncAdminClient(conf)`` has coroutine methods; ``AdminClient(conf)`` the same methods,
blocking (run on a background event loop). Both are context managers and connect lazily.

Failures: an error for the whole request raises its ``KafkaError``. When a batched operation
fails for some of its items (topics, partitions, groups, resources), ``KafkaErrors`` is raised
after the others are done: ``.errors`` maps each failed item to its KafkaError and
``.results`` holds what the successful items returned. Retriable item errors (a leader being
elected, a coordinator loading...) are retried with backoff within ``default.api.timeout.ms``.
"""
import asyncio
import struct
import time

from pybroker.client import config as client_config
from pybroker.client.admin_share import SYNC_METHODS as SHARE_GROUP_METHODS
from pybroker.client.admin_share import ShareGroupAdmin
from pybroker.client.cluster import CONTROLLER, Cluster, backoff_s
from pybroker.client.errors import KafkaError, KafkaErrors, UnknownTopicError, error_for
from pybroker.client.runner import LoopThread
from pybroker.client.types import (EARLIEST, LATEST, MAX_TIMESTAMP, ConfigResource, GroupDescription,
                                   GroupListing, ListOffsetsResult, MemberDescription, NewTopic,
                                   OffsetAndMetadata, TopicPartition)
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

LIST_OFFSETS, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 2, 9, 15, 16
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, DESCRIBE_CONFIGS = 19, 20, 21, 32
ALTER_CONFIGS, CREATE_PARTITIONS, DELETE_GROUPS, INCREMENTAL_ALTER_CONFIGS = 33, 37, 42, 44
# api key -> (lowest, highest) version this client builds and parses
VERSIONS = {
    CREATE_TOPICS: (2, 7), DELETE_TOPICS: (1, 6), CREATE_PARTITIONS: (0, 3),
    DESCRIBE_CONFIGS: (1, 4), ALTER_CONFIGS: (0, 2), INCREMENTAL_ALTER_CONFIGS: (0, 1),
    LIST_GROUPS: (0, 5), DESCRIBE_GROUPS: (0, 5), DELETE_GROUPS: (0, 2),
    LIST_OFFSETS: (1, 10), DELETE_RECORDS: (0, 2), OFFSET_FETCH: (2, 9),
}
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source of a topic override
ISOLATION = {"read_uncommitted": 0, "read_committed": 1}


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class AsyncAdminClient(ShareGroupAdmin):
    """Asyncio admin client. ``conf``: Kafka admin settings (``bootstrap.servers`` required).
    Share-group calls: ``admin_share.ShareGroupAdmin``."""

    def __init__(self, conf: dict):
        self.config = client_config.parse(conf, "admin")
        self.cluster = Cluster(self.config)
        self._closed = False

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.cluster.close()

    # ---- helpers ------------------------------------------------------------------------

    def _deadline(self) -> float:
        return time.monotonic() + self.config.seconds("default.api.timeout.ms")

    def _op_timeout_ms(self) -> int:
        return self.config["request.timeout.ms"]

    async def _call(self, node, obj, **kw):
        lo, hi = VERSIONS[obj.API_KEY]
        return await self.cluster.call(node, obj, lo, hi, **kw)

    async def _per_item(self, items, attempt, final=(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,)):
        """Run ``attempt(pending_items) -> {item: value | KafkaError}`` until every item has a
        value or a final error, retrying retriable item errors (except codes in ``final``) with
        backoff. Returns (results, errors)."""
        pending, results, errors = list(dict.fromkeys(items)), {}, {}
        deadline, tries, retries = self._deadline(), 0, self.config["retries"]
        while pending:
            got = await attempt(pending)
            again = []
            for item in pending:
                r = got.get(item)
                if r is None and item not in got:
                    r = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the broker sent no result for it",
                                   retriable=False)
                if isinstance(r, KafkaError):
                    if (r.retriable and r.code not in final and tries < retries
                            and time.monotonic() < deadline):
                        again.append(item)
                    else:
                        errors[item] = r
                else:
                    results[item] = r
            pending = again
            if pending:
                self.cluster.request_update()
                delay = backoff_s(tries, self.config["retry.backoff.ms"], self.config["retry.backoff.max.ms"])
                await asyncio.sleep(max(0.0, min(delay, deadline - time.monotonic())))
                tries += 1
        return results, errors

    @staticmethod
    def _finish(results, errors):
        if errors:
            raise KafkaErrors(errors, results)
        return results

    async def _leaders(self, tps, deadline):
        """Group partitions by leader: ({node: [tp]}, {tp: KafkaError}) after a metadata refresh."""
        topics = sorted({tp.topic for tp in tps})
        await self.cluster.refresh(topics, timeout_s=max(0.001, deadline - time.monotonic()))
        by_node, failed = {}, {}
        for tp in tps:
            t = self.cluster.topics.get(tp.topic)
            if t is None:
                failed[tp] = UnknownTopicError(f"topic {tp.topic!r} does not exist", retriable=False)
            elif tp.partition not in t.partitions:
                failed[tp] = UnknownTopicError(f"topic {tp.topic!r} has no partition {tp.partition}",
                                               retriable=False)
            elif t.partitions[tp.partition].leader < 0:
                failed[tp] = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE)
            else:
                by_node.setdefault(t.partitions[tp.partition].leader, []).append(tp)
        return by_node, failed

    async def _by_leader(self, tps, send_one):
        """``send_one(node, tps) -> {tp: value|KafkaError}`` for each leader, concurrently."""
        deadline = self._deadline()
        by_node, failed = await self._leaders(tps, deadline)
        out = dict(failed)
        outcomes = await asyncio.gather(*(send_one(node, group) for node, group in by_node.items()),
                                        return_exceptions=True)
        for (node, group), got in zip(by_node.items(), outcomes):
            if isinstance(got, KafkaError):
                out.update({tp: got for tp in group})
            elif isinstance(got, BaseException):
                raise got
            else:
                out.update(got)
        return out

    # ---- topics -------------------------------------------------------------------------

    async def create_topics(self, new_topics, validate_only: bool = False) -> None:
        """Create topics (``NewTopic`` objects or names). TOPIC_ALREADY_EXISTS and other failures
        are reported per topic through KafkaErrors."""
        topics = {t.name: t for t in (NewTopic(t) if isinstance(t, str) else t for t in new_topics)}
        api = REQUESTS[CREATE_TOPICS]

        async def attempt(names):
            req = api(topics=[api.CreatableTopic(
                name=n, num_partitions=topics[n].num_partitions, replication_factor=topics[n].replication_factor,
                assignments=[], configs=[api.CreatableTopicConfig(name=str(k), value=None if v is None else str(v))
                                         for k, v in topics[n].config.items()]) for n in names],
                timeout_ms=self._op_timeout_ms(), validate_only=validate_only)
            resp = await self._call(CONTROLLER, req)
            return {r.name: error_for(r.error_code, r.error_message) if r.error_code else True
                    for r in resp.topics}
        self._finish(*await self._per_item(list(topics), attempt))
        self.cluster.request_update()

    async def delete_topics(self, names) -> None:
        """Delete topics; unknown ones fail with UNKNOWN_TOPIC_OR_PARTITION (in KafkaErrors)."""
        api = REQUESTS[DELETE_TOPICS]

        async def attempt(pending):
            req = api(topic_names=list(pending), topics=[api.DeleteTopicState(name=n) for n in pending],
                      timeout_ms=self._op_timeout_ms())
            resp = await self._call(CONTROLLER, req)
            return {r.name: _item_error(r.error_code, getattr(r, "error_message", None), final_unknown=True)
                    or True for r in resp.responses}
        self._finish(*await self._per_item(list(names), attempt))
        self.cluster.request_update()

    async def list_topics(self):
        """Every topic with its partitions, plus brokers and controller: a ClusterMetadata."""
        return await self.cluster.refresh(None)

    async def describe_topics(self, names) -> dict:
        """``{name: TopicMetadata}``; unknown topics fail with UNKNOWN_TOPIC_OR_PARTITION."""
        names = list(names)
        md = await self.cluster.refresh(names)
        results, errors = {}, {}
        for n in names:
            t = md.topics.get(n)
            if t is None or t.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                errors[n] = UnknownTopicError(f"topic {n!r} does not exist", retriable=False)
            elif t.error:
                errors[n] = error_for(t.error)
            else:
                results[n] = t
        return self._finish(results, errors)

    async def create_partitions(self, new_totals: dict, validate_only: bool = False) -> None:
        """Grow topics to the given total partition counts: ``{topic: total}``."""
        api = REQUESTS[CREATE_PARTITIONS]

        async def attempt(names):
            req = api(topics=[api.CreatePartitionsTopic(name=n, count=int(new_totals[n]), assignments=None)
                              for n in names], timeout_ms=self._op_timeout_ms(), validate_only=validate_only)
            resp = await self._call(CONTROLLER, req)
            return {r.name: _item_error(r.error_code, r.error_message, final_unknown=True) or True
                    for r in resp.results}
        self._finish(*await self._per_item(list(new_totals), attempt))
        self.cluster.request_update()

    # ---- configs ------------------------------------------------------------------------

    def _resource_node(self, res: ConfigResource):
        """Broker resources go to that broker; topic resources to any broker."""
        if res.type == "broker" and res.name.isdigit():
            return int(res.name)
        return None

    async def describe_configs(self, resources, include_defaults: bool = True) -> dict:
        """``{ConfigResource: {name: value}}`` (values as strings, None when unset or sensitive).
        With ``include_defaults=False`` only explicitly set values (topic overrides) are kept."""
        resources = [r if isinstance(r, ConfigResource) else ConfigResource(*r) for r in resources]
        api = REQUESTS[DESCRIBE_CONFIGS]

        async def attempt(pending):
            by_node = {}
            for r in pending:
                by_node.setdefault(self._resource_node(r), []).append(r)
            out = {}
            for node, group in by_node.items():
                req = api(resources=[api.DescribeConfigsResource(resource_type=r.type_code, resource_name=r.name,
                                                                 configuration_keys=None) for r in group],
                          include_synonyms=False, include_documentation=False)
                try:
                    resp = await self._call(node, req)
                except KafkaError as exc:
                    out.update({r: exc for r in group})
                    continue
                for res in resp.results:
                    key = ConfigResource(res.resource_type, res.resource_name)
                    if res.error_code:
                        out[key] = error_for(res.error_code, res.error_message)
                    else:
                        out[key] = {c.name: c.value for c in res.configs
                                    if include_defaults or c.config_source == DYNAMIC_TOPIC_CONFIG}
            return out
        return self._finish(*await self._per_item(resources, attempt))

    async def alter_configs(self, changes: dict, validate_only: bool = False) -> None:
        """Set configs: ``{ConfigResource: {name: value}}``; a value of None removes the override
        (back to the default). Other configs of the resource are left as they are (Kafka's
        IncrementalAlterConfigs; against brokers without it, the non-incremental AlterConfigs is
        sent with the resource's current overrides merged in)."""
        changes = {(r if isinstance(r, ConfigResource) else ConfigResource(*r)): dict(v) for r, v in changes.items()}

        async def attempt(pending):
            by_node = {}
            for r in pending:
                by_node.setdefault(self._resource_node(r), []).append(r)
            out = {}
            for node, group in by_node.items():
                try:
                    out.update(await self._alter_on(node, group, changes, validate_only))
                except KafkaError as exc:
                    out.update({r: exc for r in group})
            return out
        self._finish(*await self._per_item(list(changes), attempt))

    async def _alter_on(self, node, group, changes, validate_only):
        conn = await (self.cluster.connection(node) if node is not None else self.cluster.any_connection())
        if INCREMENTAL_ALTER_CONFIGS in conn.api_versions:
            api = REQUESTS[INCREMENTAL_ALTER_CONFIGS]
            req = api(resources=[api.AlterConfigsResource(
                resource_type=r.type_code, resource_name=r.name, configs=[
                    api.AlterableConfig(name=k, config_operation=DELETE if v is None else SET,
                                        value=None if v is None else _config_str(v))
                    for k, v in changes[r].items()]) for r in group], validate_only=validate_only)
        else:
            current = await self.describe_configs(group, include_defaults=False)
            api = REQUESTS[ALTER_CONFIGS]
            resources = []
            for r in group:
                merged = {k: v for k, v in current.get(r, {}).items() if v is not None}
                for k, v in changes[r].items():
                    if v is None:
                        merged.pop(k, None)
                    else:
                        merged[k] = _config_str(v)
                resources.append(api.AlterConfigsResource(resource_type=r.type_code, resource_name=r.name,
                                                          configs=[api.AlterableConfig(name=k, value=v)
                                                                   for k, v in merged.items()]))
            req = api(resources=resources, validate_only=validate_only)
        resp = await self._call(node, req)
        return {ConfigResource(r.resource_type, r.resource_name):
                error_for(r.error_code, r.error_message) if r.error_code else True for r in resp.responses}

    # ---- groups -------------------------------------------------------------------------

    async def list_groups(self, types=None, states=None) -> list:
        """Every group known to any broker: a list of GroupListing (state and type empty on old brokers).
        ``types`` (e.g. ["share"]; "classic", "consumer", "share", "streams") and ``states`` keep only
        those groups (matched case-insensitively; brokers before ListGroups v5 cannot filter by type)."""
        md = await self.cluster.refresh([])
        api = REQUESTS[LIST_GROUPS]
        types = [t.lower() for t in ([types] if isinstance(types, str) else types or [])]
        states = list([states] if isinstance(states, str) else states or [])
        lo = 5 if types else (4 if states else VERSIONS[LIST_GROUPS][0])
        replies = await asyncio.gather(*(self.cluster.call(node, api(states_filter=states, types_filter=types),
                                                           lo, VERSIONS[LIST_GROUPS][1])
                                         for node in sorted(md.brokers)))
        seen = {}
        for resp in replies:
            for g in resp.groups:
                seen.setdefault(g.group_id, GroupListing(g.group_id, g.protocol_type, g.group_state or "",
                                                         g.group_type or ""))
        return list(seen.values())

    async def describe_groups(self, group_ids) -> dict:
        """``{group_id: GroupDescription}``; consumer groups' member assignments are decoded."""
        api = REQUESTS[DESCRIBE_GROUPS]

        async def one(gid):
            try:
                resp = await self._call(None, api(groups=[gid], include_authorized_operations=False),
                                        group_id=gid, check=lambda b: _group_error(b.groups, gid))
            except KafkaError as exc:
                return exc
            g = resp.groups[0]
            members = [MemberDescription(
                m.member_id, m.client_id, m.client_host, m.group_instance_id,
                _decode_assignment(m.member_assignment) if g.protocol_type == "consumer" else [],
                bytes(m.member_metadata or b""), bytes(m.member_assignment or b"")) for m in g.members]
            return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members,
                                    self.cluster.coordinator_id(gid))
        return await self._groups(group_ids, one)

    async def delete_groups(self, group_ids) -> None:
        """Delete (empty) groups and their committed offsets. A group with members fails with
        NON_EMPTY_GROUP; an unknown one with GROUP_ID_NOT_FOUND."""
        api = REQUESTS[DELETE_GROUPS]

        async def one(gid):
            try:
                await self._call(None, api(groups_names=[gid]), group_id=gid,
                                 check=lambda b: _group_error(b.results, gid))
            except KafkaError as exc:
                return exc
            return True
        await self._groups(group_ids, one)

    async def _groups(self, group_ids, one):
        ids = list(dict.fromkeys(group_ids))
        outcomes = await asyncio.gather(*(one(g) for g in ids))
        results = {g: o for g, o in zip(ids, outcomes) if not isinstance(o, KafkaError)}
        return self._finish(results, {g: o for g, o in zip(ids, outcomes) if isinstance(o, KafkaError)})

    async def list_group_offsets(self, group_id: str, partitions=None, require_stable: bool = False) -> dict:
        """Committed offsets of a group: ``{TopicPartition: OffsetAndMetadata}`` (all its
        partitions, or only ``partitions``; partitions without a commit are left out)."""
        api = REQUESTS[OFFSET_FETCH]
        topics = None
        if partitions is not None:
            by_topic = {}
            for tp in partitions:
                by_topic.setdefault(tp[0], []).append(tp[1])
            topics = by_topic
        req = api(group_id=group_id, require_stable=require_stable,
                  topics=None if topics is None else [api.OffsetFetchRequestTopic(name=t, partition_indexes=p)
                                                      for t, p in topics.items()],
                  groups=[api.OffsetFetchRequestGroup(
                      group_id=group_id, member_id=None, member_epoch=-1,
                      topics=None if topics is None else [api.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                                                          for t, p in topics.items()])])

        def check(body):
            if body.groups:  # v8+
                g = body.groups[0]
                return g.error_code
            return body.error_code
        resp = await self._call(None, req, group_id=group_id, check=check)
        topics_out = resp.groups[0].topics if resp.groups else resp.topics
        results, errors = {}, {}
        for t in topics_out:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    errors[tp] = error_for(p.error_code)
                elif p.committed_offset >= 0:
                    results[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "", p.committed_leader_epoch)
        return self._finish(results, errors)

    # ---- offsets and records ------------------------------------------------------------

    async def list_offsets(self, specs: dict, isolation_level: str = "read_uncommitted") -> dict:
        """``{TopicPartition: EARLIEST | LATEST | MAX_TIMESTAMP | timestamp_ms}`` ->
        ``{TopicPartition: ListOffsetsResult(offset, timestamp, leader_epoch)}``. For a timestamp,
        the earliest offset whose timestamp is >= it (offset -1 when there is none)."""
        specs = {TopicPartition(*tp): int(s) for tp, s in specs.items()}
        isolation = ISOLATION.get(isolation_level)
        if isolation is None:
            raise ValueError(f"isolation_level must be one of {sorted(ISOLATION)}")
        api = REQUESTS[LIST_OFFSETS]
        lo = 7 if any(s == MAX_TIMESTAMP for s in specs.values()) else VERSIONS[LIST_OFFSETS][0]

        async def send_one(node, tps):
            by_topic = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp)
            req = api(replica_id=-1, isolation_level=isolation, timeout_ms=self._op_timeout_ms(), topics=[
                api.ListOffsetsTopic(name=t, partitions=[api.ListOffsetsPartition(
                    partition_index=tp.partition, current_leader_epoch=-1, timestamp=specs[tp]) for tp in group])
                for t, group in by_topic.items()])
            resp = await self.cluster.call(node, req, lo, VERSIONS[LIST_OFFSETS][1], check=lambda b: 0)
            out = {}
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    out[tp] = (error_for(p.error_code) if p.error_code else
                               ListOffsetsResult(p.offset, p.timestamp, p.leader_epoch))
            return out

        async def attempt(pending):
            return await self._by_leader(pending, send_one)
        return self._finish(*await self._per_item(list(specs), attempt, final=()))

    async def delete_records(self, before: dict) -> dict:
        """Delete records before the given offsets: ``{TopicPartition: offset}`` (-1 = the high
        watermark, i.e. everything) -> ``{TopicPartition: new low watermark}``."""
        before = {TopicPartition(*tp): int(o) for tp, o in before.items()}
        api = REQUESTS[DELETE_RECORDS]

        async def send_one(node, tps):
            by_topic = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp)
            req = api(timeout_ms=self._op_timeout_ms(), topics=[api.DeleteRecordsTopic(name=t, partitions=[
                api.DeleteRecordsPartition(partition_index=tp.partition, offset=before[tp]) for tp in group])
                for t, group in by_topic.items()])
            resp = await self._call(node, req, check=lambda b: 0)
            return {TopicPartition(t.name, p.partition_index):
                    error_for(p.error_code) if p.error_code else p.low_watermark
                    for t in resp.topics for p in t.partitions}

        async def attempt(pending):
            return await self._by_leader(pending, send_one)
        return self._finish(*await self._per_item(list(before), attempt, final=()))


def _config_str(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _item_error(code, message=None, final_unknown=False):
    """The KafkaError of one item's code (None for 0); an unknown topic is final for deletes."""
    if not code:
        return None
    err = error_for(code, message)
    if final_unknown and code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        err.retriable = False
    return err


def _group_error(entries, gid):
    for e in entries:
        if e.group_id == gid:
            return e.error_code
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for group {gid!r}"


_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


def _decode_assignment(data) -> list:
    """TopicPartitions of a consumer-protocol assignment ([] when empty or unreadable)."""
    if not data:
        return []
    buf, pos, out = memoryview(data), 2, []
    try:
        if len(buf) < 6:
            return []
        (n_topics,), pos = _I32.unpack_from(buf, pos), pos + 4
        if n_topics < 0 or n_topics > len(buf):
            return []
        for _ in range(n_topics):
            (slen,), pos = _I16.unpack_from(buf, pos), pos + 2
            if slen < 0 or pos + slen > len(buf):
                return []
            topic, pos = bytes(buf[pos:pos + slen]).decode("utf-8"), pos + slen
            (n_parts,), pos = _I32.unpack_from(buf, pos), pos + 4
            if n_parts < 0 or pos + 4 * n_parts > len(buf):
                return []
            for _ in range(n_parts):
                out.append(TopicPartition(topic, _I32.unpack_from(buf, pos)[0]))
                pos += 4
    except (struct.error, UnicodeDecodeError):
        return []
    return out


class AdminClient:
    """Blocking admin client: the methods of AsyncAdminClient, each waiting for its result.

    Runs on the process-wide client loop thread unless ``loop`` (a LoopThread) is given."""

    def __init__(self, conf: dict, loop: LoopThread | None = None):
        self._loop = loop or LoopThread.shared()
        self._async = AsyncAdminClient(conf)
        self.config = self._async.config
        self._timeout = self.config.seconds("default.api.timeout.ms") + 5.0

    def _run(self, coro):
        return self._loop.run(coro, self._timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if not self._async._closed and self._loop.running:
            self._loop.run(self._async.close(), 10.0)

    def __del__(self):
        try:
            if not self._async._closed and self._loop.running:
                self._loop.submit(self._async.close())
        except Exception:
            pass


def _sync_method(name):
    coro_fn = getattr(AsyncAdminClient, name)

    def method(self, *args, **kwargs):
        return self._run(getattr(self._async, name)(*args, **kwargs))
    method.__name__ = name
    method.__qualname__ = f"AdminClient.{name}"
    method.__doc__ = coro_fn.__doc__
    return method


for _name in ("create_topics", "delete_topics", "list_topics", "describe_topics", "create_partitions",
              "describe_configs", "alter_configs", "list_groups", "describe_groups", "delete_groups",
              "list_group_offsets", "list_offsets", "delete_records", *SHARE_GROUP_METHODS):
    setattr(AdminClient, _name, _sync_method(_name))
del _name

__all__ = ["AdminClient", "AsyncAdminClient", "EARLIEST", "LATEST", "MAX_TIMESTAMP"]
